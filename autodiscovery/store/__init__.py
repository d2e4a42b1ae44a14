"""The run database: one engine, one session context, named migrations."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    IntegrityError,
    OperationalError,
)
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool, StaticPool

from autodiscovery import ROOT, AutoDiscoveryError
from autodiscovery.store.migrations import MIGRATIONS, migrate
from autodiscovery.store.models import (
    Base,
    Build,
    Candidate,
    CandidateStatus,
    Decision,
    EvalKind,
    EvalStatus,
    Evaluation,
    LlmCall,
    Run,
    RunStatus,
    Verdict,
)

DEFAULT_DB = ROOT / "runs" / "autodiscovery.db"
BUSY_TIMEOUT_S = 10

__all__ = [
    "Base", "Build", "Candidate", "CandidateStatus", "Decision", "Evaluation", "EvalKind", "EvalStatus", "LlmCall",
    "Run", "RunStatus", "Verdict", "Store", "StoreError", "DEFAULT_DB",
]


class StoreError(AutoDiscoveryError):
    pass


def shown(url: str) -> str:
    """A database URL as messages and logs may show it: its password replaced."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def redact(text: str, url: str) -> str:
    """`text` with the password of `url` taken out wherever it appears (a driver may echo it)."""
    try:
        password = make_url(url).password
    except ArgumentError:
        return text
    return text.replace(str(password), "***") if password else text


def why(exc: DatabaseError) -> str:
    """A database error in words a user can act on."""
    text = " ".join(str(exc.orig).split())
    if "locked" in text:
        return f"{text} (another process held the write lock for more than {BUSY_TIMEOUT_S} s)"
    if "readonly" in text or "read-only" in text:
        return f"{text} (the file or its folder is not writable)"
    if "full" in text:
        return f"{text} (no space left where it is)"
    return text


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    import sqlite3
    import time

    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")  # first: switching to WAL waits for a lock too
    # A new file is not in WAL mode yet: where processes opening it at once would deadlock on its rollback
    # journal, SQLite answers one of them "locked" at once, without waiting. Try again, within the timeout.
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def in_wal_mode(path: Path) -> bool:
    """Whether a SQLite file is in WAL mode (its header's read and write versions are 2)."""
    try:
        with open(path, "rb") as f:
            header = f.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[18] == 2


def reader_uri(path: Path) -> str:
    """How a command that only reads opens a SQLite file so that it writes nothing, beside it either. A
    file in rollback-journal mode: read-only (`mode=ro`). A file in WAL mode whose log is there (a run has it
    open, or was cut off): read-only too, and what that run writes shows up live; unless the folder
    cannot take the shared-memory file SQLite needs and it is not there, then as an unchanging file. A
    file in WAL mode with no log beside it (no run has it open): as an unchanging file (`immutable`), for
    opening it read-only would leave a log and a shared-memory file beside it. Decided for each
    connection: a reader that lives long (`serve`) opens one a request."""
    name = f"file:{quote(str(path))}"
    if not in_wal_mode(path):
        return f"{name}?mode=ro"
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    if wal.exists() and (shm.exists() or os.access(path.parent, os.W_OK)):
        return f"{name}?mode=ro"
    return f"{name}?mode=ro&immutable=1"


def _sqlite_read_only(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")  # a writer's checkpoint may hold a lock briefly
    cur.execute("PRAGMA query_only=ON")
    cur.close()


class Store:
    """Opens (and migrates) a database given a SQLAlchemy URL or a file path. With `create` false (the
    commands that only read) a database that does not exist yet is an error, never made.

    With `read_only`, nothing is ever written: SQLite opens the file with `mode=ro` (and `query_only`),
    PostgreSQL's transactions are read-only, nothing is migrated (a database of an older schema is an
    error that says how to bring it up to date) and no session commits. Runs may write the
    database meanwhile: in WAL mode a reader never blocks a writer."""

    def __init__(self, url: str | Path | None = None, create: bool = True, read_only: bool = False) -> None:
        self.read_only = read_only
        self.url = self._url(url, create and not read_only)
        self.shown = shown(self.url)
        """The URL as messages show it, without its password."""
        try:
            self.engine: Engine = self._engine()
        except (ArgumentError, ImportError) as exc:
            raise StoreError(f"database URL '{self.shown}' is not usable: {self._redact(exc)}") from None
        self.note = ""
        """What a reader did that it should say (an older schema read as if brought up to date)."""
        try:
            self._ours(create and not read_only)
            self._current() if read_only else migrate(self.engine)
        except DatabaseError as exc:
            if "file is not a database" in str(exc.orig):
                raise StoreError(f"{self._where()} is not an AutoDiscovery database (not an SQLite file)") from None
            raise StoreError(f"cannot open database {self.shown}: {self._redact(why(exc))}") from None
        self._factory = sessionmaker(self.engine, expire_on_commit=False)

    def _engine(self) -> Engine:
        if not self.read_only:
            engine = create_engine(self.url)
            if engine.dialect.name == "sqlite":
                event.listen(engine, "connect", _sqlite_pragmas)
            return engine
        url = make_url(self.url)
        if url.get_backend_name() == "sqlite":
            path = url.database or ""
            if not path or path.startswith(":memory:"):
                raise ArgumentError("an in-memory database cannot be opened read-only")
            if path.startswith("file:"):  # a URI the caller wrote: taken as it is
                engine = create_engine(url.set(query={**url.query, "uri": "true"}))
            else:
                file = Path(path).resolve()
                # The URL names the file (what messages say); the connection is the creator's.
                engine = create_engine(f"sqlite:///{file}", poolclass=NullPool, creator=lambda: sqlite3.connect(
                    reader_uri(file), uri=True, check_same_thread=False))
            event.listen(engine, "connect", _sqlite_read_only)
            return engine
        if url.get_backend_name() == "postgresql":
            return create_engine(url, connect_args={"options": "-c default_transaction_read_only=on"})
        return create_engine(url)

    def _current(self) -> None:
        """A database whose schema is this version's, read as it is; one of an older schema (SQLite), read
        from a copy in memory brought up to date (the file unchanged: `note` says so); refused, without a
        write, where neither will do."""
        with self.engine.connect() as conn:
            done = set(conn.scalars(text("SELECT name FROM _migrations")))
        ours = [name for name, _ in MIGRATIONS]
        if missing := [name for name in ours if name not in done]:
            behind = f"{len(missing)} migration{'s' if len(missing) > 1 else ''} behind"
            if self.engine.dialect.name == "sqlite":
                self.engine = self._in_memory()
                migrate(self.engine)
                self.note = (f"{self._where()} is of an older schema ({behind}): read from a copy in memory brought "
                             f"up to date, the file unchanged (`autodiscovery migrate --db {self._where()}` "
                             "rewrites it)")
                return
            raise StoreError(f"{self._where()} is of an older schema ({behind}: {', '.join(missing)}); a command that "
                             f"only reads never changes it: `autodiscovery migrate --db {self._where()}` brings it "
                             "up to date")
        if newer := sorted(done - set(ours)):
            raise StoreError(f"{self._where()} was written by a newer AutoDiscovery (migrations unknown here: "
                             f"{', '.join(newer)}): upgrade this installation")

    def _in_memory(self) -> Engine:
        """The database copied whole into memory, one connection that every session shares (it is the copy)."""
        copy = sqlite3.connect(":memory:", check_same_thread=False)
        with self.engine.connect() as conn:
            source = conn.connection.dbapi_connection
            assert isinstance(source, sqlite3.Connection)  # a SQLite engine's (the caller checked)
            source.backup(copy)
        url = self.engine.url
        self.engine.dispose()
        return create_engine(url, poolclass=StaticPool, creator=lambda: copy)

    def _redact(self, exc: object) -> str:
        return redact(str(exc), self.url)

    @property
    def where(self) -> str:
        """Where the database is, as messages name it: its file, or its URL without the password."""
        return self._where()

    def _where(self) -> str:
        path = make_url(self.url).database if self.engine.dialect.name == "sqlite" else None
        return path if path and not path.startswith(("file:", ":memory:")) else self.shown

    def _ours(self, create: bool) -> None:
        """Refuse another program's database (tables, none of ours), and, unless `create`, an empty one."""
        with self.engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
        if tables and "_migrations" not in tables:
            raise StoreError(f"{self._where()} is not an AutoDiscovery database (it holds other tables: "
                             f"{', '.join(sorted(tables)[:5])})")
        if not tables and not create:
            raise StoreError(f"no AutoDiscovery database at {self._where()}: nothing was recorded there "
                             "(`autodiscovery run` creates one; --db names another)")

    @staticmethod
    def _url(url: str | Path | None, create: bool = True) -> str:
        if url is None:
            url = DEFAULT_DB
        text = str(url)
        if "://" in text:
            try:
                make_url(text)
            except ArgumentError as exc:
                raise StoreError(f"database URL '{shown(text)}' is not usable: {redact(str(exc), text)}") from None
            if text.startswith("sqlite:///") and not text.startswith(("sqlite:///:memory:", "sqlite:///file:")):
                Store._folder(Path(text.removeprefix("sqlite:///")), create)
            return text
        path = Path(text).expanduser().resolve()
        Store._folder(path, create)
        return f"sqlite:///{path}"

    @staticmethod
    def _folder(path: Path, create: bool) -> None:
        """The database file's folder, made for a new database; a reader finds the file or says so."""
        if create:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the folder of database {path}: {exc.strerror}") from None
        elif not path.is_file():
            raise StoreError(f"no AutoDiscovery database at {path}: the file does not exist "
                             "(`autodiscovery run` creates one; --db names another)")

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
        """The one way to write: commits on success, rolls back on error, always closes (a read-only
        store's sessions only close: the pool ends their transaction, and what they read stays loaded)."""
        session = self._factory()
        try:
            yield session
            if not self.read_only:
                session.commit()
        except OperationalError as exc:
            session.rollback()
            raise StoreError(f"cannot write database {self.shown}: {self._redact(why(exc))}; what was recorded "
                             "before is kept, "
                             "and an interrupted run can be resumed") from None
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()
