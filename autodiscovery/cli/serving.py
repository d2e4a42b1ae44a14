"""`serve`: the run database in a browser, read-only."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from autodiscovery import AutoDiscoveryError
from autodiscovery.cli.common import DbOption, app, friendly, say, state
from autodiscovery.store import Store


@app.command()
@friendly
def serve(host: Annotated[str, typer.Option(help="Address to listen on; another than 127.0.0.1 lets other "
                                                 "machines read every run (there is no login).")] = "127.0.0.1",
          port: Annotated[int, typer.Option(help="Port to listen on (0: any free one).")] = 8765,
          poll: Annotated[float, typer.Option(help="Seconds between a run page's checks for news.")] = 2.0,
          db: DbOption = None) -> None:
    """Watch and review runs in a browser: every run, a run live as it goes, each candidate (source,
    diffs, evaluations, LLM calls), the lineage and the tree. Read-only; safe while runs write."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise AutoDiscoveryError("serve needs starlette and uvicorn: pip install -e .") from None
    from autodiscovery import serve as web

    if poll <= 0:
        raise AutoDiscoveryError(f"--poll {poll:g}: give a number of seconds above 0")
    store = Store(db or state["db"], create=False, read_only=True)
    sock = web.bind(host, port)
    where = f"[{host}]" if ":" in host else host
    shown_port = sock.getsockname()[1]
    say(f"serving {store.where}, read-only")
    if store.note:
        say(f"note: {escape(store.note)}")
    if not web.loopback(host):
        say(f"[bold yellow]warning:[/] {host} is open to other machines: whoever reaches it reads every run")
    say(f"open http://{where}:{shown_port}/ (Ctrl-C stops)")
    try:
        web.run(store, sock, poll)
    finally:
        sock.close()
