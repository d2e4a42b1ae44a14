"""An analytical model of the WMMA GEMM's cycles on a GPGPU-Sim GPU, for phase C.

Per SM and per k-step, the resident blocks need tensor-pipe time t_mma (every 16x16x16 MMA holds one
of the SM's tensor units for the initiation interval) and memory time t_mem (a round trip to L2/DRAM
plus the bytes of the A and B tiles at the SM's share of bandwidth). A two-stage kernel overlaps the
two; a single-stage kernel overlaps them only across blocks. Cycles = k-steps per block x waves x step.
It is deliberately simple: phase C reports how well it ranks and predicts the simulated kernels.
"""

from __future__ import annotations

import math
from typing import Any

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
