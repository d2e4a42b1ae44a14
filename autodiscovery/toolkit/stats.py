"""Statistics for paired measurements: the median and a distribution-free interval around it."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Median and an order-statistic confidence interval for it (no assumption about the spread).

    The interval is [x_(j), x_(k)] with j, k chosen from the Binomial(n, 1/2) distribution so that
    it covers the true median with at least `confidence` (or is the full range when n is tiny).
    """
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    if n == 0:
        raise ValueError("no values")
    med = float(np.median(x))
    alpha = 1.0 - confidence
    cdf, j = 0.0, 0
    # Largest j with P(Bin(n, 1/2) < j) <= alpha / 2: the interval is x[j], x[n-1-j] (0-based).
    for i in range(n):
        p = math.comb(n, i) / 2.0**n
        if cdf + p > alpha / 2:
            break
        cdf += p
        j = i + 1
    j = min(j, (n - 1) // 2)
    lo, hi = float(x[max(j - 1, 0)]), float(x[n - max(j, 1)])
    return med, lo, hi


def summarize_ratio(ratios: Sequence[float], confidence: float = 0.95) -> dict[str, float]:
    med, lo, hi = median_ci(ratios, confidence)
    return {"median": med, "ci_low": lo, "ci_high": hi, "n": len(ratios)}
