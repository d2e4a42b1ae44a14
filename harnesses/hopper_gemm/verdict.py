"""What a checked launch of a GEMM candidate must satisfy, and its verdict in words: the tolerance
against cuBLAS, a check's stats row read back (`bench_kernels.cu`: compare, the inputs' mismatch
counts, the guard zones'), and why a launch failed."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harnesses.hopper_gemm.settings import relative_tolerance

DISTRIBUTIONS = ("uniform", "normal", "wide", "blocks", "halves")  # see bench_kernels.cu
COLUMNS = 16  # a check's stats row: compare's six, the inputs' two mismatch counts, eight guard zones'
ZONES = [(name, side) for name in ("A", "B", "C") for side in ("before", "after")] + [("W", "before"), ("W", "after")]
"""The guard zones a check verifies, in the order of their columns (8 to 15) in its stats row."""


class GateFailure(Exception):
    pass


@dataclass
class Draw:
    """The inputs of one launch: which slot, and the seed and distribution its content comes from."""

    slot: int
    seed: int
    dist: int


@dataclass
class Check:
    """One checked launch, before its numbers are read back."""

    kernel: str
    phase: str  # gate | dependent (a gate draw behind a kernel that writes its inputs late) | estimate | warmup | timed
    index: int  # draw number in the gate, launch number in the timing
    dist: int
    row: int  # row of the stats table


@dataclass
class Tolerance:
    """How far from cuBLAS an output may be: a relative (Frobenius) error that grows with √K as honest
    fp32 accumulation's does, capped by the campaign's tolerance; and a bound on the largest element."""

    rel: float
    max_rel: float
    why: str

    @classmethod
    def of(cls, settings: dict, K: int) -> Tolerance:
        rel = relative_tolerance(settings["tolerance"], settings["tolerance_per_sqrt_k"], K)
        why = (f"{rel:.3g} (for K = {K}: {settings['tolerance_per_sqrt_k']:g} × √K; honest fp32 accumulation "
               "stays an order of magnitude under it)" if rel < settings["tolerance"] else f"{rel:g}")
        return cls(rel, 5 * settings["tolerance"], why)


def verdict(stats: np.ndarray, tol: Tolerance) -> dict:
    """One stats row (see bench_kernels.cu: compare, plus the input mismatch counts) as a result."""
    d2, r2 = stats[:2].view(np.float64)
    dmax, rmax = (np.array(stats[2:4], dtype=np.uint64).astype(np.uint32)).view(np.float32)
    nonfinite, unwritten, changed = int(stats[4]), int(stats[5]), int(stats[6]) + int(stats[7])
    rel = math.sqrt(d2 / r2) if r2 > 0 else (0.0 if d2 == 0 else math.inf)
    max_rel = float(dmax) / float(rmax) if rmax > 0 else (0.0 if dmax == 0 else math.inf)
    breaches = {f"{name} {side}": 2 * int(n) for (name, side), n in zip(ZONES, stats[8:8 + len(ZONES)]) if n}
    ok = nonfinite == 0 and changed == 0 and not breaches and rel <= tol.rel and max_rel <= tol.max_rel
    return {"rel_err": rel, "max_err": max_rel, "nonfinite": nonfinite, "unwritten": unwritten,
            "inputs_unchanged": changed == 0, "guards": breaches, "ok": ok}


def breach_words(breaches: dict[str, int]) -> str:
    """Changed guard zones ({"C after": bytes changed}) in words."""
    out = []
    for zone, n in breaches.items():
        name, side = zone.split()
        out.append(f"wrote {n} bytes past the end of {name}" if side == "after" else
                   f"wrote {n} bytes before the start of {name}")
    return "; ".join(out)


def failure(check: Check, r: dict, tol: Tolerance) -> str:
    """Why a checked launch failed, in words the log and the agent can use."""
    if check.phase == "gate":
        where = f"draw {check.index} ({DISTRIBUTIONS[check.dist]})"
    elif check.phase == "dependent":
        where = (f"draw {check.index} ({DISTRIBUTIONS[check.dist]}), launched while the kernel writing its inputs "
                 "still ran (pdl: every block must execute griddepcontrol.wait before it touches global memory)")
    else:
        where = f"{check.phase} launch {check.index} ({DISTRIBUTIONS[check.dist]} inputs)"
    if r.get("guards"):
        return f"{where}: guard zone: {breach_words(r['guards'])}"
    if not r["inputs_unchanged"]:
        return f"{where}: the kernel modified its inputs"
    if r["nonfinite"]:
        what = f"{r['unwritten']} outputs never written" if r["unwritten"] else "NaN/Inf in the output"
        return f"{where}: {r['nonfinite']} non-finite outputs ({what})"
    if r["rel_err"] > tol.rel:
        return f"{where}: relative error {r['rel_err']:.3g} exceeds the tolerance {tol.why}"
    return f"{where}: the largest error is {r['max_err']:.3g} of the largest output, over {tol.max_rel:g}"
