"""The co-design report: each phase's best in cycles, and the analytical model checked against them."""

from __future__ import annotations

from rich.table import Table

from autodiscovery.store import Run, Store
from harnesses.accelsim.arch import Architecture
from harnesses.accelsim.model import predict


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "–" if x is None else format(x, spec)


def phases(store: Store, run_id: int) -> dict | None:
    """The co-design phase table: each phase's best, its cycles, the change from the baseline, % of bound;
    and how the analytical model's predictions compare with the simulated cycles."""
    with store.session() as s:
        run = Run.find(s, run_id)
        if run is None:
            return None
        problem = run.config.get("problem", {})
        rows = []
        for c in run.candidates:
            phase = (c.knobs or {}).get("phase")
            ev = c.measurement
            if phase is None:
                continue
            m = ev.metrics if ev is not None and ev.status == "ok" else {}
            rows.append({"seq": c.seq, "phase": phase, "kernel": c.knobs["kernel"], "arch": c.knobs["arch"],
                         "change": c.knobs.get("change"), "status": c.status, "cycles": m.get("cycles"), "pct_of_bound": m.get("pct_of_bound"),
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
            "attribution": attribution(rows, stock), "cross": cross(rows, base, stock),
            "model_scale": scale,
            "model_calibrated_error_on_C": held_out[len(held_out) // 2] if held_out else None,
            "model_rank_correlation": _spearman([c["predicted"] for c in checks], [c["simulated"] for c in checks]),
            "model_median_abs_error": sorted(abs(c["error"]) for c in checks)[len(checks) // 2] if checks else None}


def attribution(rows: list[dict], stock: dict | None) -> list[dict]:
    """Phase D's one-change-at-a-time points against the best kernel on the stock architecture: what
    each change alone buys, and which changes buy nothing at this shape."""
    singles = [r for r in rows if r["phase"] == "D" and r["change"] and r["cycles"]]
    if not singles or stock is None:
        return []
    kernel = singles[0]["kernel"]
    ref = next((r["cycles"] for r in rows if r["phase"] in "ABC" and r["kernel"] == kernel and r["arch"] == stock
                and r["cycles"]), None)
    return [{"seq": r["seq"], "change": r["change"], "cycles": r["cycles"], "reference": ref,
             "vs_reference": (r["cycles"] - ref) / ref if ref else None, "inert": ref is not None and r["cycles"] == ref}
            for r in singles]


def cross(rows: list[dict], base: dict | None, stock: dict | None) -> dict | None:
    """Does kernel × architecture beat the sum of its parts? The baseline, the best kernel on stock, the
    stock kernel on the best architecture of D, and the best of the cross, with the product of the two
    parts' speedups as what independent effects would give."""
    if base is None or stock is None:
        return None
    stock_kernel = base["kernel"]
    on_stock = [r for r in rows if r["phase"] in "ABC" and r["arch"] == stock and r["cycles"]]
    d_best = min((r for r in rows if r["phase"] == "D" and r["cycles"]), key=lambda r: r["cycles"], default=None)
    e_rows = [r for r in rows if r["phase"] == "E" and r["cycles"]]
    if not on_stock or d_best is None or not e_rows:
        return None
    kernel_only = min(r["cycles"] for r in on_stock)
    arch_only = next((r["cycles"] for r in rows if r["kernel"] == stock_kernel and r["arch"] == d_best["arch"]
                      and r["cycles"]), None)
    crossed = [r for r in e_rows if r["kernel"] != stock_kernel]
    both = min((r["cycles"] for r in crossed), default=None)
    if arch_only is None or both is None:
        return None
    predicted = kernel_only * arch_only / base["cycles"]
    return {"baseline": base["cycles"], "kernel_only": kernel_only, "arch_only": arch_only, "both": both,
            "predicted": round(predicted), "super_additive": both < predicted,
            "vs_predicted": (both - predicted) / predicted}


def _spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3:
        return None
    import numpy as np

    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def phases_table(run_id: int, data: dict):
    """The phase table, and where phase D and E have them, the attribution and the cross."""
    from rich.console import Group

    parts = [_phases(run_id, data)]
    if data.get("attribution"):
        t = Table(title="phase D: one change at a time from stock, the best kernel frozen")
        for col in ("#", "change", "cycles", "vs best kernel on stock", ""):
            t.add_column(col, overflow="fold")
        for a in data["attribution"]:
            t.add_row(str(a["seq"]), a["change"], str(a["cycles"]),
                      "–" if a["vs_reference"] is None else f"{a['vs_reference']:+.1%}",
                      "no effect at this shape" if a["inert"] else "")
        parts.append(t)
    if c := data.get("cross"):
        t = Table(title="kernel × architecture against the sum of its parts")
        for col in ("point", "cycles", "vs baseline"):
            t.add_column(col, overflow="fold")
        for name, key in (("baseline", "baseline"), ("best kernel, stock architecture", "kernel_only"),
                          ("stock kernel, best architecture", "arch_only"),
                          ("both parts' speedups multiplied (predicted)", "predicted"),
                          ("best kernel × best architecture (measured)", "both")):
            t.add_row(name, str(c[key]), f"{(c[key] - c['baseline']) / c['baseline']:+.1%}")
        t.caption = ("super-additive: the cross beats the product of its parts by "
                     f"{-c['vs_predicted']:.1%}" if c["super_additive"] else
                     f"not super-additive: the cross is {c['vs_predicted']:+.1%} against the product of its parts")
        parts.append(t)
    return Group(*parts)


def _phases(run_id: int, data: dict) -> Table:
    base = data["baseline_cycles"]
    t = Table(title=f"co-design phases of run {run_id} "
                    f"({f'baseline {base} cycles' if base is not None else 'the baseline did not finish'})")
    for col in ("phase", "#", "simulated", "best configuration", "cycles", "vs baseline", "% of bound"):
        t.add_column(col, overflow="fold")
    names = {"A": "A baseline", "B": "B kernel only", "C": "C model picks", "D": "D architecture only",
             "E": "E best B × best D"}
    for r in data["phases"]:
        k = r["kernel"]
        kernel = (f"{k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']} {k['FRAGS_M']}x{k['FRAGS_N']} frags "
                  f"S{k['STAGES']} P{k['PERSISTENT']}")
        arch = " ".join(f"{a}={v}" for a, v in r["arch_changes"].items()) or "stock"
        change = "–" if r["change"] is None else f"{r['change']:+.1%}"
        t.add_row(names[r["phase"]], str(r["seq"]), str(r["simulated"]), f"{kernel}; {arch}", str(r["cycles"]),
                  change, fmt(r["pct_of_bound"], ".1f"))
    rho = data["model_rank_correlation"]
    err = data["model_median_abs_error"]
    cal = data.get("model_calibrated_error_on_C")
    t.caption = (f"analytical model over {len(data['model'])} stock-architecture kernels: rank correlation "
                 f"{fmt(rho, '.2f')}, median |error| {'–' if err is None else f'{err:.0%}'}; scaled by "
                 f"{fmt(data.get('model_scale'), '.2f')} (fitted on A+B), median |error| on the phase-C picks "
                 f"{'–' if cal is None else f'{cal:.0%}'}")
    return t
