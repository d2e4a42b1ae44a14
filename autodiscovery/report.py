"""Read-only views of the store: the rows behind `runs`, `show`, `lineage` and `export`."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from autodiscovery import AutoDiscoveryError
from autodiscovery.loop import score_of
from autodiscovery.store import Candidate, Decision, LlmCall, Run, Store


class NotFound(AutoDiscoveryError):
    pass


def _metrics(c: Candidate) -> dict[str, Any]:
    ev = c.measurement
    m = ev.metrics if ev is not None and ev.status == "ok" else {}
    ratio = m.get("ratio", {})
    return {"tflops": m.get("tflops", {}).get("candidate"), "x_cublas": score_of(c),
            "ci_low": ratio.get("ci_low"), "ci_high": ratio.get("ci_high")}


def _run(s: Session, run_id: int) -> Run:
    run = Run.find(s, run_id)
    if run is None:
        raise NotFound(f"no run {run_id} in this database")
    return run


def runs(store: Store) -> list[dict]:
    with store.session() as s:
        out = []
        for run in s.scalars(select(Run).order_by(Run.id)):
            best = _metrics(run.best) if run.best else {}
            ev = run.best.measurement if run.best else None
            cycles = ev.metrics.get("cycles") if ev is not None else None
            if cycles is not None:  # a simulated run: its score is cycles, not a ratio to cuBLAS
                best["x_cublas"] = None
            out.append({
                "id": run.id, "campaign": run.campaign, "agent": run.agent, "status": run.status,
                "stop_reason": run.stop_reason,
                "candidates": sum(c.status != "proposed" for c in run.candidates),
                "rejected": sum(c.status == "rejected" for c in run.candidates),
                "best_seq": run.best.seq if run.best else None,
                "best_tflops": best.get("tflops"), "best_x_cublas": best.get("x_cublas"), "best_cycles": cycles,
                "device": run.fingerprint.get("gpu"), "created_at": run.created_at.isoformat(),
                "elapsed_s": run.elapsed_s,
            })
        return out


def candidate_row(c: Candidate) -> dict:
    b = c.build
    return {
        "seq": c.seq, "id": c.id, "parent_seq": c.parent.seq if c.parent else None, "family": c.family,
        "knobs": c.knobs, "proposer": c.proposer, "hypothesis": c.hypothesis, "status": c.status,
        "source_hash": c.source_hash, **_metrics(c),
        "registers": b.registers if b else None, "spill_stores": b.spill_stores if b else None,
        "spill_loads": b.spill_loads if b else None, "stack": b.stack if b else None,
        "smem_static": b.smem_static if b else None, "has_hgmma": b.has_hgmma if b else None,
        "decision": c.decision.reason if c.decision else None,
        "verdict": c.decision.verdict if c.decision else None,
    }


def show_run(store: Store, run_id: int) -> dict:
    with store.session() as s:
        run = _run(s, run_id)
        calls = s.scalars(select(LlmCall).where(LlmCall.run_id == run_id).order_by(LlmCall.id))
        return {
            "id": run.id, "campaign": run.campaign, "agent": run.agent, "status": run.status,
            "stop_reason": run.stop_reason, "created_at": run.created_at.isoformat(), "elapsed_s": run.elapsed_s,
            "best_seq": run.best.seq if run.best else None,
            "config": run.config, "fingerprint": run.fingerprint,
            "candidates": [candidate_row(c) | {"source": c.source} for c in run.candidates],
            "phases": None,
            "llm_calls": [{"model": k.model, "input_tokens": k.input_tokens, "output_tokens": k.output_tokens,
                           "latency_ms": k.latency_ms, "cost": k.cost, "error": k.error} for k in calls],
        }


def show_run_full(store: Store, run_id: int) -> dict:
    return show_run(store, run_id) | {"phases": phases(store, run_id)}


def show_candidate(store: Store, run_id: int, seq: int) -> dict:
    with store.session() as s:
        _run(s, run_id)
        c = Candidate.by_seq(s, run_id, seq)
        if c is None:
            raise NotFound(f"run {run_id} has no candidate #{seq}")
        b = c.build
        return candidate_row(c) | {
            "run": run_id, "source": c.source,
            "build": None if b is None else {"ok": b.ok, "compiler": b.compiler, "flags": b.flags,
                                             "seconds": b.seconds, "log": b.log},
            "evaluations": [{"kind": e.kind, "status": e.status, "against": e.against_id, "metrics": e.metrics,
                             "log": e.log, "device": e.device, "seconds": e.seconds} for e in c.evaluations],
        }


def lineage(store: Store, run_id: int) -> list[dict]:
    """The kept chain from the seed to the best, following each keep back to what it replaced."""
    with store.session() as s:
        run = _run(s, run_id)
        chain: list[Candidate] = []
        cand = run.best
        while cand is not None:
            chain.append(cand)
            d = s.scalar(select(Decision).where(Decision.candidate_id == cand.id))
            cand = s.get(Candidate, d.incumbent_id) if d and d.incumbent_id else None
        return [candidate_row(c) for c in reversed(chain)]


def export(store: Store, run_id: int) -> tuple[str, dict]:
    """The best kernel's source (its manifest rides in it) and a summary of where it came from."""
    with store.session() as s:
        run = _run(s, run_id)
        if run.best is None:
            raise NotFound(f"run {run_id} has no kept candidate to export")
        return run.best.source, candidate_row(run.best) | {"run": run_id, "campaign": run.campaign,
                                                          "device": run.fingerprint.get("gpu")}


def phases(store: Store, run_id: int) -> dict | None:
    """The co-design phase table: each phase's best, its cycles, the change from the baseline, % of bound;
    and how the analytical model's predictions compare with the simulated cycles."""
    from harnesses.accelsim.arch import Architecture
    from harnesses.accelsim.model import predict

    with store.session() as s:
        run = _run(s, run_id)
        problem = run.config.get("problem", {})
        rows = []
        for c in run.candidates:
            phase = (c.knobs or {}).get("phase")
            ev = c.measurement
            if phase is None:
                continue
            m = ev.metrics if ev is not None and ev.status == "ok" else {}
            rows.append({"seq": c.seq, "phase": phase, "kernel": c.knobs["kernel"], "arch": c.knobs["arch"],
                         "status": c.status, "cycles": m.get("cycles"), "pct_of_bound": m.get("pct_of_bound"),
                         "bound_cycles": m.get("bound_cycles")})
    if not rows:
        return None
    base = next((r for r in rows if r["phase"] == "A" and r["cycles"]), None)
    stock = next((r["arch"] for r in rows if r["phase"] == "A"), None)
    table = []
    for phase in "ABCDE":
        done = [r for r in rows if r["phase"] == phase and r["cycles"]]
        if not done:
            continue
        best = min(done, key=lambda r: r["cycles"])
        change = (best["cycles"] - base["cycles"]) / base["cycles"] if base else None
        arch_diff = {k: v for k, v in best["arch"].items() if stock and stock.get(k) != v}
        table.append({"phase": phase, "seq": best["seq"], "simulated": len(done), "kernel": best["kernel"],
                      "arch_changes": arch_diff, "cycles": best["cycles"], "change": change,
                      "pct_of_bound": best["pct_of_bound"]})
    checks = []
    for r in rows:
        if r["cycles"] and r["arch"] == stock:
            p = predict(r["kernel"], Architecture(**r["arch"]), problem.get("M", 512), problem.get("N", 512),
                        problem.get("K", 512))["cycles"]
            checks.append({"seq": r["seq"], "phase": r["phase"], "predicted": round(p), "simulated": r["cycles"],
                           "error": (p - r["cycles"]) / r["cycles"]})
    # The model's scale, fitted on the baseline and phase B, then judged on the phase-C picks it made.
    fit = sorted(c["simulated"] / c["predicted"] for c in checks if c["phase"] in "AB" and c["predicted"])
    scale = fit[len(fit) // 2] if fit else None
    for c in checks:
        c["calibrated_error"] = (scale * c["predicted"] - c["simulated"]) / c["simulated"] if scale else None
    held_out = sorted(abs(c["calibrated_error"]) for c in checks if c["phase"] == "C" and scale)
    return {"baseline_cycles": base["cycles"] if base else None, "phases": table, "model": checks,
            "model_scale": scale,
            "model_calibrated_error_on_C": held_out[len(held_out) // 2] if held_out else None,
            "model_rank_correlation": _spearman([c["predicted"] for c in checks], [c["simulated"] for c in checks]),
            "model_median_abs_error": sorted(abs(c["error"]) for c in checks)[len(checks) // 2] if checks else None}


def _spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3:
        return None
    import numpy as np

    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])
