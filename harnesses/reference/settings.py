"""The `harness:` and `problem:` sections of a reference campaign."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from autodiscovery.campaign import HarnessSettings, ProblemBase

DTYPES = ("float32", "float16", "bfloat16", "float64")
"""Floating types a campaign may cast the reference's floating inputs and parameters to."""
TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}
"""Relative error ‖out − ref‖ / ‖ref‖ an output of each floating type may have (integers and booleans
must be equal), against the float64 truth where it can be had (`gate.py`): honest kernels that sum in
another order, or round once at the end, land far under it; lower precision in the arithmetic lands far
over (see docs/results/gate-calibration.md)."""


class Problem(ProblemBase):
    """The user's operation: a Python file in KernelBench's format (`class Model(nn.Module)`,
    `get_inputs()`, `get_init_inputs()`, module-level sizes), the reference every candidate is checked
    and timed against."""

    file: str
    """The problem file: a path, absolute or relative to the campaign file's folder, else to the project
    (problems/softmax.py)."""
    sizes: dict[str, int] = {}
    """Module-level sizes to set before `get_inputs()` and `get_init_inputs()` run (batch_size: 8192)."""
    dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None
    """Cast the reference's floating inputs and parameters to this type (none: as the file makes them)."""

    @field_validator("sizes")
    @classmethod
    def _positive(cls, sizes: dict[str, int]) -> dict[str, int]:
        bad = [k for k, v in sizes.items() if v < 1]
        if bad:
            raise ValueError(f"sizes must be positive: {', '.join(bad)}")
        return sizes

    @model_validator(mode="after")
    def _readable(self) -> Problem:
        from harnesses.reference.problem import ProblemError, read

        try:
            read(self.file, self.sizes)  # the file is there, in KernelBench's format, with the sizes set
        except ProblemError as exc:
            raise ValueError(str(exc)) from None
        return self

    def names(self) -> dict[str, int]:
        from harnesses.reference.problem import read

        return read(self.file, self.sizes).sizes

    def describe(self) -> str:
        from pathlib import Path

        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        return f"{Path(self.file).stem}" + (f" ({sizes})" if sizes else "") + (f" {self.dtype}" if self.dtype else "")


class Settings(HarnessSettings):
    """The reference harness: CUDA and Triton kernels checked and timed against the user's PyTorch module."""

    name: Literal["reference"] = "reference"
    languages: list[Literal["cuda", "triton"]] = Field(["cuda", "triton"], min_length=1)
    """The languages its candidates may be in: CUDA C++ (device code, built with nvcc) and Triton (a Python
    file of @triton.jit functions, run where Triton is installed). A candidate in another is refused by
    `check`, before it is built."""
    baseline: Literal["eager", "compile"] = "eager"
    """The objective: the speed-up over PyTorch eager (KernelBench's), or over `torch.compile` of the
    reference. Both are measured and shown either way."""
    compile: bool = True
    """Time `torch.compile` of the reference too (its kernels are cached between evaluations)."""
    tolerance: dict[str, float] = {}
    """Relative error per output dtype, where the default (`TOLERANCE`) does not fit a problem."""
    gate_draws: int = Field(6, ge=3, le=40)
    """Launches the gate checks before timing, each on fresh inputs, cycling through the distributions
    the reference stays finite on: its own, normal, uniform, wide exponents, large offsets, ties."""
    pairs: int = Field(30, ge=5)
    """Timed launches of the candidate, each beside one of the reference (eager and compiled), in
    alternating order, each on inputs drawn for it alone and after an L2 flush; every one checked."""
    timing_budget_s: float = Field(20.0, gt=0)
    """Fewer pairs (at least 5) where the reference is slow, so timing takes about this long at most."""
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    timeout_s: float = Field(300.0, gt=0)
    """How long an evaluation's child may go without progress (its start, torch.compile's first build
    included, to the first gate launch; then from one checked launch or timed pair to the next) before it
    is killed as hung."""
    truth_multiple: float = Field(4.0, ge=1.0)
    """An output passes where its relative error against the truth (the module in float64 on the same
    inputs) is within its dtype's tolerance or within this many times PyTorch's own error against the
    truth on that launch, whichever is larger (and where it is within the tolerance of PyTorch's output)."""
    sanitize: bool = True
    """Run every candidate about to be kept under compute-sanitizer (memcheck, racecheck, synccheck,
    initcheck: a process each, side by side), every buffer an allocation of its own; a finding blocks the
    keep. compute-sanitizer is found on PATH or beside nvcc."""
    sanitize_timeout_s: float = Field(600.0, gt=0)
    """Hard limit for each compute-sanitizer tool's process (a tool that runs out blocks the keep; what it found before stands)."""
    nvcc: str = "nvcc"
    nvcc_flags: list[str] = ["-O3", "-std=c++17"]
    arch: str = "sm_90a"
    """Target; built as -gencode arch=compute_XX,code=sm_XX."""
    build_workers: int = Field(0, ge=0)
    cache_dir: str = "runs/cache"
    """Where cubins (and torch.compile's kernels, under inductor/) are kept."""

    @field_validator("tolerance")
    @classmethod
    def _dtypes(cls, tolerance: dict[str, float]) -> dict[str, float]:
        bad = [k for k in tolerance if k not in DTYPES]
        if bad:
            raise ValueError(f"tolerance for {', '.join(bad)}: only floating dtypes have one ({', '.join(DTYPES)})")
        return tolerance
