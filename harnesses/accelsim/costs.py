"""What an architecture costs: area and power against the stock 32-SM part, knob by knob.

These are estimates for ranking designs inside a budget, not a floorplan. Each share below is the
reasoning it rests on; change them in `harness.arch.shares` when you know your process better.

Chip shares of the stock 32-SM part (an A100-class design cut down to an edge die: GA100's 826 mm²
hold 128 SMs with 40 MB of L2 and five HBM2 interfaces; die-shot annotations put roughly half of it
in the SM array):
  sm_array 0.55      the 32 SMs
  l2 0.20            L2 slices and the crossbar
  memory 0.15        memory controllers and DRAM PHYs
  (the remaining 0.10 is I/O and control, which no knob touches)
Shares inside one SM (A100 SM: 256 KB register file, 192 KB L1/shared array, 4 tensor cores):
  register_file 0.18   the largest SRAM of the SM, heavily ported
  shared_memory 0.14   the L1/shared array with its bank crossbar
  tensor_cores 0.20    four third-generation tensor cores
Power follows the same parts with their share of dynamic power (register file and tensor cores are
the SM's largest consumers; DRAM I/O is a large share of board power): sm_array 0.60, l2 0.12,
memory 0.20; register_file 0.22, shared_memory 0.10, tensor_cores 0.25.

How each knob scales its part:
  sms                 the SM array in proportion to the SM count
  registers_per_sm    the register file in proportion to its size
  shmem_banks         bank decoders and the crossbar: +25% of the shared-memory array per doubling
  tensor_initiation   tensor throughput: units in proportion to 16 / initiation (8 = twice the MMA units)
  tensor_latency      a shorter pipeline at the same clock needs faster (larger) logic: +30% of the tensor
                      cores' area per halving of latency, in proportion to 25 / latency - 1
  dram_latency        latency bought with more and closer controllers and deeper queues: +50% of the
                      memory interface in proportion to 190 / latency - 1 (a slower interface saves)
  l2_rop_latency      a faster L2 pipeline and more slices: +30% of the L2 in proportion to 200 / latency - 1
  scheduler           a policy, not a structure: costs nothing
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from harnesses.accelsim.arch import Architecture

STOCK = Architecture()


class Shares(BaseModel):
    """Fractions of the stock chip (and, inside an SM, of one SM) that the knobs scale."""

    model_config = ConfigDict(extra="forbid")
    sm_array: float = Field(0.55, ge=0, le=1)
    l2: float = Field(0.20, ge=0, le=1)
    memory: float = Field(0.15, ge=0, le=1)
    register_file: float = Field(0.18, ge=0, le=1)
    shared_memory: float = Field(0.14, ge=0, le=1)
    tensor_cores: float = Field(0.20, ge=0, le=1)


POWER = Shares(sm_array=0.60, l2=0.12, memory=0.20, register_file=0.22, shared_memory=0.10, tensor_cores=0.25)


def parts(arch: Architecture, s: Shares) -> dict[str, float]:
    """Each knob's change of the whole chip, as a fraction of the stock chip."""
    sm = s.sm_array / STOCK.sms  # one SM's share of the chip
    per_sm = {
        "registers_per_sm": s.register_file * (arch.registers_per_sm / STOCK.registers_per_sm - 1),
        "shmem_banks": s.shared_memory * 0.25 * math.log2(arch.shmem_banks / STOCK.shmem_banks),
        "tensor_initiation": s.tensor_cores * (STOCK.tensor_initiation / arch.tensor_initiation - 1),
        "tensor_latency": s.tensor_cores * (STOCK.tensor_initiation / arch.tensor_initiation) * 0.30
        * (STOCK.tensor_latency / arch.tensor_latency - 1),
    }
    out = {k: sm * arch.sms * v for k, v in per_sm.items()}
    out["sms"] = sm * (arch.sms - STOCK.sms)
    out["dram_latency"] = s.memory * 0.50 * (STOCK.dram_latency / arch.dram_latency - 1)
    out["l2_rop_latency"] = s.l2 * 0.30 * (STOCK.l2_rop_latency / arch.l2_rop_latency - 1)
    out["scheduler"] = 0.0
    return out


def estimate(arch: Architecture, area: Shares | None = None, power: Shares | None = None) -> dict:
    """Area and power of `arch` as % over the stock part, with each knob's part of it."""
    a, p = parts(arch, area or Shares()), parts(arch, power or POWER)
    return {"area_pct": round(100 * sum(a.values()), 2), "power_pct": round(100 * sum(p.values()), 2),
            "area_by_knob": {k: round(100 * v, 2) for k, v in a.items() if v},
            "power_by_knob": {k: round(100 * v, 2) for k, v in p.items() if v}}


class Budget(BaseModel):
    """How much more than the stock part a design may cost."""

    model_config = ConfigDict(extra="forbid")
    area_pct: float | None = Field(10.0, ge=0)
    """Area over the stock part, in % (None: no limit)."""
    power_pct: float | None = Field(None, ge=0)
    """Power over the stock part, in % (None: no limit)."""

    def over(self, cost: dict) -> str | None:
        """Why a design with this cost is outside the budget, or None."""
        if self.area_pct is not None and cost["area_pct"] > self.area_pct + 1e-9:
            return f"area +{cost['area_pct']:.1f}% over the budget of +{self.area_pct:g}%"
        if self.power_pct is not None and cost["power_pct"] > self.power_pct + 1e-9:
            return f"power +{cost['power_pct']:.1f}% over the budget of +{self.power_pct:g}%"
        return None


class ArchSettings(BaseModel):
    """`harness.arch`: the budget a design must fit, and the shares its costs are estimated from."""

    model_config = ConfigDict(extra="forbid")
    budget: Budget = Budget()
    area_shares: Shares = Shares()
    power_shares: Shares = POWER

    def cost(self, arch: Architecture) -> dict:
        return estimate(arch, self.area_shares, self.power_shares)


def pareto(points: list[dict], x: str = "area_pct", y: str = "cycles") -> list[dict]:
    """The points no other point beats on both x and y (fewer is better for both), by x."""
    front: list[dict] = []
    for p in sorted(points, key=lambda p: (p[x], p[y])):
        if not front or p[y] < front[-1][y]:
            front.append(p)
    return front
