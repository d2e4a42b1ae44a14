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
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return Reply(r.status, r.read().decode(), dict(r.headers))
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.read().decode(), dict(exc.headers))


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
