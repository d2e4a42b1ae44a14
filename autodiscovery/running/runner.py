"""The entry points of the commands that do work: start or resume a run (validate the campaign, check
the machine, hand over to the loop), measure or profile one kernel, the prompt an LLM agent would send,
the ladder."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from autodiscovery import AutoDiscoveryError, provenance, registry
from autodiscovery.campaign import (
    DEFAULT_CAMPAIGN,
    Campaign,
    apply_override,
    load,
    validate,
    validated,
)
from autodiscovery.interfaces import AgentBase, Outcome, Proposal
from autodiscovery.roles import Checking, Doctoring, Evaluating, Profiling, Resuming, declared
from autodiscovery.running.check import CheckFailed, check_source
from autodiscovery.running.driver import Display, Driver, Quiet, Stop
from autodiscovery.running.evaluate import assess
from autodiscovery.running.ledger import Ledger, score_of
from autodiscovery.running.refs import PastRun, RefError, candidate_at, open_run, parse
from autodiscovery.store import CandidateStatus, EvalKind, Evaluation, Run, RunStatus, Store
from autodiscovery.store.models import row, utcnow
from autodiscovery.toolkit.build import BuildReport
from autodiscovery.toolkit.text import first_line, plural

__all__ = ["Quiet", "Stop", "measure", "profile", "prompt", "ladder", "resume_run", "run_campaign"]

MAY_CHANGE_ON_RESUME = ("budget.", "stop.", "agent.", "description", "executor.")
"""What a resumed run may change: how long it goes on, who proposes, how patient it is, where it runs
(with the harness's own `resumable` settings). Everything else (the problem, the gate, the timing, the
compiler and its flags) is what its measurements mean."""


def prepare(campaign: Campaign, harness: Evaluating | None = None) -> tuple[Evaluating, Evaluating, AgentBase]:
    """The campaign's harness (or `harness`), the same as the loop uses it under the campaign's executor
    (the evaluations on Ray, say), and its agent."""
    from autodiscovery.running import executors

    made = harness or registry.make_harness(campaign)
    agent = registry.agent(campaign.agent.kind)(campaign)
    return made, executors.wrap(made, campaign.executor), agent


def workers(harness: Evaluating, runs: Evaluating | None = None) -> int:
    """Builds at once: the harness's `build_workers`, else one per CPU, and never fewer than the devices
    the evaluations run on (`runs`, else the harness: a pool's devices must not wait for their builds)."""
    return declared(harness).build_workers or max(os.cpu_count() or 2, declared(runs or harness).parallel)


def origin(store: Store, ref: str, what: str = "--from") -> tuple[PastRun, Proposal]:
    """A recorded candidate to start a run from (`RUN/SEQ`, or `RUN` for its best): its run as recorded,
    and the new run's seed, linked to it."""
    at = parse(ref, what)
    recorded = open_run(store, at.run)
    with store.session() as s:
        cand = candidate_at(s, at, f"{what} {ref}")
        run = cand.run
        if not cand.source:
            raise RefError(f"{what} {ref}: candidate #{cand.seq} has no kernel (it was refused before one was made)")
        objective = recorded.harness.objective
        score = score_of(cand, objective)
        measured = f", {objective.format(score, '.4g')}" if score is not None else ""
        seed = Proposal(hypothesis=f"Continues run {run.id} #{cand.seq} ({cand.proposer}, {cand.family or '?'}{measured}): "
                                   f"{first_line(cand.hypothesis)}",
                        source=cand.source, proposer=f"from {run.id}/{cand.seq}", family=cand.family,
                        knobs=dict(cand.knobs), origin_id=cand.id)
        recorded.config["origin"] = f"{run.id}/{cand.seq}"
        return recorded, seed


def run_campaign(name_or_path: str | None, overrides: list[str], store: Store, display: Display = Quiet(),
                 harness: Evaluating | None = None, dry_run: bool = False, stop: Stop | None = None,
                 started: Callable[[int], None] | None = None, from_: str | None = None,
                 campaign: Campaign | None = None, parent_id: int | None = None) -> int:
    """A new run of a campaign (`campaign` when it is already loaded with these overrides); with `from_`
    (RUN[/SEQ]) its seed is that recorded candidate and the campaign is that run's unless one is named."""
    seed = None
    if from_ is not None:
        recorded, seed = origin(store, from_)
        if name_or_path is not None:
            named = (campaign or load(name_or_path, overrides)).model_dump(mode="json")
            config = named | {"origin": recorded.config["origin"]}
        else:
            config = dict(recorded.config)
            for assignment in overrides:
                apply_override(config, assignment)
        campaign = validate(config, f"campaign of run {recorded.run_id}", overrides)
    elif campaign is None:
        campaign = load(name_or_path or DEFAULT_CAMPAIGN, overrides)  # validated before anything else happens
    if campaign.suite and parent_id is None:
        raise AutoDiscoveryError(f"campaign '{campaign.name}' is a suite: it runs with `autodiscovery run --campaign`, "
                                 "a run for each of its problems (--from starts one run)")
    made, used, agent = prepare(campaign, harness)
    first = seed or agent.seed_proposal(campaign)
    if dry_run:  # all a GPU is not needed for: the seed's manifest, plan, build, and the cubin's kernels
        checked = check_source(first.source, f"seed {from_ or campaign.seed}", campaign, made)
        if not checked.ok:
            raise CheckFailed(checked.failure())
    elif isinstance(made, Checking):
        made.check(first.source)  # a shape the seed cannot take is refused now
    fingerprint = used.preflight(need_gpu=not dry_run) | ({"dry_run": True} if dry_run else {})
    agent.preflight()  # an unreachable endpoint or a rejected key stops us here, before any work
    loop = Driver(campaign, store, made, agent, display, workers(made, used), dry_run=dry_run, stop=stop or Stop(),
                started=started, seed=seed, parent_id=parent_id, runs=used)
    return loop.new_run(fingerprint)


def readiness(checked: Campaign, rows: list[tuple]) -> list[tuple[str, list[str]]]:
    """Each shipped campaign with what it needs that this machine lacks ([]: ready), by `doctor`'s rows of
    its harness: `rows` for `checked`'s, the others' checked once each (with their first campaign)."""
    from autodiscovery.campaign import available

    by_harness = {checked.harness.name: rows}
    out = []
    for path in available():
        try:
            campaign = load(str(path))
        except AutoDiscoveryError as exc:
            out.append((path.stem, [f"a valid campaign file ({exc})"]))
            continue
        name = campaign.harness.name
        if name not in by_harness:
            cls = registry.harness(name)
            by_harness[name] = cls.doctor(campaign) if isinstance(cls, Doctoring) else []
        out.append((path.stem, [what for what, found, _, needed in by_harness[name] if needed and not found]))
    return out


def _flat(data: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in data.items():
        if isinstance(v, dict) and v:
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def resume_run(run_id: int, overrides: list[str], store: Store, display: Display = Quiet(),
               harness: Evaluating | None = None, allow_new_toolchain: bool = False, stop: Stop | None = None,
               started: Callable[[int], None] | None = None) -> int:
    before = open_run(store, run_id)
    recorded = open_run(store, run_id, overrides)
    campaign, fingerprint_was = recorded.campaign, recorded.fingerprint
    may_change = (*MAY_CHANGE_ON_RESUME, *(f"harness.{k}" for k in declared(recorded.harness).resumable))
    was, now = _flat(before.campaign.model_dump(mode="json")), _flat(campaign.model_dump(mode="json"))
    for key in sorted(set(was) | set(now)):
        if was.get(key) != now.get(key) and not key.startswith(may_change):
            raise AutoDiscoveryError(
                f"run {run_id} was measured with {key} = {was.get(key)!r}; a resumed run keeps what its "
                f"measurements mean (start a new run for {key} = {now.get(key)!r})")
    made, used, agent = prepare(campaign, harness)
    dry_run = bool(fingerprint_was.get("dry_run"))
    fingerprint = used.preflight(need_gpu=not dry_run)
    agent.preflight()
    if fingerprint_was.get("gpu") and fingerprint.get("gpu") != fingerprint_was.get("gpu"):
        raise AutoDiscoveryError(
            f"run {run_id} was measured on {fingerprint_was['gpu']}, this machine has {fingerprint.get('gpu')}: "
            "start a new run instead of mixing devices"
        )
    changed = {k: (fingerprint_was[k], fingerprint.get(k)) for k in declared(recorded.harness).toolchain
               if k in fingerprint_was and fingerprint_was[k] != fingerprint.get(k)}
    if changed and not allow_new_toolchain:
        what = ", ".join(f"{k} {a} → {b}" for k, (a, b) in changed.items())
        raise AutoDiscoveryError(f"run {run_id} was measured with another toolchain ({what}); resume with "
                                 "--allow-new-toolchain to go on anyway (the run records the change)")
    if isinstance(used, Resuming):
        used.adopt(fingerprint_was)  # e.g. the baseline chosen when the run started stays the baseline
    code = provenance.code()
    with store.session() as s:
        run = row(s, Run, run_id)  # open_run read it
        run.config = campaign.model_dump(mode="json")
        at = utcnow().isoformat(timespec="seconds")
        if changed:
            run.fingerprint = fingerprint_was | {"toolchain_changes": [*fingerprint_was.get("toolchain_changes", []), {
                "at": at, **{k: {"was": a, "now": b} for k, (a, b) in changed.items()}}]}
        if (recorded_code := run.fingerprint.get("code")) and recorded_code.get("source") != code["source"]:
            # the code that measured each candidate: the run's, then each resumption's from its time on
            run.fingerprint = dict(run.fingerprint) | {"code_changes": [*run.fingerprint.get("code_changes", []),
                                                                         {"at": at, **code}]}
    loop = Driver(campaign, store, made, agent, display, workers(made, used), dry_run=dry_run, stop=stop or Stop(),
                started=started, runs=used)
    return loop.drive(run_id)


def _build_or_fail(harness: Evaluating, source: str, what: str) -> BuildReport:
    if isinstance(harness, Checking):
        harness.check(source)
    build = harness.build(source)
    if not build.ok:
        raise AutoDiscoveryError(f"{what} does not compile: {build.log.splitlines()[0] if build.log else ''}")
    return build


def measure(kernel: str, name_or_path: str, overrides: list[str], repeat: int = 1,
            harness: Evaluating | None = None, store: Store | None = None) -> tuple[list[Outcome], int | None]:
    """Check, build and evaluate one kernel file, `repeat` times (each in a fresh child process); with
    `store`, recorded there as a run of its own (agent `measure`: the kernel its one candidate, each
    measurement an evaluation of it, the machine and the code in its fingerprint), whose id is returned."""
    path = Path(kernel)
    if not path.is_file():
        raise AutoDiscoveryError(f"kernel file not found: {kernel}")
    campaign = load(name_or_path, overrides)
    harness = harness or registry.make_harness(campaign)
    source = path.read_text()
    checked = check_source(source, kernel, campaign, harness)  # what needs no GPU, before the GPU is asked for
    if not checked.ok:
        raise CheckFailed(checked.failure())
    fingerprint = harness.preflight()
    build = _build_or_fail(harness, source, kernel)
    if store is None:
        return [assess(harness, source, build) for _ in range(repeat)], None
    config = campaign.model_dump(mode="json") | {"measure": {"kernel": str(path), "repeat": repeat}}
    ledger = Ledger.create(store, campaign.name, "measure", config, fingerprint, harness.objective)
    t0 = time.monotonic()
    ledger.elapsed = lambda: time.monotonic() - t0
    (cand,) = ledger.add([Proposal(hypothesis=f"{path.name} as given, measured by `autodiscovery measure`",
                                   source=source, proposer="measure", family=path.name.split(".")[0])])
    ledger.built(cand.id, ledger.save_build(build))
    outcomes = []
    try:
        for _ in range(repeat):
            eval_id = ledger.begin(cand.id, EvalKind.benchmark)
            outcomes.append(assess(harness, source, build))
            ledger.finish(eval_id, cand.id, EvalKind.benchmark, outcomes[-1], status=CandidateStatus.measured)
    except BaseException:
        ledger.close(RunStatus.interrupted, "interrupted", None)
        raise
    ledger.close(RunStatus.finished, f"measured {plural(repeat, 'time')}", None)
    return outcomes, ledger.run_id


def profile(target: str, name_or_path: str, overrides: list[str], store: Store | None,
            harness: Evaluating | None = None) -> tuple[str, Outcome, Evaluating]:
    """The harness's profiler on a recorded candidate (`RUN/SEQ`, stored with it) or a kernel file
    (nothing recorded), beside the baseline at the same problem. Returns (label, outcome, harness)."""
    path = Path(target)
    if path.is_file():
        candidate_id, (campaign, source) = None, (load(name_or_path, overrides), path.read_text())
    else:
        try:
            at = parse(target, seq="required")
        except RefError:
            raise AutoDiscoveryError(f"'{target}' is neither RUN/SEQ (e.g. 3/7) nor a kernel file") from None
        if store is None:
            raise AutoDiscoveryError(f"{target}: a recorded candidate is read from a run database (--db)")
        assert at.seq is not None  # required by the parse above
        recorded = open_run(store, at.run, overrides)
        with store.session() as s:
            c = candidate_at(s, at, f"profile {target}")
            candidate_id, source = c.id, c.source
        campaign = recorded.campaign
    harness = harness or registry.make_harness(campaign)
    if not isinstance(harness, Profiling):
        raise AutoDiscoveryError(f"the {campaign.harness.name} harness has no profiler")
    harness.preflight()
    outcome = harness.profile(source, _build_or_fail(harness, source, target))
    if candidate_id is not None and store is not None:  # a recorded candidate: its profile is stored with it
        with store.session() as s:
            s.add(Evaluation(candidate_id=candidate_id, kind=EvalKind.profile, status=outcome.status,
                             metrics=outcome.metrics, log=outcome.log, device=outcome.device,
                             seconds=outcome.seconds))
    return target, outcome, harness


def prompt(ref: str, store: Store, overrides: list[str] | tuple[str, ...] = (), seed: int = 0,
           harness: Evaluating | None = None) -> dict:
    """The messages the LLM agent would send to change a recorded candidate (`RUN/SEQ`, or `RUN` for its
    best), with inspirations drawn from the run's program database as a proposal draws them."""
    import random

    from autodiscovery.agents.client import LlmSettings
    from autodiscovery.agents.llm import LlmAgent, messages
    from autodiscovery.agents.programs import Entry, Programs
    from autodiscovery.running.ledger import Ledger

    at = parse(ref, "prompt")
    recorded = open_run(store, at.run, overrides)
    run_id = at.run
    with store.session() as s:
        seq = candidate_at(s, at, f"prompt {ref}").seq
    campaign = recorded.campaign
    harness = harness or recorded.harness(campaign)
    if isinstance(harness, Resuming):
        harness.adopt(recorded.fingerprint)  # what the run found of the machine and the problem
    history = Ledger(store, run_id, harness.objective, lambda: 0.0).history()
    llm = validated(campaign.agent.of(LlmAgent), LlmSettings)
    programs = Programs.of(history, near=llm.near_miss)
    target = next(r for r in history.records if r.seq == seq)
    entry = next((e for e in programs.entries if e.record.seq == seq), Entry(target, "chosen by hand"))
    draw = programs.around(entry, random.Random(seed), llm.inspirations)
    system, user = messages(llm, recorded.fingerprint, harness, history, draw)
    return {"run": run_id, "seq": seq, "role": entry.role, "inspirations": [e.record.seq for e in draw.inspirations],
            "system": system["content"], "user": user["content"]}


def parse_shape(text: str) -> tuple[int, int, int]:
    """'4096' (square) or 'MxNxK'."""
    parts = text.lower().split("x")
    if len(parts) not in (1, 3) or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise AutoDiscoveryError(f"shape '{text}' is neither N nor MxNxK with positive integers")
    m, n, k = (parts[0],) * 3 if len(parts) == 1 else parts
    return int(m), int(n), int(k)


def ladder(name_or_path: str, overrides: list[str], shapes: list[str], store: Store, per_family: int,
           families: list[str] | None = None, progress: Callable[[str], None] = lambda _: None,
           harness: Evaluating | None = None) -> list[tuple[Campaign, int, list, Evaluating]]:
    """The best configuration of each family at each shape: [(campaign, run_id, rungs, harness)]."""
    from autodiscovery.running.ladder import Ladder

    parsed = [parse_shape(s) for s in shapes]
    out = []
    for M, N, K in parsed:
        campaign = load(name_or_path, [*overrides, f"problem.M={M}", f"problem.N={N}", f"problem.K={K}"])
        h = harness or registry.make_harness(campaign)
        fingerprint = h.preflight()  # per shape: a baseline chosen for the shape is chosen again
        run_id, rungs = Ladder(campaign, store, h, workers(h), progress).climb(fingerprint, per_family, families)
        out.append((campaign, run_id, rungs, h))
    return out
