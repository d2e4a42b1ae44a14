"""Commands about the set-up: what a campaign needs, and the campaigns that ship."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from autodiscovery import AutoDiscoveryError, registry
from autodiscovery import campaign as campaigns
from autodiscovery.cli.common import app, console, emit_json, friendly


@app.command()
@friendly
def doctor(campaign: Annotated[str, typer.Option(help="Campaign whose tools to check.")] = "edge-codesign",
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Check the tools a campaign needs (simulator, CUDA 11 nvcc, nvcc, GPU) and say what to set."""
    c = campaigns.load(campaign)
    with console.status(f"checking what {c.name} needs"):
        rows = registry.harness(c.harness.name).doctor(c)  # (tool, where found, hint, needed)
    if as_json:
        emit_json([{"tool": what, "found": path, "if_missing": None if path else hint, "needed": needed}
                   for what, path, hint, needed in rows])
    else:
        t = Table(title=f"what {c.name} needs")
        for col in ("tool", "found", "if missing"):
            t.add_column(col, overflow="fold")
        for what, path, hint, needed in rows:
            missing = "[red]not found[/]" if needed else "[yellow]not found (not needed by this campaign)[/]"
            t.add_row(what, f"[green]{path}[/]" if path else missing, "" if path else hint)
        console.print(t)
    if not all(p for _, p, _, needed in rows if needed):  # exit 0 when what the campaign needs is there
        raise typer.Exit(1)


@app.command("campaigns")
@friendly
def list_campaigns() -> None:
    """List the campaigns that ship."""
    t = Table(title="campaigns")
    paths = campaigns.available()
    # A campaign's name is what `run --campaign` takes: printed whole at any terminal width.
    t.add_column("name", no_wrap=True, min_width=max((len(p.stem) for p in paths), default=4))
    for col in ("file", "description"):
        t.add_column(col)
    for path in paths:
        try:
            c = campaigns.load(str(path))
            t.add_row(path.stem, str(path.name), c.description)
        except AutoDiscoveryError as exc:
            t.add_row(path.stem, str(path.name), f"[red]invalid: {exc}[/]")
    console.print(t)
