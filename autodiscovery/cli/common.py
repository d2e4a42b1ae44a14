"""What every command shares: the Typer app, the consoles, the --db option, one-line errors."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from autodiscovery import AutoDiscoveryError
from autodiscovery.store import Store

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Autonomous, measured optimization of GPU kernels.")
console = Console()
err = Console(stderr=True)
state: dict = {"db": None}


@app.callback()
def main(db: Annotated[str | None, typer.Option(help="Database: a SQLAlchemy URL or a file path "
                                                   "(default runs/autodiscovery.db).")] = None) -> None:
    state["db"] = db


DbOption = Annotated[str | None, typer.Option("--db", help="Database: a SQLAlchemy URL or a file path.")]
SetOption = Annotated[list[str] | None, typer.Option("--set", help="Override a campaign field: key.path=value.")]


def store(db: str | None = None, create: bool = False, read_only: bool = False) -> Store:
    """The database of --db (or the default): read commands need one that exists and open it `read_only`
    (nothing written, nothing migrated); `create` makes it."""
    opened = Store(db or state["db"], create=create, read_only=read_only)
    if opened.note:
        err.print(f"note: {escape(opened.note)}", highlight=False, soft_wrap=True)
    return opened


def friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """One line on stderr and a non-zero exit for the errors a user can act on; never a traceback."""
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AutoDiscoveryError as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except (typer.Exit, KeyboardInterrupt):
            raise
        except Exception as exc:  # a bug of ours: say so in one line; the traceback on request
            if os.environ.get("AUTODISCOVERY_DEBUG"):
                raise
            err.print(f"[bold red]internal error:[/] {type(exc).__name__}: {escape(' '.join(str(exc).split()))} "
                      "(set AUTODISCOVERY_DEBUG=1 for the traceback; what was recorded is kept)",
                      highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
    return wrapper


def destination(path: Path, folder: bool = False) -> Path:
    """Where a command will write: a file whose folder exists or can be made (`folder`: a folder), or an
    AutoDiscoveryError naming what is in the way, before any work is done."""
    if not folder and path.is_dir():
        raise AutoDiscoveryError(f"{path} is a folder: name a file to write (e.g. {path / 'report.html'})")
    if folder and path.exists() and not path.is_dir():
        raise AutoDiscoveryError(f"{path} is a file: name a folder")
    parent = path if folder else path.parent
    if blocking := next((p for p in [parent, *parent.parents] if p.exists() and not p.is_dir()), None):
        raise AutoDiscoveryError(f"cannot write {path}: {blocking} is a file, not a folder")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AutoDiscoveryError(f"cannot create the folder {exc.filename or path}: {exc.strerror}") from None
    return path


def write(path: Path, text: str) -> None:
    """Write a file, or say in one line why it cannot be written."""
    try:
        destination(path).write_text(text)
    except OSError as exc:
        raise AutoDiscoveryError(f"cannot write {path}: {exc.strerror}") from None


def hint(command: str, db: str | None = None) -> str:
    """A command to type next, `autodiscovery COMMAND`, with the database this one used where it is not the
    default (`db`: the command's --db, else the global one), its password left out."""
    import shlex

    from autodiscovery.store import shown

    given = db or state["db"]
    return f"autodiscovery {command}" + (f" --db {shlex.quote(shown(str(given)))}" if given else "")


def say(text: str) -> None:
    """One message line: never wrapped, so it reads (and greps) the same at any terminal width."""
    console.print(text, soft_wrap=True, highlight=False)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
