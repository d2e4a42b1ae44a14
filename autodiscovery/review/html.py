"""`report RUN --out report.html`: one self-contained HTML page (charts as inline SVG, no network), and
`--png DIR`: the same charts as images.

The charts are matplotlib figures: the progress of every candidate with the best-so-far line, the kept
lineage by step, the spread of the best kernel's paired measurements, and for co-design runs the
cycles of every simulated configuration by phase and the analytical model against the simulator.
"""

from __future__ import annotations

import difflib
import io
import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import jinja2
from markupsafe import Markup

from autodiscovery.review import report
from autodiscovery.store import Store

TEMPLATES = Path(__file__).parent / "templates"
NUMBER = re.compile(r"[+\-−]?[\d.,]+%?")
"""A table cell that is one number (right-aligned in the page)."""
KEPT, REVERTED, FAILED = "#1a7f37", "#8c959f", "#cf222e"
NOT_MEASURED = {"proposed", "built"}
NEAR = 0.3
"""The progress chart draws again, on a linear scale, every score within this fraction of the best..."""
NEAR_SHARE = 1 / 6
"""...where those scores take less than this share of the height of the chart of every candidate."""
LABEL_GAP = 4
"""Points between a label and what it labels, on the side away from the baseline's line."""


@dataclass
class Figures:
    """Each chart by name, as a matplotlib figure."""

    figs: dict[str, object] = field(default_factory=dict)

    def svg(self, name: str) -> Markup:
        buf = io.StringIO()
        self.figs[name].savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
        text = buf.getvalue()
        text = text[text.index("<svg"):]  # no XML declaration or DOCTYPE inside HTML
        text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
        return Markup(text)

    def png(self, directory: Path) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        out = []
        for name, fig in self.figs.items():
            path = directory / f"{name}.png"
            fig.savefig(path, format="png", dpi=120, bbox_inches="tight")
            out.append(path)
        return out

    def close(self) -> None:
        import matplotlib.pyplot as plt

        for fig in self.figs.values():
            plt.close(fig)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "autodiscovery", "font.size": 9, "axes.spines.top": False,
                         "axes.spines.right": False})
    return plt


def _legend(ax, **kwargs) -> None:
    """A legend of the series that have something drawn: an empty series gets no entry, and an axes with
    none gets no legend."""
    from matplotlib.container import Container

    def drawn(handle) -> bool:
        if isinstance(handle, Container):
            return len(handle) > 0
        if hasattr(handle, "get_offsets"):  # scatter
            return len(handle.get_offsets()) > 0
        if hasattr(handle, "get_xdata"):  # lines
            return len(handle.get_xdata()) > 0
        return True

    shown = [(h, label) for h, label in zip(*ax.get_legend_handles_labels()) if drawn(h)]
    if shown:
        ax.legend([h for h, _ in shown], [label for _, label in shown], **kwargs)


def _near_best(scored: list[dict], best: float | None, higher: bool,
               baseline: float | None) -> tuple[float, float] | None:
    """The lowest and highest score within NEAR of the best (and the baseline, where it is that near)."""
    if best is None:
        return None

    def near(v: float) -> bool:
        return v >= (1 - NEAR) * best if higher else v <= (1 + NEAR) * best
    values = [c["score"] for c in scored if near(c["score"])] + ([baseline] if baseline and near(baseline) else [])
    return min(values), max(values)


def _share(band: tuple[float, float], every: tuple[float, float], log: bool) -> float:
    """The share of the chart's height that `band` takes, on its scale."""
    scale = (lambda v: math.log10(max(v, 1e-12))) if log else (lambda v: v)
    whole = scale(every[1]) - scale(every[0])
    return (scale(band[1]) - scale(band[0])) / whole if whole > 0 else 1.0


def _bar_label(ax, x: float, top: float, text: str, baseline: float | None, per_point: float) -> None:
    """A bar's label just above its top, or inside the bar where the baseline's line would run through
    the label (`per_point`: data units a point)."""
    size = 7
    room = (LABEL_GAP + 1.4 * size + 3) * per_point  # the label and its gap, with a margin
    if baseline is None or not top < baseline < top + room:
        ax.annotate(text, (x, top), xytext=(0, LABEL_GAP), textcoords="offset points", ha="center", va="bottom",
                    fontsize=size)
    elif top > room:
        ax.annotate(text, (x, top), xytext=(0, -LABEL_GAP), textcoords="offset points", ha="center", va="top",
                    fontsize=size, color="white")
    else:  # a bar too short to hold it, just under the line: above the line
        ax.annotate(text, (x, baseline), xytext=(0, LABEL_GAP), textcoords="offset points", ha="center",
                    va="bottom", fontsize=size)


def collect(store: Store, run_id: int) -> dict:
    """Everything the page shows, as data (what `report --json` would need to redraw it)."""
    run = report.show_run(store, run_id)
    chain = report.lineage(store, run_id)
    tables, extra = report.sections(store, run_id)
    sources = {(run_id, c["seq"]): c["source"] for c in run["candidates"]}
    for r in chain:  # steps of the run a --from run continues
        if (r["run"], r["seq"]) not in sources:
            sources[(r["run"], r["seq"])] = report.show_candidate(store, r["run"], r["seq"])["source"]

    def name(r: dict) -> str:
        return f"#{r['seq']}" if r["run"] == run_id else f"{r['run']}/{r['seq']}"

    peak = run["fingerprint"].get("peak_tflops")
    steps, prev = [], None
    for i, r in enumerate(chain):
        diff = "" if prev is None else "".join(difflib.unified_diff(
            sources[(prev["run"], prev["seq"])].splitlines(keepends=True),
            sources[(r["run"], r["seq"])].splitlines(keepends=True), fromfile=name(prev), tofile=name(r), n=2))
        steps.append(r | {"step": i, "pct_peak": 100 * r["tflops"] / peak if peak and r.get("tflops") else None,
                          "diff": diff, "name": name(r)})
        prev = r
    best = next((c for c in run["candidates"] if c["seq"] == run["best_seq"]), None)
    spread = {}
    if best is not None:
        evs = report.show_candidate(store, run_id, best["seq"])["evaluations"]
        bench = next((e for e in evs if e["kind"] == "benchmark" and e["status"] == "ok"), None)
        if bench and bench["metrics"].get("ratios"):
            spread = {"ratios": bench["metrics"]["ratios"], "ratio": bench["metrics"].get("ratio", {}),
                      "tflops": bench["metrics"].get("tflops", {})}
    baseline_tflops = None
    if spread.get("tflops"):
        baseline_tflops = next((v for k, v in spread["tflops"].items() if k != "candidate"), None)
    return {"run": {k: v for k, v in run.items() if k != "candidates"}, "candidates": run["candidates"],
            "tally": report.tally_text(run),
            "steps": steps, "spread": spread, "harness": extra, "tables": tables, "peak_tflops": peak,
            "baseline_tflops": baseline_tflops}


def figures(data: dict) -> Figures:
    plt = _pyplot()
    figs = Figures()
    objective = data["run"]["objective"]
    higher = "cycles" not in objective
    vs_cublas = "cuBLAS" in objective

    # ---- progress: every candidate in order, and the band near the best on a linear scale ----------
    cands = [c for c in data["candidates"] if c["status"] not in NOT_MEASURED]
    scored = [c for c in cands if c.get("score") is not None]
    kept = [c for c in scored if c.get("verdict") == "keep"]
    reverted = [c for c in scored if c.get("verdict") != "keep"]
    failed = [c for c in cands if c.get("score") is None]
    low = min((c["score"] for c in scored), default=1.0)
    high = max((c["score"] for c in scored), default=1.0)
    log = high / max(low, 1e-12) > 50
    floor = low / 2 if log else low - 0.05 * (high - low or 1)
    best_x, best_y, best, best_c = [], [], None, None
    for c in sorted(scored, key=lambda c: c["seq"]):
        if c.get("verdict") == "keep" and (best is None or (c["score"] > best if higher else c["score"] < best)):
            best, best_c = c["score"], c
        if best is not None:
            best_x.append(c["seq"])
            best_y.append(best)
    band = _near_best(scored, best, higher, 1.0 if vs_cublas else None)
    if band and _share(band, (low, high), log) < NEAR_SHARE:
        fig, (ax, near) = plt.subplots(2, 1, figsize=(9, 5.6), sharex=True,
                                       gridspec_kw={"height_ratios": [2, 3], "hspace": 0.3})
    else:
        fig, ax = plt.subplots(figsize=(9, 3.6))
        near = None
    ax.scatter([c["seq"] for c in reverted], [c["score"] for c in reverted], s=22, marker="o",
               facecolors="none", edgecolors=REVERTED, label="reverted", gid="reverted", zorder=3)
    ax.scatter([c["seq"] for c in kept], [c["score"] for c in kept], s=30, color=KEPT, label="kept",
               gid="kept", zorder=4)
    ax.scatter([c["seq"] for c in failed], [floor] * len(failed), s=26, marker="x", color=FAILED,
               label="failed or refused", gid="failed", zorder=3)
    if best_x:
        ax.step(best_x, best_y, where="post", color=KEPT, linewidth=1.2, label="best so far", gid="best-so-far")
    if vs_cublas:
        ax.axhline(1.0, color="#0969da", linestyle="--", linewidth=1, label="cuBLAS", gid="cublas")
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(f"{objective} (log scale)" if log else objective)
    ax.set_title("every candidate in order")
    if near is not None:
        lo, hi = band
        pad = (hi - lo) or abs(hi) * 0.01 or 1
        baseline = 1.0 if vs_cublas else None
        above = best >= baseline if baseline is not None else higher  # the best's label: away from the line
        near.set_ylim(lo - (0.08 if above else 0.25) * pad, hi + (0.25 if above else 0.08) * pad)
        ax.axhspan(*near.get_ylim(), color=REVERTED, alpha=0.25, linewidth=0, zorder=0, gid="near-band",
                   label="shown below, on a linear scale")
        inside = [c for c in scored if lo <= c["score"] <= hi]
        near.scatter([c["seq"] for c in inside if c.get("verdict") != "keep"],
                     [c["score"] for c in inside if c.get("verdict") != "keep"], s=22, marker="o",
                     facecolors="none", edgecolors=REVERTED, gid="near-reverted", zorder=3)
        near.scatter([c["seq"] for c in inside if c.get("verdict") == "keep"],
                     [c["score"] for c in inside if c.get("verdict") == "keep"], s=30, color=KEPT,
                     gid="near-kept", zorder=4)
        near.step(best_x, best_y, where="post", color=KEPT, linewidth=1.2, gid="near-best-so-far")
        if vs_cublas:
            near.axhline(1.0, color="#0969da", linestyle="--", linewidth=1, gid="near-cublas")
        near.annotate(f"best #{best_c['seq']}: {best_c.get('score_text') or f'{best:g}'}", (best_c["seq"], best),
                      xytext=(0, 2 * LABEL_GAP if above else -2 * LABEL_GAP), textcoords="offset points",
                      ha="center", va="bottom" if above else "top", fontsize=8, color=KEPT, gid="best-label",
                      bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
                      zorder=5)
        near.set_ylabel(objective)
        near.set_title(f"near the best: every candidate within {NEAR:.0%} of it, on a linear scale")
        near.set_xlabel("candidate")
    else:
        ax.set_xlabel("candidate")
    _legend(ax, loc="lower right" if higher else "upper right", fontsize=8, frameon=False)
    figs.figs["progress"] = fig

    # ---- the lineage by step -------------------------------------------------------------------
    steps = data["steps"]
    if steps:
        fig, ax = plt.subplots(figsize=(9, 3.4))
        names = [f"{s['step']}\n{s['family'] or '?'}" for s in steps]
        if vs_cublas:
            values = [s.get("tflops") or 0 for s in steps]
            ax.bar(range(len(steps)), values, color=KEPT, gid="lineage-bars")
            if data.get("baseline_tflops"):
                ax.axhline(data["baseline_tflops"], color="#0969da", linestyle="--", linewidth=1,
                           label=f"cuBLAS ({data['baseline_tflops']:.0f} TFLOP/s)")
                _legend(ax, fontsize=8, frameon=False, loc="upper left")
            ax.set_ylabel("TFLOP/s")
            ax.set_ylim(0, 1.18 * max([*values, data.get("baseline_tflops") or 0]))
            per_point = ax.get_ylim()[1] / (ax.bbox.height * 72 / fig.dpi)
            for i, s in enumerate(steps):
                _bar_label(ax, i, values[i], f"{s['score']:.3f}×", data.get("baseline_tflops"), per_point)
        else:
            values = [s.get("score") or 0 for s in steps]
            ax.bar(range(len(steps)), values, color=KEPT, gid="lineage-bars")
            ax.set_ylabel(objective)
        ax.set_xticks(range(len(steps)), names, fontsize=7)
        ax.set_title("the kept lineage, step by step")
        figs.figs["lineage"] = fig

    # ---- spread of the best kernel's paired measurements ------------------------------------------
    sp = data.get("spread") or {}
    if sp.get("ratios"):
        fig, ax = plt.subplots(figsize=(9, 2.6))
        ratios = sp["ratios"]
        ax.hist(ratios, bins=min(30, max(5, len(ratios) // 2)), color=REVERTED, gid="spread")
        r = sp.get("ratio", {})
        if r.get("median") is not None:
            ax.axvline(r["median"], color=KEPT, linewidth=1.5, label=f"median {r['median']:.4f}")
        if r.get("ci_low") is not None:
            ax.axvspan(r["ci_low"], r["ci_high"], color=KEPT, alpha=0.2,
                       label=f"CI {r['ci_low']:.4f}–{r['ci_high']:.4f}")
        ax.set_xlabel(f"{objective}, one value per timed pair ({len(ratios)} pairs)")
        ax.set_ylabel("pairs")
        ax.set_title("the best kernel's measurement: paired ratios against the baseline")
        _legend(ax, fontsize=8, frameon=False)
        figs.figs["spread"] = fig

    # ---- co-design: cycles by phase, and the model against the simulator -----------------------------
    h = data.get("harness") or {}
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
            ax.axhline(h["baseline_cycles"], color="#0969da", linestyle="--", linewidth=1, label="baseline")
        ax.set_xticks(range(len(order)), [f"phase {p}" for p in order])
        ax.set_ylabel("cycles")
        ax.set_title("simulated cycles of every configuration, by phase")
        _legend(ax, fontsize=8, frameon=False)
        figs.figs["phases"] = fig
    if (m := h.get("model")) and m.get("points"):
        fig, ax = plt.subplots(figsize=(4.8, 4.2))
        for kind, gid, color in (("left out of its own fit (A, B)", "model-fit", REVERTED),
                                 ("phase-C pick", "model-picks", KEPT)):
            pts = [p for p in m["points"] if p["held_out"] == kind]
            if pts:
                ax.scatter([p["predicted"] for p in pts], [p["simulated"] for p in pts], s=18, color=color,
                           gid=gid, label=kind)
        every = [v for p in m["points"] for v in (p["predicted"], p["simulated"])]
        ax.plot([min(every), max(every)], [min(every), max(every)], color="#0969da", linewidth=1,
                label="predicted = simulated")
        _legend(ax, fontsize=8, frameon=False)
        ax.set_xlabel("model's prediction (cycles)")
        ax.set_ylabel("simulated (cycles)")
        ax.set_title("the fitted model on points it did not see")
        figs.figs["model"] = fig
    if (pf := h.get("pareto")) and pf.get("points"):
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, cost, front in zip(axes, ("area", "power"), (pf["front"], pf.get("power_front") or [])):
            ax.scatter([p[f"{cost}_pct"] for p in pf["points"]], [p["cycles"] for p in pf["points"]], s=18,
                       color=REVERTED, gid=f"pareto-{cost}-points", label="best point of each architecture")
            ax.step([p[f"{cost}_pct"] for p in front], [p["cycles"] for p in front], where="post", color=KEPT,
                    gid=f"pareto-{cost}-front", label="Pareto front")
            budget = (h.get("budget") or {}).get(f"{cost}_pct")
            if budget is not None:
                ax.axvline(budget, color="#0969da", linestyle="--", linewidth=1, label=f"budget +{budget:g}% {cost}")
            ax.set_xlabel(f"{cost} over the stock part (%)")
            ax.set_title(f"cycles against {cost}")
            _legend(ax, fontsize=8, frameon=False)
        axes[0].set_ylabel("cycles")
        figs.figs["pareto"] = fig
    return figs


def _utc(when: datetime | str) -> datetime:
    """A time as UTC to the second; the database's times are naive UTC."""
    when = datetime.fromisoformat(when) if isinstance(when, str) else when
    when = when.astimezone(timezone.utc) if when.tzinfo else when.replace(tzinfo=timezone.utc)
    return when.replace(microsecond=0)


def _time_html(when: datetime | str) -> Markup:
    """`2026-11-20 08:01:02 UTC`, in a <time> element."""
    t = _utc(when)
    return Markup('<time datetime="{}">{}</time>').format(t.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                                           t.strftime("%Y-%m-%d %H:%M:%S UTC"))


def _times_shown(value):
    """A fingerprint or configuration with the times it records (keys `at`, `…_at`) as `… UTC`."""
    if isinstance(value, dict):
        return {k: _utc(v).strftime("%Y-%m-%d %H:%M:%S UTC") if (k == "at" or k.endswith("_at")) and _is_time(v)
                else _times_shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_times_shown(v) for v in value]
    return value


def _is_time(value) -> bool:
    if isinstance(value, datetime):
        return True
    try:
        return isinstance(value, str) and bool(datetime.fromisoformat(value))
    except ValueError:
        return False


def _diff_html(text: str) -> Markup:
    out = []
    for line in text.splitlines():
        cls = "add" if line.startswith("+") and not line.startswith("+++") else \
              "del" if line.startswith("-") and not line.startswith("---") else \
              "hunk" if line.startswith("@@") else ""
        out.append(f'<span class="{cls}">{Markup.escape(line)}</span>' if cls else str(Markup.escape(line)))
    return Markup("\n".join(out))


def render(store: Store, run_id: int, png_dir: Path | None = None) -> tuple[str, list[Path]]:
    """The page, and the PNGs written (with `png_dir`)."""
    data = collect(store, run_id)
    figs = figures(data)
    try:
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                                 undefined=jinja2.StrictUndefined)
        env.filters["diff_html"] = _diff_html
        env.tests["numeric_text"] = lambda cell: bool(NUMBER.fullmatch(cell))
        env.filters["pretty"] = lambda v: json.dumps(_times_shown(v), indent=2, default=str)
        env.filters["time"] = _time_html
        page = env.get_template("report.html.j2").render(
            data=data, charts={name: figs.svg(name) for name in figs.figs})
        pngs = figs.png(png_dir) if png_dir is not None else []
    finally:
        figs.close()
    return page, pngs
