"""Nsight Compute for a candidate and its baseline: the command line, and the numbers read back.

The evaluation child runs under `ncu --profile-from-start off`: only the candidate's launch and the
baseline's launch(es) sit inside profiler ranges, in that order. `ncu --page raw --csv` then writes
one row per profiled kernel with every metric of the requested sections, in base units.
"""

from __future__ import annotations

import csv
import io
import re
import shutil

from autodiscovery import AutoDiscoveryError

SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis", "WarpStateStats",
            "LaunchStats", "Occupancy")

# (key in the summary, metric names to try in order, scale from the base unit)
SCALARS = [
    ("time_us", ("gpu__time_duration.sum",), 1e-3),
    ("sm_clock_mhz", ("sm__cycles_elapsed.avg.per_second", "gpc__cycles_elapsed.avg.per_second"), 1e-6),
    ("sm_throughput_pct", ("sm__throughput.avg.pct_of_peak_sustained_elapsed",), 1),
    ("l2_hit_pct", ("lts__t_sector_hit_rate.pct",), 1),
    ("l2_throughput_pct", ("lts__throughput.avg.pct_of_peak_sustained_elapsed",), 1),
    ("dram_throughput_pct", ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                             "dram__cycles_active.avg.pct_of_peak_sustained_elapsed"), 1),
    ("registers", ("launch__registers_per_thread",), 1),
    ("smem_kb", ("launch__shared_mem_per_block_dynamic",), 1 / 1024),
    ("grid", ("launch__grid_size",), 1),
]
TENSOR = re.compile(r"^sm__pipe_tensor_op_(gmma|hmma)?\w*cycles_active\.avg\.pct_of_peak_sustained_active$")
STALL = re.compile(r"^smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")
HELPER_KERNELS = {"fill", "verify", "poison", "compare", "delay"}


class ProfileError(AutoDiscoveryError):
    pass


def command(ncu: str, log_file: str) -> list[str]:
    """The prefix that runs the evaluation child under Nsight Compute."""
    path = shutil.which(ncu)
    if path is None:
        raise ProfileError(f"Nsight Compute ({ncu}) not found: install it or set harness.ncu to its path")
    sections = [arg for s in SECTIONS for arg in ("--section", s)]
    return [path, "--profile-from-start", "off", "--clock-control", "none", "--target-processes", "all",
            "--csv", "--page", "raw", "--print-units", "base", "--log-file", log_file, *sections]


def rows(text: str) -> list[dict[str, str]]:
    """The kernels of a `--page raw --csv` log, in launch order (the units row dropped)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ProfileError("Nsight Compute wrote no kernel rows: " + _first_error(text))
    table = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    return [r for r in table if r.get("ID", "").strip().isdigit()]


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "ERROR" in line or "WARNING" in line:
            return line.strip()
    return (text.strip().splitlines() or ["empty log"])[-1][:200]


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value.replace(",", ""))
    except ValueError:
        return None


def summarize(row: dict[str, str]) -> dict:
    """The figures `profile` shows for one kernel."""
    out: dict = {"kernel": row.get("Kernel Name", "")}
    for key, metrics, scale in SCALARS:
        v = next((x for m in metrics if (x := _number(row.get(m))) is not None), None)
        if v is not None:
            out[key] = round(v * scale, 3)
    rate, ns = _number(row.get("dram__bytes.sum.per_second")), _number(row.get("gpu__time_duration.sum"))
    if rate is not None and ns is not None:
        out["dram_mb"] = round(rate * ns * 1e-9 / 1e6, 1)  # bytes moved to and from DRAM
    tensor = sorted(((m, n) for m, v in row.items() if TENSOR.match(m) and (n := _number(v)) is not None),
                    key=lambda mv: ("gmma" not in mv[0], "hmma" not in mv[0], mv[0]))
    if tensor:
        out["tensor_pipe_pct"] = round(tensor[0][1], 2)
        out["tensor_metric"] = tensor[0][0]
    stalls = {m.group(1): _number(v) for k, v in row.items() if (m := STALL.match(k))}
    top = sorted(((k, v) for k, v in stalls.items() if v), key=lambda kv: -kv[1])[:6]
    out["stalls"] = {k: round(v, 3) for k, v in top}
    return out


def split(table: list[dict[str, str]], kernel: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The candidate's row (the first profiled launch, named as its manifest says) and the baseline's."""
    profiled = [r for r in table if r.get("Kernel Name", "").split("(")[0].strip() not in HELPER_KERNELS
                or r is table[0]]
    if not profiled:
        raise ProfileError("Nsight Compute profiled no kernel")
    first, rest = profiled[0], profiled[1:]
    name = first.get("Kernel Name", "").split("(")[0].strip()
    if name != kernel:
        raise ProfileError(f"the first profiled kernel is '{name}', not the candidate's '{kernel}'")
    if not rest:
        raise ProfileError("Nsight Compute profiled the candidate but no baseline kernel")
    return first, rest


def profile(text: str, kernel: str) -> dict:
    """{candidate: summary, baseline: summary of the baseline's main kernel, baseline_kernels: names}."""
    cand, base = split(rows(text), kernel)
    main = max(base, key=lambda r: _number(r.get("gpu__time_duration.sum")) or 0.0)
    return {"candidate": summarize(cand), "baseline": summarize(main),
            "baseline_kernels": [r.get("Kernel Name", "") for r in base]}
