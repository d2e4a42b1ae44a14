"""The gate and the interleaved timing, run inside the evaluation child."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

import cupy as cp
import numpy as np

from harnesses.hopper_gemm.gpu import BF16_NAN, Cublas, Kernel, from_bf16_bits, random_bf16


class GateFailure(Exception):
    pass


class Bench:
    """Buffers, cuBLAS and a stream for one problem shape."""

    def __init__(self, M: int, N: int, K: int, l2_bytes: int) -> None:
        self.M, self.N, self.K = M, N, K
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.stream.use()
        self.rng = cp.random.default_rng(int.from_bytes(os.urandom(8), "little"))
        self.cublas = Cublas(self.stream)
        self.l2_bytes = l2_bytes
        self._sets: list[tuple[cp.ndarray, cp.ndarray]] = []

    # ---- inputs -------------------------------------------------------------------------
    def fresh_inputs(self, A: cp.ndarray, B: cp.ndarray) -> None:
        A[...] = random_bf16(A.shape, self.rng)
        B[...] = random_bf16(B.shape, self.rng)

    def timing_sets(self) -> list[tuple[cp.ndarray, cp.ndarray]]:
        """Input sets to rotate over, together three times larger than L2 (so every launch is cold)."""
        if not self._sets:
            set_bytes = 2 * (self.M + self.N) * self.K
            n = max(2, math.ceil(3 * self.l2_bytes / set_bytes))
            n = min(n, max(2, int(8e9 // set_bytes)))
            for _ in range(n):
                A = cp.empty((self.M, self.K), dtype=cp.uint16)
                B = cp.empty((self.N, self.K), dtype=cp.uint16)
                self.fresh_inputs(A, B)
                self._sets.append((A, B))
        return self._sets

    def output(self) -> cp.ndarray:
        return cp.empty((self.M, self.N), dtype=cp.uint16)

    # ---- correctness ----------------------------------------------------------------------
    def compare(self, C: cp.ndarray, ref: cp.ndarray, tolerance: float) -> dict:
        c, r = from_bf16_bits(C).astype(cp.float64), from_bf16_bits(ref).astype(cp.float64)
        unwritten = int(cp.count_nonzero(C == BF16_NAN))
        nonfinite = int(cp.count_nonzero(~cp.isfinite(c)))
        diff = cp.abs(c - r)
        ref_norm = float(cp.linalg.norm(r))
        rel = float(cp.linalg.norm(cp.where(cp.isfinite(c), c - r, 0.0))) / max(ref_norm, 1e-30)
        max_rel = float(cp.max(cp.where(cp.isfinite(diff), diff, 0.0))) / max(float(cp.max(cp.abs(r))), 1e-30)
        ok = nonfinite == 0 and rel <= tolerance and max_rel <= 5 * tolerance
        return {"rel_err": rel, "max_err": max_rel, "nonfinite": nonfinite, "unwritten": unwritten, "ok": ok}

    def gate(self, kernel: Kernel, draws: int, tolerance: float) -> list[dict]:
        """Fresh random inputs each draw on alternating buffers; the output poisoned before each launch.

        Raises GateFailure with the reason at the first failing draw.
        """
        buffers = [(cp.empty((self.M, self.K), cp.uint16), cp.empty((self.N, self.K), cp.uint16), self.output())
                   for _ in range(2)]
        ref = self.output()
        results = []
        for d in range(draws):
            A, B, C = buffers[d % 2]
            self.fresh_inputs(A, B)
            A0, B0 = A.copy(), B.copy()
            self.cublas.gemm(A, B, ref)
            C.fill(BF16_NAN)
            kernel(kernel.bind(A, B, C))
            self.stream.synchronize()
            r = self.compare(C, ref, tolerance) | {"draw": d}
            r["inputs_unchanged"] = bool(cp.array_equal(A, A0) and cp.array_equal(B, B0))
            results.append(r)
            if not r["inputs_unchanged"]:
                raise GateFailure(f"draw {d}: the kernel modified its inputs")
            if r["nonfinite"]:
                what = f"{r['unwritten']} outputs never written" if r["unwritten"] else "NaN/Inf in the output"
                raise GateFailure(f"draw {d}: {r['nonfinite']} non-finite outputs ({what})")
            if not r["ok"]:
                raise GateFailure(
                    f"draw {d}: relative error {r['rel_err']:.3g} (max {r['max_err']:.3g}) exceeds tolerance {tolerance:g}"
                )
        return results

    # ---- timing ---------------------------------------------------------------------------
    def runners(self, kernels: dict[str, Kernel | None]) -> dict[str, tuple[Callable[[int], None], cp.ndarray]]:
        """One launcher per name (None means cuBLAS), each taking the index of the input set to use."""
        sets = self.timing_sets()
        out: dict = {}
        for name, kernel in kernels.items():
            C = self.output()
            if kernel is None:
                out[name] = ((lambda i, C=C: self.cublas.gemm(sets[i][0], sets[i][1], C)), C)
            else:
                params = [kernel.bind(A, B, C) for A, B in sets]
                out[name] = ((lambda i, k=kernel, p=params: k(p[i])), C)
        return out

    def interleave(self, launchers: list[Callable[[int], None]], reps: int, warmup_ms: float,
                   sample_ms: float, budget_s: float) -> tuple[np.ndarray, list[int], list[int]]:
        """Time the launchers in alternating order (A B, B A, ...); returns ms per launch [rep, launcher].

        Warm-up runs every launcher in turn for about `warmup_ms`, so clocks and power settle first.
        Each sample repeats one launcher (rotating input sets) until it lasts about `sample_ms`;
        nothing synchronizes between samples, so the host stays ahead of the GPU and no launch gap is
        timed. Slow kernels get fewer pairs (at least 10) so timing stays within about `budget_s`.
        """
        nsets = len(self.timing_sets())
        idx = 0
        last = [0] * len(launchers)

        def run(k: int, times: int) -> None:
            nonlocal idx
            for _ in range(times):
                launchers[k](idx)
                last[k] = idx
                idx = (idx + 1) % nsets

        est = []
        for k in range(len(launchers)):
            run(k, 1)
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(self.stream)
            run(k, 2)
            e1.record(self.stream)
            e1.synchronize()
            est.append(max(cp.cuda.get_elapsed_time(e0, e1) / 2, 1e-3))
        rounds = int(min(1000, math.ceil(warmup_ms / sum(est))))
        for _ in range(rounds):
            for k in range(len(launchers)):
                run(k, 1)
        inner = [int(min(500, max(1, math.ceil(sample_ms / t)))) for t in est]
        per_pair_ms = sum(n * t for n, t in zip(inner, est))
        reps = int(max(10, min(reps, budget_s * 1000 // per_pair_ms)))
        events = [[(cp.cuda.Event(), cp.cuda.Event()) for _ in launchers] for _ in range(reps)]
        for r in range(reps):
            order = range(len(launchers)) if r % 2 == 0 else reversed(range(len(launchers)))
            for k in order:
                events[r][k][0].record(self.stream)
                run(k, inner[k])
                events[r][k][1].record(self.stream)
        self.stream.synchronize()
        times = np.array([[cp.cuda.get_elapsed_time(a, b) / inner[k] for k, (a, b) in enumerate(row)]
                          for row in events])
        return times, inner, last

    def recheck(self, C: cp.ndarray, set_index: int, tolerance: float) -> dict:
        """The output left by the timed launches must still be right (no shortcut while timed)."""
        A, B = self.timing_sets()[set_index]
        ref = self.output()
        self.cublas.gemm(A, B, ref)
        self.stream.synchronize()
        return self.compare(C, ref, tolerance)


def elapsed(start: float) -> float:
    return round(time.perf_counter() - start, 4)
