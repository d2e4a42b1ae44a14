import numpy as np

from autodiscovery.toolkit.stats import median_ci, summarize_ratio


def test_median_interval_covers_at_the_stated_level():
    rng = np.random.default_rng(1)
    hits = sum(lo <= 0 <= hi for _, lo, hi in (median_ci(rng.standard_cauchy(25)) for _ in range(1000)))
    assert 0.93 <= hits / 1000 <= 0.99


def test_interval_brackets_the_median_and_narrows_with_more_pairs():
    rng = np.random.default_rng(2)
    small = summarize_ratio(rng.normal(1.0, 0.02, 10))
    large = summarize_ratio(rng.normal(1.0, 0.02, 200))
    for s in (small, large):
        assert s["ci_low"] <= s["median"] <= s["ci_high"]
    assert large["ci_high"] - large["ci_low"] < small["ci_high"] - small["ci_low"]
