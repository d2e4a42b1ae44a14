"""The `harness:` section of a hopper_gemm campaign."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator

from autodiscovery.campaign import HarnessSettings, ProblemBase


def relative_tolerance(tolerance: float, per_sqrt_k: float, K: int) -> float:
    """The relative error an output may have at this K: it grows with √K as honest fp32 error does."""
    return min(tolerance, max(2e-4, per_sqrt_k * math.sqrt(K)))


class Problem(ProblemBase):
    """C = A·Bᵀ with A M×K, B N×K and C M×N, all row-major."""

    M: int = Field(4096, gt=0)
    """Rows of A and C."""
    N: int = Field(4096, gt=0)
    """Rows of B, columns of C."""
    K: int = Field(4096, gt=0)
    """The reduction dimension: columns of A and B."""
    dtype_in: Literal["bf16", "fp16"] = "bf16"
    """Element type of A and B."""
    accumulate: Literal["fp32"] = "fp32"
    """Accumulator type, also cuBLAS's compute type."""
    dtype_out: Literal["bf16", "fp32"] = "bf16"
    """Element type of C."""

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K

    def work(self) -> float:
        return float(self.flops)

    def describe(self) -> str:
        return f"{self.M}×{self.N}×{self.K}"

    def names(self) -> dict[str, int]:
        return {"M": self.M, "N": self.N, "K": self.K}


class Settings(HarnessSettings):
    """The hopper_gemm harness: BF16 GEMM kernels built for sm_90a, checked and timed against cuBLAS."""

    name: Literal["hopper_gemm"] = "hopper_gemm"
    """Which harness evaluates the candidates."""
    tolerance: float = Field(1e-2, gt=0, le=0.1)
    """Largest relative error ‖C − C_cuBLAS‖ / ‖C_cuBLAS‖ accepted (and 5× this for the largest element)."""
    tolerance_per_sqrt_k: float = Field(2e-5, gt=0, le=1e-3)
    """The relative error may also be at most this × √K (at least 2e-4): honest fp32 accumulation errs
    about 2.4e-6 × √K on these inputs, fp16 accumulation 10× more, whatever the data looks like."""
    gate_draws: int = Field(5, ge=5, le=40)
    """Launches the gate checks before timing, each on fresh inputs, cycling through the distributions:
    uniform, normal, a wide dynamic range, and two of large offsets that cancel (in blocks, in halves)."""
    baseline: Literal["gemmex", "best_lt"] = "gemmex"
    """The cuBLAS the candidates are timed against: cublasGemmEx's default algorithm, or the fastest of
    cuBLASLt's top heuristic algorithms for the shape (32 MiB workspace), chosen once per shape."""
    both_baselines: bool = True
    """Time the other cuBLAS too (the best cuBLASLt algorithm beside cublasGemmEx, or the reverse) in the
    same interleaved rotation, so every measurement states × each; the objective stays `baseline`."""
    warmup_ms: float = Field(200.0, ge=0)
    """Untimed launches, alternating between the kernels, for about this long before timing."""
    repetitions: int = Field(40, ge=10)
    """Timed pairs of samples (candidate, cuBLAS), interleaved in alternating order."""
    sample_ms: float = Field(2.0, gt=0)
    """Each timed sample repeats launches until it lasts about this long."""
    timing_budget_s: float = Field(4.0, gt=0)
    """Slow kernels get fewer pairs (at least 10) so that timing takes about this long at most."""
    precision: float = Field(0.002, ge=0, lt=0.1)
    """Timing stops, after `screen_pairs` pairs (every five pairs after), once the confidence interval
    around the median ratio is within this fraction of it either way: a kernel's measurement costs what
    its noise needs (0: always `repetitions` pairs)."""
    screen_pairs: int = Field(10, ge=0)
    """Screening: after this many timed pairs a candidate clearly below its bar (the incumbent's × cuBLAS,
    or cuBLAS for a run's first candidate) stops (0: never)."""
    screen_slack: float = Field(0.04, ge=0, lt=1)
    """Screening: how far below the bar the short measurement's median must be."""
    screen_far: float = Field(0.5, gt=0, lt=1)
    """Screening: a candidate whose first launches run at less than this fraction of its bar is far below
    it: timed for `screen_far_pairs` pairs without warm-up, and stopped there if every pair is too."""
    screen_far_pairs: int = Field(2, ge=0)
    """Screening: the pairs a candidate far below its bar is timed for (0: no such screen)."""
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    """Confidence level of the interval on the median ratio."""
    timeout_s: float = Field(120.0, gt=0)
    """How long an evaluation's child may go without progress (a launch of the gate or a timed pair
    finished) before it is killed as hung: a slow kernel that keeps finishing its launches is never
    killed for being slow."""
    nvcc: str = "nvcc"
    """The CUDA compiler: a name on PATH or a path."""
    ncu: str = "ncu"
    """Nsight Compute, for `autodiscovery profile`: a name on PATH or a path."""
    sanitize: bool = True
    """Run every candidate about to be kept under compute-sanitizer (memcheck, racecheck, synccheck,
    initcheck: a process each, side by side) at a shape of at most about 2048 a side that keeps the
    shape's remainders; a finding blocks the keep. compute-sanitizer is found on PATH or beside nvcc."""
    sanitize_timeout_s: float = Field(300.0, gt=0)
    """Hard limit for each compute-sanitizer tool's process (a tool that runs out blocks the keep; what it found before stands)."""
    nvcc_flags: list[str] = ["-O3", "-std=c++17"]
    """Flags for every build, besides the target and the report flags."""
    arch: str = "sm_90a"
    """Target; built as -gencode arch=compute_XX,code=sm_XX."""
    build_workers: int = Field(0, ge=0)
    """Parallel nvcc builds (0: one per CPU core)."""
    gpus: Literal["all"] | int | list[int] | None = None
    """The GPUs evaluations run on, one evaluation per GPU at a time: none (the default device), "all",
    a count (the first N), or a list of indices. Every one must be the same GPU model; a head-to-head
    runs both kernels on one GPU."""

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus_form(cls, v: object) -> object:
        ok = v is None or v == "all" or (isinstance(v, int) and not isinstance(v, bool)) or (
            isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in v))
        if not ok:
            raise ValueError(f"{v!r} is none of: all, a count of GPUs (2), a list of GPU indices ([0, 1])")
        return v

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: Literal["all"] | int | list[int] | None) -> Literal["all"] | int | list[int] | None:
        if isinstance(v, int) and not isinstance(v, bool) and v < 1:
            raise ValueError("a count of GPUs is at least 1")
        if isinstance(v, list) and (not v or len(set(v)) != len(v) or min(v) < 0):
            raise ValueError("a list of GPU indices is non-empty, without repeats, each 0 or more")
        return v
    cache_dir: str = "runs/cache"
    """Where cubins and build reports are kept, keyed by source, compiler, flags and arch."""
