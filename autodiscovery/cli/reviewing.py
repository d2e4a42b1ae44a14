"""Commands that read what runs recorded: runs, show, lineage, report, diff, export, prompt."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.syntax import Syntax

from autodiscovery import AutoDiscoveryError
from autodiscovery.cli.common import (
    DbOption,
    SetOption,
    app,
    console,
    destination,
    emit_json,
    friendly,
    hint,
    say,
    store,
    write,
)
from autodiscovery.review import candidate as candidate_view
from autodiscovery.review import display, exports, report
from autodiscovery.review import pool as pooling
from autodiscovery.review.sections import sections_table
from autodiscovery.roles import ShowingProfiles
from autodiscovery.running import runner
from autodiscovery.running.refs import parse
from autodiscovery.status import Sanitized
from autodiscovery.store import EvalKind, EvalStatus, RunStatus


@app.command()
@friendly
def runs(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.", metavar="")] = False,
    campaign: Annotated[str | None, typer.Option(help="Only this campaign's runs.")] = None,
    status: Annotated[str | None, typer.Option(help="Only runs with this status (running, finished, "
                                                       "interrupted, failed).")] = None,
    since: Annotated[str | None, typer.Option(help="Only runs started since a date (2026-11-20) or an age "
                                                      "(90m, 12h, 3d).")] = None,
    db: DbOption = None,
) -> None:
    """One row a run: campaign, agent, status, candidates evaluated, the best in its objective."""
    statuses = [s.value for s in RunStatus]
    if status is not None and status not in statuses:
        raise AutoDiscoveryError(f"--status '{status}' is not a run status ({', '.join(statuses)})")
    rows = report.runs(store(db, read_only=True), campaign, status, report.parse_since(since) if since else None)
    emit_json(rows) if as_json else console.print(display.runs_table(rows))


@app.command()
@friendly
def show(
    ref: Annotated[str, typer.Argument(help="RUN (e.g. 3) or RUN/CANDIDATE (e.g. 3/7).")],
    config: Annotated[bool, typer.Option("--config", help="With RUN: the campaign as resolved and the "
                                                         "fingerprint of where it ran, whole, as JSON.", metavar="")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.", metavar="")] = False,
    source: Annotated[bool, typer.Option("--source", help="With RUN/CANDIDATE: its source, with line numbers.", metavar="")]
    = False,
    db: DbOption = None,
) -> None:
    """A run (where it ran, its candidates, each decision cut to a line) or one candidate in a screen or
    two (hypothesis, decision, knobs, build, each evaluation and the start of its log; its source with
    --source, the whole record with --json)."""
    at = parse(ref)
    run_id, seq = at.run, at.seq
    given, st = db, store(db, read_only=True)
    harness = report.harness_class(st, run_id)
    if seq is None:
        data = report.show_run(st, run_id)
        table, extra = report.summary(st, run_id)
        calls = report.llm_summary(st, run_id)
        used = pooling.pool(st, run_id)
        if as_json:
            return emit_json(data | {"harness": extra, "llm_summary": calls, "pool": used})
        if config:
            return console.print_json(json.dumps({"fingerprint": data["fingerprint"], "config": data["config"]}))
        from autodiscovery.running.suite import is_suite

        if is_suite(st, run_id):  # its candidates are its problems' runs': the dispatch table says what they found
            say(f"[bold]run {data['id']}[/] · {data['campaign']} · {data['status']} ({data['stop_reason']})")
            say(display.where(data["fingerprint"], harness, console.width))
            console.print(display.dispatch_table(exports.dispatch(st, run_id)))
            say(f"a problem's run: `{hint('show RUN', given)}` (the run column); the config: "
                f"`{hint(f'show {run_id} --config', given)}`")
            return
        say(f"[bold]run {data['id']}[/] · {data['campaign']} · {data['status']} ({data['stop_reason']}) · "
            f"{report.tally_text(data)}")
        say(display.where(data["fingerprint"], harness, console.width))
        if used is not None:
            say(pooling.pool_text(used))
        if data["config"].get("origin"):
            say(f"continues {data['config']['origin']} (its lineage: `{hint(f'lineage {run_id}', given)}`)")
        console.print(display.candidates_table(data["candidates"], harness))
        if table is not None:
            console.print(table)
        if calls:
            console.print(display.llm_table(calls))
        say(f"one candidate whole: `{hint(f'show {run_id}/SEQ', given)}`; the config and fingerprint: "
            f"`{hint(f'show {run_id} --config', given)}`")
        return
    data = report.show_candidate(st, run_id, seq)
    if as_json:
        return emit_json(data)
    if source:
        return console.print(Syntax(data["source"] or "", "cuda", line_numbers=True, word_wrap=True))
    for line in candidate_view.lines(data, harness, console.width):
        console.print(escape(line), highlight=False, soft_wrap=True)
    for e in data["evaluations"]:
        if (isinstance(harness, ShowingProfiles) and e["kind"] == EvalKind.profile and e["status"] == EvalStatus.ok
                and "profile" in e["metrics"]):
            section = harness.profile_section(f"{run_id}/{seq}", e["metrics"]["profile"])
            if section is not None:
                console.print(sections_table([section]))
    lines = len((data["source"] or "").splitlines())
    say(f"one candidate whole (logs, metrics): `{hint(f'show {run_id}/{seq} --json', given)}`; its source "
        f"({lines} lines): `{hint(f'show {run_id}/{seq} --source', given)}`")


@app.command()
@friendly
def lineage(run_id: Annotated[int, typer.Argument(help="Run id.")],
            as_json: Annotated[bool, typer.Option("--json", help="Print JSON.", metavar="")] = False,
            tree: Annotated[bool, typer.Option("--tree", help="Every candidate under the one it was made from.", metavar="")] = False,
    db: DbOption = None,
) -> None:
    """The kept chain from the seed to the best: step, hypothesis, the objective and the harness's figures."""
    given, st = db, store(db, read_only=True)
    if tree:
        rows = report.tree(st, run_id)
        return emit_json(rows) if as_json else console.print(display.tree(run_id, rows))
    rows = report.lineage(st, run_id)
    if as_json:
        return emit_json(rows)
    _lineage(display.lineage_table(run_id, rows, report.harness_class(st, run_id), hint(f"show {run_id}/SEQ", given)))


def _lineage(parts: tuple[Any, str, Any]) -> None:
    table, heading, hypotheses = parts
    console.print(table)
    say(heading)  # it names a command: whole on its line
    console.print(hypotheses)


@app.command("report")
@friendly
def report_cmd(run_id: Annotated[int, typer.Argument(help="Run id.")],
               as_json: Annotated[bool, typer.Option("--json", help="Print JSON.", metavar="")] = False,
               out: Annotated[Path | None, typer.Option("--out", help="Write a self-contained HTML report "
                                                                         "(charts inline, no network).")] = None,
               png: Annotated[Path | None, typer.Option("--png", help="Write the charts as PNG images into "
                                                                         "this folder.")] = None,
               db: DbOption = None) -> None:
    """A run's summary: the lineage, and what its harness adds (for co-design runs, the phase table)."""
    given, st = db, store(db, read_only=True)
    if out is not None or png is not None:
        from autodiscovery.review import html as html_report

        if out is not None:
            destination(out)
        if png is not None:
            destination(png, folder=True)
        try:
            page, pngs = html_report.render(st, run_id, png)
        except OSError as exc:
            raise AutoDiscoveryError(f"cannot write {exc.filename or png}: {exc.strerror}") from None
        if out is not None:
            write(out, page)
            say(f"wrote {out} ({len(page) // 1024} KB)")
        for p in pngs:
            say(f"wrote {p}")
        return
    from autodiscovery.running.suite import is_suite

    if is_suite(st, run_id):  # a suite's report is its dispatch table (each problem's run has its own)
        data = exports.dispatch(st, run_id)
        if as_json:
            return emit_json({k: v for k, v in data.items() if k != "harness"})
        console.print(display.dispatch_table(data))
        return
    table, summary = report.summary(st, run_id)
    if as_json:
        return emit_json({"lineage": report.lineage(st, run_id), "harness": summary})
    _lineage(display.lineage_table(run_id, report.lineage(st, run_id), report.harness_class(st, run_id),
                                   hint(f"show {run_id}/SEQ", given)))
    if table is not None:
        console.print(table)


@app.command()
@friendly
def diff(a: Annotated[str, typer.Argument(help="A candidate: RUN/SEQ (e.g. 3/7).")],
         b: Annotated[str, typer.Argument(help="Another candidate: RUN/SEQ (the run may differ).")],
         as_json: Annotated[bool, typer.Option("--json", help="Print JSON.", metavar="")] = False,
         db: DbOption = None) -> None:
    """The source diff of two candidates, with both candidates' metrics and knobs."""
    st = store(db, read_only=True)
    data = report.diff(st, a, b)
    if as_json:
        return emit_json(data)
    console.print(display.diff_table(data, report.harness_class(st, data["a"]["run"])))
    if data["diff"]:
        console.print(Syntax(data["diff"], "diff", word_wrap=False))
    else:
        say("the two sources are identical")


@app.command()
@friendly
def export(run_ids: Annotated[list[int], typer.Argument(
               help="Run id; with --library, one or more runs or suites.")],
           out: Annotated[Path | None, typer.Option(help="Where to write the best kernel's source.")] = None,
           library: Annotated[Path | None, typer.Option(
               help="Write a callable library into this folder instead, as the runs' harness makes one: the best "
                    "kernel of each run (or of each problem of a suite; of a shape tuned in several runs, the "
                    "better), built, with a module to call them.")] = None,
    db: DbOption = None,
) -> None:
    """Write the best kernel's source (its launch manifest included) and a JSON summary beside it; or,
    with --library, the tuned kernels as a library a program can call."""
    if (out is None) == (library is None):
        raise AutoDiscoveryError("give --out FILE (the best kernel's source) or --library DIR (a callable library)")
    if out is not None and len(run_ids) > 1:
        raise AutoDiscoveryError(f"--out writes one run's best kernel: give one run, not {len(run_ids)}")
    run_id = run_ids[0]
    if library is not None:
        destination(library, folder=True)
        try:
            table = exports.library(store(db, read_only=True), run_ids, library)
        except OSError as exc:
            raise AutoDiscoveryError(f"cannot write {exc.filename or library}: {exc.strerror}") from None
        say(f"wrote {library}/: {table['summary']}")
        return
    assert out is not None  # one of --out and --library, checked above
    source, meta = exports.export(store(db, read_only=True), run_id)
    write(out, source)
    write(out.with_suffix(out.suffix + ".json"), json.dumps(meta, indent=2, default=str))
    state = meta["sanitized"]["state"]
    note = {Sanitized.clean: "sanitized: clean",
            Sanitized.never: "never sanitized: no compute-sanitizer run is recorded for it"}
    say(f"wrote {out} (#{meta['seq']}, {meta['score_text']}; {note.get(state, 'sanitize: ' + state)}) and {out}.json")


@app.command()
@friendly
def prompt(ref: Annotated[str, typer.Argument(help="A candidate, RUN/SEQ, or RUN for its best.")],
           set_: SetOption = None,
           seed: Annotated[int, typer.Option(help="Seed of the inspirations' draw.")] = 0,
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON.", metavar="")] = False,
           db: DbOption = None) -> None:
    """The prompt the llm agent would send to change a recorded candidate: the rules, the hardware, the
    kernel with its ptxas facts and profile, the lineage, inspirations and the last attempts."""
    data = runner.prompt(ref, store(db, read_only=True), list(set_ or []), seed)
    if as_json:
        return emit_json(data)
    sys.stdout.write(f"=== system ===\n{data['system']}\n=== user ===\n{data['user']}")
