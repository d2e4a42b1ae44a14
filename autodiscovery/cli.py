"""The `autodiscovery` command: thin commands over the library, Rich tables, --json where useful."""

from __future__ import annotations

import json
import os
import signal
import sys
from functools import wraps
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from autodiscovery import AutoDiscoveryError, campaign as campaigns, display, registry, report, runner
from autodiscovery.loop import Stop
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


def store(db: str | None = None) -> Store:
    return Store(db or state["db"])


def friendly(fn):
    """One line on stderr and a non-zero exit for the errors a user can act on; never a traceback."""
    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AutoDiscoveryError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
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


@app.command()
@friendly
def run(
    campaign: Annotated[Optional[str], typer.Option(
        help="Campaign name (see `campaigns`) or path to a YAML file [default: hopper-gemm; with --from, that "
             "run's campaign].")] = None,
    set_: SetOption = None,
    resume: Annotated[Optional[int], typer.Option(help="Continue an interrupted run by its id.")] = None,
    from_: Annotated[Optional[str], typer.Option(
        "--from", help="Start from a recorded candidate, RUN/SEQ (or RUN for its best): it is the new run's seed, "
                       "its lineage linked (e.g. the llm agent going on where a search run stopped).")] = None,
    agent: Annotated[Optional[str], typer.Option(help="Who proposes: search (built in) or llm.")] = None,
    model: Annotated[Optional[list[str]], typer.Option(help="LLM model name (repeatable; implies --agent llm).")] = None,
    base_url: Annotated[Optional[str], typer.Option(help="OpenAI-compatible endpoint for the llm agent.")] = None,
    gpus: Annotated[Optional[str], typer.Option(
        help="Evaluate on several GPUs of this host, one evaluation each at a time: all, a count, or "
             "indices like 0,1 (sets harness.gpus).")] = None,
    executor: Annotated[Optional[str], typer.Option(
        help="Where evaluations run: local (child processes) or ray (tasks on a Ray cluster; sets executor.kind).")] = None,
    address: Annotated[Optional[str], typer.Option(
        help="With --executor ray: the cluster, auto or ray://HOST:PORT (default: a new local one).")] = None,
    dry_run: Annotated[bool, typer.Option(help="Propose and build only: no GPU, no measurement.")] = False,
    quiet: Annotated[bool, typer.Option(help="No live display; print the summary only.")] = False,
    allow_new_toolchain: Annotated[bool, typer.Option(
        help="With --resume: go on although nvcc, the driver or cuBLAS changed (the run records it).")] = False,

    db: DbOption = None,
) -> None:
    """Run a campaign: propose, build, gate, measure, keep or revert, until a stop rule fires."""
    overrides = list(set_ or [])
    if model:
        agent = agent or "llm"
        overrides.append("agent.llm.models=[" + ", ".join("{name: " + json.dumps(m) + "}" for m in model) + "]")
    if agent:
        overrides.append(f"agent.kind={agent}")
    if base_url:
        overrides.append(f"agent.llm.base_url={json.dumps(base_url)}")
    if executor is not None:
        overrides.append(f"executor.kind={executor}")
    if address is not None:
        overrides.append(f"executor.address={json.dumps(address)}")
    if gpus is not None:
        text = gpus.strip()
        overrides.append(f"harness.gpus={text if text == 'all' or text.isdigit() else '[' + text + ']'}")
    if resume is not None and from_ is not None:
        raise AutoDiscoveryError("--resume continues a run and --from starts one: give one of them")
    if resume is None and from_ is None:  # validate the campaign before opening anything
        campaigns.load(campaign or "hopper-gemm", overrides)
    db = store(db)
    view = runner.Quiet() if quiet else display.LiveDisplay(console)
    stop, started = Stop(), []

    def on_interrupt(signum, frame):  # the first Ctrl-C asks for a safe stop, the second stops at once
        if stop.requested:
            raise KeyboardInterrupt
        stop.request()
        err.print("stopping after the current candidate (Ctrl-C again to stop at once)", soft_wrap=True)

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        if resume is None:
            run_id = runner.start(campaign, overrides, db, view, dry_run=dry_run, stop=stop, started=started.append,
                                  from_=from_)
        else:
            run_id = runner.resume(resume, overrides, db, view, allow_new_toolchain=allow_new_toolchain, stop=stop,
                                   started=started.append)
    except KeyboardInterrupt:
        where = f"autodiscovery run --resume {started[0]}" if started else "autodiscovery run --resume <id>"
        err.print(f"interrupted: everything so far is saved; continue with `{where}`", soft_wrap=True)
        raise typer.Exit(130) from None
    except AutoDiscoveryError as exc:
        if started:
            raise AutoDiscoveryError(f"{exc}; run {started[0]} is saved: continue with "
                                     f"`autodiscovery run --resume {started[0]}`") from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    summary = next(r for r in report.runs(db) if r["id"] == run_id)
    if stop.requested:
        say(f"run {run_id} stopped between two candidates; continue with `autodiscovery run --resume {run_id}`")
        raise typer.Exit(130)
    if dry_run:
        say(f"run {run_id} (dry run): {summary['status']} ({summary['stop_reason']}); "
                      f"{summary['candidates']} candidates built. See `autodiscovery show {run_id}`.")
        if summary["status"] == "failed":
            raise typer.Exit(1)
        return
    table, _ = report.summary(db, run_id)
    if table is not None:
        console.print(table)
    tflops = f", {display.fmt(summary['best_tflops'], '.1f')} TFLOP/s" if summary["best_tflops"] else ""
    say(f"run {run_id}: {summary['status']} ({summary['stop_reason']}); best {summary['best_text']}{tflops}. "
        f"See `autodiscovery lineage {run_id}`" + (f" and `autodiscovery report {run_id}`." if table else "."))
    if summary["status"] == "failed":
        raise typer.Exit(1)


@app.command()
@friendly
def measure(
    kernel: Annotated[Path, typer.Argument(help="A kernel source file with its @manifest.")],
    campaign: Annotated[str, typer.Option(help="Campaign whose problem and harness settings apply.")] = "hopper-gemm",
    set_: SetOption = None,
    repeat: Annotated[int, typer.Option(min=1, help="Measure this many times, each in a fresh process.")] = 1,
) -> None:
    """Gate and time one kernel against cuBLAS (nothing is recorded)."""
    outcomes = runner.measure(str(kernel), campaign, list(set_ or []), repeat)
    objective = registry.harness(campaigns.load(campaign, list(set_ or [])).harness.name).objective
    console.print(display.measure_table(str(kernel), outcomes, objective))
    scores = [o.score for o in outcomes if o.score is not None]
    if len(scores) > 1:
        med = sorted(scores)[len(scores) // 2]
        say(f"spread of {objective.name.strip('× ')} over {len(scores)} measurements: "
            f"{(max(scores) - min(scores)) / med:.2%} of the median ({min(scores):.4f} to {max(scores):.4f})")
    if any(o.status != "ok" for o in outcomes):
        raise typer.Exit(1)


@app.command()
@friendly
def profile(
    target: Annotated[str, typer.Argument(help="A recorded candidate, RUN/SEQ (e.g. 3/7), or a kernel file.")],
    campaign: Annotated[str, typer.Option(help="For a kernel file: the campaign whose problem applies.")] = "hopper-gemm",
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    db: DbOption = None,
) -> None:
    """Nsight Compute on a candidate and on cuBLAS at the same shape (stored with a recorded candidate)."""
    with console.status(f"profiling {target} and the baseline under Nsight Compute"):
        label, outcome = runner.profile(target, campaign, list(set_ or []), store(db))
    if outcome.status != "ok":
        raise AutoDiscoveryError(f"{label}: {outcome.status}: {outcome.log.splitlines()[0] if outcome.log else ''}")
    if as_json:
        return emit_json(outcome.metrics["profile"])
    console.print(display.profile_table(label, outcome.metrics["profile"]))


@app.command()
@friendly
def ladder(
    shape: Annotated[list[str], typer.Option(help="Problem shape: N (square) or MxNxK; repeat for several.")] = ["4096"],
    per_family: Annotated[int, typer.Option(min=1, help="Configurations tried per family (default first, then TPE).")] = 6,
    family: Annotated[Optional[list[str]], typer.Option(help="Only these families (repeatable).")] = None,
    campaign: Annotated[str, typer.Option(help="Campaign whose harness settings apply.")] = "hopper-gemm",
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,

    db: DbOption = None,
) -> None:
    """The best configuration of each kernel family at each shape, interleaved with cuBLAS."""
    with console.status("climbing the ladder") as status:
        results = runner.ladder(campaign, list(set_ or []), shape, store(db), per_family, family,
                                progress=lambda msg: status.update(f"ladder: {msg}"))
    if as_json:
        return emit_json([{"shape": list(s), "run": run_id, "rungs": [r.row() for r in rungs]}
                          for s, run_id, rungs in results])
    for s, run_id, rungs in results:
        console.print(display.ladder_table(s, run_id, [r.row() for r in rungs]))


@app.command("report")
@friendly
def report_cmd(run_id: Annotated[int, typer.Argument(help="Run id.")],
               as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
               out: Annotated[Optional[Path], typer.Option("--out", help="Write a self-contained HTML report "
                                                                         "(charts inline, no network).")] = None,
               png: Annotated[Optional[Path], typer.Option("--png", help="Write the charts as PNG images into "
                                                                         "this folder.")] = None,
               db: DbOption = None) -> None:
    """A run's summary: the lineage, and what its harness adds (for co-design runs, the phase table)."""
    db = store(db)
    if out is not None or png is not None:
        from autodiscovery import html_report

        page, pngs = html_report.render(db, run_id, png)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(page)
            say(f"wrote {out} ({len(page) // 1024} KB)")
        for p in pngs:
            say(f"wrote {p}")
        return
    table, data = report.summary(db, run_id)
    if as_json:
        return emit_json({"lineage": report.lineage(db, run_id), "harness": data})
    console.print(display.lineage_table(run_id, report.lineage(db, run_id), report.objective_name(db, run_id)))
    if table is not None:
        console.print(table)


@app.command()
@friendly
def doctor(campaign: Annotated[str, typer.Option(help="Campaign whose tools to check.")] = "edge-codesign",
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Check the tools a campaign needs (simulator, CUDA 11 nvcc, nvcc, GPU) and say what to set."""
    c = campaigns.load(campaign)
    rows = [(*r, True)[:4] for r in registry.harness(c.harness.name).doctor(c.harness)]  # (tool, path, hint, needed)
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


@app.command()
@friendly
def runs(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    campaign: Annotated[Optional[str], typer.Option(help="Only this campaign's runs.")] = None,
    status: Annotated[Optional[str], typer.Option(help="Only runs with this status (running, finished, "
                                                       "interrupted, failed).")] = None,
    since: Annotated[Optional[str], typer.Option(help="Only runs started since a date (2026-11-20) or an age "
                                                      "(90m, 12h, 3d).")] = None,
    db: DbOption = None,
) -> None:
    """One row a run: campaign, status, candidates, best TFLOP/s and × cuBLAS."""
    rows = report.runs(store(db), campaign, status, report.parse_since(since) if since else None)
    emit_json(rows) if as_json else console.print(display.runs_table(rows))


@app.command()
@friendly
def show(
    ref: Annotated[str, typer.Argument(help="RUN (e.g. 3) or RUN/CANDIDATE (e.g. 3/7).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,

    db: DbOption = None,
) -> None:
    """A run (config, fingerprint, candidates) or one candidate (metrics, logs, source)."""
    run_id, _, seq = ref.partition("/")
    if not run_id.isdigit() or (seq and not seq.isdigit()):
        raise AutoDiscoveryError(f"'{ref}' is neither RUN nor RUN/CANDIDATE (e.g. 3 or 3/7)")
    db = store(db)
    if not seq:
        data = report.show_run(db, int(run_id))
        table, extra = report.summary(db, int(run_id))
        calls = report.llm_summary(db, int(run_id))
        if as_json:
            return emit_json(data | {"harness": extra, "llm_summary": calls})
        say(f"[bold]run {data['id']}[/] · {data['campaign']} · {data['status']} ({data['stop_reason']})")
        if data["config"].get("origin"):
            say(f"continues {data['config']['origin']} (its lineage: `autodiscovery lineage {data['id']}`)")
        console.print_json(json.dumps({"fingerprint": data["fingerprint"], "config": data["config"]}))
        console.print(display.candidates_table(data["candidates"], data["objective"]))
        if table is not None:
            console.print(table)
        if calls:
            console.print(display.llm_table(calls))
        return
    data = report.show_candidate(db, int(run_id), int(seq))
    if as_json:
        return emit_json(data)
    say(f"[bold]run {run_id} candidate #{seq}[/] · {data['family']} · {data['status']} · {data['proposer']}")
    say(f"hypothesis: {data['hypothesis']}")
    if data["decision"]:
        say(f"decision: {data['verdict']}: {data['decision']}")
    console.print_json(json.dumps({"knobs": data["knobs"], "build": {k: data[k] for k in
                       ("registers", "spill_stores", "spill_loads", "stack", "smem_static", "has_hgmma")},
                       "evaluations": [{k: e[k] for k in ("kind", "status", "metrics", "seconds")}
                                       for e in data["evaluations"] if e["kind"] != "profile"]}, default=str))
    for e in data["evaluations"]:
        if e["kind"] == "profile" and e["status"] == "ok" and "profile" in e["metrics"]:
            console.print(display.profile_table(f"{run_id}/{seq}", e["metrics"]["profile"]))
    for e in data["evaluations"]:
        if e["log"]:
            console.print(f"[bold]{e['kind']} log[/]\n{e['log']}", highlight=False)
    if data["build"] and data["build"]["log"]:
        console.print(f"[bold]build log[/]\n{data['build']['log']}", highlight=False)
    console.print(Syntax(data["source"], "cuda", line_numbers=True))


@app.command()
@friendly
def lineage(run_id: Annotated[int, typer.Argument(help="Run id.")],
            as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
            tree: Annotated[bool, typer.Option("--tree", help="Every candidate under the one it was made from.")] = False,
    db: DbOption = None,
) -> None:
    """The kept chain from the seed to the best: step, hypothesis, the objective, TFLOP/s, registers."""
    db = store(db)
    if tree:
        rows = report.tree(db, run_id)
        return emit_json(rows) if as_json else console.print(display.tree(run_id, rows))
    rows = report.lineage(db, run_id)
    emit_json(rows) if as_json else console.print(display.lineage_table(run_id, rows, report.objective_name(db, run_id)))


@app.command()
@friendly
def prompt(ref: Annotated[str, typer.Argument(help="A candidate, RUN/SEQ, or RUN for its best.")],
           set_: SetOption = None,
           seed: Annotated[int, typer.Option(help="Seed of the inspirations' draw.")] = 0,
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
           db: DbOption = None) -> None:
    """The prompt the llm agent would send to change a recorded candidate: the rules, the hardware, the
    kernel with its ptxas facts and profile, the lineage, inspirations and the last attempts."""
    data = runner.prompt(ref, store(db), list(set_ or []), seed)
    if as_json:
        return emit_json(data)
    sys.stdout.write(f"=== system ===\n{data['system']}\n=== user ===\n{data['user']}")


@app.command()
@friendly
def replay(run_id: Annotated[int, typer.Argument(help="Run id.")],
           set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a field of the run's "
                                                                          "campaign: key.path=value.")] = None,
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
           db: DbOption = None) -> None:
    """Measure the run's best lineage again on this machine, beside the recorded figures."""
    with console.status(f"replaying run {run_id}") as status:
        data = runner.replay(run_id, store(db), list(set_ or []),
                             progress=lambda msg: status.update(f"replay of run {run_id}: {msg}"))
    if as_json:
        return emit_json(data)
    console.print(display.replay_table(data))
    if data["differences"]:
        console.print(display.fingerprints_table(data))
    flagged = [s for s in data["steps"] if s["flag"]]
    say(f"{len(flagged)} of {len(data['steps'])} steps differ from the recording by more than the noise"
        if flagged else f"all {len(data['steps'])} steps agree with the recording within the noise")


@app.command()
@friendly
def diff(a: Annotated[str, typer.Argument(help="A candidate: RUN/SEQ (e.g. 3/7).")],
         b: Annotated[str, typer.Argument(help="Another candidate: RUN/SEQ (the run may differ).")],
         as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
         db: DbOption = None) -> None:
    """The source diff of two candidates, with both candidates' metrics and knobs."""
    data = report.diff(store(db), a, b)
    if as_json:
        return emit_json(data)
    console.print(display.diff_table(data))
    if data["diff"]:
        console.print(Syntax(data["diff"], "diff", word_wrap=False))
    else:
        say("the two sources are identical")


@app.command()
@friendly
def export(run_id: Annotated[int, typer.Argument(help="Run id.")],
           out: Annotated[Path, typer.Option(help="Where to write the best kernel's source.")],
    db: DbOption = None,
) -> None:
    """Write the best kernel's source (its launch manifest included) and a JSON summary beside it."""
    source, meta = report.export(store(db), run_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(source)
    out.with_suffix(out.suffix + ".json").write_text(json.dumps(meta, indent=2, default=str))
    say(f"wrote {out} (#{meta['seq']}, {meta['score_text']}) and {out}.json")
