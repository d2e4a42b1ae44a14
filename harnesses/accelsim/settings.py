"""The settings of a co-design campaign simulated by GPGPU-Sim / Accel-Sim: its `harness:` section and
the co-design agent's (`agent.codesign`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from autodiscovery.campaign import HarnessSettings, Strict
from harnesses.accelsim.costs import ArchSettings


class Sample(Strict):
    """A persistent kernel simulated in part: its grid's first rounds of tiles, extrapolated to the whole
    (`harness.sample`; `harnesses/accelsim/sample.py`)."""

    rounds: tuple[int, int] = (2, 3)
    """The two samples, in rounds of the grid (R1 < R2): a round's cost is their difference over R2 - R1.
    The first round fills the caches, so the default samples begin after it."""
    min_rounds: int = Field(6, ge=4)
    """Grids of fewer rounds than this are simulated whole (the two samples would cost about as much)."""

    @model_validator(mode="after")
    def _ordered(self) -> Sample:
        if not 1 <= self.rounds[0] < self.rounds[1]:
            raise ValueError("rounds: two rounds R1 < R2, the first at least 1")
        if sum(self.rounds) >= self.min_rounds:
            raise ValueError("rounds: the two samples together must be fewer rounds than min_rounds")
        return self


class Settings(HarnessSettings):
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
    sample: Sample | None = None
    """Simulate a persistent kernel's first rounds of tiles and extrapolate to its whole grid (None: every
    simulation whole). A grid the sample cannot represent is simulated whole, and its outcome says why."""
    arch: ArchSettings = ArchSettings()
    """The area/power budget a design must fit (`arch.budget.area_pct`, +10% over stock by default) and the
    shares its costs are estimated from (costs.py)."""


class CodesignPhases(Strict):
    B: int = Field(12, ge=0)
    """Kernel-only candidates, architecture frozen at stock."""
    C: int = Field(3, ge=0)
    """Kernels the analytical model ranks best that B did not simulate, simulated to check the model."""
    D: int = Field(12, ge=0)
    """Architecture-only candidates, the best kernel frozen: one change at a time from stock first
    (eight at the shipped knobs), then the best changes in pairs and all together (`pairs`), then TPE
    over the knobs that changed anything."""
    E_kernels: int = Field(2, ge=1)
    """Phase E crosses this many best kernels of B and C ..."""
    E_archs: int = Field(2, ge=1)
    """... with this many best architectures of D."""


class CodesignSettings(Strict):
    """`agent.codesign`: the phases of a kernel × architecture co-design."""

    space: str = "edge_codesign"
    """Folder under search_spaces/ with the kernel family and the architecture knobs."""
    seed: int = 0
    phases: CodesignPhases = CodesignPhases()
    model_trust: float = Field(0.8, ge=-1, le=1.01)
    """Phase C trusts the model fitted on A and B when its leave-one-out rank correlation reaches this:
    then only its best pick is simulated and the other C - 1 simulations are saved (1.01: never)."""
    shortlist: int = Field(48, ge=1)
    """Phase C ranks every valid kernel on facts estimated from its knobs, then compiles this many of
    the best to rank them again on their own PTX (about a second of nvcc each)."""
    pairs: int = Field(3, ge=0)
    """After its single changes, phase D simulates the pairs among this many of the best of them (one
    value a knob; where fewer bought anything, those that cost least alone; never one with no effect)
    and all of them together, within its budget: whether the changes add up, help each other or get
    in each other's way."""
