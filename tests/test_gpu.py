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


def scripted_improvements() -> list:
    """Replies a model might give: two rewrites up the ladder, then a one-line edit of the incumbent."""
    from llm_server import say

    space = Space("hopper_gemm")
    tiled = space.render("tiled", space.families["tiled"].default)
    ws = space.render("wgmma_ws", space.families["wgmma_ws"].default)
    group = ("Hypothesis: a taller group of block rows (16) keeps more of B in L2 between neighbouring blocks.\n\n"
             "<<<<<<< SEARCH\n  tile_coords(blockIdx.x, tiles_m, tiles_n, 8, bm, bn);\n=======\n"
             "  tile_coords(blockIdx.x, tiles_m, tiles_n, 16, bm, bn);\n>>>>>>> REPLACE\n")
    return [
        say(f"Hypothesis: stage tiles of A and B in shared memory and give each thread an 8x8 block, "
            f"so every loaded value is reused 8 times.\n```cuda\n{tiled}```\n"),
        say(f"Hypothesis: move to Hopper tensor cores: a TMA producer warpgroup feeding two wgmma consumer "
            f"warpgroups through a 4-stage mbarrier ring.\n```cuda\n{ws}```\n"),
        say(group),
    ]


def test_scripted_llm_edits_are_built_gated_measured_and_kept(tmp_path):
    from llm_server import ScriptedServer

    store = Store(tmp_path / "llm.db")
    with ScriptedServer(scripted_improvements()) as server:
        run_id = runner.start("hopper-gemm", [
            "agent.kind=llm", "agent.llm.models=[{name: scripted}]", f"agent.llm.base_url={server.url}",
            "budget.candidates=4", "agent.search.batch=1", f"harness.cache_dir={tmp_path / 'cache'}"], store)
    shown = report.show_run(store, run_id)
    cands = shown["candidates"]
    assert [c["proposer"] for c in cands] == ["seed", "llm:scripted", "llm:scripted", "llm:scripted"]
    assert cands[1]["status"] == "kept" and cands[2]["status"] == "kept"
    assert cands[3]["status"] in ("kept", "reverted") and cands[3]["x_cublas"] > 0.5
    chain = report.lineage(store, run_id)
    assert [r["seq"] for r in chain][:3] == [0, 1, 2] and chain[-1]["x_cublas"] > 0.8
    assert len(shown["llm_calls"]) == 3 and all(c["error"] is None for c in shown["llm_calls"])
