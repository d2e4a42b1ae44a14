"""The `harness:` section of a co-design campaign simulated by GPGPU-Sim / Accel-Sim."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from autodiscovery.campaign import Strict
from harnesses.accelsim.costs import ArchSettings


class Settings(Strict):
    """The accelsim harness: a kernel program simulated by GPGPU-Sim (PTX mode) or Accel-Sim (traces)."""

    name: Literal["accelsim"] = "accelsim"
    gpgpusim_root: str | None = None
    """GPGPU-Sim checkout (built); default: $AUTODISCOVERY_GPGPUSIM_ROOT, else $GPGPUSIM_ROOT."""
    base_config: str | None = None
    """A gpgpusim.config of your own, the knobs appended to it as overrides; default:
    $AUTODISCOVERY_SIM_CONFIG, else none: the whole config is rendered from the platform model
    (platform.py). Trace mode reads the trace.config beside it."""
    accelsim_root: str | None = None
    """Accel-Sim framework checkout, for trace mode; default: $AUTODISCOVERY_ACCELSIM_ROOT, else $ACCELSIM_ROOT."""
    traces: str | None = None
    """A kernelslist.g of recorded traces: run accel-sim.out -trace instead of the PTX-mode program."""
    nvcc: str | None = None
    """A CUDA 11.x nvcc; default: $AUTODISCOVERY_CUDA11_NVCC, else the first nvcc of release 11 on PATH."""
    nvcc_flags: list[str] = ["-O3", "-arch=sm_80", "-cudart", "shared"]
    timeout_s: float = Field(1800.0, gt=0)
    """Hard limit for one simulation."""
    parallel: int = Field(0, ge=0)
    """Simulations at once (0: one per CPU core)."""
    cache_dir: str = "runs/cache/accelsim"
    work_dir: str = "runs/sim"
    """Each simulation runs in its own folder under here (kept with its log and config)."""
    arch: ArchSettings = ArchSettings()
    """The area/power budget a design must fit (`arch.budget.area_pct`, +10% over stock by default) and the
    shares its costs are estimated from (costs.py)."""
