"""`replay RUN`: a run's best lineage measured again on this machine, beside what was recorded.

Every kept step (for a harness that reports phases, each phase's winner) is built and measured again,
in one evaluation process where the harness can (`replay` hook), and compared with its recording in
the harness's objective: a difference larger than the noise of the two measurements (three times the
half-widths of their intervals, at least the objective's own `noise`) is flagged; an exact objective
(no interval) may not differ at all. The fingerprints of the recording and of this machine are
compared as the harness identifies them.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from autodiscovery import AutoDiscoveryError, provenance
from autodiscovery.interfaces import Objective, columns
from autodiscovery.review import report
from autodiscovery.roles import Evaluating, Replaying, identity
from autodiscovery.running.evaluate import assess
from autodiscovery.running.refs import open_run
from autodiscovery.running.runner import workers
from autodiscovery.store import Candidate, EvalStatus, Store


def noise(objective: Objective, recorded: dict, replayed: dict, rec: float | None, rep: float | None) -> float:
    """How far two measurements of one kernel may be apart, as a fraction of the recorded one."""
    a, b = objective.bounds(recorded), objective.bounds(replayed)
    if a is None or b is None or not rec or not rep:
        return 0.0
    halves = (a[1] - a[0]) / 2 / rec + (b[1] - b[0]) / 2 / rep
    return max(objective.noise, 3 * halves)


def replay(run_id: int, store: Store, overrides: list[str] | tuple[str, ...] = (), harness: Evaluating | None = None,
           progress: Callable[[str], None] = lambda _: None) -> dict:
    """Measure a run's best lineage again, on this machine, beside the recorded figures."""
    recorded = open_run(store, run_id, overrides)
    harness = harness or recorded.harness(recorded.campaign)
    objective = harness.objective
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
        cands = [c for c in (s.get(Candidate, r["id"]) for r in rows) if c is not None]  # the lineage's own rows
        sources = [c.source for c in cands]
        metrics = [dict(c.measurement.metrics) if c.measurement is not None else {} for c in cands]
    progress(f"building {len(rows)} steps")
    with ThreadPoolExecutor(max_workers=workers(harness)) as pool:
        builds = list(pool.map(harness.build, sources))
    progress(f"measuring {len(rows)} steps")
    outcomes = harness.replay(list(zip(sources, builds))) if isinstance(harness, Replaying) else None
    if outcomes is None:  # measured one by one, as `evaluate` measures them
        outcomes = []
        for i, (src, b) in enumerate(zip(sources, builds)):
            progress(f"measuring step {i + 1} of {len(rows)}")
            outcomes.append(assess(harness, src, b))
    shown = [*columns(harness, "replay"), *columns(harness, "replay-now")]
    steps = []
    for i, (r, m_rec, build, out) in enumerate(zip(rows, metrics, builds, outcomes)):
        m_rep = out.metrics if out.status == EvalStatus.ok else {}
        facts = report.build_facts(build) if build is not None else {}
        rec, rep = r.get("score"), out.score
        delta = (rep - rec) / rec if rec and rep is not None else None
        allowed = noise(objective, m_rec, m_rep, rec, rep)
        low, high = objective.bounds(m_rep) or (None, None)
        steps.append({
            "step": i, "seq": r["seq"], "family": r.get("family"), "phase": r.get("phase"),
            "recorded": {"score": rec, "ci_low": r.get("ci_low"), "ci_high": r.get("ci_high"),
                         "figures": {c.key: r["figures"].get(c.key) for c in shown}},
            "replayed": {"status": out.status, "score": rep, "ci_low": low, "ci_high": high,
                         "figures": {c.key: c.value(m_rep, facts) for c in shown},
                         "log": out.log.splitlines()[0] if out.status != EvalStatus.ok and out.log else ""},
            "delta": delta, "noise": allowed,
            "flag": out.status != EvalStatus.ok or delta is None or abs(delta) > allowed,
        })
    was, now = identity(harness, recorded.fingerprint), identity(harness, fingerprint)
    differences = {k: [was[k], now[k]] for k in was if k in now and was[k] != now[k]}
    code = provenance.code()
    return {"run": run_id, "campaign": recorded.campaign.name, "objective": objective.name,
            "recorded_fingerprint": recorded.fingerprint, "fingerprint": fingerprint | {"code": code},
            "differences": differences, "same_machine": not differences,
            "code": {"recorded": recorded.fingerprint.get("code"), "now": code,
                     "differs": provenance.differs(recorded.fingerprint.get("code"), code)},
            "steps": steps}
