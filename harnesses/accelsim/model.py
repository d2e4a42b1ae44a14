"""An analytical model of the WMMA GEMM's cycles on a GPGPU-Sim GPU, for phase C.

Per SM and per k-step, the resident blocks need tensor-pipe time t_mma (every 16x16x16 MMA holds one
of the SM's tensor units for the initiation interval) and memory time t_mem (a round trip to L2/DRAM
plus the bytes of the A and B tiles at the SM's share of bandwidth). A two-stage kernel overlaps the
two; a single-stage kernel overlaps them only across blocks. Cycles = k-steps per block x waves x step.
It is deliberately simple: phase C reports how well it ranks and predicts the simulated kernels.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from harnesses.accelsim.arch import Architecture

MAX_THREADS_PER_SM = 2048
MAX_CTAS_PER_SM = 32
SMEM_PER_SM = 167936
BYTES_PER_CYCLE_PER_SM = 64.0
L2_HIT_EXTRA = 100  # cycles beyond the ROP latency for a round trip through the interconnect
UNITS_PER_SM = 4


def registers_per_thread(k: dict[str, Any]) -> int:
    """Accumulators (8 per 16x16 fp32 fragment), operand fragments (8 each) and bookkeeping."""
    return min(255, 8 * k["FRAGS_M"] * k["FRAGS_N"] + 8 * (k["FRAGS_M"] + k["FRAGS_N"]) + 40)


def blocks_per_sm(k: dict[str, Any], arch: Architecture) -> tuple[int, str]:
    warps = (k["BLOCK_M"] // (16 * k["FRAGS_M"])) * (k["BLOCK_N"] // (16 * k["FRAGS_N"]))
    threads = warps * 32
    smem = k["STAGES"] * (k["BLOCK_M"] + k["BLOCK_N"]) * k["BLOCK_K"] * 2
    limits = {
        "threads": MAX_THREADS_PER_SM // threads,
        "regs": arch.registers_per_sm // (threads * registers_per_thread(k)),
        "smem": SMEM_PER_SM // max(smem, 1),
        "ctas": MAX_CTAS_PER_SM,
    }
    if k.get("MIN_BLOCKS"):
        limits["regs"] = max(limits["regs"], min(k["MIN_BLOCKS"], limits["threads"]))
    which = min(limits, key=limits.get)
    return max(1, limits[which]), which


def predict(k: dict[str, Any], arch: Architecture, M: int, N: int, K: int) -> dict[str, float]:
    tiles = math.ceil(M / k["BLOCK_M"]) * math.ceil(N / k["BLOCK_N"])
    blocks = min(k["PERSISTENT"], tiles) if k["PERSISTENT"] else tiles
    per_sm, limiter = blocks_per_sm(k, arch)
    resident = min(per_sm, math.ceil(blocks / arch.sms))
    waves = math.ceil(tiles / (arch.sms * resident))
    k_steps = math.ceil(K / k["BLOCK_K"])
    mmas = (k["BLOCK_M"] // 16) * (k["BLOCK_N"] // 16) * (k["BLOCK_K"] // 16)
    t_mma = resident * mmas * arch.tensor_initiation / UNITS_PER_SM + arch.tensor_latency
    bytes_ = resident * (k["BLOCK_M"] + k["BLOCK_N"]) * k["BLOCK_K"] * 2
    latency = arch.l2_rop_latency + L2_HIT_EXTRA
    t_mem = latency + bytes_ / BYTES_PER_CYCLE_PER_SM
    step = max(t_mma, t_mem) if k["STAGES"] > 1 else max(t_mma, t_mem + t_mma / resident)
    return {"cycles": waves * k_steps * step + latency, "blocks_per_sm": resident, "limiter": limiter,
            "waves": waves}


# ---- the fitted model: features from the kernel's PTX and the architecture, fitted on simulated points --

PTX_CLASSES = {"mma": ("wmma.mma",), "wmma_load": ("wmma.load",), "global_load": ("ld.global",),
               "shared_store": ("st.shared",), "barrier": ("bar.",)}
_INSN_RE = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)[^;]*;", re.M)
_LABEL_RE = re.compile(r"^(\$\w+):", re.M)
_BRA_RE = re.compile(r"\bbra(?:\.uni)?\s+(\$\w+);")


def ptx_counts(ptx: str) -> dict[str, int]:
    """Static instruction counts of the kernel's main loop (the innermost loop that holds the MMAs):
    all instructions, and by class. Without such a loop, counts of the whole kernel."""
    lines = ptx.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := _LABEL_RE.match(line))}
    body = lines
    best = None
    for i, line in enumerate(lines):
        m = _BRA_RE.search(line)
        if m and labels.get(m.group(1), i + 1) < i:  # a backward branch closes a loop
            span = lines[labels[m.group(1)]:i + 1]
            if any("wmma.mma" in x for x in span) and (best is None or len(span) < len(best)):
                best = span
    body = best or body
    ops = [m.group(1) for m in _INSN_RE.finditer("\n".join(body))
           if not m.group(1).startswith((".", "ret"))]
    counts = {"insn": len(ops)}
    for name, prefixes in PTX_CLASSES.items():
        counts[name] = sum(op.startswith(prefixes) for op in ops)
    return counts


FEATURES = ("tensor", "issue", "ldst", "chain", "memory", "smem")


def features(k: dict[str, Any], arch: Architecture, M: int, N: int, K: int, ptx: dict[str, int]) -> dict[str, float]:
    """Cycle terms of a kernel on an architecture, each in cycles of one SM, for the fit to weigh:
    tensor  the SM's MMAs x initiation interval / tensor units (tensor-pipe time)
    issue   the SM's warp-instructions of the main loop (PTX counts) over its 4 schedulers
    ldst    the SM's memory instructions of the main loop (global loads, WMMA loads, shared stores):
            the load/store unit takes one warp-instruction at a time
    chain   one block's serial path: k-steps x (the MMA chain of a warp, plus the round trip to L2
            when one stage leaves it exposed), x tiles per block x waves of blocks
    memory  the SM's tile bytes at its share of L2 bandwidth
    smem    shared-memory stores x the bank-conflict degree of the tile's row stride"""
    tiles = math.ceil(M / k["BLOCK_M"]) * math.ceil(N / k["BLOCK_N"])
    blocks = min(k["PERSISTENT"], tiles) if k["PERSISTENT"] else tiles
    per_sm, _ = blocks_per_sm(k, arch)
    waves = math.ceil(blocks / (arch.sms * per_sm))
    tiles_per_block = math.ceil(tiles / blocks)
    k_steps = math.ceil(K / k["BLOCK_K"])
    warps = (k["BLOCK_M"] // (16 * k["FRAGS_M"])) * (k["BLOCK_N"] // (16 * k["FRAGS_N"]))
    sm_loops = math.ceil(blocks / arch.sms) * warps * tiles_per_block * k_steps  # warp-iterations per SM
    mmas = math.ceil(tiles / arch.sms) * (k["BLOCK_M"] // 16) * (k["BLOCK_N"] // 16) * (K // 16)
    mma_chain = (k["BLOCK_K"] // 16) * k["FRAGS_M"] * k["FRAGS_N"] * arch.tensor_initiation + arch.tensor_latency
    round_trip = arch.l2_rop_latency + L2_HIT_EXTRA
    exposed = round_trip if k["STAGES"] == 1 else max(0, round_trip - mma_chain)
    row_bytes = k["BLOCK_K"] * 2
    conflict = max(1.0, 32 / arch.shmem_banks * (128 / math.gcd(row_bytes, 128)) / 4)
    memory_insns = ptx.get("global_load", 0) + ptx.get("wmma_load", 0) + ptx.get("shared_store", 0)
    return {
        "tensor": mmas * arch.tensor_initiation / UNITS_PER_SM,
        "issue": sm_loops * ptx.get("insn", 0) / 4,
        "ldst": sm_loops * memory_insns,
        "chain": waves * tiles_per_block * k_steps * (mma_chain + exposed),
        "memory": math.ceil(tiles / arch.sms) * k_steps * (k["BLOCK_M"] + k["BLOCK_N"]) * k["BLOCK_K"] * 2
        / BYTES_PER_CYCLE_PER_SM,
        "smem": sm_loops * ptx.get("shared_store", 0) * conflict,
    }


class Fit:
    """cycles ~ c0 + sum(c_i x feature_i) with every c_i >= 0, by least squares on simulated points."""

    def __init__(self, rows: list[dict[str, float]], cycles: list[float]) -> None:
        self.names = [f for f in FEATURES if any(r.get(f, 0) for r in rows)]
        X = np.array([[1.0] + [r.get(f, 0.0) for f in self.names] for r in rows])
        y = np.array(cycles, dtype=float)
        scale = np.maximum(np.abs(X).max(axis=0), 1e-9)
        active = list(range(X.shape[1]))
        coef = np.zeros(X.shape[1])
        while active:  # drop the most negative coefficient and refit, until none is negative
            sol, *_ = np.linalg.lstsq(X[:, active] / scale[active], y, rcond=None)
            sol = sol / scale[active]
            if (sol[1:] >= 0).all() or len(active) == 1:
                coef[:] = 0
                coef[active] = sol
                break
            worst = active[1 + int(np.argmin(sol[1:]))]
            active.remove(worst)
        self.coef = coef

    def predict(self, row: dict[str, float]) -> float:
        return float(self.coef[0] + sum(c * row.get(f, 0.0) for c, f in zip(self.coef[1:], self.names)))

    def terms(self) -> dict[str, float]:
        return {"intercept": round(float(self.coef[0]), 3),
                **{f: round(float(c), 4) for f, c in zip(self.names, self.coef[1:])}}


def spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def leave_one_out(rows: list[dict[str, float]], cycles: list[float]) -> dict[str, Any]:
    """Each point predicted by a fit on all the others: rank correlation and median |error|."""
    preds = [Fit(rows[:i] + rows[i + 1:], cycles[:i] + cycles[i + 1:]).predict(rows[i]) for i in range(len(rows))]
    errors = sorted(abs(p - c) / c for p, c in zip(preds, cycles))
    return {"n": len(rows), "rank_correlation": spearman(preds, cycles),
            "median_abs_error": errors[len(errors) // 2] if errors else None, "predicted": preds}
