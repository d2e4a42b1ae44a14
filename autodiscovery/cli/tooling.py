"""Commands about the set-up: what a campaign needs, a kernel checked against its campaign without a GPU,
and the campaigns that ship."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from autodiscovery import AutoDiscoveryError, registry
from autodiscovery import campaign as campaigns
from autodiscovery.cli.common import DbOption, SetOption, app, console, emit_json, friendly, say


@app.command()
@friendly
def doctor(campaign: Annotated[str, typer.Option(help="Campaign whose tools to check.")] =
           campaigns.DEFAULT_CAMPAIGN,
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON (the campaign's tools only).", metavar="")] = False
           ) -> None:
    """Check the tools a campaign needs (nvcc, the driver, the GPU; the simulator for edge-codesign), say
    what to set, then which shipped campaigns this machine is ready for."""
    from autodiscovery.review.display import compact
    from autodiscovery.roles import Doctoring
    from autodiscovery.running.runner import readiness

    c = campaigns.load(campaign)
    with console.status(f"checking what {c.name} needs"):
        cls = registry.harness(c.harness.name)
        rows = cls.doctor(c) if isinstance(cls, Doctoring) else []  # (tool, where found, hint, needed)
    if as_json:
        emit_json([{"tool": what, "found": path, "if_missing": None if path else hint, "needed": needed}
                   for what, path, hint, needed in rows])
    else:
        t = compact(f"what {c.name} needs")
        t.padding = (0, 1, 0, 0)
        for col in ("tool", "found", "if missing"):
            t.add_column(col, overflow="fold")
        for what, path, hint, needed in rows:
            missing = "[red]not found[/]" if needed else "[yellow]not found (not needed by this campaign)[/]"
            t.add_row(what, f"[green]{path}[/]" if path else missing, "" if path else hint)
        console.print(t)
        with console.status("checking what the other campaigns need"):
            ready = readiness(c, rows)
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column()  # what a campaign lacks wraps under itself
        for name, lacking in ready:
            grid.add_row(f" {name}", "[green]ready[/]" if not lacking else
                         f"[red]not ready[/], needs {escape(', '.join(lacking))}")
        say("the shipped campaigns on this machine:")
        console.print(grid, highlight=False)
    if not all(p for _, p, _, needed in rows if needed):  # exit 0 when what the campaign needs is there
        raise typer.Exit(1)


@app.command()
@friendly
def check(
    kernel: Annotated[Path, typer.Argument(help="A kernel source file with its @manifest.")],
    campaign: Annotated[str, typer.Option(help="Campaign (name or YAML file) whose problem and harness apply.")] =
        campaigns.DEFAULT_CAMPAIGN,
    set_: SetOption = None,
) -> None:
    """Check a kernel against its campaign without a GPU: the manifest (naming the line of a mistake), the
    launch plan at the campaign's sizes (requires, grids, names, outputs), the build with nvcc, and the
    kernels the built cubin defines against those the manifest launches, with their arguments."""
    from autodiscovery.running.check import check_file

    loaded = campaigns.load(campaign, list(set_ or []))
    with console.status(f"checking {kernel}"):
        result = check_file(kernel, loaded)
    say(f"{escape(str(kernel))} against {escape(loaded.name)} ({loaded.harness.name} harness):")
    for step in result.steps:
        mark = "[yellow]note[/]" if step.note else "[green]ok[/]  " if step.ok else "[red]FAIL[/]"
        say(f"  {mark} {step.name}: {escape(' '.join(step.text.split()))}")
        for line in step.detail.splitlines():
            say(f"       {escape(line)}")
    if not result.ok:
        raise typer.Exit(1)
    if skipped := [s.name for s in result.steps if s.text.startswith("skipped")]:
        say(f"checked all it could here; {' and '.join(skipped)} skipped: check again where the compiler is")
        return
    say(f"ready for a GPU: `autodiscovery measure {escape(str(kernel))} --campaign {escape(campaign)}`")


@app.command("campaigns")
@friendly
def list_campaigns() -> None:
    """List the campaigns that ship (`run --campaign NAME`; a campaign of your own is a YAML file's path)."""
    from autodiscovery.review.display import compact

    t = compact("campaigns")
    t.padding = (0, 1, 0, 0)
    paths = campaigns.available()
    # A campaign's name is what `run --campaign` takes: printed whole at any terminal width.
    t.add_column("name", no_wrap=True, min_width=max((len(p.stem) for p in paths), default=4))
    t.add_column("harness", no_wrap=True)
    t.add_column("description")
    for path in paths:
        try:
            c = campaigns.load(str(path))
            t.add_row(path.stem, c.harness.name, escape(c.description))
        except AutoDiscoveryError as exc:
            t.add_row(path.stem, "", f"[red]invalid: {escape(str(exc))}[/]")
    console.print(t)


@app.command()
@friendly
def migrate(db: DbOption = None) -> None:
    """Bring a database of an older schema up to date (it rewrites the file: the commands that only read
    never do)."""
    from autodiscovery.cli.common import store

    opened = store(db)  # opening for writing applies the migrations it lacks
    say(f"{opened.shown}: at today's schema")
