"""The gate and the interleaved timing, run inside the evaluation child.

Every launch of a candidate, checked or timed, is prepared the same way, so nothing tells the kernel
which one it is in:
- its A and B hold content drawn for this launch alone (a counter-based hash of a fresh seed, from one
  of several distributions), so no launch ever sees content that another launch saw;
- its C starts as the bf16 NaN pattern;
- its buffers come from one pool of slots that the gate and the timing share; each slot's A, B and C
  lie in one allocation, each between guard zones (autodiscovery/toolkit/guard.py) drawn afresh for the
  launch, and so does a kernel's workspace.
After the launch, untimed: A and B are derived again from their seed and compared (a kernel that wrote
to its inputs is caught), every guard zone is verified (a write past or before a buffer is caught, on
memory that would not have faulted), cuBLAS computes the same product, and the output is compared with
it. Every
launch is checked, the timed ones included. A timed sample is: draws, poison and an L2 flush (untimed:
a memset of twice L2, then a read of another twice L2, so that L2 holds none of the inputs and no dirty
line whose write-back the timed kernel would pay for), then the launches back to back between two
events, then the checks (untimed).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import cupy as cp
import numpy as np

from autodiscovery.toolkit import child
from harnesses.hopper_gemm.gpu import Cublas, DeviceInfo, Kernel
from harnesses.hopper_gemm.helpers import Helpers
from harnesses.hopper_gemm.slots import JOB, arena, jobs
from harnesses.hopper_gemm.verdict import (  # noqa: F401  (the names callers take from here)
    COLUMNS,
    DISTRIBUTIONS,
    Check,
    Draw,
    GateFailure,
    Tolerance,
    breach_words,
    failure,
    verdict,
)

# Timed launches draw uniform [-1, 1) inputs, every one fresh; the gate draws from all five. The
# distribution moves the ratio by about 1% (data changes power, and these GPUs run at their power
# limit), so timing keeps to one: uniform, as the timing always has (timings stay comparable).
TIMED = 1
GATE_PHASES = ("gate", "dependent")  # the checked launches of the gate (the others: timing's)
SLOT_MEMORY_BYTES = 16 << 30  # the most the input/output pool may take
MAX_SLOTS = 64
HOST_LAUNCH_S = 25e-6  # what queuing one launch costs the host, about
UPSTREAM_S = 30e-6  # how long the kernel before a dependent launch waits before it writes the inputs


class Bench:
    """A pool of input/output slots, cuBLAS, the helper kernels and a stream, for one problem shape."""

    def __init__(self, M: int, N: int, K: int, info: DeviceInfo, helpers_cubin: str,
                 baseline: str = "gemmex", lt_algo: int | None = None, both: bool = False,
                 guarded: bool = True) -> None:
        self.M, self.N, self.K = M, N, K
        self.guarded = guarded
        """Slots in guarded arenas; else (under compute-sanitizer) A, B and C allocations of their own."""
        self.zones: list[list[cp.ndarray]] = []  # each slot's guard zones, in ZONES order (A, B, C)
        self.watched: dict[str, list[cp.ndarray]] = {}  # each kernel's workspace zones, by kernel name
        self.zone_seed: dict = {}  # a workspace's zones' draw, by kernel name
        self.jobs = np.zeros(0, JOB)
        """Every slot's buffers (A, B, C, then its guard zones) as fill_many and verify_many take them."""
        self.per_slot = 9 if guarded else 3
        self._jobs_dev: cp.ndarray | None = None  # `jobs` on the device (None: not since a slot was added)
        self.drawn = 0
        """Slots 0 to drawn-1 hold content drawn for a launch (a baseline's sample reuses it)."""
        self._tables: list[cp.ndarray] = []  # every table uploaded: a launch queued before may still read it
        self.arenas: list[cp.ndarray] = []  # the allocations the slots and workspaces are views of
        self.info = info
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.stream.use()
        self.rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
        # The reference every output is checked against (none under compute-sanitizer, where nothing is
        # checked: loading cuBLAS there costs each tool seconds).
        self.cublas = Cublas(self.stream) if guarded else None
        self.helpers = Helpers(helpers_cubin, self.stream, info.sms)
        self.slots: list[tuple[cp.ndarray, cp.ndarray, cp.ndarray]] = []
        self.draws: dict[int, Draw] = {}
        self.ref = cp.empty((M, N), cp.uint16)
        self.flush = cp.empty(2 * info.l2_bytes, cp.uint8)
        self.clean = cp.zeros(2 * info.l2_bytes, cp.uint8)
        """Read after the flush's memset: L2 then holds only clean lines, whose eviction costs the timed
        kernel nothing (the memset's dirty lines cost a memory-bound kernel ~10% of its time)."""
        self.sink = cp.zeros(1, cp.uint32)
        self._aside: tuple[cp.ndarray, cp.ndarray] | None = None  # inputs set aside for arrive_late
        self._go: tuple[cp.cuda.PinnedMemoryPointer, np.ndarray] | None = None  # arrive_late's host-written word
        self.estimates: list[float] = []
        """The last timing's estimate of each kernel's launch, in ms (`timing.interleave`)."""
        self._epoch = 0
        self.checks: list[Check] = []
        self._stats: list[cp.ndarray] = []  # the stats table, in chunks of consecutive rows
        self._rows_used = 0
        self._rows_held = 0
        self.baseline = self._baseline(baseline, lt_algo) if guarded else None
        self.other_kind = ("best_lt" if baseline == "gemmex" else "gemmex") if both else None
        """The other cuBLAS, timed beside the baseline so that every result states both (None: not timed)."""
        self.other = self._baseline(self.other_kind, lt_algo) if self.other_kind else None

    # ---- the pool -----------------------------------------------------------------------
    @property
    def slot_bytes(self) -> int:
        return 2 * ((self.M + self.N) * self.K + self.M * self.N)

    @property
    def max_slots(self) -> int:
        free = cp.cuda.runtime.memGetInfo()[0]
        return int(max(1, min(MAX_SLOTS, min(SLOT_MEMORY_BYTES, free // 2) // self.slot_bytes)))

    def slot(self, i: int) -> tuple[cp.ndarray, cp.ndarray, cp.ndarray]:
        while len(self.slots) <= i:
            shapes = [("A", (self.M, self.K)), ("B", (self.N, self.K)), ("C", (self.M, self.N))]
            if not self.guarded:
                self.slots.append(tuple(cp.empty(shape, cp.uint16) for _, shape in shapes))
            else:
                raw, views, zones = arena([(name, shape) for name, shape in shapes])
                self.slots.append(tuple(views))
                self.zones.append(zones)
                self.arenas.append(raw)
            self._add_jobs(len(self.slots) - 1)
        return self.slots[i]

    def _add_jobs(self, i: int) -> None:
        self.jobs = np.concatenate([self.jobs, jobs(i, self.slots[i], self.zones[i] if self.guarded else [])])
        self._jobs_dev = None

    def _jobs_of(self, first: int) -> int:
        """The device address of slot `first`'s jobs (the table uploaded where a slot was added since)."""
        if self._jobs_dev is None:
            self._jobs_dev = cp.asarray(self.jobs.view(np.uint8))
            self._tables.append(self._jobs_dev)
        return self._jobs_dev.data.ptr + first * self.per_slot * JOB.itemsize

    def _blocks(self, slots: int) -> int:
        """Blocks a job, where `slots` slots are drawn or checked at once: about eight an SM over their
        operands, whose draws are arithmetic as much as stores (a guard zone's job ends in its first
        blocks)."""
        return max(4, -(-8 * self.info.sms // (2 * slots)))

    def workspace(self, name: str, nbytes: int) -> cp.ndarray:
        """A kernel's workspace (zero), between guard zones that every check of its launches verifies."""
        if not self.guarded:
            return cp.zeros(nbytes, cp.uint8)
        raw, (view,), zones = arena([("W", (nbytes // 2 + nbytes % 2,))])
        raw.fill(0)
        self.watched[name] = zones
        self.arenas.append(raw)
        for k, z in enumerate(zones):
            self.helpers.fill(z, self._seed_of(name, k), 0, flip=False)
        return view.view(cp.uint8)[:nbytes]

    def _seed_of(self, key: str, k: int) -> int:
        return (hash((key, k, self.zone_seed.get(key, 0))) & (2**62 - 1)) | 1

    def _gemmex(self) -> Cublas:
        """cublasGemmEx: the baseline, and the truth every check compares with (a guarded bench's only)."""
        if self.cublas is None:
            raise RuntimeError("an unguarded bench has no cuBLAS: it neither checks nor times a baseline")
        return self.cublas

    def _baseline(self, kind: str, lt_algo: int | None) -> Callable[[cp.ndarray, cp.ndarray, cp.ndarray], None]:
        if kind == "gemmex":
            return self._gemmex().gemm
        from harnesses.hopper_gemm.cublaslt import CublasLt

        self.lt = CublasLt(self.stream)
        A, B, C = self.slot(0)
        self.prepare(Draw(0, self.seed(), 0))
        # The algorithm chosen (its timings with it) or the one a recorded choice named.
        self.lt_choice = self.lt.choose(A, B, C) if lt_algo is None else self.lt.use(A, B, C, lt_algo)
        return self.lt.gemm

    # ---- one launch's inputs and its check ----------------------------------------------
    def seed(self) -> int:
        return int(self.rng.integers(1, 2**63))

    def prepare(self, draw: Draw) -> None:
        """Fresh content in the slot's A and B, the poison in its C, and its guard zones drawn afresh, all
        from the draw's seed (untimed)."""
        self.prepare_many(draw.slot + 1, draw.seed, draw.dist, first=draw.slot)

    def prepare_many(self, n: int, seed: int, dist: int, first: int = 0) -> list[Draw]:
        """`prepare` for slots `first` to n-1 at once (a timed sample's), each slot's content its own, from
        one seed."""
        self.slot(n - 1)
        self.helpers.fill_many(self._jobs_of(first), (n - first) * self.per_slot, seed, dist, self._blocks(n - first))
        draws = [Draw(j, seed, dist) for j in range(first, n)]
        self.draws.update((d.slot, d) for d in draws)
        self.drawn = max(self.drawn, n) if first <= self.drawn else self.drawn
        return draws

    def _rows(self, n: int) -> int:
        """The first of n consecutive fresh rows of the stats table (a new chunk where the last has too
        few left: the rows skipped stay zero, and no check reads them)."""
        if self._rows_used + n > self._rows_held:
            size = max(64, n, self._rows_held)
            self._stats.append(cp.zeros((size, COLUMNS), cp.uint64))
            self._rows_used, self._rows_held = self._rows_held, self._rows_held + size
        first = self._rows_used
        self._rows_used += n
        return first

    def _row_ptr(self, row: int) -> int:
        for chunk in self._stats:
            if row < len(chunk):
                return chunk.data.ptr + row * COLUMNS * 8
            row -= len(chunk)
        raise IndexError(row)

    def check(self, slot: int, kernel: str, phase: str, index: int) -> Check:
        """Queue the checks of the launch that used `slot`: inputs unchanged, guard zones intact, output
        against cuBLAS."""
        return self.check_many([slot], kernel, phase, index)[0]

    def check_many(self, slots: list[int], kernel: str, phase: str, first_index: int) -> list[Check]:
        """`check` for the launches that used these slots (consecutive, from one draw's seed where more
        than one: a timed sample's), the inputs' and the zones' checks in one launch."""
        draw = self.draws[slots[0]]
        assert all(self.draws[s].seed == draw.seed and self.draws[s].dist == draw.dist for s in slots)
        assert slots == list(range(slots[0], slots[0] + len(slots)))
        first = self._rows(len(slots))
        # verify_many counts slot s's mismatches at row `row of s` of the table it is given: rows from here.
        table = self._row_ptr(first) - slots[0] * COLUMNS * 8
        self.helpers.verify_many(self._jobs_of(slots[0]), len(slots) * self.per_slot, draw.seed, draw.dist, table,
                                 self._blocks(len(slots)))
        if self.guarded and (zones := self.watched.get(kernel)) is not None:  # verified, then drawn afresh
            ptr = self._row_ptr(first)
            for k, z in enumerate(zones):
                self.helpers.verify(z, self._seed_of(kernel, k), 0, False, ptr + (14 + k) * 8)
            self.zone_seed[kernel] = self.zone_seed.get(kernel, 0) + 1
            for k, z in enumerate(zones):
                self.helpers.fill(z, self._seed_of(kernel, k), 0, flip=False)
        out = []
        for j, s in enumerate(slots):
            A, B, C = self.slot(s)
            self._gemmex().gemm(A, B, self.ref)
            self.helpers.compare(C, self.ref, self._row_ptr(first + j))
            out.append(Check(kernel, phase, first_index + j, draw.dist, first + j))
        self.checks.extend(out)
        return out

    def results(self, tolerance: Tolerance) -> list[tuple[Check, dict]]:
        """Every queued check with its result (waits for the GPU)."""
        self.stream.synchronize()
        table = cp.concatenate(self._stats).get() if self._stats else np.zeros((0, COLUMNS), np.uint64)
        return [(c, verdict(table[c.row], tolerance)) for c in self.checks]

    # ---- the gate -----------------------------------------------------------------------
    def gate(self, kernel: Kernel, name: str, draws: int, tolerance: Tolerance) -> list[dict]:
        """`draws` launches on fresh inputs, cycling through the distributions; each launch checked and
        timed (its "ms": a slow kernel's estimate, `screen.slow_estimate`). One draw at a time, each
        a sign of progress to the parent (`child.beat`): a slow kernel is never taken for a hung one.

        Raises GateFailure with the reason of the first failing draw.
        """
        first = len(self.checks)
        nslots = min(self.max_slots, 2)
        dependent = bool(kernel.launch.get("pdl"))
        launched: list[tuple[cp.cuda.Event, cp.cuda.Event] | None] = []
        for d in range(draws):
            draw = Draw(d % nslots, self.seed(), d % len(DISTRIBUTIONS))
            self.prepare(draw)
            late = dependent and d % 2 == 1
            self.helpers.smem_poison(self.info.max_smem_optin)  # shared memory never written reads as NaN
            if late:  # every other draw: the inputs arrive from the kernel before, late
                self.arrive_late(draw.slot)
            # Timed with events, but not a late draw: an event between the kernel before and a dependent
            # launch would make the launch wait for that kernel's end, which is what the draw tests.
            events = None if late else (cp.cuda.Event(), cp.cuda.Event())
            if events:
                events[0].record(self.stream)
            try:
                kernel(kernel.bind(*self.slot(draw.slot)))
            finally:
                if events:
                    events[1].record(self.stream)
                if late:
                    self.release_upstream()
            self.check(draw.slot, name, "dependent" if late else "gate", d)
            launched.append(events)
            self.stream.synchronize()
            child.beat()
        out = []
        for (c, r), events in zip(self.results(tolerance)[first:], launched):
            timed = {"ms": round(cp.cuda.get_elapsed_time(*events), 4)} if events else {"dependent": True}
            out.append(r | {"draw": c.index, "dist": DISTRIBUTIONS[c.dist]} | timed)
            if not r["ok"]:
                raise GateFailure(failure(c, r, tolerance))
        return out

    def arrive_late(self, slot: int) -> None:
        """Make the slot's inputs arrive from the kernel queued before the next launch: they are copied
        aside and poisoned, and `upstream` lets the next kernel start at once, holds until
        `release_upstream` (called once that launch is queued), waits UPSTREAM_S, copies them back and
        poisons C. A dependent launch that reads or writes global memory before its griddepcontrol.wait
        computes from NaN, or loses its output to the poison, whatever the host's pace between the two."""
        A, B, C = self.slot(slot)
        if self._aside is None:  # one pair for the bench's shape, made at its first use
            self._aside = (cp.empty_like(A), cp.empty_like(B))
        if self._go is None:  # a word of mapped host memory, read by the GPU where the host wrote it
            mem = cp.cuda.PinnedMemoryPointer(cp.cuda.PinnedMemory(4, cp.cuda.runtime.hostAllocMapped), 0)
            self._go = (mem, np.frombuffer(mem, np.uint32, 1))
        a, b = self._aside
        a[...] = A
        b[...] = B
        self.helpers.poison(A)
        self.helpers.poison(B)
        self._epoch = self._epoch % 0xFFFFFFFF + 1
        self.helpers.upstream(self._go[0].ptr, self._epoch, a, A, b, B, C, UPSTREAM_S,
                              blocks=max(1, self.info.sms // 8))

    def release_upstream(self) -> None:
        """The dependent launch is queued: the kernel before it may go on (see arrive_late)."""
        if self._go is None:
            raise RuntimeError("release_upstream without arrive_late: no launch waits for its inputs")
        self._go[1][0] = self._epoch

    # ---- timing -------------------------------------------------------------------------
    def launchers(self, kernels: dict[str, Kernel | None]) -> dict[str, Callable[[int], None]]:
        """One launcher per name (None means the cuBLAS baseline, or under the other baseline's name, that
        one), each taking a slot index."""
        out: dict = {}
        for name, kernel in kernels.items():
            if kernel is None:
                fn = self.other if name == self.other_kind else self.baseline
                out[name] = lambda i, fn=fn: fn(*self.slot(i))
            else:
                params: dict[int, int] = {}

                def launch(i: int, k: Kernel = kernel, p: dict = params) -> None:
                    if i not in p:
                        p[i] = k.bind(*self.slot(i))
                    k(p[i])
                out[name] = launch
        return out

    def sample(self, name: str, launch: Callable[[int], None], n: int, checked: bool, phase: str,
               first_index: int, est_s: float | None) -> tuple[cp.cuda.Event, cp.cuda.Event]:
        """n launches timed together between two events. A candidate's (`checked`) are each on inputs
        drawn for it, and checked after; cuBLAS's, which is trusted, are on the inputs a candidate's
        sample drew last (drawn for them where none has yet): the same kind of content, cold in L2 alike,
        at none of the cost of drawing it."""
        if checked:
            draws = self.prepare_many(n, self.seed(), int(self.rng.integers(TIMED)))
        else:
            if n > self.drawn:
                self.prepare_many(n, self.seed(), int(self.rng.integers(TIMED)), first=self.drawn)
            draws = [self.draws[j] for j in range(n)]
        cp.cuda.runtime.memsetAsync(self.flush.data.ptr, 0, self.flush.nbytes, self.stream.ptr)  # cold L2
        self.helpers.scrub(self.clean, self.sink)  # and clean
        # Keep the GPU busy while the host queues the sample, so no launch waits for the host.
        self.helpers.delay(n * max(0.0, HOST_LAUNCH_S - (est_s or 0.0)) + 50e-6)
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(self.stream)
        for d in draws:
            launch(d.slot)
        e1.record(self.stream)
        if checked:
            self.check_many([d.slot for d in draws], name, phase, first_index)
        return e0, e1


def elapsed(start: float) -> float:
    return round(time.perf_counter() - start, 4)
