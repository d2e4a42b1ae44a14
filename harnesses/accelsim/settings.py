"""The `harness:` section of a co-design campaign simulated by GPGPU-Sim / Accel-Sim."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from autodiscovery.campaign import Strict


class Settings(Strict):
    """The accelsim harness: a kernel program simulated by GPGPU-Sim (PTX mode) or Accel-Sim (traces)."""

    name: Literal["accelsim"] = "accelsim"
    gpgpusim_root: str | None = None
    """GPGPU-Sim checkout (built); default: $GPGPUSIM_ROOT."""
    base_config: str | None = None
    """The gpgpusim.config overrides are appended to; default: $GPGPUSIM_CONFIG, else
    <gpgpusim_root>/configs/tested-cfgs/SM80_A100/gpgpusim.config."""
    accelsim_root: str | None = None
    """Accel-Sim framework checkout, for trace mode; default: $ACCELSIM_ROOT."""
    traces: str | None = None
    """A kernelslist.g of recorded traces: run accel-sim.out -trace instead of the PTX-mode program."""
    nvcc: str | None = None
    """A CUDA 11.x nvcc; default: $CUDA11_NVCC, else the first nvcc of release 11 on PATH."""
    nvcc_flags: list[str] = ["-O3", "-arch=sm_80", "-cudart", "shared"]
    timeout_s: float = Field(1800.0, gt=0)
    """Hard limit for one simulation."""
    parallel: int = Field(0, ge=0)
    """Simulations at once (0: one per CPU core)."""
    cache_dir: str = "runs/cache/accelsim"
    work_dir: str = "runs/sim"
    """Each simulation runs in its own folder under here (kept with its log and config)."""
