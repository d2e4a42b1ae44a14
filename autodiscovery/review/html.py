"""`report RUN --out report.html`: one self-contained HTML page (charts as inline SVG, no network), and
`--png DIR`: the same charts as images.

The core draws the progress of every candidate (with the best-so-far line, and the band near the best
on a linear scale where a log scale would squash it) and the kept lineage in the objective, step by
step; the run's harness adds its tables (`summary`) and its charts (`charts`), which may replace the
lineage chart with one of its own.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from autodiscovery.interfaces import columns
from autodiscovery.review import report
from autodiscovery.review.charts import (
    BASELINE,
    FAILED,
    KEPT,
    LABEL_GAP,
    REVERTED,
    Figures,
    legend,
    pyplot,
)
from autodiscovery.roles import Charting, Shown
from autodiscovery.store import CandidateStatus, EvalKind, EvalStatus, Store, Verdict

TEMPLATES = Path(__file__).parent / "templates"
NUMBER = re.compile(r"[+\-−]?[\d.,]+%?")
"""A table cell that is one number (right-aligned in the page)."""
NOT_MEASURED = frozenset({CandidateStatus.proposed, CandidateStatus.built})
"""Candidates never measured (waiting, or built in a dry run): no point on the progress chart."""
NEAR = 0.3
"""The progress chart draws again, on a linear scale, every score within this fraction of the best..."""
NEAR_SHARE = 1 / 6
"""...where those scores take less than this share of the height of the chart of every candidate."""


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


def collect(store: Store, run_id: int) -> dict:
    """Everything the page shows, as data (what `report --json` would need to redraw it), and what a
    harness's `charts` draw from."""
    run = report.show_run(store, run_id)
    chain = report.lineage(store, run_id)
    tables, extra = report.sections(store, run_id)
    harness = report.harness_class(store, run_id)
    sources = {(run_id, c["seq"]): c["source"] for c in run["candidates"]}
    for r in chain:  # steps of the run a --from run continues
        if (r["run"], r["seq"]) not in sources:
            sources[(r["run"], r["seq"])] = report.show_candidate(store, r["run"], r["seq"])["source"]

    def name(r: dict) -> str:
        return f"#{r['seq']}" if r["run"] == run_id else f"{r['run']}/{r['seq']}"

    steps, prev = [], None
    for i, r in enumerate(chain):
        diff = "" if prev is None else "".join(difflib.unified_diff(
            sources[(prev["run"], prev["seq"])].splitlines(keepends=True),
            sources[(r["run"], r["seq"])].splitlines(keepends=True), fromfile=name(prev), tofile=name(r), n=2))
        steps.append(r | {"step": i, "diff": diff, "name": name(r)})
        prev = r
    best = next((c for c in run["candidates"] if c["seq"] == run["best_seq"]), None)
    measurement = {}
    if best is not None:
        evs = report.show_candidate(store, run_id, best["seq"])["evaluations"]
        bench = next((e for e in evs if e["kind"] == EvalKind.benchmark and e["status"] == EvalStatus.ok), None)
        measurement = dict(bench["metrics"]) if bench else {}
    return {"run": {k: v for k, v in run.items() if k != "candidates"}, "candidates": run["candidates"],
            "tally": report.tally_text(run), "best_summary": report.summary_text(harness, best or {}),
            "columns": [{"key": c.key, "label": c.label, "spec": c.spec, "note": c.note}
                        for c in columns(harness, "report")],
            "steps": steps, "best_measurement": measurement, "harness": extra, "tables": tables,
            "registers": any(r.get("registers") is not None for r in chain)}


def figures(data: dict, harness: Shown, only: set[str] | None = None) -> Figures:
    """The core's charts, then the harness's (one named like a core chart replaces it); with `only`, just
    the core's charts of those names (what a live page draws again)."""
    plt = pyplot()
    figs = Figures()
    objective = harness.objective
    higher = objective.higher_is_better
    reference = objective.reference
    name = objective.name

    # ---- progress: every candidate in order, and the band near the best on a linear scale ----------
    cands = [c for c in data["candidates"] if c["status"] not in NOT_MEASURED]
    scored = [c for c in cands if c.get("score") is not None]
    kept = [c for c in scored if c.get("verdict") == Verdict.keep]
    reverted = [c for c in scored if c.get("verdict") != Verdict.keep]
    failed = [c for c in cands if c.get("score") is None]
    low = min((c["score"] for c in scored), default=1.0)
    high = max((c["score"] for c in scored), default=1.0)
    log = low > 0 and high / low > 50
    # Failures are drawn beyond the worst score: at the bottom where higher is better, at the top where lower is.
    floor = (low / 2 if log else low - 0.05 * (high - low or 1)) if higher else \
        (high * 2 if log else high + 0.05 * (high - low or 1))
    best_x, best_y, best, best_c = [], [], None, None
    for c in sorted(scored, key=lambda c: c["seq"]):
        if c.get("verdict") == Verdict.keep and (best is None or (c["score"] > best if higher else c["score"] < best)):
            best, best_c = c["score"], c
        if best is not None:
            best_x.append(c["seq"])
            best_y.append(best)
    band = _near_best(scored, best, higher, reference)
    if band and band[0] < band[1] and _share(band, (low, high), log) < NEAR_SHARE:
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
    if reference is not None:
        ax.axhline(reference, color=BASELINE, linestyle="--", linewidth=1, label=objective.reference_name,
                   gid="baseline")
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(f"{name} (log scale)" if log else name)
    ax.set_title("every candidate in order")
    if near is not None:
        assert band is not None and best is not None and best_c is not None  # a band is drawn near a best
        lo, hi = band
        pad = (hi - lo) or abs(hi) * 0.01 or 1
        above = best >= reference if reference is not None else higher  # the best's label: away from the line
        near.set_ylim(lo - (0.08 if above else 0.25) * pad, hi + (0.25 if above else 0.08) * pad)
        ax.axhspan(*near.get_ylim(), color=REVERTED, alpha=0.25, linewidth=0, zorder=0, gid="near-band",
                   label="shown below, on a linear scale")
        inside = [c for c in scored if lo <= c["score"] <= hi]
        near.scatter([c["seq"] for c in inside if c.get("verdict") != Verdict.keep],
                     [c["score"] for c in inside if c.get("verdict") != Verdict.keep], s=22, marker="o",
                     facecolors="none", edgecolors=REVERTED, gid="near-reverted", zorder=3)
        near.scatter([c["seq"] for c in inside if c.get("verdict") == Verdict.keep],
                     [c["score"] for c in inside if c.get("verdict") == Verdict.keep], s=30, color=KEPT,
                     gid="near-kept", zorder=4)
        near.step(best_x, best_y, where="post", color=KEPT, linewidth=1.2, gid="near-best-so-far")
        if reference is not None:
            near.axhline(reference, color=BASELINE, linestyle="--", linewidth=1, gid="near-baseline")
        near.annotate(f"best #{best_c['seq']}: {best_c.get('score_text') or f'{best:g}'}", (best_c["seq"], best),
                      xytext=(0, 2 * LABEL_GAP if above else -2 * LABEL_GAP), textcoords="offset points",
                      ha="center", va="bottom" if above else "top", fontsize=8, color=KEPT, gid="best-label",
                      bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
                      zorder=5)
        near.set_ylabel(name)
        near.set_title(f"near the best: every candidate within {NEAR:.0%} of it, on a linear scale")
        near.set_xlabel("candidate")
    else:
        ax.set_xlabel("candidate")
    legend(ax, loc="lower right" if higher else "center right", fontsize=8, frameon=False)
    figs.figs["progress"] = fig

    if only is not None and "lineage" not in only:
        return figs

    # ---- the lineage by step, in the objective -------------------------------------------------------
    steps = data["steps"]
    if steps:
        fig, ax = plt.subplots(figsize=(9, 3.4))
        ax.bar(range(len(steps)), [s.get("score") or 0 for s in steps], color=KEPT, gid="lineage-bars")
        if reference is not None:
            ax.axhline(reference, color=BASELINE, linestyle="--", linewidth=1, label=objective.reference_name)
            legend(ax, fontsize=8, frameon=False, loc="upper left")
        ax.set_xticks(range(len(steps)), [f"{s['step']}\n{s['family'] or '?'}" for s in steps], fontsize=7)
        ax.set_ylabel(name)
        ax.set_title("the kept lineage, step by step")
        figs.figs["lineage"] = fig

    if only is not None:
        return figs

    # ---- the harness's own ---------------------------------------------------------------------------
    for chart in harness.charts(data) if isinstance(harness, Charting) else []:
        if chart.name in figs.figs:
            plt.close(figs.figs[chart.name])
        figs.figs[chart.name] = chart.figure
        figs.titles[chart.name] = chart.title
    return figs


def _utc(when: datetime | str) -> datetime:
    """A time as UTC to the second; the database's times are naive UTC."""
    when = datetime.fromisoformat(when) if isinstance(when, str) else when
    when = when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)
    return when.replace(microsecond=0)


def _time_html(when: datetime | str) -> Markup:
    """`2026-11-20 08:01:02 UTC`, in a <time> element."""
    t = _utc(when)
    return Markup('<time datetime="{}">{}</time>').format(t.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                                           t.strftime("%Y-%m-%d %H:%M:%S UTC"))


def _times_shown(value: Any) -> Any:
    """A fingerprint or configuration with the times it records (keys `at`, `…_at`) as `… UTC`."""
    if isinstance(value, dict):
        return {k: _utc(v).strftime("%Y-%m-%d %H:%M:%S UTC") if (k == "at" or k.endswith("_at")) and _is_time(v)
                else _times_shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_times_shown(v) for v in value]
    return value


def _is_time(value: Any) -> bool:
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


def environment(*folders: Path) -> jinja2.Environment:
    """The templates' environment: the report's folder (and `folders`, searched first), escaping on, an
    undefined name an error, the filters the pages share."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([*folders, TEMPLATES]), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["diff_html"] = _diff_html
    env.globals |= {"NOT_MEASURED": NOT_MEASURED, "CandidateStatus": CandidateStatus, "EvalKind": EvalKind,
                    "EvalStatus": EvalStatus}
    env.tests["numeric_text"] = lambda cell: bool(NUMBER.fullmatch(cell))
    env.filters["pretty"] = lambda v: json.dumps(_times_shown(v), indent=2, default=str)
    env.filters["time"] = _time_html
    env.filters["figure"] = lambda v, spec: "–" if v is None else ("yes" if v is True else "no" if v is False
                                                                  else format(v, spec) if spec else str(v))
    return env


DRAWING = threading.Lock()
"""matplotlib's pyplot is one state for the process: one page's charts are drawn at a time."""


def _svgs(figs: Figures, data: dict) -> tuple[dict[str, Markup], list[tuple[str, str]]]:
    """The charts as inline SVG by name, and those that no table introduces, with their headings."""
    attached = {t.chart for t in data["tables"] if t.chart} | {"progress", "lineage"}
    return ({name: figs.svg(name) for name in figs.figs},
            [(name, figs.titles.get(name) or name) for name in figs.figs if name not in attached])


def charts(data: dict, harness: Shown, only: set[str] | None = None) -> tuple[dict[str, Markup], list[tuple[str, str]]]:
    """The run's charts (with `only`, those of the core named) as inline SVG, and the headings of those no
    table introduces: what `report --out` and `serve` both show."""
    with DRAWING:
        figs = figures(data, harness, only)
        try:
            return _svgs(figs, data)
        finally:
            figs.close()


def render(store: Store, run_id: int, png_dir: Path | None = None) -> tuple[str, list[Path]]:
    """The page, and the PNGs written (with `png_dir`)."""
    data = collect(store, run_id)
    harness = report.harness_class(store, run_id)
    with DRAWING:
        figs = figures(data, harness)
        try:
            svgs, others = _svgs(figs, data)
            pngs = figs.png(png_dir) if png_dir is not None else []
        finally:
            figs.close()
    page = environment().get_template("report.html.j2").render(
        data=data, charts=svgs, others=others, objective=harness.objective, href=lambda run, seq: "")
    return page, pngs
