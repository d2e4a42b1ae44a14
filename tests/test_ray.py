"""`executor.kind: ray` on a real local Ray cluster: co-design simulations as CPU tasks (one worker
killed mid-task), evaluations as GPU tasks with declared resources, builds as tasks in a dry run."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is an extra: pip install -e '.[ray]'")

from conftest import needs_nvcc  # noqa: E402

from autodiscovery import campaign as campaigns  # noqa: E402
from autodiscovery.review import report  # noqa: E402
from autodiscovery.running import executors, runner  # noqa: E402
from autodiscovery.store import Store  # noqa: E402

TESTS = Path(__file__).parent


def test_an_unreachable_cluster_is_one_line(tmp_path):
    from typer.testing import CliRunner

    from autodiscovery.cli import app

    if ray.is_initialized():
        pytest.skip("a cluster is up in this process")
    res = CliRunner().invoke(app, ["run", "--executor", "ray", "--address", "ray://127.0.0.1:1", "--dry-run",
                                   "--db", str(tmp_path / "x.db")])
    assert res.exit_code == 2 and "Ray cluster at ray://127.0.0.1:1" in res.output


@pytest.fixture(scope="module")
def cluster():
    """A local cluster of 2 CPUs and 2 (logical) GPUs; its workers import the tests' modules too."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(TESTS.parent), before or ""])
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             _system_config=executors.WORKER_CONFIG)
    yield ray.cluster_resources()
    ray.shutdown()
    if before is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = before


@pytest.mark.long
def test_codesign_simulations_run_as_tasks_and_a_killed_worker_is_retried(cluster, tmp_path):
    from replay import AT_512, KilledOnce

    marks = tmp_path / "marks"
    marks.mkdir()
    store = Store(tmp_path / "ray.db")
    overrides = [*AT_512, "executor.kind=ray", "agent.codesign.phases={B: 4, C: 1, D: 3, E_kernels: 1, E_archs: 1}",
                 f"harness.cache_dir={tmp_path / 'cache'}", "agent.codesign.shortlist=4"]
    from replay import recorded_ptx

    from harnesses.accelsim.agent import CodesignAgent

    recorded_ptx(CodesignAgent(campaigns.load("edge-codesign", overrides)))  # the model's PTX facts, not nvcc's
    run_id = runner.run_campaign("edge-codesign", overrides, store, harness=KilledOnce(marks=str(marks), sim_seconds=0.2))
    shown = report.show_run(store, run_id)
    assert shown["status"] == "finished" and shown["fingerprint"]["executor"] == "ray (local)"
    simulated = [c for c in shown["candidates"] if c["status"] not in ("rejected", "proposed")]
    assert len(simulated) >= 8
    killed = (marks / "killed").read_text()
    ran = [p.name.split("-")[1] for p in marks.iterdir() if p.name.startswith("ran-")]
    assert ran.count(killed) >= 2  # killed once, then run again by Ray (and in head-to-heads)
    evaluations = [e for c in simulated for e in report.show_candidate(store, run_id, c["seq"])["evaluations"]
                   if e["kind"] == "benchmark"]
    assert len(evaluations) == len(simulated)  # each recorded once, the retried one included
    victim = [c for c in simulated if hashlib.sha256(c["source"].encode()).hexdigest()[:16] == killed]
    assert len(victim) == 1 and victim[0]["score"] is not None  # recorded once, with the retry's result
    pids = {e["metrics"]["ray"]["pid"] for e in evaluations}
    assert os.getpid() not in pids and len(pids) >= 2  # on the cluster's workers, not in the driver


@pytest.mark.long
def test_gpu_evaluations_ask_for_a_gpu_each(cluster, tmp_path):
    from replay import ReplayHarness

    from autodiscovery.agents.search import SearchAgent

    # Each evaluation takes a while, so that two are in flight at once (a GPU each).
    harness = ReplayHarness(SearchAgent(campaigns.load("hopper-gemm")).space, delay_s=0.3)
    store = Store(tmp_path / "g.db")
    run_id = runner.run_campaign("hopper-gemm", ["executor.kind=ray", "budget.candidates=10", "stop.target=5"], store,
                          harness=harness)
    shown = report.show_run(store, run_id)
    evs = [e for c in shown["candidates"] for e in report.show_candidate(store, run_id, c["seq"])["evaluations"]
           if e["kind"] in ("benchmark", "head_to_head")]
    assert evs and all(len(e["metrics"]["ray"]["gpu_ids"]) == 1 for e in evs)
    assert {e["metrics"]["ray"]["gpu_ids"][0] for e in evs} == {"0", "1"}  # both GPUs, one a task
    assert all("(Ray GPU " in e["device"] for e in evs)
    assert len(report.lineage(store, run_id)) >= 3


@needs_nvcc
@pytest.mark.long
def test_a_dry_run_builds_on_the_workers(cluster, tmp_path):
    store = Store(tmp_path / "b.db")
    run_id = runner.run_campaign("hopper-gemm", ["executor.kind=ray", "executor.build_on=workers", "budget.candidates=3",
                                          f"harness.cache_dir={tmp_path / 'cache'}"], store, dry_run=True)
    cands = report.show_run(store, run_id)["candidates"]
    assert [c["status"] for c in cands] == ["built"] * 3 and all(c["registers"] for c in cands)
