"""`serve` for the tests: the application on a free port of 127.0.0.1 in a thread (real uvicorn, real
HTTP), and requests that return what came back whatever its status."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from autodiscovery import serve
from autodiscovery.serve.app import create_app
from autodiscovery.store import Store


@dataclass
class Reply:
    status: int
    body: str
    headers: dict = field(default_factory=dict)

    def json(self):
        return json.loads(self.body)


def request(url: str, method: str = "GET", headers: dict | None = None, data: bytes | None = None) -> Reply:
    """What came back, whatever its status. A request line too long for the server is answered 400 and
    the connection closed; where it closes while this client is still sending the line, the client sees a
    reset instead of the answer (about one time in 150 on a loaded machine): the request is sent again,
    up to three times, so that the answer is what the test reads."""
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    for attempt in range(3):
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return Reply(r.status, r.read().decode(), dict(r.headers))
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, exc.read().decode(), dict(exc.headers))
        except (ConnectionResetError, urllib.error.URLError) as exc:
            reset = isinstance(exc, ConnectionResetError) or isinstance(getattr(exc, "reason", None), ConnectionResetError)
            if not reset or attempt == 2:
                raise
    raise AssertionError("unreachable")


@contextmanager
def served(db: str | Path, poll_s: float = 0.5):
    """The base URL of `serve` over `db` (read-only), until the block ends."""
    import uvicorn

    store = Store(db, create=False, read_only=True)
    sock = serve.bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(store, poll_s), log_level="warning", access_log=False,
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        store.engine.dispose()


def grown(path: Path, copies: int, runs: int) -> None:
    """Make a recorded database large: run 1's candidates (with their evaluations and decisions) copied
    `copies` times into a new run, each copy's seeds made from the previous copy's best, and `runs` more
    runs like run 1 (sharing its candidates' rows as their best)."""
    import sqlite3

    with sqlite3.connect(path) as conn:
        def columns(table: str) -> list[str]:
            return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]

        def copy(table: str, where: str, changes: dict[str, str], params: dict) -> None:
            cols = columns(table)
            select = ", ".join(changes.get(c, c) for c in cols)
            conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {select} FROM {table} WHERE {where}", params)

        top = conn.execute("SELECT max(id) FROM runs").fetchone()[0]
        big = top + 1
        copy("runs", "id = 1", {"id": ":big", "campaign": "'hopper-gemm-large'", "best_candidate_id": "NULL"},
             {"big": big})
        n = conn.execute("SELECT count(*) FROM candidates WHERE run_id = 1").fetchone()[0]
        step = 10 ** len(str(n * copies + 1000))
        for k in range(1, copies + 1):
            off = {"off": k * step, "big": big, "seq": (k - 1) * n}
            shift = "CASE WHEN {0} IS NULL THEN NULL ELSE {0} + :off END"
            copy("candidates", "run_id = 1", {"id": "id + :off", "run_id": ":big", "seq": "seq + :seq",
                                              "parent_id": shift.format("parent_id"),
                                              "incumbent_id": shift.format("incumbent_id")}, off)
            copy("evaluations", "candidate_id IN (SELECT id FROM candidates WHERE run_id = 1)",
                 {"id": "id + :off", "candidate_id": "candidate_id + :off",
                  "against_id": shift.format("against_id")}, off)
            copy("decisions", "run_id = 1", {"id": "id + :off", "run_id": ":big", "candidate_id": "candidate_id + :off",
                                             "incumbent_id": shift.format("incumbent_id")}, off)
        best = conn.execute("SELECT best_candidate_id FROM runs WHERE id = 1").fetchone()[0]
        conn.execute("UPDATE runs SET best_candidate_id = ? WHERE id = ?", (best + copies * step, big))
        for i in range(runs):
            copy("runs", "id = 1", {"id": ":id", "campaign": ":campaign"},
                 {"id": big + 1 + i, "campaign": f"hopper-gemm-{i % 7}"})
