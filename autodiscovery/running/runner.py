"""Start or resume a run: validate the campaign, check the machine, then hand over to the loop."""

from __future__ import annotations

import os

from autodiscovery import AutoDiscoveryError, registry
from autodiscovery.campaign import Campaign, apply_override, load, validate
from autodiscovery.interfaces import Proposal
from autodiscovery.review.report import objective_of
from autodiscovery.running.evaluate import assess
from autodiscovery.running.ledger import score_of
from autodiscovery.running.loop import Display, Loop, Quiet, Stop
from autodiscovery.store import Candidate, Run, Store
from autodiscovery.store.models import utcnow
from autodiscovery.toolkit.text import first_line

# What a resumed run may change: how long it goes on, who proposes, how patient it is. Everything else
# (the problem, the gate, the timing, the compiler and its flags) is what its measurements mean.
MAY_CHANGE_ON_RESUME = ("budget.", "stop.", "agent.", "description", "harness.timeout_s", "harness.build_workers",
                        "harness.parallel", "harness.cache_dir", "harness.work_dir",
                        "harness.ncu", "harness.gpus", "executor.")
TOOLCHAIN = ("nvcc", "driver", "cuda_driver", "cuda_runtime", "cublas", "simulator")


def prepare(campaign: Campaign, harness=None):
    from autodiscovery.running import executors

    harness = executors.wrap(harness or registry.harness(campaign.harness.name)(campaign), campaign.executor)
    agent = registry.agent(campaign.agent.kind)(campaign)
    return harness, agent


def workers(harness) -> int:
    return harness.build_workers or os.cpu_count() or 2


def origin(store: Store, ref: str, what: str = "--from") -> tuple[dict, Proposal]:
    """A recorded candidate to start a run from (`RUN/SEQ`, or `RUN` for its best): its run's campaign,
    and the new run's seed, linked to it."""
    run_id, slash, seq = ref.partition("/")
    if not run_id.isdigit() or (slash and not seq.isdigit()):
        raise AutoDiscoveryError(f"{what} '{ref}' is neither RUN nor RUN/SEQ (e.g. 3 or 3/7)")
    with store.session() as s:
        run = Run.find(s, int(run_id))
        if run is None:
            raise AutoDiscoveryError(f"{what} {ref}: no run {run_id} in this database")
        cand = Candidate.by_seq(s, run.id, int(seq)) if slash else run.best
        if cand is None:
            raise AutoDiscoveryError(f"{what} {ref}: run {run_id} has {f'no candidate #{seq}' if slash else 'no best yet'}")
        if not cand.source:
            raise AutoDiscoveryError(f"{what} {ref}: candidate #{cand.seq} has no kernel (it was refused before one was made)")
        objective = objective_of(run)
        score = score_of(cand, objective)
        measured = f", {score:.4g}{objective.joiner}{objective.name}" if score is not None else ""
        seed = Proposal(hypothesis=f"Continues run {run.id} #{cand.seq} ({cand.proposer}, {cand.family or '?'}{measured}): "
                                   f"{first_line(cand.hypothesis)}",
                        source=cand.source, proposer=f"from {run.id}/{cand.seq}", family=cand.family,
                        knobs=dict(cand.knobs), origin_id=cand.id)
        return dict(run.config) | {"origin": f"{run.id}/{cand.seq}"}, seed


def start(name_or_path: str | None, overrides: list[str], store: Store, display: Display = Quiet(), harness=None,
          dry_run: bool = False, stop: Stop | None = None, started=None, from_: str | None = None) -> int:
    """A new run of a campaign; with `from_` (RUN[/SEQ]) its seed is that recorded candidate and the
    campaign is that run's unless one is named."""
    seed = None
    if from_ is None:
        campaign = load(name_or_path or "hopper-gemm", overrides)  # validated before anything else happens
    else:
        config, seed = origin(store, from_)
        if name_or_path is not None:
            named = load(name_or_path, overrides).model_dump(mode="json")
            config = named | {"origin": config["origin"]}
        else:
            for assignment in overrides:
                apply_override(config, assignment)
        campaign = validate(config, f"campaign of run {from_.partition('/')[0]}", overrides)
    harness, agent = prepare(campaign, harness)
    seed = seed or agent.seed_proposal(campaign)
    harness.check(seed.source)  # a shape the seed cannot take is refused now
    fingerprint = harness.preflight(need_gpu=not dry_run) | ({"dry_run": True} if dry_run else {})
    agent.preflight()  # an unreachable endpoint or a rejected key stops us here, before any work
    loop = Loop(campaign, store, harness, agent, display, workers(harness), dry_run=dry_run, stop=stop or Stop(),
                started=started, seed=seed)
    return loop.start(fingerprint)


def _flat(data: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in data.items():
        if isinstance(v, dict) and v:
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def resume(run_id: int, overrides: list[str], store: Store, display: Display = Quiet(), harness=None,
           allow_new_toolchain: bool = False, stop: Stop | None = None, started=None) -> int:
    with store.session() as s:
        run = Run.find(s, run_id)
        if run is None:
            raise AutoDiscoveryError(f"no run {run_id} in this database")
        config, recorded = dict(run.config), dict(run.fingerprint)
    before = _flat(validate(config, f"run {run_id} config").model_dump(mode="json"))
    for assignment in overrides:
        apply_override(config, assignment)
    campaign = validate(config, f"run {run_id} config", overrides)
    after = _flat(campaign.model_dump(mode="json"))
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key) and not key.startswith(MAY_CHANGE_ON_RESUME):
            raise AutoDiscoveryError(
                f"run {run_id} was measured with {key} = {before.get(key)!r}; a resumed run keeps what its "
                f"measurements mean (start a new run for {key} = {after.get(key)!r})")
    harness, agent = prepare(campaign, harness)
    dry_run = bool(recorded.get("dry_run"))
    fingerprint = harness.preflight(need_gpu=not dry_run)
    agent.preflight()
    if recorded.get("gpu") and fingerprint.get("gpu") != recorded.get("gpu"):
        raise AutoDiscoveryError(
            f"run {run_id} was measured on {recorded['gpu']}, this machine has {fingerprint.get('gpu')}: "
            "start a new run instead of mixing devices"
        )
    changed = {k: (recorded[k], fingerprint.get(k)) for k in TOOLCHAIN
               if k in recorded and recorded[k] != fingerprint.get(k)}
    if changed and not allow_new_toolchain:
        what = ", ".join(f"{k} {a} → {b}" for k, (a, b) in changed.items())
        raise AutoDiscoveryError(f"run {run_id} was measured with another toolchain ({what}); resume with "
                                 "--allow-new-toolchain to go on anyway (the run records the change)")
    harness.adopt(recorded)  # e.g. the baseline chosen when the run started stays the baseline
    with store.session() as s:
        run = Run.find(s, run_id)
        run.config = campaign.model_dump(mode="json")
        if changed:
            run.fingerprint = recorded | {"toolchain_changes": [*recorded.get("toolchain_changes", []), {
                "at": utcnow().isoformat(timespec="seconds"), **{k: {"was": a, "now": b} for k, (a, b) in changed.items()}}]}
    loop = Loop(campaign, store, harness, agent, display, workers(harness), dry_run=dry_run, stop=stop or Stop(),
                started=started)
    return loop.drive(run_id)


def measure(kernel: str, name_or_path: str, overrides: list[str], repeat: int = 1, harness=None) -> list:
    """Check, build and evaluate one kernel file, `repeat` times (each in a fresh child process)."""
    from pathlib import Path

    path = Path(kernel)
    if not path.is_file():
        raise AutoDiscoveryError(f"kernel file not found: {kernel}")
    campaign = load(name_or_path, overrides)
    harness = harness or registry.harness(campaign.harness.name)(campaign)
    harness.preflight()
    source = path.read_text()
    harness.check(source)
    build = harness.build(source)
    if not build.ok:
        raise AutoDiscoveryError(f"{kernel} does not compile: {build.log.splitlines()[0] if build.log else ''}")
    return [assess(harness, source, build) for _ in range(repeat)]


def profile(target: str, name_or_path: str, overrides: list[str], store: Store, harness=None):
    """Nsight Compute on a recorded candidate (`RUN/SEQ`, stored with it) or a kernel file (nothing
    recorded), and on the baseline at the same shape. Returns (label, outcome)."""
    from pathlib import Path

    from autodiscovery.store import Candidate, Evaluation

    run_id, slash, seq = target.partition("/")
    recorded = bool(slash) and run_id.isdigit() and seq.isdigit()
    if recorded:
        with store.session() as s:
            run = Run.find(s, int(run_id))
            if run is None:
                raise AutoDiscoveryError(f"no run {run_id} in this database")
            c = Candidate.by_seq(s, int(run_id), int(seq))
            if c is None:
                raise AutoDiscoveryError(f"run {run_id} has no candidate #{seq}")
            config, source, candidate_id = dict(run.config), c.source, c.id
        for assignment in overrides:
            apply_override(config, assignment)
        campaign = validate(config, f"run {run_id} config", overrides)
    else:
        path = Path(target)
        if not path.is_file():
            raise AutoDiscoveryError(f"'{target}' is neither RUN/SEQ (e.g. 3/7) nor a kernel file")
        campaign, source = load(name_or_path, overrides), path.read_text()
    harness = harness or registry.harness(campaign.harness.name)(campaign)
    if not hasattr(harness, "profile"):
        raise AutoDiscoveryError(f"the {campaign.harness.name} harness has no profiler")
    harness.preflight()
    harness.check(source)
    build = harness.build(source)
    if not build.ok:
        raise AutoDiscoveryError(f"{target} does not compile: {build.log.splitlines()[0] if build.log else ''}")
    outcome = harness.profile(source, build)
    if recorded:
        with store.session() as s:
            s.add(Evaluation(candidate_id=candidate_id, kind="profile", status=outcome.status,
                             metrics=outcome.metrics, log=outcome.log, device=outcome.device,
                             seconds=outcome.seconds))
    return target, outcome


def prompt(ref: str, store: Store, overrides: list[str] = (), seed: int = 0, harness=None) -> dict:
    """The messages the LLM agent would send to change a recorded candidate (`RUN/SEQ`, or `RUN` for its
    best), with inspirations drawn from the run's program database as a proposal draws them."""
    import random

    from autodiscovery.agents.llm import LlmAgent, messages
    from autodiscovery.agents.programs import Entry, Programs
    from autodiscovery.running.ledger import Ledger

    config, _ = origin(store, ref, "prompt")
    run_id, seq = (int(x) for x in config.pop("origin").split("/"))
    with store.session() as s:
        fingerprint = dict(Run.find(s, run_id).fingerprint)
    for assignment in overrides:
        apply_override(config, assignment)
    campaign = validate(config, f"run {run_id} config", overrides)
    harness = harness or registry.harness(campaign.harness.name)(campaign)
    history = Ledger(store, run_id, harness.objective, lambda: 0.0).history()
    llm = campaign.agent.of(LlmAgent)
    programs = Programs.of(history, near=llm.near_miss)
    target = next(r for r in history.records if r.seq == seq)
    entry = next((e for e in programs.entries if e.record.seq == seq), Entry(target, "chosen by hand"))
    draw = programs.around(entry, random.Random(seed), llm.inspirations)
    system, user = messages(campaign, fingerprint, harness, history, draw)
    return {"run": run_id, "seq": seq, "role": entry.role, "inspirations": [e.record.seq for e in draw.inspirations],
            "system": system["content"], "user": user["content"]}


NOISE_FLOOR = 0.02
"""Replayed and recorded figures of a timed objective may differ this much (another process, another
hour of the GPU's clocks) before the difference is flagged; a deterministic one (cycles) may not differ."""
FINGERPRINT_KEYS = ("gpu", "sms", "cc", "max_sm_clock_mhz", "driver", "cuda_driver", "cuda_runtime", "cublas",
                    "nvcc", "arch", "simulator", "baseline")


def replay(run_id: int, store: Store, overrides: list[str] = (), harness=None, progress=lambda _: None) -> dict:
    """Measure a run's best lineage again, on this machine: every kept step (for co-design runs, each
    phase's winner), in one evaluation process where the harness can, beside the recorded figures."""
    from concurrent.futures import ThreadPoolExecutor

    from autodiscovery.review import report
    from autodiscovery.store import Candidate

    with store.session() as s:
        run = Run.find(s, run_id)
        if run is None:
            raise AutoDiscoveryError(f"no run {run_id} in this database")
        config, recorded_fp = dict(run.config), dict(run.fingerprint)
    for assignment in overrides:
        apply_override(config, assignment)
    campaign = validate(config, f"run {run_id} config", overrides)
    harness = harness or registry.harness(campaign.harness.name)(campaign)
    progress("checking this machine")
    fingerprint = harness.preflight()
    extra = report.summary(store, run_id)[1] or {}
    if extra.get("phases"):
        rows = [report.show_candidate(store, run_id, p["seq"]) | {"phase": p["phase"]} for p in extra["phases"]]
    else:
        rows = report.lineage(store, run_id)
    if not rows:
        raise AutoDiscoveryError(f"run {run_id} has no kept step to replay")
    with store.session() as s:
        sources = [s.get(Candidate, r["id"]).source for r in rows]
    progress(f"building {len(rows)} steps")
    with ThreadPoolExecutor(max_workers=workers(harness)) as pool:
        builds = list(pool.map(harness.build, sources))
    progress(f"measuring {len(rows)} steps")
    if hasattr(harness, "replay"):
        outcomes = harness.replay(list(zip(sources, builds)))
    else:
        outcomes = []
        for i, (src, b) in enumerate(zip(sources, builds)):
            progress(f"measuring step {i + 1} of {len(rows)}")
            outcomes.append(assess(harness, src, b))
    peak = fingerprint.get("peak_tflops")
    steps = []
    for i, (r, out) in enumerate(zip(rows, outcomes)):
        m = out.metrics if out.status == "ok" else {}
        tflops = (m.get("tflops") or {}).get("candidate")
        ratio = m.get("ratio") or {}
        rec, rep = r.get("score"), out.score
        delta = (rep - rec) / rec if rec and rep is not None else None
        noise = 0.0
        if r.get("ci_low") is not None and ratio.get("ci_low") is not None and rec and rep:
            halves = (r["ci_high"] - r["ci_low"]) / 2 / rec + (ratio["ci_high"] - ratio["ci_low"]) / 2 / rep
            noise = max(NOISE_FLOOR, 3 * halves)
        steps.append({
            "step": i, "seq": r["seq"], "family": r.get("family"), "phase": r.get("phase"),
            "recorded": {"score": rec, "tflops": r.get("tflops"), "ci_low": r.get("ci_low"), "ci_high": r.get("ci_high")},
            "replayed": {"status": out.status, "score": rep, "tflops": tflops,
                         "pct_peak": 100 * tflops / peak if tflops and peak else None,
                         "ci_low": ratio.get("ci_low"), "ci_high": ratio.get("ci_high"),
                         "log": out.log.splitlines()[0] if out.status != "ok" and out.log else ""},
            "delta": delta, "noise": noise,
            "flag": out.status != "ok" or delta is None or abs(delta) > noise,
        })
    def facts(fp: dict) -> dict:
        out = {k: fp.get(k) for k in FINGERPRINT_KEYS if k in fp}
        if isinstance(out.get("baseline"), dict):  # its kind and algorithm, not the timings that chose it
            out["baseline"] = " ".join(str(out["baseline"].get(k)) for k in ("kind", "algo_index") if k in out["baseline"])
        return out

    was, now = facts(recorded_fp), facts(fingerprint)
    differences = {k: [was[k], now[k]] for k in was if k in now and was[k] != now[k]}
    return {"run": run_id, "campaign": campaign.name, "objective": harness.objective.name,
            "recorded_fingerprint": recorded_fp, "fingerprint": fingerprint, "differences": differences,
            "same_machine": not differences, "steps": steps}


def parse_shape(text: str) -> tuple[int, int, int]:
    """'4096' (square) or 'MxNxK'."""
    parts = text.lower().split("x")
    if len(parts) not in (1, 3) or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise AutoDiscoveryError(f"shape '{text}' is neither N nor MxNxK with positive integers")
    return (int(parts[0]),) * 3 if len(parts) == 1 else tuple(int(p) for p in parts)


def ladder(name_or_path: str, overrides: list[str], shapes: list[str], store: Store, per_family: int,
           families: list[str] | None = None, progress=lambda _: None, harness=None):
    """The best configuration of each family at each shape: [(shape, run_id, rungs)]."""
    from autodiscovery.running.ladder import Ladder

    parsed = [parse_shape(s) for s in shapes]
    out = []
    for M, N, K in parsed:
        campaign = load(name_or_path, [*overrides, f"problem.M={M}", f"problem.N={N}", f"problem.K={K}"])
        h = harness or registry.harness(campaign.harness.name)(campaign)
        fingerprint = h.preflight()  # per shape: a baseline chosen for the shape is chosen again
        run_id, rungs = Ladder(campaign, store, h, workers(h), progress).climb(fingerprint, per_family, families)
        out.append(((M, N, K), run_id, rungs))
    return out
