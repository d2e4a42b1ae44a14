"""How a GEMM configuration fits a problem shape: its output tiles, the waves they run in on the GPU's
SMs, the work of the busiest SM, and a rough time from those.

The time is a model for ordering what to try first at a shape (which tile size, how many CTAs, whether
to split K, how deep a load ring), never a measurement and never part of a decision: each SM is a
tensor-core rate (the dense peak over the SMs) fed at a fixed number of FLOPs per byte of operand loaded
and by no more than its load ring holds per round trip to L2; a tile costs its MMAs or its loads
(whichever is longer) plus its epilogue and a fixed start, the busiest slot sets the time, and a K split
adds a pass over the fp32 partials through DRAM, or, where the blocks of one tile's split form a cluster
(cluster[0] == split_k), an exchange of the partials between their shared memories. Under stream-K the
tiles of the last partial wave and one full wave before it are shared out evenly by k-iterations, at the
cost of writing and reading back a partial tile (FIXUP_GBPS). Blocks launched in clusters fill only the
slots whole clusters fit in (the driver's count, where the run has one).

A floor under that, for the shapes that move more bytes than they compute: the operands and the output
read and written once from DRAM, at STREAM_GBPS (STREAM_GBPS_PLAIN where the operands' tensor maps do not
promote L2 fills to 256 bytes; PER_SM_STREAM_GBPS a block where few blocks run, as in a last round of
blocks). A tile's epilogue and start come on top: they do not overlap its loads. The
estimate is a smooth maximum of the two, so configurations at the floor still rank by how close their
own time comes to it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from harnesses.hopper_gemm.manifest import Launch

PEAK_TFLOPS = 989.4
"""The dense bf16 peak of an H100 SXM at its highest clock, where the run has not measured one."""
FLOPS_PER_BYTE = 60.0
"""Operand bytes an SM can load per FLOP it computes at peak (L2 to shared memory), as a ratio: a tile
whose FLOPs per byte loaded fall below this is bound by its loads (128×128: 64, 64×128: 43)."""
TILE_START_US = 0.6
"""What a tile costs beside its main loop: filling the pipeline, the first MMA's wait."""
DRAM_GBPS = 3000.0
"""For the pass that adds a K split's fp32 partials."""
DSMEM_GBPS = 3000.0
"""What distributed shared memory moves between the SMs of clusters, over the whole GPU (published H100
microbenchmarks put it near 3 TB/s, less for larger clusters); an SM's share is this over the SMs."""
FIXUP_GBPS = 8.0
"""What stream-K's shared phase costs beyond an even split, as the rate at which one SM would move its two
fp32 partial tiles (one written, one read back): measured on an H100 from wgmma_cluster with and without
STREAMK at 4096³ (30 µs for 256 KB: 8.6 GB/s) and 2304×8192×6144 (64 µs for 295 KB). Timed in the
kernel, the store of a 128 KB partial alone takes 3.7 µs and its add 2.4 µs; the rest is the shared
phase's main loop, slower by a tenth with the CTAs on twice as many tiles at once."""
STREAM_GBPS = 2850.0
"""What one launch reads of a matrix from DRAM at best: a TMA ring over 117 MB on an H100, 41-43 µs, its
tensor map promoting L2 fills to 256 bytes (a plain load ring does as well)."""
STREAM_GBPS_PLAIN = 2740.0
"""The same for a TMA ring whose tensor maps do not promote L2 fills: 2-4% slower in that measurement (117
and 235 MB), 1-5% in GEMMs that stream B (128×28672×4096, 16×28672×4096, 128×6144×4096 and
256×4096×14336 on an H100)."""
PER_SM_STREAM_GBPS = 40.0
"""What one block reads from DRAM at most: 66 blocks took 13 µs (launch excluded) for 33.6 MB."""
RING_LATENCY_US = 1.45
"""How long a load takes to come back from L2 under a full GPU's load: a block whose ring holds ring_k
columns of K in flight loads at most that many per round trip. Measured on an H100 from 128×128 tiles at
one tile an SM (512×4096×4096 and 512×4096×14336): 0.37 µs a 64-column stage with 4 stages in flight,
0.33 µs (the MMAs' pace, and cuBLAS's) with 6."""
CLUSTER_REDUCE_US = 0.5
"""What a split reduced in its cluster costs beside moving the partials: two cluster barriers and the
round trips of the first remote reads."""
SMOOTH = 4
"""The exponent of the smooth maximum of the SMs' time and the DRAM floor: equal, they give 1.19 times
either; at half the floor, the SMs' time adds 1.5%."""
FULL_RING_K = 256
"""Columns of K a load ring holds that RING_LATENCY_US was measured with (four 64-column stages). Of
configurations the estimate rates alike, the ones whose ring holds fewer come after: shallower rings
measured slower than the model says where their stages are large (256×152 tiles at 3000×5000×2000:
0.968× cuBLAS with three stages, 0.985× with four), which the round trip alone does not show."""
SMEM_PER_SM = 233472
"""Shared memory of a Hopper SM (228 KB), of which each resident block also takes 1 KB."""
THREADS_PER_SM = 2048


@dataclass(frozen=True)
class Fit:
    tile: tuple[int, int]
    """BM × BN of one output tile."""
    split: int
    """Slices of K each tile's reduction is cut into (1: none)."""
    tiles: int
    """Units of work: output tiles times K slices."""
    ctas: int
    """Blocks launched."""
    slots: int
    """Blocks the GPU holds at once: the SMs times the blocks one SM holds."""
    per_slot: int
    """Units the busiest block runs (one slot's work)."""
    useful: float
    """Share of the tiles' area inside C (the rest is past the edge of a ragged shape)."""
    estimate_us: float
    sms: int
    cluster_reduce: bool = False
    """The split's partials are added up inside the cluster, through distributed shared memory."""
    stream_k: bool = False
    """The last waves are shared out by k-iterations (the tiles do not fill whole waves)."""
    promoted: bool = False
    """The operands' tensor maps promote L2 fills to 256 bytes (the DRAM floor at STREAM_GBPS)."""
    ring_k: int = 0
    """Columns of K the load ring holds in flight (0: no ring stated)."""
    l2_gb: float = 0.0
    """Operand bytes the tiles read from L2 in one launch, in GB: every tile reads its BM rows of A and its
    BN columns of B over its K, an operand its cluster multicasts once a cluster. Not part of the estimate:
    of configurations the estimate cannot tell apart, the one that moves fewer bytes goes first (a GEMM of
    many waves runs at the power limit, where a byte not moved is a clock kept: 8192×57344×8192 on an H100,
    128×256 tiles 0.978× the best cuBLASLt algorithm, the same in clusters of two sharing B 1.008×; and a tile
    that covers M reads B once: 32×57344×8192, swapped split-K tiles 16 rows high 0.963×, 32 rows high 1.026×)."""

    @property
    def tie_break(self) -> int:
        """How to order fits of equal estimate, lower first: the columns of K a stated ring holds short of
        FULL_RING_K."""
        return max(0, FULL_RING_K - self.ring_k) if self.ring_k else 0

    @property
    def estimate(self) -> float:
        """What the search compares: the estimated time in µs."""
        return self.estimate_us

    @property
    def waves(self) -> float:
        """Units over slots: 0.24 leaves three quarters of the GPU idle, 1.03 runs a second wave of 3%."""
        return self.tiles / self.slots

    def describe(self) -> str:
        """'128×256 tiles: 32 for 132 SMs (0.24 waves), the busiest SM runs 1, 100% useful area'."""
        bm, bn = self.tile
        where = " reduced in the cluster" if self.cluster_reduce else ""
        split = f" × {self.split} K slices{where}" if self.split > 1 else ""
        units = "units" if self.split > 1 else "tiles"
        busiest = (f"the last waves shared by k-iterations (stream-K), {self.tiles / min(self.ctas, self.slots):.2f} "
                   "tiles' work a block" if self.stream_k else f"the busiest block runs {self.per_slot}")
        return (f"{bm}×{bn} tiles{split}: {self.tiles} {units} for {self.sms} SMs ({self.waves:.2f} waves), {busiest}, "
                f"{self.useful:.0%} of the tile area inside C{', L2 fills promoted to 256 bytes' if self.promoted else ''}")

    def as_dict(self) -> dict:
        """Its fields, with what follows from them: the waves, and how full the last of them is."""
        return {**asdict(self), "tile": list(self.tile), "waves": round(self.waves, 4),
                "last_wave": round(self.waves - math.ceil(self.waves) + 1, 4),
                "useful": round(self.useful, 4), "estimate_us": round(self.estimate_us, 2),
                "l2_gb": round(self.l2_gb, 3)}


def fit(launch: Launch, M: int, N: int, K: int, sms: int, peak_tflops: float | None = None,
        out_bytes: int = 2, cluster_slots: dict[str, int] | None = None) -> Fit | None:
    """The fit of a kernel whose launch is resolved at M×N×K, by the tile its manifest states; None
    where it states none. `cluster_slots`: blocks resident at once by cluster size, one block an SM."""
    if launch.tile is None:
        return None
    (bm, bn), split = launch.tile, launch.split_k
    tiles_m, tiles_n = math.ceil(M / bm), math.ceil(N / bn)
    tiles = tiles_m * tiles_n * split
    ctas = launch.grid[0] * launch.grid[1] * launch.grid[2]
    threads = launch.block[0] * launch.block[1] * launch.block[2]
    per_sm = max(1, min(THREADS_PER_SM // threads, SMEM_PER_SM // (launch.smem + 1024)))
    slots = sms * per_sm
    size = launch.cluster[0] * launch.cluster[1] * launch.cluster[2]
    if size > 1 and cluster_slots and str(size) in cluster_slots:
        slots = min(slots, cluster_slots[str(size)] * per_sm)
    busy = min(ctas, slots)
    per_slot = math.ceil(tiles / busy)
    peak_sm = (peak_tflops or PEAK_TFLOPS) * 1e12 / sms
    k = math.ceil(K / split)
    # Blocks sharing an SM share its rate: a slot's unit takes that many times as long. Their rings
    # are in flight at once, so the round trips are not shared.
    sharing = min(per_sm, math.ceil(busy / sms))
    round_trips = k / launch.ring_k * RING_LATENCY_US * 1e-6 / sharing if launch.ring_k else 0.0
    main = max(2 * bm * bn * k / peak_sm, 2 * (bm + bn) * k * FLOPS_PER_BYTE / peak_sm, round_trips)
    in_cluster = split > 1 and launch.cluster[0] == split
    exchange_us = 0.0
    if in_cluster:
        # A block leaves its partial in its own shared memory, reads the other blocks' parts of its
        # BM / split rows through DSMEM and writes those rows of the output.
        exchange_us = bm * bn * 4 * (split - 1) / split / (DSMEM_GBPS * 1e3 / sms) + CLUSTER_REDUCE_US
        epilogue = bm * bn * out_bytes / split * FLOPS_PER_BYTE / peak_sm
    else:
        epilogue = bm * bn * (4 if split > 1 else out_bytes) * FLOPS_PER_BYTE / peak_sm
    unit_us = (main + epilogue) * 1e6 + exchange_us + TILE_START_US
    estimate = per_slot * unit_us * sharing
    stream_k = launch.stream_k and tiles % busy != 0
    if stream_k:
        # Whole waves but the last run as tiles; the rest is shared evenly, each block finishing or leaving
        # about two partial tiles (a start and an end), each written to L2 once and read back once.
        whole = max(0, tiles // busy - 1)
        shared = (tiles - whole * busy) / busy
        partial_us = bm * bn * 4 * 2 / (FIXUP_GBPS * 1e3)
        estimate = (whole * unit_us + shared * (unit_us - TILE_START_US) + 2 * TILE_START_US + partial_us) * sharing
    # The floor: the operands and the output through DRAM once, round by round (a last round of few
    # blocks reads its share at their rate); the tile's epilogue and start on top.
    dram = 2 * (M * K + N * K) + out_bytes * M * N
    last = tiles - (per_slot - 1) * busy
    a_reads = tiles_n / (size if launch.multicast == "A" else 1)
    b_reads = tiles_m / (size if launch.multicast == "B" else 1)
    l2_gb = 2 * K * (M * a_reads + N * b_reads) / 1e9
    operands = [tm for tm in launch.tensor_maps.values() if tm.get("tensor") in ("A", "B")]
    promoted = bool(operands) and all(tm.get("l2_promotion", 0) >= 256 for tm in operands)
    stream = STREAM_GBPS_PLAIN if operands and not promoted else STREAM_GBPS
    dram_us = sum(units * dram / tiles / (min(stream, units * PER_SM_STREAM_GBPS) * 1e3)
                  for units in [busy] * (per_slot - 1) + [last])
    floor = dram_us + (unit_us - main * 1e6) * sharing
    # Two limits near each other slow a kernel more than either alone (its loads queue behind the DRAM's):
    # a smooth maximum, which also ranks the configurations a floor would tie by how close they run to it.
    estimate = (estimate ** SMOOTH + floor ** SMOOTH) ** (1 / SMOOTH)
    if split > 1 and not in_cluster:
        estimate += M * N * (4 * split + out_bytes) / (DRAM_GBPS * 1e3) + 2.0
    return Fit(tile=(bm, bn), split=split, tiles=tiles, ctas=ctas, slots=slots, per_slot=per_slot,
               useful=M * N / (tiles_m * bm * tiles_n * bn), estimate_us=estimate, sms=sms,
               cluster_reduce=in_cluster, stream_k=stream_k, promoted=promoted, ring_k=launch.ring_k or 0,
               l2_gb=l2_gb)
