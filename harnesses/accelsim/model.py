"""The phase-C model of the WMMA GEMM's cycles on a GPGPU-Sim GPU.

A kernel's cycles are set by its busiest SM. The model counts, for that SM, what each resource must
do (tensor-pipe MMAs, issued instructions, load/store instructions, shared-memory wavefronts of the
fragment loads with their bank conflicts) and how long its serial path is (the k-steps one resident
block runs in order, each waiting on its fragment loads and its MMA chain, and on a round trip to L2
when a single stage leaves it exposed). Those terms are fitted to simulated points by non-negative
least squares (`Fit`): phase C fits them on what A and B simulated and is judged on points it did not
see. The facts of each kernel come from its PTX: the main loop's instruction counts, and the
registers per thread ptxas gives it, which set how many blocks an SM holds.

Without PTX (no nvcc) the counts and registers are estimated from the knobs; `predict` is the same
terms weighed by `PRIOR`, the model's first guess before anything is simulated.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autodiscovery.toolkit import sandbox
from harnesses.accelsim.arch import Architecture

MAX_THREADS_PER_SM = 2048
MAX_CTAS_PER_SM = 32
SMEM_PER_SM = 167936
L2_HIT_EXTRA = 100  # cycles beyond the ROP latency for a round trip through the interconnect
UNITS_PER_SM = 4  # sub-cores: one warp scheduler and one tensor unit each


def estimated_registers(k: dict[str, Any]) -> int:
    """Without ptxas: accumulators (8 per 16x16 fp32 fragment), operand fragments and bookkeeping,
    capped by the launch bounds' blocks per SM."""
    regs = min(255, 8 * k["FRAGS_M"] * k["FRAGS_N"] + 8 * (k["FRAGS_M"] + k["FRAGS_N"]) + 40)
    if k.get("MIN_BLOCKS"):
        regs = min(regs, 65536 // (k["MIN_BLOCKS"] * warps(k) * 32))
    return regs


def warps(k: dict[str, Any]) -> int:
    return (k["BLOCK_M"] // (16 * k["FRAGS_M"])) * (k["BLOCK_N"] // (16 * k["FRAGS_N"]))


def blocks_per_sm(k: dict[str, Any], arch: Architecture, registers: int | None = None) -> tuple[int, str]:
    """How many blocks of the kernel one SM holds, and what limits it (the simulator's own rule:
    threads, registers per thread x threads, static shared memory, blocks)."""
    threads = warps(k) * 32
    smem = k["STAGES"] * (k["BLOCK_M"] + k["BLOCK_N"]) * k["BLOCK_K"] * 2
    limits = {
        "threads": MAX_THREADS_PER_SM // threads,
        "regs": arch.registers_per_sm // (threads * (registers or estimated_registers(k))),
        "smem": SMEM_PER_SM // max(smem, 1),
        "ctas": MAX_CTAS_PER_SM,
    }
    which = min(limits, key=lambda k: limits[k])
    return max(1, limits[which]), which


@functools.cache
def conflict_degree(row_halves: int, banks: int, bank_bytes: int = 4) -> int:
    """Bank-conflict degree of one 16x16 fp16 fragment load whose rows are `row_halves` apart: the most
    distinct words any one bank must serve (1 = conflict-free)."""
    words: dict[int, set[int]] = {}
    for row in range(16):
        for col in range(0, 32, bank_bytes):  # 16 halves = 32 bytes per row
            word = (row * row_halves * 2 + col) // bank_bytes
            words.setdefault(word % banks, set()).add(word)
    return max(len(w) for w in words.values())


@dataclass(frozen=True)
class Layout:
    """How the kernel's work falls on its busiest SM."""
    tiles: int
    blocks: int
    blocks_per_sm: int      # blocks the busiest SM runs in all
    resident: int           # of which at once
    limiter: str
    tiles_per_block: int
    k_steps: int
    warps: int
    sequential: int         # k-steps one block slot runs in order
    warp_steps: int         # warp x k-step pairs the SM runs

    @property
    def resident_warps(self) -> int:
        return self.resident * self.warps


def layout(k: dict[str, Any], arch: Architecture, M: int, N: int, K: int, registers: int | None = None) -> Layout:
    tiles = math.ceil(M / k["BLOCK_M"]) * math.ceil(N / k["BLOCK_N"])
    blocks = min(k["PERSISTENT"], tiles) if k["PERSISTENT"] else tiles
    per_sm, limiter = blocks_per_sm(k, arch, registers)
    on_sm = math.ceil(blocks / arch.sms)
    resident = min(per_sm, on_sm)
    tiles_per_block = math.ceil(tiles / blocks)
    k_steps = math.ceil(K / k["BLOCK_K"])
    w = warps(k)
    return Layout(tiles, blocks, on_sm, resident, limiter, tiles_per_block, k_steps, w,
                  math.ceil(on_sm / resident) * tiles_per_block * k_steps, on_sm * tiles_per_block * w * k_steps)


# ---- the kernel's facts: from its PTX, or estimated from its knobs -------------------------------

PTX_CLASSES = {"mma": ("wmma.mma",), "wmma_load": ("wmma.load",), "global_load": ("ld.global",),
               "shared_store": ("st.shared",), "barrier": ("bar.",)}
_INSN_RE = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)[^;]*;", re.M)
_LABEL_RE = re.compile(r"^(\$\w+):", re.M)
_BRA_RE = re.compile(r"\bbra(?:\.uni)?\s+(\$\w+);")
_REGS_RE = re.compile(r"Used (\d+) registers")


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


def compile_facts(source: str, nvcc: str, facts: Path) -> dict[str, int]:
    """Compile a kernel to PTX with a CUDA 11 nvcc and count its main loop (`ptx_counts`), with ptxas's
    registers per thread; the facts are written to `facts` (whole, whichever process writes them) and
    the PTX beside them. {} when nvcc fails."""
    facts.parent.mkdir(parents=True, exist_ok=True)
    bindir = Path(nvcc).parent
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.cu").write_text(source)
        env = sandbox.build_env(str(bindir))
        proc = subprocess.run([nvcc, "-ptx", "-O3", "-arch=sm_80", "-o", "k.ptx", "k.cu"], cwd=tmp,
                              capture_output=True, text=True, timeout=300, env=env)
        if proc.returncode != 0:
            return {}
        ptxas = shutil.which("ptxas", path=str(bindir)) or shutil.which("ptxas")
        report = subprocess.run([ptxas, "-v", "-arch=sm_80", "-o", "k.o", "k.ptx"], cwd=tmp, capture_output=True,
                                text=True, timeout=300, env=env) if ptxas else None
        out = ptx_counts((Path(tmp) / "k.ptx").read_text())
        if report is not None and (regs := ptxas_registers(report.stdout + report.stderr)):
            out["registers"] = regs
        shutil.copy(Path(tmp) / "k.ptx", facts.with_suffix(".ptx"))
    tmp_facts = facts.with_suffix(f".{os.getpid()}.tmp")
    tmp_facts.write_text(json.dumps(out))
    os.replace(tmp_facts, facts)
    return out


def ptxas_registers(report: str) -> int | None:
    """Registers per thread from `ptxas -v` output."""
    m = _REGS_RE.search(report)
    return int(m.group(1)) if m else None


def loads_per_thread(k: dict[str, Any]) -> int:
    """16-byte global loads (and shared stores) per thread per k-step: the A and B tiles over the block."""
    threads = warps(k) * 32
    return math.ceil(k["BLOCK_M"] * k["BLOCK_K"] / 8 / threads) + math.ceil(k["BLOCK_N"] * k["BLOCK_K"] / 8 / threads)


def per_step(k: dict[str, Any], ptx: dict[str, int] | None) -> dict[str, float]:
    """What one warp does per k-step. MMAs and fragment loads follow from the knobs; instructions,
    global loads and shared stores are the PTX main loop's, divided by how many k-steps the compiler
    unrolled into it (its MMAs over one k-step's). Without PTX they are estimated: 8 instructions per
    fragment load and 25 per 16-byte load-and-store, a fit to the template's PTX."""
    mma = k["FRAGS_M"] * k["FRAGS_N"] * k["BLOCK_K"] // 16
    frag_loads = (k["FRAGS_M"] + k["FRAGS_N"]) * k["BLOCK_K"] // 16
    if ptx and ptx.get("mma"):
        unroll = ptx["mma"] / mma
        return {"mma": mma, "frag_loads": frag_loads, "insn": ptx["insn"] / unroll,
                "global_load": ptx.get("global_load", 0) / unroll, "shared_store": ptx.get("shared_store", 0) / unroll}
    loads = loads_per_thread(k)
    return {"mma": mma, "frag_loads": frag_loads, "insn": 8 * frag_loads + 25 * loads,
            "global_load": loads, "shared_store": loads}


# ---- the terms the fit weighs ----------------------------------------------------------------------

FEATURES = ("serial", "exposed", "smem", "tensor", "issue", "ldst", "load_chain", "mma_chain")


def features(k: dict[str, Any], arch: Architecture, M: int, N: int, K: int,
             ptx: dict[str, int] | None = None) -> dict[str, float]:
    """Cycle terms of a kernel on an architecture, on its busiest SM, for the fit to weigh
    (`ptx` is the kernel's main-loop counts with its `registers` per thread, or None):
    serial      the k-steps one block slot runs in order x a round trip to L2 (a fixed latency per step)
    exposed     the same for a single-stage kernel, whose loads nothing overlaps
    smem        shared-memory wavefronts: the SM's fragment loads x the bank-conflict degree of the
                tile's row stride under the architecture's banks
    tensor      the SM's MMAs x initiation interval over the tensor units its resident warps can use
    issue       the SM's warp-instructions over the schedulers its resident warps can use
    ldst        the SM's global loads and shared stores, one warp-instruction at a time
    load_chain  a warp's fragment loads in order: k-steps in order x fragment loads per step
    mma_chain   a warp's MMAs in order: k-steps in order x MMAs per step x initiation interval"""
    ptx = ptx or {}
    lay = layout(k, arch, M, N, K, ptx.get("registers"))
    step = per_step(k, ptx)
    units = min(UNITS_PER_SM, lay.resident_warps)
    round_trip = arch.l2_rop_latency + L2_HIT_EXTRA
    return {
        "serial": lay.sequential * round_trip,
        "exposed": lay.sequential * round_trip if k["STAGES"] == 1 else 0.0,
        "smem": lay.warp_steps * step["frag_loads"] * conflict_degree(k["BLOCK_K"], arch.shmem_banks),
        "tensor": lay.warp_steps * step["mma"] * arch.tensor_initiation / units,
        "issue": lay.warp_steps * step["insn"] / units,
        "ldst": lay.warp_steps * (step["global_load"] + step["shared_store"]),
        "load_chain": lay.sequential * step["frag_loads"],
        "mma_chain": lay.sequential * step["mma"] * arch.tensor_initiation,
    }


PRIOR = {"intercept": 0.0, "serial": 0.0, "exposed": 0.66, "smem": 1.4, "tensor": 0.0, "issue": 0.0, "ldst": 5.9,
         "load_chain": 97.0, "mma_chain": 0.48}
"""The weights before anything is simulated: the fit on the recorded real 512³ run's A and B points,
rounded (a fragment load waits about 100 cycles, a shared-memory wavefront takes about one and a half)."""


def prior(row: dict[str, float]) -> float:
    """Cycles of a row of terms under the prior's weights."""
    return PRIOR["intercept"] + sum(PRIOR[n] * v for n, v in row.items())


def predict(k: dict[str, Any], arch: Architecture, M: int, N: int, K: int,
            ptx: dict[str, int] | None = None) -> dict[str, Any]:
    """The prior's cycles for a kernel on an architecture, with its layout."""
    lay = layout(k, arch, M, N, K, (ptx or {}).get("registers"))
    return {"cycles": prior(features(k, arch, M, N, K, ptx)), "blocks_per_sm": lay.resident, "limiter": lay.limiter,
            "waves": math.ceil(lay.blocks_per_sm / lay.resident)}


def nnls(A: np.ndarray, b: np.ndarray, iterations: int = 500) -> np.ndarray:
    """Non-negative least squares, min |Ax - b| with x >= 0 (Lawson and Hanson's active-set method)."""
    n = A.shape[1]
    x, passive = np.zeros(n), np.zeros(n, dtype=bool)
    for _ in range(iterations):
        w = A.T @ (b - A @ x)
        if passive.all() or (w[~passive] <= 1e-10 * max(1.0, np.abs(w).max())).all():
            break
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(A[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > 1e-12
    return x


class Fit:
    """cycles ~ c0 + sum(c_i x feature_i) with c0 and every c_i >= 0 (a fixed cost and per-unit costs
    cannot be negative), by non-negative least squares on simulated points."""

    def __init__(self, rows: list[dict[str, float]], cycles: list[float]) -> None:
        self.names = [f for f in FEATURES if any(r.get(f, 0) for r in rows)]
        X = np.array([[1.0] + [r.get(f, 0.0) for f in self.names] for r in rows])
        scale = np.maximum(np.abs(X).max(axis=0), 1e-9)
        self.coef = nnls(X / scale, np.array(cycles, dtype=float)) / scale

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
    errors = [abs(p - c) / c for p, c in zip(preds, cycles)]
    return {"n": len(rows), "rank_correlation": spearman(preds, cycles),
            "median_abs_error": statistics.median(errors) if errors else None, "predicted": preds}


def held_out_confirms(pick: float | None, fitted: list[float]) -> bool:
    """The model's first pick, a point it never saw, confirms it when the simulator puts it ahead of
    every point it was fitted on, as the model did by picking it (cycles: fewer is better)."""
    return pick is not None and bool(fitted) and pick < min(fitted)
