"""The co-design report: each phase's best in cycles, and the analytical model checked against them."""

from __future__ import annotations

import statistics

from autodiscovery.interfaces import Section
from autodiscovery.store import CandidateStatus, EvalStatus, Run, RunStatus, Store
from harnesses.accelsim.arch import Architecture
from harnesses.accelsim.costs import ArchSettings, pareto
from harnesses.accelsim.model import held_out_confirms, spearman


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "–" if x is None else format(x, spec)


def phases(store: Store, run_id: int) -> dict | None:
    """Everything the co-design report shows: each phase's best (cycles, kernel cycles, change from the
    baseline, % of bound, area); phase D's attribution; the cross against the product of its parts;
    the fitted model judged on points it did not see; and the cycles-versus-area Pareto front."""
    with store.session() as s:
        run = Run.find(s, run_id)
        if run is None:
            return None
        config = run.config or {}
        going, stopped = run.status == RunStatus.running, run.stop_reason or ""
        rows = []
        for c in run.candidates:
            knobs = c.knobs or {}
            phase = knobs.get("phase")
            ev = c.measurement
            if phase is None:
                continue
            m = ev.metrics if ev is not None and ev.status == EvalStatus.ok else {}
            rows.append({"seq": c.seq, "phase": phase, "kernel": knobs["kernel"], "arch": knobs["arch"],
                         "change": knobs.get("change"), "changes": knobs.get("changes"),
                         "combined_left_out": knobs.get("combined_left_out"), "status": c.status,
                         "cycles": m.get("cycles"),
                         "kernel_cycles": m.get("kernel_cycles", m.get("cycles")),
                         "pct_of_bound": m.get("pct_of_bound"), "bound_cycles": m.get("bound_cycles"),
                         "model": knobs.get("model"), "predicted": knobs.get("predicted"),
                         "over_budget": knobs.get("over_budget"), "not_tried": knobs.get("not_tried")})
    if not rows:
        return None
    settings = ArchSettings.model_validate((config.get("harness") or {}).get("arch") or {})
    for r in rows:
        try:
            r.update({k: v for k, v in settings.cost(Architecture(**r["arch"])).items() if k.endswith("_pct")})
        except ValueError:
            r.update(area_pct=None, power_pct=None)
    base = next((r for r in rows if r["phase"] == "A" and r["cycles"]), None)
    stock = next((r["arch"] for r in rows if r["phase"] == "A"), None)
    table = []
    for phase in "ABCDE":
        done = [r for r in rows if r["phase"] == phase and r["cycles"]]
        if not done:
            continue
        # E's best is the best cross, which phase D may already have simulated
        pool = done + crossed(rows, base["kernel"], stock, "cycles") if phase == "E" and base else done
        best = min(pool, key=lambda r: r["cycles"])
        change = (best["cycles"] - base["cycles"]) / base["cycles"] if base else None
        arch_diff = {k: v for k, v in best["arch"].items() if stock and stock.get(k) != v}
        table.append({"phase": phase, "seq": best["seq"], "simulated": len(done), "kernel": best["kernel"],
                      "arch_changes": arch_diff, "cycles": best["cycles"], "kernel_cycles": best["kernel_cycles"],
                      "change": change, "pct_of_bound": best["pct_of_bound"], "area_pct": best["area_pct"]})
    singles = attribution(rows, stock)
    last = max(r["phase"] for r in rows)
    skipped = [{"phase": p, "why": "not reached yet: the run is going on" if going else
                f"not reached: the run stopped first ({stopped or 'no reason recorded'})"}
               for p in "ABCDE" if p > last]
    return {"baseline_cycles": base["cycles"] if base else None, "phases": table, "skipped": skipped,
            "attribution": singles, "combined": combined(rows, singles),
            "over_budget": next((r["over_budget"] for r in rows if r["over_budget"]), []),
            "not_tried": not_tried(rows, settings_phase(config, "D")),
            "cross": cross(rows, base, stock), "model": model_check(rows, settings_phase(config, "C")),
            "budget": settings.budget.model_dump(), "pareto": pareto_front(rows, settings) | {"stock": stock}}


def settings_phase(config: dict, phase: str) -> int | None:
    """A phase's budget of simulations, as the run's campaign set it."""
    return (((config.get("agent") or {}).get("codesign") or {}).get("phases") or {}).get(phase)


def not_tried(rows: list[dict], budget: int | None) -> list[dict]:
    """The single changes phase D's budget left out (recorded when D began), less any simulated later."""
    listed: list = next((r["not_tried"] for r in rows if r.get("not_tried")), [])
    simulated = {r["change"] for r in rows if r["phase"] == "D" and r["change"]}
    why = f"not simulated: phase D's budget ({budget} simulations) ran out first" if budget else \
        "not simulated: phase D's budget ran out first"
    return [{"change": c, "why": why} for c in listed if c not in simulated]


def model_check(rows: list[dict], budget: int | None = None) -> dict | None:
    """The phase-C model: how it did on the A and B points, each left out of its own fit, and on the
    C picks it chose and the simulator then ran (held out entirely); whether it was trusted (both: a
    good leave-one-out rank and a first pick that beat every point of A and B) and how many of phase
    C's simulations that saved."""
    c_rows = [r for r in rows if r["phase"] == "C" and r["model"]]
    if not c_rows:
        return None
    info = c_rows[0]["model"]
    fitted = [r["cycles"] for r in rows if r["phase"] in "AB" and r["cycles"]]
    confirmed = held_out_confirms(c_rows[0]["cycles"], fitted)
    moved_on = any(r["phase"] in "DE" for r in rows)  # phase C over: what its budget had left was saved
    budget = budget or len(c_rows)
    saved = (budget - len(c_rows) if info.get("trusted") else 0) if moved_on else info.get("simulations_saved", 0)
    points = [{**p, "held_out": "left out of its own fit (A, B)"} for p in info.get("points", [])]
    picks = [{"seq": r["seq"], "predicted": r["predicted"], "simulated": r["cycles"],
              "held_out": "phase-C pick"} for r in c_rows if r["cycles"] and r["predicted"] is not None]
    errors = [abs(p["predicted"] - p["simulated"]) / p["simulated"] for p in picks]
    return {"n": info.get("n"), "terms": info.get("terms"), "ptx": info.get("ptx"),
            "threshold": info.get("threshold"), "trusted": info.get("trusted"), "held_out_confirms": confirmed,
            "loo_rank_correlation": info.get("loo_rank_correlation"),
            "loo_median_abs_error": info.get("loo_median_abs_error"),
            "picks_rank_correlation": spearman([p["predicted"] for p in picks], [p["simulated"] for p in picks]),
            "picks_median_abs_error": statistics.median(errors) if errors else None,
            "simulations_saved": max(0, saved), "points": points + picks}


def pareto_front(rows: list[dict], settings: ArchSettings) -> dict:
    """Cycles against area and against power: the best simulated point of each architecture, the ones
    no other beats on both (one front for each cost), and the best within the budget."""
    best: dict[str, dict] = {}
    for r in rows:
        if r["cycles"] and r["area_pct"] is not None:
            key = str(sorted(r["arch"].items()))
            if key not in best or r["cycles"] < best[key]["cycles"]:
                best[key] = r
    pts = [{"seq": r["seq"], "phase": r["phase"], "area_pct": r["area_pct"], "power_pct": r["power_pct"],
            "cycles": r["cycles"], "arch": r["arch"]} for r in best.values()]
    front = pareto(pts)
    within = [p for p in pts if settings.budget.over(p) is None]
    return {"points": pts, "front": front, "power_front": pareto(pts, x="power_pct"),
            "best_within_budget": min(within, key=lambda p: p["cycles"], default=None)}


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
             "vs_reference": (r["cycles"] - ref) / ref if ref else None, "inert": ref is not None and r["cycles"] == ref,
             "area_pct": r["area_pct"], "power_pct": r["power_pct"]}
            for r in singles]


def combined(rows: list[dict], attributed: list[dict]) -> dict:
    """Phase D's pairs (and all the best changes together) against the sum of their single changes'
    savings (`attributed`: the attribution's rows): where the combined gain comes from, and which
    combinations were not simulated, with why."""
    singles = {a["change"]: a for a in attributed}
    points = []
    for r in rows:
        if r["phase"] != "D" or not r["changes"] or not r["cycles"]:
            continue
        found = [singles.get(c) for c in r["changes"]]
        parts = [p for p in found if p is not None]
        ref = parts[0]["reference"] if found and found[0] is not None else None
        additive = ref + sum(p["cycles"] - ref for p in parts) if ref and len(parts) == len(found) else None
        points.append({"seq": r["seq"], "changes": r["changes"], "cycles": r["cycles"], "reference": ref,
                       "vs_reference": (r["cycles"] - ref) / ref if ref else None, "additive": additive,
                       "interaction": (r["cycles"] - additive) / ref if additive is not None else None,
                       "area_pct": r["area_pct"], "power_pct": r["power_pct"]})
    left_out: list = next((r["combined_left_out"] for r in rows if r.get("combined_left_out")), [])
    simulated = {tuple(p["changes"]) for p in points}
    return {"points": points, "left_out": [o for o in left_out if tuple(o["changes"]) not in simulated]}


def crossed(rows: list[dict], stock_kernel: dict, stock: dict | None, cyc: str) -> list[dict]:
    """The simulated points of kernel x architecture: phase D's own points already pair the best kernel
    with each architecture, and E adds the other crosses."""
    return [r for r in rows if r["phase"] in "DE" and r[cyc] and r["kernel"] != stock_kernel and r["arch"] != stock]


def cross(rows: list[dict], base: dict | None, stock: dict | None) -> dict | None:
    """Does kernel x architecture beat the sum of its parts? The baseline, the best kernel on stock, the
    stock kernel on the best architecture of D, and the best of the cross, in kernel cycles (the launch
    latency, the same in every point, left out). Beside the measured cross: the sum of the parts'
    savings (additive effects) and the product of their speedups (independent effects)."""
    if base is None or stock is None:
        return None
    cyc = "kernel_cycles"
    stock_kernel = base["kernel"]
    on_stock = [r for r in rows if r["phase"] in "ABC" and r["arch"] == stock and r[cyc]]
    d_best = min((r for r in rows if r["phase"] == "D" and r[cyc]), key=lambda r: r[cyc], default=None)
    e_rows = [r for r in rows if r["phase"] == "E" and r[cyc]]
    if not on_stock or d_best is None or not e_rows:
        return None
    kernel_only = min(r[cyc] for r in on_stock)
    arch_only = next((r[cyc] for r in rows if r["kernel"] == stock_kernel and r["arch"] == d_best["arch"]
                      and r[cyc]), None)
    best = min(crossed(rows, stock_kernel, stock, cyc), key=lambda r: r[cyc], default=None)
    if arch_only is None or best is None:
        return None
    both, b = best[cyc], base[cyc]
    additive = kernel_only + arch_only - b
    product = kernel_only * arch_only / b
    return {"baseline": b, "kernel_only": kernel_only, "arch_only": arch_only, "both": both,
            "additive": round(additive), "predicted": round(product),
            "super_additive": round(both) < round(additive), "vs_additive": (both - additive) / additive,
            "vs_predicted": (both - product) / product, "seq": best["seq"], "phase": best["phase"]}


def cross_caption(c: dict) -> str:
    """What the cross says, in words: super-additive, additive, or not; and where its point comes from."""
    against = f"({c['vs_predicted']:+.1%} against the product)"
    if round(c["both"]) == round(c["additive"]):
        verdict = f"additive: the cross is the sum of its parts {against}"
    elif c["super_additive"]:
        verdict = f"super-additive: the cross beats the sum of its parts by {-c['vs_additive']:.1%} {against}"
    else:
        verdict = f"not super-additive: the cross is {c['vs_additive']:+.1%} against the sum of its parts {against}"
    if c.get("phase") == "D":  # the best kernel with D's best architecture: no phase-E cross did better
        verdict += f"; its point is phase D's own #{c['seq']} (the best kernel, D's architecture), no cross of E beat it"
    return verdict


def pct(x: float | None, spec: str = "+.1%") -> str:
    return "–" if x is None else format(x, spec)


def phases_table(run_id: int, data: dict) -> list[Section]:
    """The phase table, and where the run has them: the attribution, the cross, the model check and the
    Pareto fronts."""
    parts = [_phases(run_id, data)]
    if data.get("attribution") or data.get("over_budget") or data.get("not_tried"):
        rows = [[str(a["seq"]), a["change"], str(a["cycles"]), pct(a["vs_reference"]),
                 pct(a["area_pct"], "+.1f") + "%", pct(a["power_pct"], "+.1f") + "%",
                 "no effect at this shape" if a["inert"] else ""] for a in data["attribution"]]
        rows += [["–", o["change"], "not simulated", "–", f"{o['area_pct']:+.1f}%", f"{o['power_pct']:+.1f}%",
                  o["why"]] for o in data.get("over_budget") or []]
        rows += [["–", o["change"], "not simulated", "–", "–", "–", o["why"]] for o in data.get("not_tried") or []]
        parts.append(Section("attribution", "phase D: one change at a time from stock, the best kernel frozen",
                             ["#", "change", "cycles", "vs best kernel on stock", "area", "power", ""], rows))
    if (comb := data.get("combined")) and (comb["points"] or comb["left_out"]):
        rows = [[str(p["seq"]), " + ".join(p["changes"]), str(p["cycles"]), pct(p["vs_reference"]),
                 pct(None if p["additive"] is None else (p["additive"] - p["reference"]) / p["reference"]),
                 pct(p["interaction"]), pct(p["area_pct"], "+.1f") + "%"] for p in comb["points"]]
        rows += [["–", " + ".join(o["changes"]), "not simulated: " + o["why"], "–", "–", "–", "–"]
                 for o in comb["left_out"]]
        parts.append(Section("combined", "phase D: the best single changes together, the best kernel frozen",
                             ["#", "changes", "cycles", "vs ref", "sum", "interaction", "area"], rows,
                             "vs ref: against the best kernel on the stock architecture; sum: the savings of "
                             "each change alone, added; interaction: the point less that sum, as a share of "
                             "the reference: negative where the changes help each other, positive where they "
                             "get in each other's way"))
    if c := data.get("cross"):
        rows = [[name, str(c[key]), pct((c[key] - c["baseline"]) / c["baseline"])]
                for name, key in (("baseline", "baseline"), ("best kernel, stock architecture", "kernel_only"),
                                  ("stock kernel, best architecture", "arch_only"),
                                  ("sum of the parts' savings (predicted)", "additive"),
                                  ("product of the parts' speedups (predicted)", "predicted"),
                                  ("best kernel × best architecture (measured)", "both"))]
        caption = cross_caption(c)
        parts.append(Section("cross", "kernel × architecture against the sum of its parts (kernel cycles)",
                             ["point", "kernel cycles", "vs baseline"], rows, caption))
    if m := data.get("model"):
        rows = [[str(p["seq"]), p["held_out"], str(p["predicted"]), str(p["simulated"]),
                 pct((p["predicted"] - p["simulated"]) / p["simulated"], "+.0%")] for p in m["points"]]
        rho, err = m["loo_rank_correlation"], m["loo_median_abs_error"]
        caption = (f"leave-one-out over {m['n']} points: rank correlation {fmt(rho, '.2f')}, median |error| "
                   f"{pct(err, '.0%')} (≥ {fmt(m['threshold'], '.2f')}: {'yes' if m['trusted'] else 'no'}); "
                   f"its first pick, held out, {'beat' if m['held_out_confirms'] else 'did not beat'} every "
                   f"point of A and B; phase-C picks: rank correlation "
                   f"{fmt(m['picks_rank_correlation'], '.2f')}, median |error| "
                   f"{pct(m['picks_median_abs_error'], '.0%')}; simulations saved: {m['simulations_saved']}"
                   + ("" if m.get("ptx") else "; no nvcc: PTX counts and registers estimated from the knobs"))
        parts.append(Section("model", "phase C: the model fitted on A and B, on points it did not see",
                             ["#", "held out as", "predicted", "simulated", "error"], rows, caption, chart="model"))
    if (pf := data.get("pareto")) and pf["front"]:
        budget = data.get("budget") or {}
        stock = pf.get("stock") or {}
        best = pf["best_within_budget"]
        for cost, front in (("area", pf["front"]), ("power", pf.get("power_front") or [])):
            limit = budget.get(f"{cost}_pct")
            rows = [[str(p["seq"]), p["phase"],
                     " ".join(f"{k}={v}" for k, v in p["arch"].items() if stock.get(k) != v) or "stock",
                     f"{p['area_pct']:+.1f}%", f"{p['power_pct']:+.1f}%", str(p["cycles"]),
                     "best within budget" if best and p["seq"] == best["seq"] else ""] for p in front]
            parts.append(Section(f"pareto-{cost}", f"cycles against {cost}: the Pareto front (budget "
                                 + (f"+{fmt(limit, 'g')}% {cost})" if limit is not None else f"on {cost}: none)"),
                                 ["#", "phase", "architecture", "area", "power", "cycles", ""], rows,
                                 chart="pareto" if cost == "power" else ""))
    return parts


def _phases(run_id: int, data: dict) -> Section:
    base = data["baseline_cycles"]
    names = {"A": "A baseline", "B": "B kernel only", "C": "C model picks", "D": "D architecture only",
             "E": "E kernel × architecture"}
    rows = []
    for r in data["phases"]:
        k = r["kernel"]
        kernel = (f"{k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']} {k['FRAGS_M']}x{k['FRAGS_N']} frags "
                  f"S{k['STAGES']} P{k['PERSISTENT']}")
        arch = " ".join(f"{a}={v}" for a, v in r["arch_changes"].items()) or "stock"
        rows.append([names[r["phase"]], str(r["seq"]), str(r["simulated"]), f"{kernel}; {arch}", str(r["cycles"]),
                     str(r["kernel_cycles"]), pct(r["change"]), fmt(r["pct_of_bound"], ".1f"),
                     "–" if r["area_pct"] is None else f"{r['area_pct']:+.1f}%"])
    rows += [[names[s["phase"]], "–", "0", s["why"], "–", "–", "–", "–", "–"] for s in data.get("skipped") or []]
    caption = ("kernel cycles: the simulator's count without the kernel launch latency it includes; % of bound is "
               "taken on them, against each point's own architecture")
    if any(r["phase"] == "E" for r in data["phases"]):
        caption += "; E's best is the best kernel × architecture point, phase D's included"
    return Section("phases", f"co-design phases of run {run_id} "
                             f"({f'baseline {base} cycles' if base is not None else 'the baseline did not finish'})",
                   ["phase", "#", "simulated", "best configuration", "cycles", "kernel cycles", "vs baseline",
                    "% of bound", "area"], rows, caption, chart="phases")


def charts(data: dict) -> list:
    """The co-design charts: the cycles of every simulated configuration by phase, the analytical model
    against the simulator on points it did not see, and the Pareto fronts of cycles against area and power
    (each follows its table in the page)."""
    from autodiscovery.interfaces import Chart
    from autodiscovery.review.charts import BASELINE, KEPT, REVERTED, legend, pyplot

    plt = pyplot()
    out = []
    h = data.get("harness") or {}
    cands = [c for c in data["candidates"] if c["status"] not in (CandidateStatus.proposed, CandidateStatus.built)]
    if h.get("phases"):
        fig, ax = plt.subplots(figsize=(9, 3.4))
        by_phase: dict[str, list] = {}
        for c in cands:
            phase = (c.get("knobs") or {}).get("phase")
            if phase and c.get("score") is not None:
                by_phase.setdefault(phase, []).append(c)
        order = sorted(by_phase)
        for i, phase in enumerate(order):
            pts = by_phase[phase]
            xs = [i + (j - (len(pts) - 1) / 2) * min(0.08, 0.7 / max(len(pts), 1)) for j in range(len(pts))]
            ax.scatter(xs, [c["score"] for c in pts], s=18, color=REVERTED, gid=f"phase-{phase}")
        best_of = {p["phase"]: p["cycles"] for p in h["phases"]}
        ax.bar([order.index(p) for p in best_of if p in order], [best_of[p] for p in best_of if p in order],
               color=KEPT, alpha=0.35, width=0.8, label="phase best")
        if h.get("baseline_cycles"):
            ax.axhline(h["baseline_cycles"], color=BASELINE, linestyle="--", linewidth=1, label="baseline")
        ax.set_xticks(range(len(order)), [f"phase {p}" for p in order])
        ax.set_ylabel("cycles")
        ax.set_title("simulated cycles of every configuration, by phase")
        legend(ax, fontsize=8, frameon=False)
        out.append(Chart("phases", fig))
    if (m := h.get("model")) and m.get("points"):
        fig, ax = plt.subplots(figsize=(4.8, 4.2))
        for kind, gid, color in (("left out of its own fit (A, B)", "model-fit", REVERTED),
                                 ("phase-C pick", "model-picks", KEPT)):
            pts = [p for p in m["points"] if p["held_out"] == kind]
            if pts:
                ax.scatter([p["predicted"] for p in pts], [p["simulated"] for p in pts], s=18, color=color,
                           gid=gid, label=kind)
        every = [v for p in m["points"] for v in (p["predicted"], p["simulated"])]
        ax.plot([min(every), max(every)], [min(every), max(every)], color=BASELINE, linewidth=1,
                label="predicted = simulated")
        legend(ax, fontsize=8, frameon=False)
        ax.set_xlabel("model's prediction (cycles)")
        ax.set_ylabel("simulated (cycles)")
        ax.set_title("the fitted model on points it did not see")
        out.append(Chart("model", fig))
    if (pf := h.get("pareto")) and pf.get("points"):
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, cost, front in zip(axes, ("area", "power"), (pf["front"], pf.get("power_front") or [])):
            ax.scatter([p[f"{cost}_pct"] for p in pf["points"]], [p["cycles"] for p in pf["points"]], s=18,
                       color=REVERTED, gid=f"pareto-{cost}-points", label="best point of each architecture")
            ax.step([p[f"{cost}_pct"] for p in front], [p["cycles"] for p in front], where="post", color=KEPT,
                    gid=f"pareto-{cost}-front", label="Pareto front")
            budget = (h.get("budget") or {}).get(f"{cost}_pct")
            if budget is not None:
                ax.axvline(budget, color=BASELINE, linestyle="--", linewidth=1, label=f"budget +{budget:g}% {cost}")
            ax.set_xlabel(f"{cost} over the stock part (%)")
            ax.set_title(f"cycles against {cost}")
            legend(ax, fontsize=8, frameon=False)
        axes[0].set_ylabel("cycles")
        out.append(Chart("pareto", fig))
    return out
