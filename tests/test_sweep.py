"""The benchmark of shapes no one chose: a sweep draws a suite's problems from a stated distribution, the
same ones from the same seed on any machine; a run of it learns nothing from the sweep's own earlier
results in the kernel databases; and a campaign whose seed would eat its minutes starts at the top."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from shapes import record_run

from autodiscovery import campaign as campaigns
from autodiscovery.agents import warm
from autodiscovery.agents.search import SearchAgent
from autodiscovery.campaign import CampaignError, Sweep
from autodiscovery.store import Store

RANGES = {"M": (16, 16384), "N": (512, 32768), "K": (512, 32768)}


def test_the_shipped_sweep_draws_24_problems_from_its_seed_within_its_ranges():
    c = campaigns.load("gemm-sweep")
    assert c.sweep is not None and c.suite is not None and len(c.suite) == 24
    assert c.suite == campaigns.load("gemm-sweep").suite  # the same seed, the same problems
    for entry in c.suite:
        assert set(entry.problem) == {"M", "N", "K"}
        for name, (lo, hi) in RANGES.items():
            assert lo <= entry.problem[name] <= hi and entry.problem[name] % 8 == 0
    assert [e.label for e in c.suite] == [f"{i:02d}" for i in range(1, 25)]
    other = campaigns.load("gemm-sweep", ["sweep.seed=2", "sweep.count=12"]).suite
    assert other is not None and len(other) == 12
    assert not {tuple(e.problem.values()) for e in other} & {tuple(e.problem.values()) for e in c.suite}


def test_a_draw_is_log_uniform_over_each_range():
    """Every factor of two as likely as another: the mean of log2 M over many draws is the middle of its
    range (4 to 14: 9), and each half of the range holds about half of them."""
    problems = Sweep(seed=7, count=1000, sizes=RANGES).problems()
    logs = [math.log2(p["M"]) for p in problems]
    assert abs(sum(logs) / len(logs) - 9) < 0.3
    assert 0.45 < sum(v < 9 for v in logs) / len(logs) < 0.55
    assert min(p["M"] for p in problems) == 16 and max(p["K"] for p in problems) <= 32768


def test_a_problem_of_the_sweep_is_a_campaign_of_one_problem():
    c = campaigns.load("gemm-sweep")
    assert c.suite is not None
    one = c.entry(c.suite[2])
    assert one.sweep is None and one.suite is None and one.name == f"gemm-sweep/{c.suite[2].label}"
    assert (one.problem.M, one.problem.N, one.problem.K) == tuple(c.suite[2].problem.values())
    again = campaigns.validate(c.model_dump(mode="json"))  # a recorded configuration reads back as it was
    assert again.suite == c.suite


def test_a_sweep_that_cannot_draw_or_a_suite_beside_it_is_refused(tmp_path):
    with pytest.raises(CampaignError, match=r"sweep.sizes.M: \[9, 15\] holds no multiple of 8"):
        Sweep(count=2, sizes={"M": (9, 15)}).problems()
    with pytest.raises(CampaignError, match="a sweep draws its suite; give one or the other"):
        campaigns.load("gemm-sweep", ["suite=[{label: a, problem: {M: 64}}]"])
    with pytest.raises(CampaignError, match="not a range of positive sizes"):
        campaigns.load("gemm-sweep", ["sweep.sizes.M=[64, 16]"])


def test_a_run_learns_nothing_from_its_own_campaigns_earlier_runs_in_the_kernel_databases(tmp_path):
    """With `own_records: false` the sweep's earlier runs in a kernel database are passed over (a suite's
    problems are named after it); another campaign's there, and the run's own database, still warm it."""
    kernels, own = Store(tmp_path / "kernels.db"), Store(tmp_path / "own.db")
    space = SearchAgent(campaigns.load("hopper-gemm")).space
    cluster = space.families["wgmma_cluster"].default
    record_run(kernels, (64, 4096, 4096), "wgmma_cluster", cluster | {"BN": 128}, 1.1, name="gemm-sweep/03")
    record_run(kernels, (128, 4096, 4096), "wgmma_cluster", cluster | {"BN": 144}, 1.0, name="llama3-8b-gemm/qkv · 128")
    record_run(own, (96, 4096, 4096), "wgmma_cluster", cluster | {"BN": 160}, 1.0, name="gemm-sweep/01 · 96×4096×4096")
    fields = campaigns.load("hopper-gemm", ["problem.M=64"]).problem.model_dump(mode="json")

    def found(not_of):
        problem = warm.Problem("hopper_gemm", fields, {"M": 64, "N": 4096, "K": 4096}, "H100", None, not_of)
        return sorted(k["BN"] for _, k, _ in warm.bests([(own, 99), (kernels, None)], problem, space, 5))

    assert found(None) == [128, 144, 160]
    assert found("gemm-sweep") == [144, 160]
    agent = SearchAgent(campaigns.load("gemm-sweep").entry(campaigns.load("gemm-sweep").suite[0]))
    assert agent.campaign_name == "gemm-sweep" and agent.own_records is False


@pytest.mark.parametrize("sets, start", [
    ((), "bottom"),  # 4096³ in 120 minutes: the naive seed takes a second or two, the whole climb is shown
    (("problem.M=8192", "problem.N=57344", "problem.K=8192", "budget.minutes=1"), "top"),  # ~85 s of a minute
    (("problem.M=512", "problem.N=512", "problem.K=512", "budget.minutes=1"), "bottom"),
    (("problem.M=8192", "problem.N=57344", "problem.K=8192", "budget.minutes=1", "agent.search.start=bottom"), "bottom"),
])
def test_a_campaign_starts_at_the_top_where_its_seed_would_eat_its_minutes(sets, start):
    assert SearchAgent(campaigns.load("hopper-gemm", list(sets))).start == start


def test_a_seed_of_no_known_rate_starts_at_the_bottom(tmp_path):
    """A space whose seed's family states no rate (a user's own) cannot be estimated: the bottom, as before."""
    space = Path(__file__).parents[1] / "search_spaces" / "hopper_gemm" / "families.yaml"
    mine = tmp_path / "space"
    mine.mkdir()
    (mine / "families.yaml").write_text(space.read_text().replace("    tflops: 0.9\n", ""))
    seeds = Path(__file__).parents[1] / "seeds" / "hopper_gemm"
    for f in seeds.iterdir():
        (mine / f.name).write_text(f.read_text())
    c = campaigns.load("hopper-gemm", ["problem.M=8192", "problem.N=57344", "problem.K=8192", "budget.minutes=1",
                                       f"agent.search.space={mine}"])
    assert SearchAgent(c).start == "bottom"


def test_a_recorded_sweep_reads_back_whatever_its_labels():
    """A run records its suite as drawn, labels and all: read back by a later version, whose labels differ,
    it is the same suite (the shipped trial's database, labelled '1 · 40×3392×12632')."""
    from autodiscovery import ROOT
    from autodiscovery.review import exports

    store = Store(ROOT / "docs" / "gemm-sweep-h200" / "trial-seed100.db", create=False, read_only=True)
    data = exports.dispatch(store, 1)
    assert [r["label"] for r in data["rows"]][0] == "1 · 40×3392×12632" and data["summary"]["problems"] == 3
