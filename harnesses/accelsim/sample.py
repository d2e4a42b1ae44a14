"""A persistent GEMM simulated in part: its grid's first rounds of tiles, extrapolated to the whole
(`harness.sample`).

A persistent kernel's blocks each take a tile, then the next one `gridDim.x` tiles on, round after round,
every tile the same work over the whole of K. Where the tiles fill whole rounds, every round after the
first costs the same: the simulation of the first R1 and of the first R2 rounds gives the cost of a round
(their difference over R2 - R1) and what the first carries beside it (its fill, the launch, the drain),
and the whole grid is that carry plus its rounds at that cost. A grid that is not a whole number of
rounds (its last round partly idle), a kernel of one block a tile (a round is then a wave the hardware
schedules, not the program), or one of fewer rounds than `min_rounds` is simulated in full, and its
outcome says why. Only the sampled tiles' outputs are checked; the rest stay as the program left them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from autodiscovery.interfaces import Outcome
from harnesses.accelsim.settings import Sample

TILES = re.compile(r"constexpr int BM = (\d+), BN = (\d+)")
BLOCKS = re.compile(r"const int blocks = (\d+) > 0")


@dataclass(frozen=True)
class Plan:
    """How a kernel's grid is sampled at a problem's M and N."""

    bm: int
    bn: int
    tiles: int
    blocks: int
    rounds: int
    """Rounds of the whole grid (tiles over blocks)."""
    sampled: tuple[int, int]
    """The two samples' rounds, R1 < R2."""

    def computed(self, rounds: int) -> int:
        """The tiles a sample of `rounds` rounds computes."""
        return min(self.tiles, rounds * self.blocks)

    def mask(self, M: int, N: int, rounds: int) -> np.ndarray:
        """The outputs a sample of `rounds` rounds writes: its tiles, in the order the kernel takes them."""
        tiles_n = -(-N // self.bn)
        out = np.zeros((M, N), dtype=bool)
        for t in range(self.computed(rounds)):
            m0, n0 = (t // tiles_n) * self.bm, (t % tiles_n) * self.bn
            out[m0:m0 + self.bm, n0:n0 + self.bn] = True
        return out


def plan(program: str, M: int, N: int, sample: Sample | None) -> Plan | str:
    """The sampling of this program's grid, or why it is simulated in full."""
    if sample is None:
        return "harness.sample is not set"
    tiles_m, blocks_m = TILES.search(program), BLOCKS.search(program)
    if tiles_m is None or blocks_m is None:
        return "the program does not state its tiles and blocks as the co-design kernel does"
    bm, bn, persistent = int(tiles_m[1]), int(tiles_m[2]), int(blocks_m[1])
    tiles = -(-M // bm) * -(-N // bn)
    if persistent <= 0 or persistent >= tiles:
        return f"one block a tile ({tiles} tiles): its rounds are the hardware's waves, not the program's"
    if tiles % persistent:
        return f"{tiles} tiles over {persistent} blocks leave the last round partly idle"
    rounds = tiles // persistent
    if rounds < sample.min_rounds:
        return f"{rounds} rounds of tiles, fewer than harness.sample.min_rounds ({sample.min_rounds})"
    first, second = sample.rounds
    return Plan(bm, bn, tiles, persistent, rounds, (first, second))


def extrapolated(p: Plan, first: Outcome, second: Outcome, bound: int) -> Outcome:
    """The whole grid's outcome from its two samples: cycles and kernel cycles as the first sample's carry
    plus every round at the cost the two give; % of bound on those; the samples' own figures kept under
    `sample`."""
    r1, r2 = p.sampled
    m1, m2 = first.metrics, second.metrics
    out: dict = dict(m2)
    for key in ("cycles", "kernel_cycles"):
        per_round = (m2[key] - m1[key]) / (r2 - r1)
        out[key] = round(m1[key] + (p.rounds - r1) * per_round)
    out["pct_of_bound"] = round(100 * bound / max(1, out["kernel_cycles"]), 2)
    out["wall_s"] = round(m1.get("wall_s", 0.0) + m2.get("wall_s", 0.0), 3)
    out["sample"] = {"rounds": [r1, r2], "of": p.rounds, "tiles": p.tiles, "blocks": p.blocks,
                     "cycles": [m1["cycles"], m2["cycles"]], "kernel_cycles": [m1["kernel_cycles"], m2["kernel_cycles"]],
                     "per_round": round((m2["cycles"] - m1["cycles"]) / (r2 - r1), 1)}
    return Outcome(second.status, out, second.log, round(first.seconds + second.seconds, 3), second.device,
                   score=out["cycles"])
