"""The architecture knobs of a candidate, and how they become gpgpusim.config overrides."""

from __future__ import annotations

import re
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from autodiscovery import AutoDiscoveryError
from harnesses.accelsim.platform import STOCK

_STOCK = STOCK.options()
"""The stock part's option values: each knob's default is its option's."""

ARCH_RE = re.compile(r"/\*\s*@arch\b(.*?)\*/\s*", re.S)


class ArchError(AutoDiscoveryError):
    pass


class Architecture(BaseModel):
    """A 32-SM A100-class GPU as GPGPU-Sim models it; every field maps to one config option, and its
    default is that option's value in the platform model (`platform.STOCK`): the stock part."""

    model_config = ConfigDict(extra="forbid")
    scheduler: Literal["lrr", "gto", "two_level_active"] = Field(_STOCK["-gpgpu_scheduler"], validate_default=True)
    """Warp scheduler (-gpgpu_scheduler)."""
    dram_latency: int = Field(int(_STOCK["-dram_latency"]), ge=1, le=2000)
    """DRAM latency in cycles (-dram_latency)."""
    l2_rop_latency: int = Field(int(_STOCK["-gpgpu_l2_rop_latency"]), ge=1, le=2000)
    """L2 raster-op queue latency (-gpgpu_l2_rop_latency)."""
    shmem_banks: Literal[16, 32, 64] = Field(int(_STOCK["-gpgpu_shmem_num_banks"]), validate_default=True)
    """Shared-memory banks per SM (-gpgpu_shmem_num_banks)."""
    tensor_latency: int = Field(int(_STOCK["-ptx_opcode_latency_tesnor"]), ge=1, le=512)
    """Tensor-core instruction latency (-ptx_opcode_latency_tesnor, the simulator's spelling)."""
    tensor_initiation: int = Field(int(_STOCK["-ptx_opcode_initiation_tensor"]), ge=1, le=512)
    """Tensor-core initiation interval (-ptx_opcode_initiation_tensor)."""
    registers_per_sm: int = Field(int(_STOCK["-gpgpu_shader_registers"]), ge=16384, le=262144)
    """Registers per SM (-gpgpu_shader_registers)."""
    sms: int = Field(int(_STOCK["-gpgpu_n_clusters"]), ge=1, le=256)
    """SMs: clusters of one core each (-gpgpu_n_clusters, -gpgpu_n_cores_per_cluster 1)."""

    @model_validator(mode="after")
    def _initiation_within_latency(self) -> Architecture:
        if self.tensor_initiation > self.tensor_latency:
            raise ValueError(f"tensor_initiation {self.tensor_initiation} > tensor_latency {self.tensor_latency}: "
                             "the simulator crashes when the initiation interval exceeds the latency")
        return self

    def overrides(self) -> dict[str, str]:
        sched = "two_level_active:6:0:1" if self.scheduler == "two_level_active" else self.scheduler
        return {
            "-gpgpu_n_clusters": str(self.sms), "-gpgpu_n_cores_per_cluster": "1",
            "-gpgpu_scheduler": sched, "-dram_latency": str(self.dram_latency),
            "-gpgpu_l2_rop_latency": str(self.l2_rop_latency), "-gpgpu_shmem_num_banks": str(self.shmem_banks),
            "-ptx_opcode_latency_tesnor": str(self.tensor_latency),
            "-ptx_opcode_initiation_tensor": str(self.tensor_initiation),
            "-gpgpu_shader_registers": str(self.registers_per_sm),
        }


def render_config(base: str, arch: Architecture) -> str:
    """The base config with the architecture appended as overrides (the last value of an option wins)."""
    lines = [f"{k} {v}" for k, v in arch.overrides().items()]
    return base.rstrip("\n") + "\n\n# ---- autodiscovery overrides (last value wins) ----\n" + "\n".join(lines) + "\n"


def option_values(config: str) -> dict[str, str]:
    """Option -> value as the config file sets it (the last occurrence wins, as in the simulator)."""
    out = {}
    for line in config.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-"):
            key, _, value = line.partition(" ")
            out[key] = value.strip()
    return out


def split(artifact: str) -> tuple[str, Architecture]:
    """A candidate is a kernel program plus an `/* @arch ... */` block; returns (program, architecture)."""
    m = ARCH_RE.search(artifact)
    if not m:
        raise ArchError("no /* @arch ... */ block in the candidate")
    try:
        data = yaml.safe_load(m.group(1)) or {}
        arch = Architecture.model_validate(data)
    except yaml.YAMLError as exc:
        raise ArchError(f"@arch block is not valid YAML: {getattr(exc, 'problem', exc)}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "arch"
        raise ArchError(f"@arch: {where}: {err['msg']}") from None
    return artifact[: m.start()] + artifact[m.end():], arch


def block(arch: Architecture) -> str:
    return "/* @arch\n" + yaml.safe_dump(arch.model_dump(), sort_keys=False) + "*/\n"
