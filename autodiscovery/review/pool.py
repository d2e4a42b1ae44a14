"""Where a run's device time went, from its recorded timestamps alone: `show`'s pool line."""

from __future__ import annotations

import math

from sqlalchemy import select

from autodiscovery.review.report import _run
from autodiscovery.store import (
    Build,
    Candidate,
    EvalKind,
    EvalStatus,
    Evaluation,
    Store,
)

DEVICE_KINDS = (EvalKind.benchmark, EvalKind.head_to_head, EvalKind.sanitize)
"""The evaluations that hold a device: the pool line's shares of its time, each by its kind."""

def pool(store: Store, run_id: int) -> dict | None:
    """Where the devices' time went, from the recorded timestamps (None before any measurement). The
    devices: the GPUs the run was given, or the most measurements that ran at once (simulations).

    A measurement occupies one device from its end (`created_at`) back by its `seconds`. The window runs
    from the first start to the last end; a device idle in it is put down to what the run was waiting for
    at that moment: no candidate proposed and not yet started (the agent), candidates proposed but still
    compiling (builds: a build starts when its candidate is proposed), or neither (the loop itself:
    dispatch, decisions)."""
    with store.session() as s:
        run = _run(s, run_id)
        gpus = (run.fingerprint or {}).get("gpus")
        evals = s.execute(select(Evaluation.candidate_id, Evaluation.kind, Evaluation.created_at, Evaluation.seconds)
                          .join(Candidate, Evaluation.candidate_id == Candidate.id)
                          .where(Candidate.run_id == run_id,
                                 Evaluation.kind.in_(DEVICE_KINDS),
                                 Evaluation.status != EvalStatus.running, Evaluation.seconds > 0)).all()
        cands = s.execute(select(Candidate.id, Candidate.created_at, Build.seconds)
                          .outerjoin(Build, Candidate.build_id == Build.id).where(Candidate.run_id == run_id)).all()
    spans = [(end.timestamp() - seconds, end.timestamp(), kind) for _, kind, end, seconds in evals]
    starts: dict[int, float] = {}
    for cand, kind, end, seconds in evals:
        if kind == EvalKind.benchmark:
            starts[cand] = min(starts.get(cand, math.inf), end.timestamp() - seconds)
    waiting = []
    for cand, created, build_s in cands:
        if cand in starts:
            done = created.timestamp() + (build_s or 0.0)
            waiting.append((created.timestamp(), min(done, starts[cand]), starts[cand]))
    if not spans:
        return None
    if isinstance(gpus, list) and gpus:
        devices = len(gpus)
    else:  # the most at once for half a second or more (an end is recorded a moment after it happens)
        devices, now, steps = 1, 0, sorted([(a, 1) for a, *_ in spans] + [(b, -1) for _, b, *_ in spans])
        for (t, step), (t_next, _) in zip(steps, steps[1:]):
            now += step
            if t_next - t >= 0.5:
                devices = max(devices, now)
    t0, t1 = min(a for a, *_ in spans), max(b for _, b, *_ in spans)
    window = max(t1 - t0, 1e-9)
    edges = sorted({t0, t1, *(t for a, b, *_ in spans for t in (a, b)),
                    *(min(max(t, t0), t1) for w in waiting for t in w)})
    # One sweep over the edges: how many measurements run, candidates wait, and waiting ones are built,
    # in each interval between two edges (each count kept as its changes at the edges).
    index = {t: i for i, t in enumerate(edges)}

    def at(t: float) -> int:
        return index[min(max(t, t0), t1)]

    running, ready, built = ([0] * len(edges) for _ in range(3))
    for a, b, *_ in spans:
        running[index[a]] += 1
        running[index[b]] -= 1
    for proposed, done, start in waiting:  # waiting from its proposal to its start; built from `done` on
        for counts, since in ((ready, proposed), (built, max(proposed, done))):
            if at(since) < at(start):
                counts[at(since)] += 1
                counts[at(start)] -= 1
    idle = {"proposal": 0.0, "build": 0.0, "loop": 0.0}
    busy = waits = ready_built = 0
    for i, (a, b) in enumerate(zip(edges, edges[1:])):
        busy, waits, ready_built = busy + running[i], waits + ready[i], ready_built + built[i]
        free = max(0, devices - busy)
        if free:
            cause = "proposal" if not waits else "loop" if ready_built else "build"
            idle[cause] += free * (b - a)
    total = devices * window
    share = {k: sum(b - a for a, b, kind in spans if kind == k) / total for k in DEVICE_KINDS}
    return {"devices": devices, "window_s": round(window, 2), "per_minute": round(len(starts) / window * 60, 2),
            "busy": round(sum(share.values()), 4),
            **{k: round(v, 4) for k, v in share.items()},
            "idle": {k: round(v / total, 4) for k, v in idle.items()}}


def pool_text(p: dict) -> str:
    """'pool: 8 at once over 312 s, 41 candidates a minute, busy 92% (benchmarks 85%, head-to-heads 7%);
    idle: waiting for proposals 5%, builds 1%, the loop 2%' (and the share of sanitize runs beside the
    head-to-heads, where a run had some). Candidates a minute: those measured over the window."""
    idle = p["idle"]
    per_minute = f", {p['per_minute']:.0f} candidates a minute" if "per_minute" in p else ""
    return (f"pool: {p['devices']} at once over {p['window_s']:.0f} s{per_minute}, busy "
            f"{p['busy']:.0%} (benchmarks {p['benchmark']:.0%}, head-to-heads {p['head_to_head']:.0%}"
            + (f", sanitize {p['sanitize']:.0%}" if p.get("sanitize") else "") + "); idle: "
            f"waiting for proposals {idle['proposal']:.0%}, builds {idle['build']:.0%}, the loop {idle['loop']:.0%}")
