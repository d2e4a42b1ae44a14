"""What a measurement costs: how many launches each phase of the timing takes, and when it may stop
before its full count.

A measurement costs what it can decide. A candidate below the bar it must clear (the incumbent's
× cuBLAS, or cuBLAS itself for a run's first) is recorded with what its first pairs say: one that its
first launches put far below the bar (at most `far` of it) is timed for `far_pairs` pairs, no warm-up,
and stops there if every one of those pairs is far below too; one below the bar by more than the slack
stops after `pairs` pairs if their median is. A screened measurement can revert a candidate, never keep
one against an incumbent. The gate is never shortened: every draw is checked, whatever the timing does.

Neither rule can be fooled into a win: a kernel slow on its first launches only is timed on, since its
pairs are not all far below; a kernel fast on its first launches only is timed to the full count, where
the median of every pair decides. Both read the pairs, never the first launches alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Screen:
    """Where timing may stop: times are [pair, kernel] with the candidate first and the baseline second."""

    bar: float
    """The ratio the candidate must clear: the incumbent's × cuBLAS, or 1 (cuBLAS) for the first."""
    pairs: int
    """After this many pairs a median below `bar × (1 − slack)` stops the timing (0: never)."""
    slack: float
    far: float
    """Far below: a ratio under `bar × far`."""
    far_pairs: int
    """Pairs timed, without warm-up, for a candidate whose first launches are far below."""

    @property
    def below(self) -> float:
        return self.bar * (1 - self.slack)

    def far_from(self, estimate_ms: list[float]) -> bool:
        """Whether the first launches' times ([candidate, baseline, ...], ms) put the candidate far below."""
        return bool(self.far_pairs) and estimate_ms[1] / estimate_ms[0] < self.bar * self.far

    def stops(self, times: np.ndarray, far: bool) -> str | None:
        """Why the timing stops after these pairs, or None (`far`: the first launches were far below):
        "far" (every pair far below the bar) or "below" (their median below the bar less the slack)."""
        ratios = times[:, 1] / times[:, 0]
        n = len(ratios)
        if far and n == self.far_pairs and float(ratios.max()) < self.bar * self.far:
            return "far"
        if n == self.pairs and float(np.median(ratios)) < self.below:
            return "below"
        return None

    def limit(self, why: str) -> float:
        """The ratio a screened candidate was found under."""
        return self.bar * self.far if why == "far" else self.below

    def checkpoints(self, far: bool) -> set[int]:
        return {n for n in (self.pairs, self.far_pairs if far else 0) if n}


@dataclass(frozen=True)
class Precise:
    """Timing until the noise is known: after `least` pairs, and every `every` pairs after, the timing stops
    once the confidence interval around the median ratio of the first two kernels (the candidate and the
    bar's baseline) is within `within` of the median either way. A kernel of microseconds, whose pairs
    agree to a tenth of a percent, is then timed for the pairs its noise needs, not for `repetitions`; a
    noisy one still gets every pair. The interval stays in the result: what was measured says how well."""

    within: float
    least: int = 10
    every: int = 5
    confidence: float = 0.95

    def due(self, pairs: int) -> bool:
        return self.within > 0 and pairs >= self.least and (pairs - self.least) % self.every == 0

    def met(self, times: np.ndarray) -> bool:
        from autodiscovery.toolkit.stats import median_ci

        med, lo, hi = median_ci((times[:, 1] / times[:, 0]).tolist(), self.confidence)
        return (hi - lo) / 2 <= self.within * med


def slow_estimate(gate_ms: list[float], sample_ms: float) -> float | None:
    """A kernel's time from its gate's launches where they are slow enough that a timed sample holds one
    launch (at least `sample_ms`): then they are its estimate, and no launch is spent on one. The median,
    so that neither a slow first launch nor a fast one decides it. None: estimate it as usual."""
    if not gate_ms:
        return None
    median = float(np.median(gate_ms))
    return median if median >= sample_ms else None


SLOW_PAIR_MS = 100.0
"""A pair of samples this long is waited for before the next is queued, a sign of progress each."""


@dataclass(frozen=True)
class Plan:
    """How the timing goes, from each kernel's estimated time: launches a sample, warm-up rounds, pairs."""

    inner: list[int]
    """Launches a sample, for each kernel."""
    warmup_rounds: int
    reps: int
    """Pairs at most."""
    far: bool
    """The candidate's first launches are far below its bar: no warm-up, the far screen after its pairs."""
    stops: set[int]
    """After how many pairs the screen is asked."""
    per_pair_ms: float = 0.0

    @property
    def slow(self) -> bool:
        """Whether each pair is waited for, a sign of progress each (`SLOW_PAIR_MS`)."""
        return self.per_pair_ms > SLOW_PAIR_MS


def plan(est_ms: list[float], sample_ms: float, warmup_ms: float, reps: int, budget_s: float, most: int,
         screen: Screen | None) -> Plan:
    """The timing of kernels estimated at `est_ms` each: a sample repeats a kernel for about `sample_ms`
    (at most `most` launches, the pool's slots), warm-up for about `warmup_ms` (none for a candidate far
    below its bar), `reps` pairs, fewer (at least 10) for slow kernels so that timing takes about
    `budget_s`."""
    far = screen is not None and screen.far_from(est_ms)
    inner = [int(min(most, max(1, math.ceil(sample_ms / t)))) for t in est_ms]
    per_pair_ms = sum(n * t for n, t in zip(inner, est_ms))
    rounds = 0 if far else int(min(1000, math.ceil(warmup_ms / per_pair_ms)))
    reps = int(max(10, min(reps, budget_s * 1000 // per_pair_ms)))
    return Plan(inner, rounds, reps, far, screen.checkpoints(far) if screen is not None else set(), per_pair_ms)
