"""The buffers a bench launches on: slots whose A, B and C lie in one allocation each, every buffer between
guard zones (`autodiscovery/toolkit/guard.py`), and the table of jobs that draws and checks all of a
slot's buffers in one launch of the harness's own kernels (bench_kernels.cu: fill_many, verify_many)."""

from __future__ import annotations

import math

import cupy as cp
import numpy as np

from autodiscovery.toolkit import guard

MASK64 = (1 << 64) - 1
JOB = np.dtype([("ptr", "<u8"), ("n", "<u8"), ("cols", "<u8"), ("salt", "<u8"), ("kind", "<u4"), ("column", "<u4"),
                ("row", "<u4"), ("pad", "<u4")])
"""bench_kernels.cu's Job: one buffer of a slot, as fill_many draws it and verify_many checks it."""
JOB_A, JOB_B, JOB_C, JOB_ZONE = range(4)


def jobs(i: int, buffers: tuple[cp.ndarray, ...], zones: list[cp.ndarray]) -> np.ndarray:
    """Slot i's buffers in the jobs table: A, B (their mismatches in columns 6 and 7 of its check's row),
    C (poisoned), and each guard zone (column 8 on, in ZONES order). Each job's content is drawn from
    its own salt: the slot and the buffer."""
    A, B, C = buffers
    rows = [(A, JOB_A, 6), (B, JOB_B, 7), (C, JOB_C, 0)] + [(z, JOB_ZONE, 8 + k) for k, z in enumerate(zones)]
    out = np.zeros(len(rows), JOB)
    for j, (buf, kind, column) in enumerate(rows):
        salt = ((i * 16 + j + 1) * 0x9E3779B97F4A7C15) & MASK64
        out[j] = (buf.data.ptr, buf.size, buf.shape[1], salt, kind, column, i, 0)
    return out


def arena(buffers: list[tuple[str, tuple[int, ...]]]) -> tuple[cp.ndarray, list[cp.ndarray], list[cp.ndarray]]:
    """bf16 buffers in one allocation, each between guard zones: the allocation, the buffers, and the
    zones (before and after each buffer, as rows of bf16 for the helpers' fill and verify)."""
    sizes = [(name, 2 * math.prod(shape)) for name, shape in buffers]
    total, slots = guard.layout(sizes)
    raw = cp.empty(total, cp.uint8)
    views = [raw[s.start:s.end].view(cp.uint16).reshape(shape) for s, (_, shape) in zip(slots, buffers)]
    zones = [raw[lo:hi].view(cp.uint16).reshape(1, -1) for _, _, lo, hi in guard.zones(slots)]
    return raw, views, zones
