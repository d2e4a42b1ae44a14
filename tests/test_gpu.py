"""On a Hopper GPU: the gate accepts the seed and rejects kernels that cheat; paired timing; a short run."""

from __future__ import annotations

from pathlib import Path

import pytest

from autodiscovery import campaign as campaigns, report, runner
from autodiscovery.space import Space
from autodiscovery.store import Store
from harnesses.hopper_gemm import HopperGemmHarness

pytestmark = pytest.mark.gpu
KERNELS = Path(__file__).parent / "kernels"


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    c = campaigns.load("hopper-gemm", ["problem.M=2048", "problem.N=2048", "problem.K=2048",
                                       "harness.timeout_s=45", "harness.repetitions=12",
                                       f"harness.cache_dir={tmp_path_factory.mktemp('cache')}"])
    h = HopperGemmHarness(c)
    h.preflight()
    return h


def evaluate(h, source):
    return h.evaluate(source, h.build(source))


def test_gate_accepts_the_seed(harness):
    seed = campaigns.load("hopper-gemm").seed_path().read_text()
    out = evaluate(harness, seed)
    assert out.status == "ok", out.log
    draws = out.metrics["gate"]["candidate"]
    assert len(draws) == 3 and all(d["rel_err"] < 1e-2 and d["inputs_unchanged"] for d in draws)
    assert 0 < out.score < 0.2


@pytest.mark.parametrize(
    "kernel, status, words",
    [
        ("wrong_layout.cu", "incorrect", "relative error"),
        ("writes_nothing.cu", "incorrect", "never written"),
        ("half_the_rows.cu", "incorrect", "never written"),
        ("scribbles_on_input.cu", "incorrect", "modified its inputs"),
        ("first_launch_only.cu", "incorrect", "draw 1"),
        ("low_precision.cu", "incorrect", "relative error"),
        ("illegal_address.cu", "crashed", "illegal"),
        ("hangs.cu", "timeout", "killed after"),
    ],
)
def test_gate_rejects_wrong_kernels(harness, kernel, status, words):
    out = evaluate(harness, (KERNELS / kernel).read_text())
    assert out.status == status, out.log
    assert words in out.log.lower() if words == "illegal" else words in out.log


def test_paired_timing_against_cublas(harness):
    space = Space("hopper_gemm")
    src = space.render("mma_sync", space.families["mma_sync"].default)
    out = evaluate(harness, src)
    assert out.status == "ok", out.log
    m = out.metrics
    assert m["pairs"] == 12 and len(m["ratios"]) == 12  # a fast kernel gets every pair asked for
    assert m["ratio"]["ci_low"] <= m["ratio"]["median"] <= m["ratio"]["ci_high"]
    assert m["tflops"]["cublas"] > 200
    assert m["input_sets"] >= 2 and min(m["launches_per_sample"].values()) >= 1
    # The same kernel against itself, head to head: a ratio of one within the noise.
    build = harness.build(src)
    same = harness.head_to_head((src, build), (src, build))
    assert same.status == "ok" and abs(same.metrics["ratio"]["median"] - 1) < 0.03


def test_a_short_run(tmp_path):
    store = Store(tmp_path / "gpu.db")
    run_id = runner.start("hopper-gemm", ["budget.candidates=3", f"harness.cache_dir={tmp_path / 'cache'}"], store)
    rows = report.lineage(store, run_id)
    assert rows[0]["seq"] == 0 and len(rows) >= 2
    assert rows[-1]["x_cublas"] > rows[0]["x_cublas"]
    run = report.show_run(store, run_id)
    assert run["fingerprint"]["cublas"] and run["fingerprint"]["sms"] >= 100


@pytest.mark.parametrize("shape", [(2048, 2048, 2048), (1000, 778, 520)])
@pytest.mark.parametrize("family", [f.name for f in Space("hopper_gemm").ladder()])
def test_every_family_default_passes_the_gate(tmp_path_factory, family, shape):
    M, N, K = shape
    c = campaigns.load("hopper-gemm", [f"problem.M={M}", f"problem.N={N}", f"problem.K={K}",
                                       "harness.repetitions=10", "harness.timeout_s=60",
                                       f"harness.cache_dir={tmp_path_factory.getbasetemp() / 'family-cache'}"])
    h = HopperGemmHarness(c)
    h.preflight()
    space = Space("hopper_gemm")
    fam = space.families[family]
    out = evaluate(h, space.render(family, fam.default))
    assert out.status == "ok", out.log
    if family.startswith("wgmma"):
        assert h.build(space.render(family, fam.default)).has_hgmma is True
