"""The run database: one engine, one session context, named migrations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from autodiscovery import ROOT, AutoDiscoveryError
from autodiscovery.store.migrations import migrate
from autodiscovery.store.models import (
    Base, Build, Candidate, CandidateStatus, Decision, Evaluation, EvalStatus, LlmCall, Run, RunStatus,
)

DEFAULT_DB = ROOT / "runs" / "autodiscovery.db"

__all__ = [
    "Base", "Build", "Candidate", "CandidateStatus", "Decision", "Evaluation", "EvalStatus", "LlmCall",
    "Run", "RunStatus", "Store", "StoreError", "DEFAULT_DB",
]


class StoreError(AutoDiscoveryError):
    pass


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


class Store:
    """Opens (and migrates) a database given a SQLAlchemy URL or a file path."""

    def __init__(self, url: str | Path | None = None) -> None:
        self.url = self._url(url)
        try:
            self.engine: Engine = create_engine(self.url)
        except (ArgumentError, ImportError) as exc:
            raise StoreError(f"database URL '{self.url}' is not usable: {exc}") from None
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        try:
            with self.engine.begin() as conn:
                migrate(conn)
        except OperationalError as exc:
            raise StoreError(f"cannot open database {self.url}: {exc.orig}") from None
        self._factory = sessionmaker(self.engine, expire_on_commit=False)

    @staticmethod
    def _url(url: str | Path | None) -> str:
        if url is None:
            url = DEFAULT_DB
        text = str(url)
        if "://" in text:
            make_url(text)
            if text.startswith("sqlite:///") and not text.startswith("sqlite:///:memory:"):
                Path(text.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            return text
        path = Path(text).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path}"

    @contextmanager
    def session(self) -> Iterator[Session]:
        """The one way to write: commits on success, rolls back on error, always closes."""
        session = self._factory()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()
