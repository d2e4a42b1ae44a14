"""The run database: one engine, one session context, named migrations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from autodiscovery import ROOT, AutoDiscoveryError
from autodiscovery.store.migrations import migrate
from autodiscovery.store.models import (
    Base, Build, Candidate, CandidateStatus, Decision, Evaluation, EvalStatus, LlmCall, Run, RunStatus,
)

DEFAULT_DB = ROOT / "runs" / "autodiscovery.db"
BUSY_TIMEOUT_S = 10

__all__ = [
    "Base", "Build", "Candidate", "CandidateStatus", "Decision", "Evaluation", "EvalStatus", "LlmCall",
    "Run", "RunStatus", "Store", "StoreError", "DEFAULT_DB",
]


class StoreError(AutoDiscoveryError):
    pass


def why(exc: OperationalError) -> str:
    """A database error in words a user can act on."""
    text = str(exc.orig)
    if "locked" in text:
        return f"{text} (another process held the write lock for more than {BUSY_TIMEOUT_S} s)"
    if "readonly" in text or "read-only" in text:
        return f"{text} (the file or its folder is not writable)"
    if "full" in text:
        return f"{text} (no space left where it is)"
    return text


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
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
            migrate(self.engine)
        except OperationalError as exc:
            raise StoreError(f"cannot open database {self.url}: {why(exc)}") from None
        self._factory = sessionmaker(self.engine, expire_on_commit=False)

    @staticmethod
    def _url(url: str | Path | None) -> str:
        if url is None:
            url = DEFAULT_DB
        text = str(url)
        if "://" in text:
            make_url(text)
            if text.startswith("sqlite:///") and not text.startswith(("sqlite:///:memory:", "sqlite:///file:")):
                Path(text.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            return text
        path = Path(text).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path}"

    def build_id(self, facts: dict) -> int:
        """The id of the build row with these facts' cache key, created on first sight: two processes
        recording the same build at once (two runs, one database) end up with the one row."""
        for attempt in (0, 1):
            try:
                with self.session() as s:
                    return Build.record(s, facts).id
            except IntegrityError:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    @contextmanager
    def session(self) -> Iterator[Session]:
        """The one way to write: commits on success, rolls back on error, always closes."""
        session = self._factory()
        try:
            yield session
            session.commit()
        except OperationalError as exc:
            session.rollback()
            raise StoreError(f"cannot write database {self.url}: {why(exc)}; what was recorded before is kept, "
                             "and an interrupted run can be resumed") from None
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()
