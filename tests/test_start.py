"""Where a run starts and what ends it: a seed that fails or times out does not end a run while the
agent has candidates left; a run may start at the top of the ladder, or from the best kernels recorded
for the nearest problems in any run database, each re-checked and re-measured here; a suite tunes its
problems in the order that warms each from the nearest tuned before it."""

from __future__ import annotations

from pathlib import Path

from replay import ReplayHarness, key
from shapes import record_run
from sqlalchemy import select
from typer.testing import CliRunner

from autodiscovery import campaign as campaigns
from autodiscovery.agents.search import SearchAgent
from autodiscovery.cli import app
from autodiscovery.running.driver import Driver
from autodiscovery.running.suite import order
from autodiscovery.store import Candidate, EvalKind, Run, Store

TIMEOUT = {"status": "timeout", "log": "killed after 120 s without progress"}
GPU = "Replayed NVIDIA H100"


def run(campaign, store, **harness_kw) -> tuple[int, list[Candidate], ReplayHarness]:
    agent = SearchAgent(campaign)
    harness = ReplayHarness(agent.space, **harness_kw)
    run_id = Driver(campaign, store, harness, agent, workers=2).new_run(dict(harness.fingerprint))
    with store.session() as s:
        cands = list(s.scalars(select(Candidate).where(Candidate.run_id == run_id).order_by(Candidate.seq)))
        for c in cands:
            _ = c.decision, c.evaluations
    return run_id, cands, harness


def test_a_seed_that_times_out_does_not_end_the_run(store):
    """The run goes on from the next rung, and the seed's row says what happened to it."""
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=4", "agent.search.batch=3"])
    run_id, cands, _ = run(campaign, store, recordings={key("naive", {}): TIMEOUT})
    assert cands[0].proposer == "seed" and cands[0].status == "timeout"
    assert "killed after 120 s" in cands[0].measurement.log
    assert [c.family for c in cands[1:]] == ["tiled", "mma_sync", "wgmma_tma"]
    with store.session() as s:
        r = s.get(Run, run_id)
        assert r.status == "finished" and r.best is not None and r.best.seq > 0


def test_a_run_where_nothing_passes_fails_and_says_what_became_of_its_first(store):
    space = SearchAgent(campaigns.load("hopper-gemm")).space
    every = {key(f.name, dict(f.default)): TIMEOUT for f in space.families.values()}
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=3"])
    run_id, cands, _ = run(campaign, store, recordings=every | {key("naive", {}): TIMEOUT})
    assert len(cands) == 3 and all(c.status == "timeout" for c in cands)
    with store.session() as s:
        r = s.get(Run, run_id)
        assert r.status == "failed" and r.best is None
        assert r.stop_reason == ("failed: no candidate passed; the first (seed, #0) ended timeout: killed after 120 s "
                                 "without progress (budget spent: 3 candidates)")


def test_a_run_that_starts_at_the_top_measures_the_highest_rungs_first(store):
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=3", "agent.search.start=top",
                                              "agent.search.batch=2"])
    _, cands, harness = run(campaign, store)
    assert [c.family for c in cands[:2]] == ["wgmma_splitk", "wgmma_cluster"]
    assert all(c.proposer == "search:structural" for c in cands[:2])
    assert "naive" not in {c.family for c in cands}


def test_a_run_that_starts_at_the_top_goes_down_where_the_top_fails(store):
    space = SearchAgent(campaigns.load("hopper-gemm")).space
    top = {key(f.name, dict(f.default)): TIMEOUT for f in space.families.values() if f.rung >= 7}
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=4", "agent.search.start=top",
                                              "agent.search.batch=2"])
    _, cands, _ = run(campaign, store, recordings=top)
    assert [c.family for c in cands] == ["wgmma_splitk", "wgmma_cluster", "wgmma_persistent", "wgmma_ws"]
    assert [c.status for c in cands[:2]] == ["timeout", "timeout"] and cands[2].status == "kept"


def test_a_warm_start_from_another_database_rechecks_and_remeasures_its_kernels(store, tmp_path):
    """The kernels of a kernel database are candidates like any: built, gated and timed here. One that
    fails at this problem is not kept, whatever it measured where it was recorded."""
    kernels = Store(tmp_path / "kernels.db")
    space = SearchAgent(campaigns.load("hopper-gemm")).space
    near = space.families["wgmma_cluster"].default | {"BN": 192}
    record_run(kernels, (4096, 4096, 8192), "wgmma_cluster", near, 1.04, gpu=GPU)
    record_run(kernels, (4096, 4096, 4096), "wgmma_persistent", {"BM": 128, "BN": 128}, 1.02, gpu=GPU)
    record_run(kernels, (4096, 4096, 4096), "wgmma_ws", {}, 0.9, gpu="another GPU")  # not this GPU's
    failing = {key("wgmma_cluster", near): {"status": "incorrect", "log": "relative error 3.1 over the tolerance"}}
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=6", "stop.target=5", "agent.search.start=top",
                                              f"agent.search.kernels=[{tmp_path / 'kernels.db'}]"])
    _, cands, harness = run(campaign, store, recordings=failing)
    warm = [c for c in cands if c.proposer == "search:warm"]
    assert [c.family for c in warm[:2]] == ["wgmma_persistent", "wgmma_cluster"]  # the nearest problem first
    cluster = warm[1]
    assert "kernels.db at 4096×4096×8192, 1.040× cuBLAS there" in cluster.hypothesis
    assert cluster.status == "incorrect" and cluster.decision.verdict == "revert"
    assert all(any(e.kind == EvalKind.benchmark for e in c.evaluations) for c in warm)
    assert cands[0].proposer == "search:warm" and "naive" not in {c.family for c in cands}
    assert {c.family for c in warm} == {"wgmma_cluster", "wgmma_persistent"}  # not another GPU's
    assert any(c.status == "kept" for c in warm)


def test_at_equal_distance_the_runs_own_database_warms_first(tmp_path):
    """256×8192×28672 is as far from 1024×8192×28672 (M four times) as from 256×4096×14336 (N and K twice):
    the problem the run's own database tuned (a suite's, just before this one) comes first, whatever the
    run ids of the two databases; at unequal distance the nearer comes first from either."""
    from autodiscovery.agents import warm

    own, shipped = Store(tmp_path / "own.db"), Store(tmp_path / "shipped.db")
    space = SearchAgent(campaigns.load("hopper-gemm")).space
    cluster = space.families["wgmma_cluster"].default
    for _ in range(3):  # the shipped database's run ids smaller than the own one's
        record_run(shipped, (256, 4096, 14336), "wgmma_cluster", cluster | {"BN": 128}, 1.04, gpu=GPU)
    record_run(own, (4096, 4096, 4096), "wgmma_ws", {}, 1.0, gpu=GPU)
    record_run(own, (1024, 8192, 28672), "wgmma_cluster", cluster | {"BN": 256}, 1.02, gpu=GPU)
    record_run(shipped, (256, 8192, 14336), "wgmma_splitk", {}, 1.01, gpu=GPU)
    problem = warm.Problem("hopper_gemm", campaigns.load("hopper-gemm", ["problem.M=256", "problem.N=8192",
                           "problem.K=28672"]).problem.model_dump(mode="json"), {"M": 256, "N": 8192, "K": 28672}, GPU)
    found = warm.bests([(own, None), (shipped, None)], problem, space, 3)
    assert [(f, k["BN"]) for f, k, _ in found[1:]] == [("wgmma_cluster", 256), ("wgmma_cluster", 128)]
    assert found[0][0] == "wgmma_splitk"  # 256×8192×14336: K twice, nearer than either
    assert "at 1024×8192×28672" in found[1][2] and "at 256×4096×14336" in found[2][2]
    assert [f for f, _, _ in warm.bests([(shipped, None), (own, None)], problem, space, 3)][1:] == \
        ["wgmma_cluster", "wgmma_cluster"]


def test_another_gpu_of_the_same_compute_capability_warms_behind_this_gpus_own(tmp_path):
    """An H100's bests warm an H200's run (the same sm_90a kernels build and run there, and are re-measured
    like any candidate), as far as this GPU's own at twice a size; another architecture's never do, nor
    does any other GPU's where this one's compute capability is not known."""
    from autodiscovery.agents import warm

    own, shipped = Store(tmp_path / "own.db"), Store(tmp_path / "shipped.db")
    space = SearchAgent(campaigns.load("hopper-gemm")).space
    splitk, cluster = space.families["wgmma_splitk"].default, space.families["wgmma_cluster"].default
    h200, h100 = "NVIDIA H200", "NVIDIA H100 80GB HBM3"
    record_run(own, (256, 57344, 8192), "wgmma_cluster", cluster | {"BN": 176}, 0.99, gpu=h200, cc="9.0")
    record_run(own, (32, 57344, 8192), "wgmma_splitk", splitk | {"QSIZE": 5}, 0.93, gpu=h200, cc="9.0")
    record_run(shipped, (32, 59136, 8192), "wgmma_splitk", splitk | {"BM": 32, "SWAP": 1}, 1.07, gpu=h100, cc="9.0")
    record_run(shipped, (16, 28672, 4096), "wgmma_splitk", splitk | {"BM": 16, "SWAP": 1}, 0.98, gpu=h100, cc="9.0",
               sets=("harness.baseline=best_lt",))  # timed against the best cuBLASLt algorithm: its figure says so
    record_run(shipped, (32, 59136, 8192), "wgmma_cluster", cluster | {"BN": 64}, 1.2, gpu="NVIDIA A100", cc="8.0")
    fields = campaigns.load("hopper-gemm", ["problem.M=32", "problem.N=59136", "problem.K=8192"]).problem
    shape = {"M": 32, "N": 59136, "K": 8192}

    def found(gpu, cc, count=5):
        problem = warm.Problem("hopper_gemm", fields.model_dump(mode="json"), shape, gpu, cc)
        return [(f, k["BM"], k.get("BN"), where) for f, k, where in
                warm.bests([(own, None), (shipped, None)], problem, space, count)]

    got = found(h200, "9.0")
    assert [row[:3] for row in got] == [("wgmma_splitk", 64, 128), ("wgmma_splitk", 32, 128),
                                        ("wgmma_cluster", 128, 176), ("wgmma_splitk", 16, 128)]
    assert "at 32×59136×8192 on NVIDIA H100 80GB HBM3, 1.070× cuBLAS there" in got[1][3]
    assert " on " not in got[0][3] and " on " not in got[2][3]  # this GPU's own say no GPU
    assert "at 16×28672×4096 on NVIDIA H100 80GB HBM3, 0.980× best Lt there" in got[3][3]
    assert [row[:2] for row in found(h200, None)] == [("wgmma_splitk", 64), ("wgmma_cluster", 128)]
    on_h100 = found(h100, "9.0", 3)  # the other way round: the H200's runs are the sibling's
    assert [row[:2] for row in on_h100] == [("wgmma_splitk", 32), ("wgmma_splitk", 64), ("wgmma_splitk", 16)]
    assert "on NVIDIA H200" in on_h100[1][3] and " on " not in on_h100[2][3]


def test_a_kernel_database_may_be_left_out_by_a_pattern(tmp_path):
    from autodiscovery.agents import warm

    for name in ("a.db", "suite-h100.db", "suite-h200.db"):
        Store(tmp_path / name)
    names = [str(tmp_path / n) for n in ("a.db", "suite-h100.db", "suite-h200.db")]
    kept = warm.kernel_stores([*names, "!suite-*.db"])
    assert [Path(s.shown.removeprefix("sqlite:///")).name for s in kept] == ["a.db"]
    shipped = warm.kernel_stores(["shipped"])
    less = warm.kernel_stores(["shipped", "!llama70b-qwen72b-*/*.db"])
    assert 0 < len(less) < len(shipped)
    assert not any("llama70b-qwen72b-" in s.shown for s in less)


def test_a_pattern_that_leaves_out_nothing_is_refused_in_one_line(tmp_path):
    """A mistyped `!PATTERN` would let in the databases it was written to keep out (a suite's own earlier
    runs, in a run that claims to start from none): refused, naming it, from the command line too."""
    import pytest

    from autodiscovery.agents import warm
    from autodiscovery.agents.space import SpaceError

    with pytest.raises(SpaceError, match=r"'!llama70b-qwen72b/\*.db' leaves out none of the"):
        warm.kernel_stores(["shipped", "!llama70b-qwen72b/*.db"])
    res = CliRunner().invoke(app, ["--db", str(tmp_path / "runs.db"), "run", "--campaign", "hopper-gemm",
                                   "--set", "agent.search.kernels=[shipped, '!no-such-*/*.db']"])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "'!no-such-*/*.db' leaves out none of the" in " ".join(res.output.split())


def test_a_kernel_database_that_cannot_be_read_is_refused_in_one_line(tmp_path):
    import pytest

    from autodiscovery import AutoDiscoveryError

    (tmp_path / "not.db").write_text("not a database")
    campaign = campaigns.load("hopper-gemm", [f"agent.search.kernels=[{tmp_path / 'not.db'}]"])
    with pytest.raises(AutoDiscoveryError) as exc:
        SearchAgent(campaign)
    assert str(exc.value).startswith("agent.search.kernels: ") and "\n" not in str(exc.value)


def test_a_suite_tunes_each_problem_after_the_nearest_one_tuned_before_it():
    campaign = campaigns.load("llama3-8b-gemm")
    entries = campaign.suite
    ordered = [e.label for e in order(campaign, entries)]
    assert ordered[0] == entries[0].label and sorted(ordered) == sorted(e.label for e in entries)
    assert ordered.index("gate_up 2048") < ordered.index("gate_up 512") < ordered.index("gate_up 128")
    # each next problem is the one nearest those before it: no other is nearer to them
    import math

    sizes = {e.label: campaign.entry(e, "t").problem.names() for e in entries}

    def d(a, b):
        return sum(abs(math.log(sizes[a][k] / sizes[b][k])) for k in "MNK")

    for i in range(1, len(ordered)):
        reach = min(d(ordered[i], p) for p in ordered[:i])
        assert all(min(d(o, p) for p in ordered[:i]) >= reach - 1e-12 for o in ordered[i:])
