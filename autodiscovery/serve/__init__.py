"""`autodiscovery serve`: a read-only web view of the run database, live while runs write to it.

Starlette (routes, responses) on uvicorn; the pages are the HTML report's Jinja2 templates and charts
(`review.html`), a run's page polls one small JSON route and swaps in what changed. `app` holds the
application, `views` what the pages show beyond the report, `secrets` what they never show.
"""

from __future__ import annotations

import socket

from autodiscovery import AutoDiscoveryError
from autodiscovery.store import Store


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: any free one), or an error that says what is in the way."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise AutoDiscoveryError(f"--host {host}: no such address ({exc.strerror})") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        why = "is in use" if exc.errno == 98 else f"cannot be bound ({exc.strerror})"
        raise AutoDiscoveryError(f"port {port} on {host} {why}: --port names another") from None
    sock.listen(128)
    return sock


def loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def run(store: Store, sock: socket.socket, poll_s: float = 2.0) -> None:
    """Serve until interrupted (Ctrl-C)."""
    import uvicorn

    from autodiscovery.review.charts import pyplot
    from autodiscovery.serve.app import LOOPBACK, create_app

    pyplot()  # matplotlib loaded now, not on the first run page asked for
    host = sock.getsockname()[0]
    app = create_app(store, poll_s, LOOPBACK if loopback(host) else None)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", server_header=False)
    uvicorn.Server(config).run(sockets=[sock])
