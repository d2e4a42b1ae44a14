"""How hopper_gemm's numbers are shown: its columns (TFLOP/s, the share of the dense peak, cuBLAS's own
rate, clocks and power, HGMMA in the SASS), its report charts (the lineage in TFLOP/s against cuBLAS, the
spread of the best kernel's paired ratios), its Nsight Compute profile as a table, and what the LLM
agent is told of the task and the machine."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import jinja2

from autodiscovery.interfaces import Chart, Column, Section

if TYPE_CHECKING:
    from autodiscovery.interfaces import History


def _tflops(m: dict, _b: dict) -> float | None:
    return (m.get("tflops") or {}).get("candidate")


def _pct_peak(m: dict, b: dict) -> float | None:
    t, peak = _tflops(m, b), m.get("peak_tflops")
    return 100 * t / peak if t and peak else None


def _versus(kind: str) -> Callable[[dict, dict], float | None]:
    """× the other cuBLAS (timed in the same rotation), where the objective is not already that one."""
    return lambda m, b: m["vs"][kind]["median"] if m.get("baseline", "gemmex") != kind else None


EVERYWHERE = frozenset({"live", "candidates", "lineage", "diff", "measure", "ladder", "replay", "report",
                        "summary", "prompt", "suite"})
VERSUS = {  # the other cuBLAS a run states beside its objective: its heading, and what it means
    "best_lt": ("× best Lt", "× the fastest of cuBLASLt's heuristic algorithms for the shape, timed in the same "
                             "rotation as cublasGemmEx (above 1: faster than it)"),
    "gemmex": ("× GemmEx", "× cublasGemmEx, timed in the same rotation as the best cuBLASLt algorithm"),
}


def columns(baseline: str) -> tuple[Column, ...]:
    """The figures beside the objective (× cuBLAS, or × best Lt where the campaign's baseline is the best
    cuBLASLt algorithm): TFLOP/s, × the other cuBLAS (timed in the same rotation) wherever a lineage or a
    report is read, % of peak, the clock and power of a measurement, HGMMA, waves."""
    other = "best_lt" if baseline == "gemmex" else "gemmex"
    label, note = VERSUS[other]
    return (
        Column("tflops", "TFLOP/s", _tflops, ".1f", EVERYWHERE),
        Column("cublas_tflops", "cuBLAS TFLOP/s", lambda m, b: (m.get("tflops") or {}).get("cublas"), ".1f",
               frozenset({"measure"})),
        Column(f"x_{other}", label, _versus(other), ".3f",
               frozenset({"measure", "lineage", "ladder", "report", "summary", "suite"}), after=True, joiner="",
               note=note),
        Column("pct_peak", "% of peak", _pct_peak, ".1f", frozenset({"replay-now", "report"}),
               note="of the dense bf16 tensor-core peak at the highest SM clock (SMs × clock × 4096 FLOP a cycle)"),
        Column("sm_clock_mhz", "SM MHz", lambda m, b: m["power"]["sm_clock_mhz"]["mean"], ".0f",
               frozenset({"measure"}), after=True),
        Column("power_w", "W", lambda m, b: m["power"]["power_w"]["mean"], ".0f", frozenset({"measure"}), after=True),
        Column("hgmma", "HGMMA", lambda m, b: b.get("has_hgmma"), "", frozenset({"ladder"}), after=True),
        Column("waves", "waves", lambda m, b: m["fit"]["waves"], ".2f", frozenset({"ladder", "prompt", "report"}),
               after=True,
               note="output tiles over the blocks the GPU holds at once: below 1 leaves SMs idle, 1.1 runs a "
                    "second wave one tenth full"),
    )


PROFILE_ROWS = [  # (key in a profile summary, label, format): the table and the prompt
    ("time_us", "duration (µs)", ".1f"), ("sm_clock_mhz", "SM clock (MHz)", ".0f"),
    ("tensor_pipe_pct", "tensor pipe busy (%)", ".1f"), ("sm_throughput_pct", "SM throughput (% of peak)", ".1f"),
    ("l2_hit_pct", "L2 hit rate (%)", ".1f"), ("l2_throughput_pct", "L2 throughput (% of peak)", ".1f"),
    ("dram_throughput_pct", "DRAM throughput (% of peak)", ".1f"),
    ("dram_mb", "DRAM traffic (MB)", ".0f"), ("registers", "registers per thread", ".0f"),
    ("smem_kb", "dynamic shared memory (KB)", ".0f"), ("grid", "grid (blocks)", ".0f"),
]
UNPROBED: dict[str, Any] = {"gpu": "NVIDIA H100 or H200 (not probed)", "cc": "9.0", "sms": 132, "l2_bytes": 50 * 2**20,
            "smem_per_block": 232448}
"""What a prompt says of the GPU when the run's fingerprint has no device (a dry run without one)."""


def _f(v: float | None, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def profile_rows(profile: dict, rows: list[tuple[str, str, str]] = PROFILE_ROWS) -> list[tuple[str, str, str]]:
    """(metric, the candidate, the baseline) for each figure either has, then each kernel's top stall
    reasons."""
    cand, base = profile.get("candidate") or {}, profile.get("baseline") or {}
    out = [(label, _f(cand.get(k), spec), _f(base.get(k), spec)) for k, label, spec in rows if k in cand or k in base]
    for reason in dict.fromkeys([*(cand.get("stalls") or {}), *(base.get("stalls") or {})]):
        out.append((f"stall: {reason} (warps per issue)", _f((cand.get("stalls") or {}).get(reason), ".2f"),
                    _f((base.get("stalls") or {}).get(reason), ".2f")))
    return out


def profile_section(label: str, profile: dict) -> Section:
    """Candidate and baseline side by side: Nsight Compute's figures, then each kernel's top stall reasons."""
    rows = [list(r) for r in profile_rows(profile)]
    rows.append(["kernel", (profile.get("candidate") or {}).get("kernel", ""),
                 ", ".join(profile.get("baseline_kernels", []))])
    return Section(id="profile", title=f"{label}: Nsight Compute, candidate against the baseline",
                   columns=["metric", "candidate", "baseline"], rows=rows)


def build_notes(facts: dict) -> list[str]:
    if facts.get("has_hgmma") is None:
        return []
    return ["wgmma (HGMMA) in the SASS" if facts["has_hgmma"] else "no wgmma (HGMMA) in the SASS"]


@cache
def _prompts() -> jinja2.Environment:
    folder = resources.files("harnesses.hopper_gemm") / "prompts"
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=False, trim_blocks=True)


def machine(fingerprint: dict) -> dict:
    """What the prompts say of the GPU and the toolchain: the run's fingerprint where it has a device."""
    fp = fingerprint if fingerprint.get("gpu") else UNPROBED

    def named(key: str, label: str) -> str:
        return f"{label}{fingerprint[key]}" if fingerprint.get(key) else ""

    toolchain = [v for v in (named("nvcc", ""), named("cuda_driver", "CUDA driver "), named("driver", "driver "),
                             named("cublas", "cuBLAS ")) if v]
    smem = fp.get("smem_per_block") or UNPROBED["smem_per_block"]
    return {"gpu": fp.get("gpu"), "cc": fp.get("cc", "9.0"), "sms": fp.get("sms"),
            "clock_mhz": f"{fp['max_sm_clock_mhz']:.0f}" if fp.get("max_sm_clock_mhz") else "",
            "l2_mib": round((fp.get("l2_bytes") or 0) / 2**20), "smem_kb": smem // 1024, "smem_per_block": smem,
            "peak_tflops": f"{fp['peak_tflops']:.0f}" if fp.get("peak_tflops") else "",
            "toolchain": ", ".join(toolchain) or "not probed"}


def cublas_tflops(history: History) -> str:
    """The baseline's TFLOP/s as the run measured it (the median over the measurements)."""
    figures = sorted(t / r.score for r in history.records if r.score and (t := _tflops(r.metrics, {})))
    return f"{figures[len(figures) // 2]:.0f}" if figures else ""


def brief(facts: dict) -> str:
    return _prompts().get_template("brief.j2").render(**facts)


def hardware(facts: dict, history: History, fit: str = "") -> str:
    return _prompts().get_template("hardware.j2").render(**facts, cublas_tflops=cublas_tflops(history), fit=fit)


def prompt_profile(seq: int, profile: dict) -> str:
    if not profile:
        return ""
    rows = "\n".join(f"| {name} | {mine} | {theirs} |" for name, mine, theirs in profile_rows(profile))
    return f"Nsight Compute, this kernel beside cuBLAS:\n\n| metric | #{seq} | cuBLAS |\n| --- | --- | --- |\n{rows}"


# ---- charts of the HTML report -------------------------------------------------------------------
def charts(data: dict) -> list[Chart]:
    """The lineage in TFLOP/s against cuBLAS's (replacing the core's chart of the objective by step), and
    the spread of the best kernel's paired ratios."""
    from autodiscovery.review.charts import KEPT, REVERTED, bar_label, legend, pyplot

    plt = pyplot()
    out = []
    steps = data["steps"]
    best = data.get("best_measurement") or {}
    baseline = (best.get("tflops") or {}).get("cublas")
    if steps:
        fig, ax = plt.subplots(figsize=(9, 3.4))
        values = [s["figures"].get("tflops") or 0 for s in steps]
        ax.bar(range(len(steps)), values, color=KEPT, gid="lineage-bars")
        if baseline:
            ax.axhline(baseline, color="#0969da", linestyle="--", linewidth=1, label=f"cuBLAS ({baseline:.0f} TFLOP/s)")
            legend(ax, fontsize=8, frameon=False, loc="upper left")
        ax.set_ylabel("TFLOP/s")
        ax.set_ylim(0, 1.18 * max([*values, baseline or 0]))
        per_point = ax.get_ylim()[1] / (ax.bbox.height * 72 / fig.dpi)
        for i, s in enumerate(steps):
            bar_label(ax, i, values[i], f"{s['score']:.3f}×", baseline, per_point)
        ax.set_xticks(range(len(steps)), [f"{s['step']}\n{s['family'] or '?'}" for s in steps], fontsize=7)
        ax.set_title("the kept lineage, step by step")
        out.append(Chart("lineage", fig))
    ratios = best.get("ratios")
    if ratios:
        fig, ax = plt.subplots(figsize=(9, 2.6))
        ax.hist(ratios, bins=min(30, max(5, len(ratios) // 2)), color=REVERTED, gid="spread")
        r = best.get("ratio") or {}
        if r.get("median") is not None:
            ax.axvline(r["median"], color=KEPT, linewidth=1.5, label=f"median {r['median']:.4f}")
        if r.get("ci_low") is not None:
            ax.axvspan(r["ci_low"], r["ci_high"], color=KEPT, alpha=0.2, label=f"CI {r['ci_low']:.4f}–{r['ci_high']:.4f}")
        ax.set_xlabel(f"{data['run']['objective']}, one value per timed pair ({len(ratios)} pairs)")
        ax.set_ylabel("pairs")
        ax.set_title("the best kernel's measurement: paired ratios against the baseline")
        legend(ax, fontsize=8, frameon=False)
        out.append(Chart("spread", fig, "The best kernel's measurement"))
    return out
