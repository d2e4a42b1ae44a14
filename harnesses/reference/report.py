"""How the reference harness's numbers are shown: the speed-up over the other baseline, the achieved
bandwidth and rate, the share of the roofline, the kernel's time; and what the LLM agent is told of the
problem (the reference's own source, its tensors, its roofline) and of the machine."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

import jinja2

from autodiscovery.interfaces import Chart, Column

if TYPE_CHECKING:
    from autodiscovery.interfaces import History
    from harnesses.reference import ReferenceHarness

WIDE = frozenset({"live", "candidates", "lineage", "diff", "measure", "ladder", "replay", "report", "summary",
                  "prompt"})


def _speedup(which: str) -> Callable[[dict, dict], float | None]:
    return lambda m, b: ((m.get("speedup") or {}).get(which) or {}).get("median")


def columns(baseline: str) -> tuple[Column, ...]:
    """The columns beside the objective (× eager or × compile): the other speed-up, GB/s, TFLOP/s where
    the problem computes enough to count, % of the roofline, the kernel's time."""
    other = "compile" if baseline == "eager" else "eager"
    return (
        Column(f"x_{other}", f"× {other}", _speedup(other), ".3f", WIDE, joiner=""),
        Column("gbps", "GB/s", lambda m, b: m.get("gbps"), ".0f", WIDE - {"live"}),
        Column("tflops", "TFLOP/s", lambda m, b: m.get("tflops") or None, ".1f",
               frozenset({"measure", "replay", "report"})),
        Column("roofline_pct", "% roofline", lambda m, b: m.get("roofline_pct"), ".1f", WIDE - {"live", "diff"},
               joiner="",
               note="the least time the problem can take (every byte of its inputs, parameters and outputs once at "
                    "the memory's peak bandwidth, or its FLOPs at the peak rate) over the kernel's"),
        Column("us", "µs", lambda m, b: (m.get("ms") or {}).get("candidate") and m["ms"]["candidate"] * 1e3, ".1f",
               frozenset({"candidates", "measure", "report", "replay"}), after=True),
    )


def charts(data: dict) -> list[Chart]:
    """Each kept step's bandwidth against the memory's peak (where the problem is bandwidth-bound)."""
    from autodiscovery.review.charts import BASELINE, KEPT, pyplot

    steps = [s for s in data["steps"] if (s.get("figures") or {}).get("gbps")]
    peak = (data["run"].get("fingerprint") or {}).get("peak_gbps")
    if not steps or not peak:
        return []
    fig, ax = pyplot().subplots(figsize=(9, 3.2))
    ax.bar(range(len(steps)), [s["figures"]["gbps"] for s in steps], color=KEPT, gid="bandwidth-bars")
    ax.axhline(peak, color=BASELINE, linestyle="--", linewidth=1, label=f"memory peak ({peak:.0f} GB/s)")
    ax.set_xticks(range(len(steps)), [f"{s['step']}\n{s['family'] or '?'}" for s in steps], fontsize=7)
    ax.set_ylabel("GB/s (every byte once)")
    ax.set_title("the kept lineage's bandwidth")
    ax.legend(fontsize=8, frameon=False, loc="lower right")
    return [Chart("bandwidth", fig, "Bandwidth against the memory's peak")]


@cache
def _prompts() -> jinja2.Environment:
    folder = resources.files("harnesses.reference") / "prompts"
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=False, trim_blocks=True)


def _tensors(facts: dict) -> list[str]:
    lines = [f"- input `{i['name']}`: {i['dtype']} {i['shape']}" for i in facts.get("inputs", [])]
    if not facts.get("inputs"):
        lines = [f"- input `{n}`" for n in facts.get("input_names", [])]
    lines += [f"- parameter `{p['name']}`: {p['dtype']} {p['shape']}" for p in facts.get("params", [])]
    lines += [f"- output {i}: {o['dtype']} {o['shape']}" for i, o in enumerate(facts.get("outputs", []))]
    return lines


def brief(harness: ReferenceHarness, fingerprint: dict) -> str:
    from harnesses.hopper_gemm.build import gencode
    from harnesses.reference.settings import TOLERANCE

    s, facts = harness.settings, harness.facts
    floor_us = None
    if facts.get("peak_gbps") and "bytes_read" in facts:
        from harnesses.reference.worker import roofline

        floor_us = roofline(facts, 1.0)["roofline_ms"] * 1e3
    return _prompts().get_template("brief.j2").render(
        gpu=fingerprint.get("gpu") or "an NVIDIA H100 or H200 (not probed)", arch=s.arch,
        baseline={"eager": "PyTorch eager", "compile": "torch.compile"}[s.baseline],
        source=harness.static.source.strip(), file=harness.static.path.name,
        sizes=", ".join(f"{k} = {v}" for k, v in harness.static.sizes.items()), tensors=_tensors(facts),
        compile=" ".join(["nvcc -cubin", *gencode(s.arch), *s.nvcc_flags]),
        tolerances=", ".join(f"{k} {v:g}" for k, v in (TOLERANCE | s.tolerance).items()),
        multiple=f"{s.truth_multiple:g}", truth_note=facts.get("truth_note", "") if facts.get("truth") != "float64" else "",
        bytes_mb=(facts.get("bytes_read", 0) + facts.get("bytes_written", 0)) / 1e6 if "bytes_read" in facts else None,
        flops=facts.get("flops"), floor_us=floor_us, cuda="cuda" in s.languages,
        triton="triton" in s.languages).rstrip("\n")


def hardware(harness: ReferenceHarness, fingerprint: dict, history: History) -> str:
    eager = sorted(r.metrics["ms"]["eager"] for r in history.records if (r.metrics.get("ms") or {}).get("eager"))
    compiled = sorted(r.metrics["ms"]["compile"] for r in history.records if (r.metrics.get("ms") or {}).get("compile"))
    fp = fingerprint if fingerprint.get("gpu") else {}
    return _prompts().get_template("hardware.j2").render(
        gpu=fp.get("gpu") or "NVIDIA H100 or H200 (not probed)", sms=fp.get("sms") or 132,
        l2_mib=round((fp.get("l2_bytes") or 50 * 2**20) / 2**20), smem_kb=(fp.get("smem_per_block") or 232448) // 1024,
        peak_gbps=fp.get("peak_gbps"), torch=fp.get("torch") or "not probed",
        eager_us=eager[len(eager) // 2] * 1e3 if eager else None,
        compile_us=compiled[len(compiled) // 2] * 1e3 if compiled else None).rstrip("\n")
