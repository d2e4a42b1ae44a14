"""What every command shares: the Typer app, the consoles, the --db option, one-line errors."""

from __future__ import annotations

import json
import os
import sys
from functools import wraps
from typing import Annotated, Optional

import typer
from rich.console import Console

from autodiscovery import AutoDiscoveryError
from autodiscovery.store import Store

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Autonomous, measured optimization of GPU kernels.")
console = Console()
err = Console(stderr=True)
state: dict = {"db": None}


@app.callback()
def main(db: Annotated[Optional[str], typer.Option(help="Database: a SQLAlchemy URL or a file path "
                                                   "(default runs/autodiscovery.db).")] = None) -> None:
    state["db"] = db


DbOption = Annotated[Optional[str], typer.Option("--db", help="Database: a SQLAlchemy URL or a file path.")]
SetOption = Annotated[Optional[list[str]], typer.Option("--set", help="Override a campaign field: key.path=value.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def store(db: str | None = None) -> Store:
    return Store(db or state["db"])


def friendly(fn):
    """One line on stderr and a non-zero exit for the errors a user can act on; never a traceback."""
    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AutoDiscoveryError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True, markup=True)
            raise typer.Exit(2) from None
        except (typer.Exit, KeyboardInterrupt):
            raise
        except Exception as exc:  # a bug of ours: say so in one line; the traceback on request
            if os.environ.get("AUTODISCOVERY_DEBUG"):
                raise
            err.print(f"[bold red]internal error:[/] {type(exc).__name__}: {exc} "
                      "(set AUTODISCOVERY_DEBUG=1 for the traceback; what was recorded is kept)",
                      highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
    return wrapper


def say(text: str) -> None:
    """One message line: never wrapped, so it reads (and greps) the same at any terminal width."""
    console.print(text, soft_wrap=True, highlight=False)


def emit_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
