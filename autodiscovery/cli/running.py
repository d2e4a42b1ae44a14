"""Commands that run work on this machine: a campaign, one kernel, the profiler, the ladder, a replay."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

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
    hint,
    say,
    state,
    store,
)
from autodiscovery.review import display, exports, live, report
from autodiscovery.review.sections import sections_table
from autodiscovery.roles import Exporting, ShowingProfiles
from autodiscovery.running import runner, suite
from autodiscovery.running.driver import Stop
from autodiscovery.store import CandidateStatus, EvalStatus, Run, RunStatus, Store
from autodiscovery.toolkit.text import plural


@app.command()
@friendly
def run(
    campaign: Annotated[str | None, typer.Option(
        help=f"Campaign name (see `campaigns`) or path to a YAML file (default: {campaigns.DEFAULT_CAMPAIGN}; "
             "with --from, that run's campaign).")] = None,
    set_: SetOption = None,
    resume: Annotated[int | None, typer.Option(help="Continue an interrupted run by its id.")] = None,
    from_: Annotated[str | None, typer.Option(
        "--from", help="Start from a recorded candidate, RUN/SEQ (or RUN for its best): it is the new run's seed, "
                       "its lineage linked (e.g. the llm agent going on where a search run stopped).")] = None,
    agent: Annotated[str | None, typer.Option(help="Who proposes: search (built in) or llm.")] = None,
    model: Annotated[list[str] | None, typer.Option(help="LLM model name (repeatable; implies --agent llm).")] = None,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint for the llm agent.")] = None,
    gpus: Annotated[str | None, typer.Option(
        help="Evaluate on several GPUs of this host, one evaluation each at a time: all, a count, or "
             "indices like 0,1 (sets harness.gpus).")] = None,
    executor: Annotated[str | None, typer.Option(
        help="Where evaluations run: local (child processes) or ray (tasks on a Ray cluster; sets executor.kind).")] = None,
    address: Annotated[str | None, typer.Option(
        help="With --executor ray: the cluster, auto or ray://HOST:PORT (default: a new local one).")] = None,
    dry_run: Annotated[bool, typer.Option(help="Propose and build only: no GPU, no measurement.", metavar="")] = False,
    quiet: Annotated[bool, typer.Option(help="No live display; print the summary only.", metavar="")] = False,
    allow_new_toolchain: Annotated[bool, typer.Option(
        help="With --resume: go on although the toolchain changed (compiler, driver, libraries; the run "
             "records it).", metavar="")] = False,
    problems: Annotated[int | None, typer.Option(
        min=1, help="A suite: tune this many of its problems now, then stop between two problems "
                    "(--resume goes on).")] = None,
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
    loaded = None
    if resume is None and from_ is None:  # validated before anything is opened, and only once
        loaded = campaigns.load(campaign or campaigns.DEFAULT_CAMPAIGN, overrides)
        if problems is not None and not loaded.suite:
            raise AutoDiscoveryError(f"--problems is for a suite (a campaign with `suite:`); {loaded.name} tunes "
                                     "one problem")
    given = db
    fresh = _new_file(db)
    st = store(db, create=True)
    started: list[int] = []  # the run's id, once it is recorded
    with _kept_only_if_used(st, fresh, started):
        _run(loaded, campaign, overrides, resume, from_, quiet, dry_run, allow_new_toolchain, st, started, given,
             problems)


def _run(loaded: campaigns.Campaign | None, campaign: str | None, overrides: list[str], resume: int | None,
         from_: str | None, quiet: bool, dry_run: bool, allow_new_toolchain: bool, st: Store, started: list[int],
         given: str | None, problems: int | None = None) -> None:
    view = runner.Quiet() if quiet else live.LiveDisplay(console)
    stop = Stop()

    def on_interrupt(signum: int, frame: Any) -> None:  # the first Ctrl-C asks for a safe stop, the second stops at once
        if stop.requested:
            raise KeyboardInterrupt
        stop.request()
        err.print("stopping after the current candidate (Ctrl-C again to stop at once)", soft_wrap=True)

    previous = signal.signal(signal.SIGINT, on_interrupt)
    if (loaded is not None and loaded.suite) or (resume is not None and suite.is_suite(st, resume)):
        return _suite(loaded, resume, overrides, st, stop, started, quiet, dry_run, allow_new_toolchain, previous,
                      given, problems)
    if problems is not None:
        raise AutoDiscoveryError(f"--problems is for a suite (a campaign with `suite:`); run {resume} tunes one problem")
    with _saved(started, "run", previous, given):
        if resume is None:
            run_id = runner.run_campaign(campaign, overrides, st, view, dry_run=dry_run, stop=stop, started=started.append,
                                  from_=from_, campaign=loaded)
        else:
            run_id = runner.resume_run(resume, overrides, st, view, allow_new_toolchain=allow_new_toolchain, stop=stop,
                                   started=started.append)
    summary = report.run_row(st, run_id)
    if stop.requested:
        say(f"run {run_id} stopped between two candidates; continue with `{hint(f'run --resume {run_id}', given)}`")
        raise typer.Exit(130)
    if dry_run:
        say(f"run {run_id} (dry run): {summary['status']} ({summary['stop_reason']}); {_dry_run_builds(st, run_id, given)}")
        if summary["status"] == RunStatus.failed:
            raise typer.Exit(1)
        return
    table, _ = report.summary(st, run_id)
    if table is not None:
        console.print(table)
    say(f"run {run_id}: {summary['status']} ({summary['stop_reason']}); best {summary['best_summary']}. "
        f"See `{hint(f'lineage {run_id}', given)}`" + (f" and `{hint(f'report {run_id}', given)}`." if table else "."))
    if summary["status"] == RunStatus.failed:
        raise typer.Exit(1)


def _new_file(db: str | None) -> Path | None:
    """The SQLite file a run is about to create (None: one that is there already, or not a file)."""
    from autodiscovery.store import DEFAULT_DB

    text = str(db or state["db"] or DEFAULT_DB)
    if "://" in text:
        text = text.removeprefix("sqlite:///") if text.startswith("sqlite:///") else ""
    path = Path(text).expanduser() if text and not text.startswith((":memory:", "file:")) else None
    return path if path is not None and not path.exists() else None


@contextlib.contextmanager
def _kept_only_if_used(st: Store, fresh: Path | None, started: list[int]) -> Iterator[None]:
    """A database this command created is removed again where the command fails before it records a run
    (a driver check, a campaign's harness refusing the machine): a failed start leaves no empty file."""
    try:
        yield
    except (AutoDiscoveryError, typer.Exit) as exc:
        if fresh is not None and not started and not (isinstance(exc, typer.Exit) and exc.exit_code == 0):
            with st.session() as s:
                empty = s.query(Run).count() == 0
            if empty:
                st.engine.dispose()
                for extra in ("", "-wal", "-shm", "-journal"):
                    Path(f"{fresh}{extra}").unlink(missing_ok=True)
        raise


def _dry_run_builds(db: Store, run_id: int, given: str | None) -> str:
    """What a dry run made of its candidates: how many built, how many refused and where to read why."""
    from collections import Counter

    cands = [c for c in report.show_run(db, run_id)["candidates"] if c["status"] != CandidateStatus.proposed]
    counts = Counter(c["status"] for c in cands)
    failed = next((c["seq"] for c in cands if c["status"] != CandidateStatus.built), None)
    if failed is None:
        return f"{plural(len(cands), 'candidate')} built. See `{hint(f'show {run_id}', given)}`."
    parts = ", ".join(f"{n} {status}" for status, n in counts.most_common())
    return f"{plural(len(cands), 'candidate')}: {parts}. Why #{failed} was not built: `{hint(f'show {run_id}/{failed}', given)}`."


@contextlib.contextmanager
def _saved(started: list[int], what: str, previous: Any, given: str | None = None) -> Iterator[None]:
    """Around a run or a suite: an interrupt or an error says how to continue what was saved; the
    previous Ctrl-C handler comes back."""
    try:
        yield
    except KeyboardInterrupt:
        where = hint(f"run --resume {started[0] if started else '<id>'}", given)
        err.print(f"interrupted: everything so far is saved; continue with `{where}`", soft_wrap=True)
        raise typer.Exit(130) from None
    except AutoDiscoveryError as exc:
        if started:
            raise AutoDiscoveryError(f"{exc}; {what} {started[0]} is saved: continue with "
                                     f"`{hint(f'run --resume {started[0]}', given)}`") from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)


def _suite(loaded: campaigns.Campaign | None, resume: int | None, overrides: list[str], db: Store, stop: Stop,
           started: list[int], quiet: bool, dry_run: bool, allow_new_toolchain: bool, previous: Any,
           given: str | None = None, problems: int | None = None) -> None:
    """A suite: each problem's run in turn (each with its own live view), then the dispatch table."""
    view = runner.Quiet() if quiet else live.LiveDisplay(console)
    with _saved(started, "suite", previous, given), console.status("suite") if quiet else contextlib.nullcontext() as status:
        progress = (lambda msg: status.update(f"suite: tuning {msg}")) if status is not None else \
            (lambda msg: say(f"suite: {msg}"))
        if resume is None:
            assert loaded is not None  # a new suite's campaign is loaded before anything is opened (`run`)
            run_id = suite.start(loaded, overrides, db, view, stop, started.append, dry_run, progress,
                                 problems=problems)
        else:
            run_id = suite.resume(resume, overrides, db, view, stop, started.append, allow_new_toolchain, progress,
                                  problems=problems)
    console.print(display.dispatch_table(exports.dispatch(db, run_id)))
    summary = report.run_row(db, run_id)
    if stop.requested:
        say(f"suite {run_id} stopped between two candidates; continue with `{hint(f'run --resume {run_id}', given)}`")
        raise typer.Exit(130)
    if summary["status"] == RunStatus.interrupted:  # --problems: paused between two problems, as asked
        say(f"suite {run_id}: {summary['stop_reason']}, as --problems asked; continue with "
            f"`{hint(f'run --resume {run_id}', given)}`")
        return
    library = isinstance(report.harness_class(db, run_id), Exporting)
    say(f"suite {run_id}: {summary['status']} ({summary['stop_reason']}). See `{hint(f'report {run_id}', given)}`"
        + (f"; `{hint(f'export {run_id} --library DIR', given)}` writes its best kernels as a library."
           if library else "."))


@app.command()
@friendly
def measure(
    kernel: Annotated[Path, typer.Argument(help="A kernel source file with its @manifest.")],
    campaign: Annotated[str, typer.Option(help="Campaign whose problem and harness settings apply.")] =
        campaigns.DEFAULT_CAMPAIGN,
    set_: SetOption = None,
    repeat: Annotated[int, typer.Option(min=1, help="Measure this many times, each in a fresh process.")] = 1,
    record: Annotated[bool, typer.Option("--record", help="Record the measurements in the database (--db) as a "
                                                          "run of their own, so a figure can name it.")] = False,
    db: DbOption = None,
) -> None:
    """Gate and measure one kernel file as its campaign's harness does (recorded only with --record)."""
    loaded = campaigns.load(campaign, list(set_ or []))
    harness = registry.make_harness(loaded)
    outcomes, run_id = runner.measure(str(kernel), campaign, list(set_ or []), repeat, harness=harness,
                                      store=store(db, create=True) if record else None)
    objective = harness.objective
    console.print(sections_table([display.measure_section(str(kernel), outcomes, harness)]))
    scores = [o.score for o in outcomes if o.score is not None]
    if len(scores) > 1:
        med = statistics.median(scores)
        say(f"spread of {objective.name} over {len(scores)} measurements: {(max(scores) - min(scores)) / med:.2%} "
            f"of the median ({objective.format(min(scores), '.4f')} to {objective.format(max(scores), '.4f')})")
    if run_id is not None:
        say(f"recorded as run {run_id} (its measurements: `{hint(f'show {run_id}/0', db)}`)")
    if any(o.status != EvalStatus.ok for o in outcomes):
        raise typer.Exit(1)


@app.command()
@friendly
def profile(
    target: Annotated[str, typer.Argument(help="A recorded candidate, RUN/SEQ (e.g. 3/7), or a kernel file.")],
    campaign: Annotated[str, typer.Option(help="For a kernel file: the campaign whose problem applies.")] =
        campaigns.DEFAULT_CAMPAIGN,
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.", metavar="")] = False,
    db: DbOption = None,
) -> None:
    """The harness's profiler (Nsight Compute for hopper-gemm) on a candidate and on the baseline at the
    same problem (stored with a recorded candidate)."""
    with console.status(f"profiling {target} and the baseline"):
        recorded = not Path(target).is_file()
        label, outcome, harness = runner.profile(target, campaign, list(set_ or []),
                                                 store(db) if recorded else None)
    if outcome.status != EvalStatus.ok:
        raise AutoDiscoveryError(f"{label}: {outcome.status}: {outcome.log.splitlines()[0] if outcome.log else ''}")
    if as_json:
        return emit_json(outcome.metrics["profile"])
    section = harness.profile_section(label, outcome.metrics["profile"]) if isinstance(harness, ShowingProfiles) else None
    if section is not None:
        console.print(sections_table([section]))


@app.command()
@friendly
def ladder(
    shape: Annotated[list[str] | None, typer.Option(help="Problem shape: N (square) or MxNxK; repeat for several "
                                                         "(default: 4096).")] = None,
    per_family: Annotated[int, typer.Option(min=1, help="Configurations tried per family (default first, then TPE).")] = 6,
    family: Annotated[list[str] | None, typer.Option(help="Only these families (repeatable).")] = None,
    campaign: Annotated[str, typer.Option(help="Campaign whose harness settings apply.")] =
        campaigns.DEFAULT_CAMPAIGN,
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.", metavar="")] = False,

    db: DbOption = None,
) -> None:
    """The best configuration of each kernel family at each shape, measured as the campaign's harness does."""
    with console.status("climbing the ladder") as status:
        results = runner.ladder(campaign, list(set_ or []), shape or ["4096"], store(db, create=True), per_family, family,
                                progress=lambda msg: status.update(f"ladder: {msg}"))
    if as_json:
        return emit_json([{"shape": [c.problem.model_dump()[k] for k in "MNK"], "run": run_id,
                           "rungs": [r.row(h) for r in rungs]} for c, run_id, rungs, h in results])
    for c, run_id, rungs, h in results:
        console.print(display.ladder_table(c.problem.describe(), run_id, [r.row(h) for r in rungs], h))


@app.command()
@friendly
def replay(run_id: Annotated[int, typer.Argument(help="Run id.")],
           set_: Annotated[list[str] | None, typer.Option("--set", help="Override a field of the run's "
                                                                          "campaign: key.path=value.")] = None,
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON.", metavar="")] = False,
           db: DbOption = None) -> None:
    """Measure the run's best lineage again on this machine, beside the recorded figures."""
    from autodiscovery.review.replay import replay as measure_again

    st = store(db)
    with console.status(f"replaying run {run_id}") as status:
        data = measure_again(run_id, st, list(set_ or []),
                             progress=lambda msg: status.update(f"replay of run {run_id}: {msg}"))
    if as_json:
        return emit_json(data)
    console.print(sections_table([display.replay_section(data, report.harness_class(st, run_id))]))
    if data["differences"]:
        console.print(display.fingerprints_table(data))
    if data["code"]["differs"]:
        say(f"other code than the recording: {data['code']['differs']}")
    elif not data["code"]["recorded"]:
        say("the run did not record the code it ran (recorded before runs did): it cannot be compared")
    flagged = [s for s in data["steps"] if s["flag"]]
    say(f"{len(flagged)} of {len(data['steps'])} steps differ from the recording by more than the noise"
        if flagged else f"{'the' if len(data['steps']) == 1 else 'all'} {plural(len(data['steps']), 'step')} "
           f"agree{'s' if len(data['steps']) == 1 else ''} with the recording within the noise")
