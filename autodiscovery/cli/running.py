"""Commands that run work on this machine: a campaign, one kernel, the profiler, the ladder, a replay."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Annotated, Optional

import typer

from autodiscovery import AutoDiscoveryError, registry
from autodiscovery import campaign as campaigns
from autodiscovery.cli.common import (
    DbOption,
    SetOption,
    app,
    console,
    emit_json,
    err,
    friendly,
    say,
    store,
)
from autodiscovery.review import display, report
from autodiscovery.running import runner
from autodiscovery.running.loop import Stop


@app.command()
@friendly
def run(
    campaign: Annotated[Optional[str], typer.Option(
        help="Campaign name (see `campaigns`) or path to a YAML file (default: hopper-gemm; with --from, that "
             "run's campaign).")] = None,
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
        if not (text == "all" or re.fullmatch(r"\d+(\s*,\s*\d+)*", text)):
            raise AutoDiscoveryError(f"--gpus '{gpus}': give all, a count (2) or GPU indices (0,1)")
        overrides.append(f"harness.gpus={text if text == 'all' or text.isdigit() else '[' + text + ']'}")
    if resume is not None and from_ is not None:
        raise AutoDiscoveryError("--resume continues a run and --from starts one: give one of them")
    if resume is None and from_ is None:  # validate the campaign before opening anything
        campaigns.load(campaign or "hopper-gemm", overrides)
    db = store(db, create=True)
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
                      f"{summary['evaluated']} candidates built. See `autodiscovery show {run_id}`.")
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
        recorded = "/" in target and not Path(target).exists()
        label, outcome = runner.profile(target, campaign, list(set_ or []), store(db) if recorded else None)
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
        results = runner.ladder(campaign, list(set_ or []), shape, store(db, create=True), per_family, family,
                                progress=lambda msg: status.update(f"ladder: {msg}"))
    if as_json:
        return emit_json([{"shape": list(s), "run": run_id, "rungs": [r.row() for r in rungs]}
                          for s, run_id, rungs in results])
    for s, run_id, rungs in results:
        console.print(display.ladder_table(s, run_id, [r.row() for r in rungs]))


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
