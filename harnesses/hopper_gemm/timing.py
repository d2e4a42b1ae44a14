"""The interleaved timing of a candidate and its baseline, on a `Bench` (`measure.py`), inside the
evaluation child: an estimate of each kernel, a plan (`screen.plan`), a warm-up, then samples in
alternating order (A B, B A, ...), every candidate launch on fresh inputs and checked after."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import cupy as cp
import numpy as np

from autodiscovery.toolkit import child
from harnesses.hopper_gemm.screen import Precise, Screen, plan

if TYPE_CHECKING:
    from harnesses.hopper_gemm.gpu import Kernel
    from harnesses.hopper_gemm.measure import Bench


def interleave(bench: Bench, kernels: dict[str, Kernel | None], reps: int, warmup_ms: float, sample_ms: float,
               budget_s: float, screen: Screen | None = None, known_ms: dict[str, float] | None = None,
               precise: Precise | None = None) -> tuple[np.ndarray, list[int], str | None]:
    """Time the kernels in alternating order (A B, B A, ...); returns ms per launch [rep, kernel], the
    launches per sample, and why the timing stopped early (None: it did not): the screen's reason, or
    "precise" (`precise`: the interval around the median ratio of the first two kernels is as narrow
    as it asks, so more pairs would tell nothing more).

    Each sample repeats one kernel on fresh inputs until it lasts about `sample_ms` (as many
    launches as the pool has slots at most); warm-up samples run for about `warmup_ms` first so
    clocks and power settle. Slow kernels get fewer pairs (at least 10) so that timing stays
    within about `budget_s`. Candidates' launches are all checked (see `results`). `known_ms`: a
    kernel's time known already (its gate's launches, where they are slow), so no launch is spent
    estimating it. With `screen` (the first kernel the candidate, the second the baseline), timing
    stops early where the screen says (`screen.py`); a candidate whose first launches are far below
    its bar gets no warm-up.
    """
    names = list(kernels)
    run = bench.launchers(kernels)
    launched = dict.fromkeys(names, 0)

    def sample(k: int, n: int, phase: str, est: float | None = None) -> tuple[cp.cuda.Event, cp.cuda.Event]:
        name = names[k]
        events = bench.sample(name, run[name], n, kernels[name] is not None, phase, launched[name], est)
        launched[name] += n
        return events

    est: list[float] = []
    bench.estimates = est
    for k, name in enumerate(names):
        if known_ms and name in known_ms:
            est.append(known_ms[name])
            continue
        f0, f1 = sample(k, 1, "estimate")
        e0, e1 = sample(k, 2, "estimate")
        e1.synchronize()
        # The lesser of the two: a first launch that loads a library's kernels, or a pair that waited for
        # the host, would make a kernel of microseconds look several times slower than it is.
        est.append(max(min(cp.cuda.get_elapsed_time(f0, f1), cp.cuda.get_elapsed_time(e0, e1) / 2), 1e-3))
    child.beat()
    timing = plan(est, sample_ms, warmup_ms, reps, budget_s, bench.max_slots, screen)
    inner = timing.inner
    # Warm-up for about `warmup_ms` of the GPU's time: the plan's rounds count the kernels' time alone,
    # and the wall clock stops them sooner where the draws and checks around the launches cost more.
    warm_until = time.perf_counter() + warmup_ms / 1e3
    for _ in range(timing.warmup_rounds):
        for k in range(len(names)):
            sample(k, inner[k], "warmup", est[k] / 1e3)
        if timing.slow:
            bench.stream.synchronize()
            child.beat()
        if time.perf_counter() >= warm_until:
            break
    reps = timing.reps
    events: list[list[tuple[cp.cuda.Event, cp.cuda.Event] | None]] = [[None] * len(names) for _ in range(reps)]

    def read(rows: list) -> np.ndarray:
        bench.stream.synchronize()
        return np.array([[cp.cuda.get_elapsed_time(a, b) / inner[k] for k, (a, b) in enumerate(row)]
                         for row in rows])

    for r in range(reps):
        order = range(len(names)) if r % 2 == 0 else reversed(range(len(names)))
        for k in order:
            events[r][k] = sample(k, inner[k], "timed", est[k] / 1e3)
        if timing.slow:
            bench.stream.synchronize()
            child.beat()
        if screen is not None and r + 1 in timing.stops and r + 1 < reps and (why := screen.stops(read(events[:r + 1]), timing.far)):
            return read(events[:r + 1]), inner, why
        if precise is not None and r + 1 < reps and precise.due(r + 1) and precise.met(times := read(events[:r + 1])):
            return times, inner, "precise"
    return read(events), inner, None
