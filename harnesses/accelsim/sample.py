"""A GEMM simulated in part: its grid's first rounds of tiles, extrapolated to the whole
(`harness.sample`).

A persistent kernel's blocks each take a tile, then the next one `gridDim.x` tiles on, round after round,
every tile the same work over the whole of K. Where the tiles fill whole rounds, every round after the
first costs the same: the simulation of the first R1 and of the first R2 rounds gives the cost of a round
(their difference over R2 - R1) and what the first carries beside it (its fill, the launch, the drain),
and the whole grid is that carry plus its rounds at that cost.

A kernel of one block a tile runs in waves instead: the GPU holds `resident` blocks at once (its SMs
times the blocks an SM holds), and the hardware starts the next block, in order, where one ends. Its
first R waves are the grid's first R x resident blocks, which the program launches alone when asked for
that many tiles; the waves are extrapolated as rounds are. The blocks an SM holds are worked out before
the simulation (`model.blocks_per_sm`, the simulator's rule) and checked against what the simulator
says it held (`CTA/core`) after the first sample: where they differ, the grid is simulated whole.

A grid that is not a whole number of rounds or waves (the last partly idle), one of fewer than
`min_rounds`, or a program that does not take the count of tiles to compute is simulated in full, and
its outcome says why. Only the sampled tiles' outputs are checked; the rest stay as the program left
them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from autodiscovery.interfaces import Outcome
from harnesses.accelsim.settings import Sample

TILES = re.compile(r"constexpr int BM = (\d+), BN = (\d+)")
BLOCKS = re.compile(r"const int blocks = (\d+) > 0")
ASKED = re.compile(r"const int asked = argc > 4 \? atoi\(argv\[4\]\) : 0;")
"""The program takes the tiles to compute as its fourth argument (an older co-design kernel took rounds)."""
KNOBS = re.compile(r"constexpr int BM = (\d+), BN = (\d+), BK = (\d+);\s*constexpr int FM = (\d+), FN = (\d+), "
                   r"STAGES = (\d+);")
BOUNDS = re.compile(r"__launch_bounds__\(THREADS(?:, (\d+))?\)")


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
    waves: bool = False
    """One block a tile: `blocks` are those the GPU holds at once, a round is a wave of them."""

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


def knobs(program: str) -> dict | None:
    """The co-design kernel's knobs as its program states them (`model`'s names), or None."""
    m, bounds = KNOBS.search(program), BOUNDS.search(program)
    if m is None or bounds is None:
        return None
    names = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "FRAGS_M", "FRAGS_N", "STAGES")
    return dict(zip(names, map(int, m.groups()))) | {"MIN_BLOCKS": int(bounds[1] or 0)}


def plan(program: str, M: int, N: int, sample: Sample | None, resident: int | None = None) -> Plan | str:
    """The sampling of this program's grid, or why it is simulated in full. `resident`: the blocks the GPU
    holds at once (a grid of one block a tile is sampled by its waves of them; None: not known)."""
    if sample is None:
        return "harness.sample is not set"
    tiles_m, blocks_m = TILES.search(program), BLOCKS.search(program)
    if tiles_m is None or blocks_m is None:
        return "the program does not state its tiles and blocks as the co-design kernel does"
    if ASKED.search(program) is None:
        return "the program does not take the tiles to compute as its fourth argument (an older co-design kernel)"
    bm, bn, persistent = int(tiles_m[1]), int(tiles_m[2]), int(blocks_m[1])
    tiles = -(-M // bm) * -(-N // bn)
    waves = persistent <= 0 or persistent >= tiles
    if waves and not resident:
        return f"one block a tile ({tiles} tiles), and the blocks the GPU holds at once are not known"
    blocks = resident if waves and resident else persistent
    rounds_of = "waves of the blocks the GPU holds at once" if waves else "rounds of tiles"
    if waves and blocks >= tiles:
        return f"one block a tile: {tiles} tiles, one wave of the {blocks} blocks the GPU holds at once"
    if tiles % blocks:
        return (f"{tiles} tiles over {blocks} blocks at once leave the last wave partly idle" if waves else
                f"{tiles} tiles over {blocks} blocks leave the last round partly idle")
    rounds = tiles // blocks
    if rounds < sample.min_rounds:
        return f"{rounds} {rounds_of}, fewer than harness.sample.min_rounds ({sample.min_rounds})"
    first, second = sample.rounds
    return Plan(bm, bn, tiles, blocks, rounds, (first, second), waves)


def resident_blocks(program: str, arch: Any, registers: int | None) -> int | None:
    """The blocks of this program the GPU holds at once: its SMs times the blocks one SM holds (the
    simulator's rule, `model.blocks_per_sm`); None where the program does not state its knobs."""
    from harnesses.accelsim.model import blocks_per_sm

    k = knobs(program)
    return None if k is None else blocks_per_sm(k, arch, registers)[0] * arch.sms


def held(p: Plan, first: Outcome, sms: int) -> str | None:
    """Where a wave sample's first simulation held another count of blocks at once than the plan's, why
    it cannot stand for the grid; None where it held as planned (or the plan is of rounds)."""
    said = first.metrics.get("ctas_per_sm")
    if not p.waves or (said is not None and said * sms == p.blocks):
        return None
    if said is None:
        return "the simulator did not say how many blocks an SM held (CTA/core), so the waves cannot be checked"
    return (f"the simulator held {said} blocks an SM ({said * sms} at once), not the {p.blocks // sms} the "
            "sample's waves were planned for")


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
                     "waves": p.waves,
                     "cycles": [m1["cycles"], m2["cycles"]], "kernel_cycles": [m1["kernel_cycles"], m2["kernel_cycles"]],
                     "per_round": round((m2["cycles"] - m1["cycles"]) / (r2 - r1), 1)}
    return Outcome(second.status, out, second.log, round(first.seconds + second.seconds, 3), second.device,
                   score=out["cycles"])
