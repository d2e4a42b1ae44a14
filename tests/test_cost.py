"""A measurement costs what it can decide: the timing's plan from the first launches, the screens that
stop it early, and the limit an evaluation child runs under (no GPU: the plan and the screens are
arithmetic on times; the child is a real process)."""

from __future__ import annotations

import sys
import textwrap
import time

import numpy as np
import pytest

from autodiscovery.toolkit import child
from harnesses.hopper_gemm.screen import Precise, Screen, plan, slow_estimate
from harnesses.hopper_gemm.settings import Settings

S = Settings()
GATE_DRAWS = S.gate_draws
NAIVE_MS = 8500.0  # the naive seed at 8192×57344×8192 on an H100, a launch
CUBLAS_MS = 11.0  # cuBLAS there


def screen(bar: float = 1.0) -> Screen:
    return Screen(bar, S.screen_pairs, S.screen_slack, S.screen_far, S.screen_far_pairs)


def cost_s(candidate_ms: float, baseline_ms: float, bar: float | None, known: bool) -> float:
    """What an evaluation's GPU work costs by the plan: the gate, the estimates, the warm-up and the
    pairs up to where the screen stops them (every pair of a slow kernel as slow as its estimate)."""
    sc = screen(bar) if bar else None
    est = [candidate_ms, baseline_ms]
    p = plan(est, S.sample_ms, S.warmup_ms, S.repetitions, S.timing_budget_s, 8, sc)
    gate = GATE_DRAWS * candidate_ms
    estimates = (0 if known else 3 * candidate_ms) + 3 * baseline_ms
    pair = sum(n * t for n, t in zip(p.inner, est))
    times = np.array([[candidate_ms, baseline_ms]] * p.reps)
    pairs = next((n for n in sorted(p.stops) if n < p.reps and sc.stops(times[:n], p.far)), p.reps)
    return (gate + estimates + (p.warmup_rounds + pairs) * pair) / 1e3


def test_a_seed_that_would_take_minutes_is_decided_within_the_limit():
    """The naive seed at 8192×57344×8192: timed as any candidate (its own estimate, a warm-up round, at
    least 10 pairs) it would take minutes, past the evaluation's limit; known from its gate's launches
    and far below cuBLAS, it takes its gate and two pairs."""
    before = cost_s(NAIVE_MS, CUBLAS_MS, None, known=False)
    now = cost_s(NAIVE_MS, CUBLAS_MS, 1.0, known=True)
    assert before > 2.5 * 60 and before > S.timeout_s > now
    assert now == pytest.approx((GATE_DRAWS + 2) * NAIVE_MS / 1e3, rel=0.01)


def test_a_candidate_near_its_bar_is_timed_to_the_full_count():
    p = plan([1.02, 1.0], S.sample_ms, S.warmup_ms, S.repetitions, S.timing_budget_s, 8, screen(1.0))
    assert not p.far and p.warmup_rounds > 0 and p.reps == S.repetitions
    times = np.array([[1.02, 1.0]] * S.screen_pairs)
    assert screen(1.0).stops(times, far=False) is None  # 0.98×: within the slack of the bar


def test_far_below_stops_after_its_pairs_only_if_every_pair_is_far_below():
    """A kernel slow on its first launches only (the estimate says far below, its pairs do not) is timed
    on; the screen reads the pairs, never the first launches alone."""
    sc = screen(1.0)
    assert sc.far_from([10.0, 1.0])
    slow_then_fast = np.array([[10.0, 1.0], [0.9, 1.0]])
    assert sc.stops(slow_then_fast, far=True) is None
    slow = np.array([[10.0, 1.0], [9.0, 1.0]])
    assert sc.stops(slow, far=True) == "far"
    assert sc.limit("far") == pytest.approx(S.screen_far)


def test_a_kernel_fast_on_its_first_launches_only_is_timed_to_the_full_count():
    """Its estimate is near the bar, so no far screen and a warm-up; the median of all its pairs decides,
    and a median below the bar less the slack is screened out at `screen_pairs`."""
    sc = screen(1.0)
    p = plan([1.0, 1.0], S.sample_ms, S.warmup_ms, S.repetitions, S.timing_budget_s, 8, sc)
    assert not p.far and p.stops == {S.screen_pairs}
    fast_then_slow = np.array([[1.0, 1.0]] * 2 + [[3.0, 1.0]] * (S.screen_pairs - 2))
    assert sc.stops(fast_then_slow[:2], far=False) is None
    assert sc.stops(fast_then_slow, far=False) == "below"


def test_timing_stops_once_the_interval_around_the_median_is_as_narrow_as_asked():
    """A kernel of microseconds whose pairs agree to a tenth of a percent stops at the first pairs the rule
    reads; a noisy one goes on, and so does one whose first pairs agree but whose later ones do not."""
    rule = Precise(S.precision, S.screen_pairs)
    rng = np.random.default_rng(3)
    steady = np.column_stack([np.full(40, 0.013), 0.0084 * (1 + rng.normal(0, 0.0005, 40))])
    assert rule.due(10) and not rule.due(9) and not rule.due(12) and rule.due(15)
    assert rule.met(steady[:10])
    noisy = np.column_stack([np.full(40, 0.013), 0.0084 * (1 + rng.normal(0, 0.02, 40))])
    assert not rule.met(noisy[:10]) and not rule.met(noisy[:40])
    # Steady for a while, then 5% apart (the clock changed, say): the interval widens, the timing goes on.
    shifting = np.vstack([steady[:10], np.column_stack([np.full(10, 0.013), np.full(10, 0.0088)])])
    assert rule.met(shifting[:10]) and not rule.met(shifting[:20])
    assert not Precise(0.0).due(10)  # off: every pair asked for


def test_the_gate_times_of_a_slow_kernel_are_its_estimate():
    """The median of the gate's launches, so neither a slow first launch nor a fast one decides it."""
    assert slow_estimate([9000.0, 8500.0, 8400.0, 8600.0, 8500.0], S.sample_ms) == 8500.0
    assert slow_estimate([50.0, 0.01, 0.01, 0.01, 0.01], S.sample_ms) is None  # fast but for its first
    assert slow_estimate([0.01, 0.01, 9.0, 9.0, 9.0], S.sample_ms) == 9.0
    assert slow_estimate([], S.sample_ms) is None


WORKER = """
import sys, time
from autodiscovery.toolkit import child
job = __import__("json").load(open(sys.argv[1]))
for _ in range(job["beats"]):
    time.sleep(job["every"])
    child.beat()
time.sleep(job["then"])
child.write_result(__import__("pathlib").Path(sys.argv[2]), child.result("ok", metrics={"slept": 1}))
"""


@pytest.fixture()
def worker(tmp_path, monkeypatch):
    (tmp_path / "beating_worker.py").write_text(textwrap.dedent(WORKER))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "beating_worker"


def env(tmp_path) -> dict:
    import os

    return child.environment() | {"PYTHONPATH": os.pathsep.join([str(tmp_path), child.environment()["PYTHONPATH"]])}


def test_a_child_that_keeps_making_progress_is_never_killed_for_being_slow(worker, tmp_path):
    t = time.perf_counter()
    out = child.run(worker, {"beats": 8, "every": 0.25, "then": 0.0}, 1.0, env(tmp_path))
    assert out.status == "ok" and time.perf_counter() - t > 1.5  # twice its limit, in all


def test_a_child_that_stops_making_progress_is_killed_its_limit_after_the_last_sign(worker, tmp_path):
    out = child.run(worker, {"beats": 3, "every": 0.2, "then": 30.0}, 1.0, env(tmp_path))
    assert out.status == "timeout" and out.log.startswith("killed after 1 s without progress")
    assert 1.4 < out.seconds < 10


def test_a_child_without_progress_is_killed_at_its_limit(worker, tmp_path):
    out = child.run(worker, {"beats": 0, "every": 0, "then": 30.0}, 1.0, env(tmp_path))
    assert out.status == "timeout" and out.seconds < 10


def test_beat_does_nothing_where_no_parent_watches(monkeypatch):
    monkeypatch.delenv(child.BEAT, raising=False)
    child.beat()
    assert sys.modules["autodiscovery.toolkit.child"] is child


def recorded_head_to_heads() -> list[tuple[float, float]]:
    """(the challenger's × cuBLAS over the incumbent's, each measured apart; the head-to-head's ratio) of
    every head-to-head of the GEMM harness in the databases under docs/, read as they stand."""
    import json
    import sqlite3

    from autodiscovery import ROOT
    from autodiscovery.store import reader_uri

    out = []
    for db in sorted((ROOT / "docs").glob("**/*.db")):
        con = sqlite3.connect(reader_uri(db), uri=True)  # as a reader opens it: nothing written beside it
        try:
            rows = con.execute(
                "SELECT h.metrics, c.metrics, i.metrics, r.config FROM evaluations h "
                "JOIN candidates k ON k.id = h.candidate_id JOIN runs r ON r.id = k.run_id "
                "JOIN evaluations c ON c.candidate_id = h.candidate_id AND c.kind = 'benchmark' AND c.status = 'ok' "
                "JOIN evaluations i ON i.candidate_id = h.against_id AND i.kind = 'benchmark' AND i.status = 'ok' "
                "WHERE h.kind = 'head_to_head' AND h.status = 'ok'").fetchall()
        finally:
            con.close()
        for h, c, i, config in rows:
            h, c, i = json.loads(h), json.loads(c), json.loads(i)
            if json.loads(config)["harness"]["name"] == "hopper_gemm" and "screened" not in c:
                out.append((c["ratio"]["median"] / i["ratio"]["median"], h["ratio"]["median"]))
    return out


def test_a_keep_without_a_head_to_head_is_calibrated_on_the_recorded_head_to_heads():
    """A GEMM campaign keeps a challenger measured apart at `stop.decisive` times the incumbent without a
    head-to-head. The head-to-head is the truth that rule stands for: in every one recorded under docs/,
    the ratio measured apart and the head-to-head's differ by less than a third of the way from
    `decisive` down to `1 + min_gain`, so no challenger kept that way could have lost its head-to-head."""
    import math

    from autodiscovery import ROOT
    from autodiscovery import campaign as campaigns

    pairs = recorded_head_to_heads()
    assert len(pairs) >= 150
    worst = max(abs(math.log(h / a)) for a, h in pairs)
    # two processes' measurements: a few percent apart, never more (the worst, 4.7%, at 32×57344×8192 on an
    # H200: a memory-bound kernel whose head-to-head's interval was 6% wide)
    assert 0.01 < worst < 0.05
    gemm = [c for c in (campaigns.load(p.stem) for p in sorted((ROOT / "search_spaces").glob("*.yaml")))
            if c.harness.name == "hopper_gemm"]
    assert len(gemm) >= 5
    for c in gemm:
        assert c.stop.decisive is not None and math.log(c.stop.decisive / (1 + c.stop.min_gain)) > 1.5 * worst, c.name
    # The rule's reach: the share of the recorded head-to-heads it would have saved, all won by the challenger.
    saved = [h for a, h in pairs if a >= gemm[0].stop.decisive]
    assert len(saved) > len(pairs) / 3 and min(saved) > 1 + gemm[0].stop.min_gain
