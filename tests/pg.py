"""A real PostgreSQL server for the tests: a throwaway cluster in a temporary folder, listening on a
Unix socket only, started with the installed server's own tools (Debian's `postgresql` package), or
the server named by $AUTODISCOVERY_TEST_PG (a SQLAlchemy URL of a database the tests may create
databases next to)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path


def _tool(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def available() -> str | None:
    """Why no server can be had, or None."""
    if os.environ.get("AUTODISCOVERY_TEST_PG"):
        return None
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    if not (_tool("initdb") and _tool("pg_ctl")):
        return "PostgreSQL's server is not installed (apt-get install postgresql)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser to start PostgreSQL as its own user"
    return None


class Server:
    """initdb, pg_ctl start on a socket in the cluster's folder, and a fresh database per `database()`."""

    def __init__(self) -> None:
        self.given = os.environ.get("AUTODISCOVERY_TEST_PG")
        self.dir: Path | None = None

    def _as_owner(self, *cmd: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *cmd], check=True, capture_output=True, text=True, timeout=120)

    def start(self) -> Server:
        if self.given:
            return self
        self.dir = Path(tempfile.mkdtemp(prefix="autodiscovery-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        with socket.socket() as s:  # a port number only names the socket file; take one nobody uses
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        data = self.dir / "data"
        self._as_owner(_tool("initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync",
                       "-E", "UTF8")
        self._as_owner(_tool("pg_ctl"), "-D", str(data), "-w", "-l", str(self.dir / "log"), "-o",
                       f"-k {self.dir} -p {self.port} -c listen_addresses='' -c fsync=off -c max_connections=200",
                       "start")
        return self

    def url(self, database: str) -> str:
        if self.given:
            head, _, _ = self.given.rpartition("/")
            return f"{head}/{database}"
        return f"postgresql+psycopg://postgres@/{database}?host={self.dir}&port={self.port}"

    def database(self) -> str:
        """A new, empty database; its SQLAlchemy URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        admin = self.url("postgres").replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.given or self.dir is None:
            return
        try:
            self._as_owner(_tool("pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
