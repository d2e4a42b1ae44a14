"""On a Hopper GPU: the gate accepts the seed and rejects kernels that cheat; paired timing; a short run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autodiscovery import campaign as campaigns
from autodiscovery.agents.space import Space
from autodiscovery.review import report
from autodiscovery.running import runner
from autodiscovery.store import Store
from harnesses.hopper_gemm import HopperGemmHarness

pytestmark = pytest.mark.gpu
KERNELS = Path(__file__).parent / "kernels"


@pytest.fixture(scope="module")
def harness(build_cache):
    c = campaigns.load("hopper-gemm", ["problem.M=2048", "problem.N=2048", "problem.K=2048",
                                       "harness.timeout_s=45", "harness.repetitions=12",
                                       f"harness.cache_dir={build_cache}"])
    h = HopperGemmHarness(c)
    h.preflight()
    return h


def harness_at(shape: tuple[int, int, int], build_cache) -> HopperGemmHarness:
    """The shipped campaign at this shape, with a short timing (these tests are about the gate)."""
    M, N, K = shape
    c = campaigns.load("hopper-gemm", [f"problem.M={M}", f"problem.N={N}", f"problem.K={K}",
                                       "harness.repetitions=10", "harness.timeout_s=60",
                                       f"harness.cache_dir={build_cache}"])
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
    assert [d["dist"] for d in draws] == ["uniform", "normal", "wide", "blocks", "halves"]
    assert all(d["rel_err"] < 1e-2 and d["inputs_unchanged"] for d in draws)
    assert 0 < out.score < 0.2
    # every launch after the gate was checked too, and each timed one had its own fresh inputs
    m = out.metrics
    assert m["checked_launches"]["candidate"] >= 5 + m["pairs"] * m["launches_per_sample"]["candidate"]
    assert m["worst_rel_err"]["candidate"] < 1e-2 and m["peak_tflops"] > 500


def test_paired_timing_against_cublas(harness):
    space = Space("hopper_gemm")
    src = space.render("mma_sync", space.families["mma_sync"].default)
    out = evaluate(harness, src)
    assert out.status == "ok", out.log
    m = out.metrics
    # a fast kernel gets every pair asked for, or stops at the tenth once the pairs agree (harness.precision)
    assert len(m["ratios"]) == m["pairs"] and (m["pairs"] == 12 or m["precise"]["pairs"] == m["pairs"] == 10)
    assert m["ratio"]["ci_low"] <= m["ratio"]["median"] <= m["ratio"]["ci_high"]
    assert m["tflops"]["cublas"] > 200
    assert min(m["launches_per_sample"].values()) >= 1
    # The same kernel against itself, head to head: a ratio of one within the noise.
    build = harness.build(src)
    same = harness.head_to_head((src, build), (src, build))
    assert same.status == "ok" and abs(same.metrics["ratio"]["median"] - 1) < 0.03


def test_checked_timing_agrees_with_plain_timing_on_an_honest_kernel(harness):
    """An honest kernel's × cuBLAS under the checked, fresh-input timing matches, within noise, a plain
    interleaved timing in this process that rotates over a few fixed input sets (the timing before)."""
    import math

    import cupy as cp
    import numpy as np

    from harnesses.hopper_gemm.gpu import Cublas, Kernel, device_info

    space = Space("hopper_gemm")
    src = space.render("wgmma_ws", space.families["wgmma_ws"].default)
    build = harness.build(src)
    checked = harness.evaluate(src, build)
    assert checked.status == "ok", checked.log
    M, N, K = harness.shape
    info = device_info()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        def bf16(rows, cols):
            x = cp.random.uniform(-1, 1, (rows, cols), dtype=cp.float32)
            return (x.view(cp.uint32) >> 16).astype(cp.uint16)

        nsets = max(2, math.ceil(3 * info.l2_bytes / (2 * (M + N) * K)))
        sets = [(bf16(M, K), bf16(N, K), cp.empty((M, N), cp.uint16)) for _ in range(nsets)]
        kernel = Kernel(build.artifact, harness.check(src).model_dump(), stream, info)
        params = [kernel.bind(*s) for s in sets]
        cublas = Cublas(stream)
        runs = [lambda i: kernel(params[i]), lambda i: cublas.gemm(*sets[i])]
        ratios = []
        for rep in range(60):
            ms = []
            for k in (0, 1) if rep % 2 == 0 else (1, 0):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(stream)
                for j in range(10):
                    runs[k]((rep * 10 + j) % nsets)
                e1.record(stream)
                ms.append((k, e0, e1))
            e1.synchronize()
            t = {k: cp.cuda.get_elapsed_time(a, b) for k, a, b in ms}
            if rep >= 10:  # the first pairs warm the clocks up
                ratios.append(t[1] / t[0])
    plain = float(np.median(ratios))
    assert abs(checked.score / plain - 1) < 0.05, (checked.score, plain)


def test_a_short_run(tmp_path, build_cache):
    store = Store(tmp_path / "gpu.db")
    run_id = runner.run_campaign("hopper-gemm", ["budget.candidates=3", f"harness.cache_dir={build_cache}"], store)
    rows = report.lineage(store, run_id)
    assert rows[0]["seq"] == 0 and len(rows) >= 2
    assert rows[-1]["score"] > rows[0]["score"]
    run = report.show_run(store, run_id)
    assert run["fingerprint"]["cublas"] and run["fingerprint"]["sms"] >= 100
    # Blocks of one an SM resident in clusters of 2, 4 and 8: whole clusters, never more than the SMs.
    slots, sms = run["fingerprint"]["cluster_slots"], run["fingerprint"]["sms"]
    assert set(slots) == {"2", "4", "8"}
    assert all(0 < n <= sms and n % int(size) == 0 for size, n in slots.items()), slots


def test_a_machine_whose_gpu_is_hidden_says_so(tmp_path, build_cache, monkeypatch):
    """The driver is there, no device is visible: every command that needs the GPU says that, and doctor
    finds what run finds (exit 1)."""
    import json

    from typer.testing import CliRunner

    from autodiscovery.cli import app

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    cache = f"harness.cache_dir={build_cache}"
    seed = campaigns.load("hopper-gemm").seed_path()
    said = "no usable NVIDIA GPU: no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES is '')"
    for args in (["measure", str(seed), "--set", cache], ["run", "--quiet", "--set", cache],
                 ["ladder", "--shape", "256", "--family", "tiled", "--set", cache]):
        res = CliRunner().invoke(app, ["--db", str(tmp_path / "x.db"), *args])
        assert res.exit_code == 2 and said in res.output and "fault" not in res.output, res.output
    res = CliRunner().invoke(app, ["doctor", "--campaign", "hopper-gemm", "--json"])
    rows = {r["tool"]: r for r in json.loads(res.output)}
    assert res.exit_code == 1 and rows["Hopper GPU (sm_90a)"]["found"] is None
    assert said in rows["Hopper GPU (sm_90a)"]["if_missing"]


def test_the_ladder_command(tmp_path, build_cache):
    """`autodiscovery ladder` as a user types it: the harness comes from the campaign."""
    import json

    from typer.testing import CliRunner

    from autodiscovery.cli import app

    res = CliRunner().invoke(app, ["--db", str(tmp_path / "ladder.db"), "ladder", "--shape", "2048", "--per-family",
                                   "1", "--family", "tiled", "--family", "wgmma_tma", "--json",
                                   "--set", f"harness.cache_dir={build_cache}"])
    assert res.exit_code == 0, res.output
    (shape,) = json.loads(res.output)
    assert [r["family"] for r in shape["rungs"]] == ["tiled", "wgmma_tma"]
    assert all(r["score"] > 0 and r["passed"] == 1 for r in shape["rungs"])


@pytest.mark.parametrize("shape", [(2048, 2048, 2048), (1000, 778, 520), (1000, 776, 520)])
@pytest.mark.parametrize("family", [f.name for f in Space("hopper_gemm").ladder()])
def test_every_family_default_passes_the_gate(build_cache, family, shape):
    """Every default through the gate at a square shape and at ragged ones (M, N, K no tile multiple);
    a family whose manifest refuses a shape says so with its `requires`, and must take the other."""
    M, N, K = shape
    h = harness_at(shape, build_cache)
    space = Space("hopper_gemm")
    fam = space.families[family]
    out = evaluate(h, space.render(family, fam.default))
    if out.status == "rejected" and "requires" in out.log and shape == (1000, 778, 520):
        return  # N % 8: the TMA-store epilogue's row stride must be a multiple of 16 bytes; 776 is the check
    assert out.status == "ok", out.log
    if family.startswith("wgmma"):
        assert h.build(space.render(family, fam.default)).facts["has_hgmma"] is True


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


def test_scripted_llm_edits_are_built_gated_measured_and_kept(tmp_path, build_cache):
    from llm_server import ScriptedServer

    store = Store(tmp_path / "llm.db")
    with ScriptedServer(scripted_improvements()) as server:
        run_id = runner.run_campaign("hopper-gemm", [
            "agent.kind=llm", "agent.llm.models=[{name: scripted}]", f"agent.llm.base_url={server.url}",
            "budget.candidates=4", "agent.llm.batch=1", "agent.llm.overlap=false", "agent.llm.exploit=1",
            f"harness.cache_dir={build_cache}"], store)
    shown = report.show_run(store, run_id)
    cands = shown["candidates"]
    assert [c["proposer"] for c in cands] == ["seed", "llm:scripted", "llm:scripted", "llm:scripted"]
    assert cands[1]["status"] == "kept" and cands[2]["status"] == "kept"
    assert cands[3]["status"] in ("kept", "reverted") and cands[3]["score"] > 0.5
    chain = report.lineage(store, run_id)
    assert [r["seq"] for r in chain][:3] == [0, 1, 2] and chain[-1]["score"] > 0.8
    assert len(shown["llm_calls"]) == 3 and all(c["error"] is None for c in shown["llm_calls"])


def gpu_count() -> int:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


@pytest.mark.skipif(gpu_count() < 2, reason="needs 2 GPUs")
def test_a_run_over_two_gpus(tmp_path, build_cache):
    """`--gpus all`: evaluations go to both GPUs, each recorded with its index; the decisions hold."""
    store = Store(tmp_path / "two.db")
    run_id = runner.run_campaign("hopper-gemm", ["budget.candidates=8", "harness.gpus=all", "problem.M=2048",
                                          "problem.N=2048", "problem.K=2048", f"harness.cache_dir={build_cache}"],
                          store)
    shown = report.show_run(store, run_id)
    assert shown["status"] == "finished" and shown["fingerprint"]["gpus"] == list(range(gpu_count()))
    devices = {e["device"] for c in shown["candidates"] for e in report.show_candidate(store, run_id, c["seq"])[
        "evaluations"] if e["kind"] == "benchmark"}
    assert {d.rsplit("(GPU ", 1)[1] for d in devices} >= {"0)", "1)"}
    assert len({d.rsplit(" (GPU", 1)[0] for d in devices}) == 1  # one GPU model
    chain = report.lineage(store, run_id)
    assert len(chain) >= 3 and chain[-1]["score"] > chain[0]["score"]


def test_the_llm_agent_continues_a_search_run(tmp_path, build_cache):
    """`run --from`: a short search run, then the llm agent from its best (re-measured as the new run's
    seed) with one edit, built, gated and measured on the GPU and decided against that seed."""
    from llm_server import ScriptedServer, edit_lines

    store = Store(tmp_path / "handover.db")
    shape = ["problem.M=2048", "problem.N=2048", "problem.K=2048", f"harness.cache_dir={build_cache}"]
    search = runner.run_campaign("hopper-gemm", ["budget.candidates=3", "agent.search.batch=2", *shape], store)
    climbed = report.lineage(store, search)
    note = edit_lines("a comment after the manifest: the same machine code, measured against itself.",
                      lambda k: k.replace("*/\n", "*/\n// handed over from the search agent\n", 1))
    with ScriptedServer([note]) as server:
        handed = runner.run_campaign(None, ["agent.kind=llm", "agent.llm.models=[{name: scripted}]",
                                     f"agent.llm.base_url={server.url}", "budget.candidates=2", "agent.llm.batch=1",
                                     "agent.llm.overlap=false", "agent.llm.exploit=1", *shape], store, from_=str(search))
    chain = report.lineage(store, handed)
    assert [r["run"] for r in chain[:len(climbed)]] == [search] * len(climbed) and chain[len(climbed)]["run"] == handed
    cands = report.show_run(store, handed)["candidates"]
    assert cands[0]["proposer"] == f"from {search}/{climbed[-1]['seq']}" and cands[0]["status"] == "kept"
    assert abs(cands[0]["score"] / climbed[-1]["score"] - 1) < 0.1  # the same kernel, measured again
    assert cands[1]["proposer"] == "llm:scripted" and cands[1]["status"] in ("kept", "reverted")
    assert cands[1]["score"] > 0 and cands[1]["verdict"] in ("keep", "revert")


@pytest.mark.skipif(shutil.which("ncu") is None, reason="Nsight Compute (ncu) is not installed")
def test_profile_a_recorded_candidate_and_show_it(tmp_path, build_cache):
    """`profile RUN/SEQ`: Nsight Compute on the candidate and on cuBLAS, stored with the candidate."""
    store = Store(tmp_path / "gpu.db")
    run_id = runner.run_campaign("hopper-gemm", ["budget.candidates=2", "problem.M=2048", "problem.N=2048",
                                          "problem.K=2048", f"harness.cache_dir={build_cache}"], store)
    best = report.lineage(store, run_id)[-1]["seq"]
    label, out, _ = runner.profile(f"{run_id}/{best}", "hopper-gemm", [], store)
    assert out.status == "ok", out.log
    p = out.metrics["profile"]
    assert p["candidate"]["time_us"] > 0 and p["baseline"]["time_us"] > 0
    assert p["baseline_kernels"] and p["candidate"]["grid"] >= 1
    shown = report.show_candidate(store, run_id, best)
    assert [e["kind"] for e in shown["evaluations"]].count("profile") == 1


def test_screening_stops_a_clearly_slower_candidate_early(harness):
    """Far below its bar, a candidate is timed for `screen_far_pairs` pairs without warm-up; below it by
    more than the slack, for `screen_pairs`; near or above it, to the full count."""
    space = Space("hopper_gemm")
    source = space.render("wgmma_tma", space.families["wgmma_tma"].default)
    build = harness.build(source)
    far = harness.evaluate(source, build, bar=5.0)
    assert far.status == "ok", far.log
    assert far.metrics["screened"] | {"below": 0} == {"pairs": harness.settings.screen_far_pairs, "bar": 5.0,
                                                       "below": 0, "far": True}
    assert far.metrics["pairs"] == harness.settings.screen_far_pairs
    short = harness.evaluate(source, build, bar=far.score * 1.15)
    assert short.status == "ok" and not short.metrics["screened"]["far"], short.log
    assert short.metrics["screened"]["pairs"] == harness.settings.screen_pairs == short.metrics["pairs"]
    full = harness.evaluate(source, build, bar=short.score * 0.5)
    assert full.status == "ok" and "screened" not in full.metrics
    assert full.metrics["pairs"] > short.metrics["pairs"]


def test_a_slow_first_candidate_is_known_from_its_gate_and_timed_for_two_pairs(tmp_path, build_cache):
    """The naive seed at 2048×8192×8192 (tens of ms a launch): its gate's launches are its estimate, it is
    far below cuBLAS, its bar as a run's first, so it is timed for two pairs, every launch checked."""
    campaign = campaigns.load("hopper-gemm", ["problem.M=2048", "problem.N=8192", "problem.K=8192",
                                              f"harness.cache_dir={build_cache}"])
    h = HopperGemmHarness(campaign)
    h.preflight()
    source = campaign.seed_path().read_text()
    out = h.evaluate(source, h.build(source), bar=1.0)
    assert out.status == "ok", out.log
    assert out.metrics["screened"]["far"] and out.metrics["pairs"] == 2
    assert out.metrics["estimated_from_gate_ms"]["candidate"] > campaign.harness.sample_ms
    assert out.metrics["checked_launches"]["candidate"] == campaign.harness.gate_draws + 2


CLUSTER_VARIANTS = {
    "pairs along M, split epilogue": {"CLUSTER": 2, "CLUSTER_DIM": "M"},
    "pairs along N, whole-tile epilogue": {"CLUSTER": 2, "CLUSTER_DIM": "N", "EPILOGUE": "tma", "QSIZE": 3},
    "registers epilogue, nothing in flight": {"EPILOGUE": "regs", "INFLIGHT": 0, "CTAS": 0},
    "padded shared-memory epilogue in pairs along M": {"EPILOGUE": "smem", "QSIZE": 3, "CLUSTER": 2},
    "BK 128 in pairs along N, super-tiles": {"BK": 128, "QSIZE": 2, "CLUSTER": 2, "CLUSTER_DIM": "N",
                                             "ORDER": "super", "GROUP_M": 8},
    "BK 128 tall tiles, super-tiles": {"BM": 256, "BN": 128, "BK": 128, "QSIZE": 2, "ORDER": "super"},
    "Hilbert order in pairs along M": {"ORDER": "hilbert", "CLUSTER": 2},
    "ping-pong in pairs along M": {"SCHEDULE": "pingpong", "BM": 64, "CLUSTER": 2},
    "ping-pong 128x128, whole-tile epilogue": {"SCHEDULE": "pingpong", "BM": 128, "BN": 128, "EPILOGUE": "tma"},
    "tall tiles in pairs along N": {"BM": 256, "BN": 128, "CLUSTER": 2, "CLUSTER_DIM": "N", "GROUP_M": 8},
    "three consumers, 192x192, registers epilogue": {"BM": 192, "BN": 192, "EPILOGUE": "regs", "CTAS": 0,
                                                     "CONSUMER_REGS": 160},
    "three consumers, 192x192 in pairs along N, whole-tile epilogue": {
        "BM": 192, "BN": 192, "EPILOGUE": "tma", "QSIZE": 3, "CLUSTER": 2, "CLUSTER_DIM": "N",
        "PRODUCER_REGS": 40, "CONSUMER_REGS": 152},
    "three consumers, 192x128 in pairs along M, split epilogue": {"BM": 192, "BN": 128, "CLUSTER": 2,
                                                                   "CONSUMER_REGS": 160},
    "three consumers, 192x192, epilogue in three parts": {"BM": 192, "BN": 192, "CTAS": 0, "CONSUMER_REGS": 160},
    "128x192 in pairs along N, epilogue in three parts": {"BN": 192, "CLUSTER": 2, "CLUSTER_DIM": "N"},
    "128x128, six-stage ring": {"BN": 128, "QSIZE": 6, "INFLIGHT": 0},
    "128x128 in pairs along M, six-stage ring": {"BN": 128, "QSIZE": 6, "CLUSTER": 2},
    "stream-K": {"STREAMK": 1, "CTAS": 0, "PRODUCER_REGS": 40, "CONSUMER_REGS": 232},
    "stream-K, 128 CTAs, registers epilogue, nothing in flight": {
        "STREAMK": 1, "EPILOGUE": "regs", "INFLIGHT": 0, "PRODUCER_REGS": 40, "CONSUMER_REGS": 232},
    "stream-K, three consumers, 192x192": {"STREAMK": 1, "BM": 192, "BN": 192, "CTAS": 0, "PRODUCER_REGS": 40,
                                           "CONSUMER_REGS": 152},
    "three consumers, 192x176, split epilogue with a 48-column tail": {"BM": 192, "BN": 176, "CTAS": 0,
                                                                        "CONSUMER_REGS": 160},
    "128x208, split epilogue in four parts, 16-column tail": {"BN": 208, "CTAS": 0},
    "128x144, padded shared-memory epilogue": {"BN": 144, "EPILOGUE": "smem", "QSIZE": 4},
    "128x176 in pairs along M, whole-tile epilogue with a 48-column tail": {"BN": 176, "QSIZE": 3, "CLUSTER": 2,
                                                                           "EPILOGUE": "tma"},
    "ping-pong 64x240 in pairs along N, 48-column tail": {"SCHEDULE": "pingpong", "BM": 64, "BN": 240, "CLUSTER": 2,
                                                          "CLUSTER_DIM": "N", "QSIZE": 4},
    "stream-K 128x224": {"STREAMK": 1, "BN": 224, "CTAS": 0, "PRODUCER_REGS": 40, "CONSUMER_REGS": 232},
    "128x224, L2 fills promoted to 256 bytes": {"BN": 224, "CTAS": 0, "L2_PROMO": 256},
    "128x128 in pairs along M, L2 fills promoted to 256 bytes": {"BN": 128, "QSIZE": 6, "CLUSTER": 2, "L2_PROMO": 256},
    "256x152, slab epilogue, four stages, 24-column tail": {"BM": 256, "BN": 152, "QSIZE": 4, "CTAS": 0,
                                                            "EPILOGUE": "tma_slab", "INFLIGHT": 0},
    "256x152 in pairs along M, B multicast in halves of 76 rows": {"BM": 256, "BN": 152, "QSIZE": 4, "CTAS": 0,
                                                                   "EPILOGUE": "tma_slab", "CLUSTER": 2},
    "256x136 in pairs along N, slab epilogue, 8-column tail": {"BM": 256, "BN": 136, "EPILOGUE": "tma_slab",
                                                               "CLUSTER": 2, "CLUSTER_DIM": "N"},
    "ping-pong 64x240, slab epilogue, 48-column tail": {"SCHEDULE": "pingpong", "BM": 64, "BN": 240,
                                                        "EPILOGUE": "tma_slab"},
    "stream-K 256x160, slab epilogue": {"STREAMK": 1, "BM": 256, "BN": 160, "QSIZE": 4, "CTAS": 0,
                                        "EPILOGUE": "tma_slab", "PRODUCER_REGS": 40, "CONSUMER_REGS": 232},
    "256x152 in pairs along M, warp epilogue, 24-column tail": {"BM": 256, "BN": 152, "QSIZE": 4, "CTAS": 0,
                                                                "EPILOGUE": "tma_warp", "CLUSTER": 2, "INFLIGHT": 0},
    "128x256, warp epilogue": {"EPILOGUE": "tma_warp"},
    "ping-pong 64x240, warp epilogue, 48-column tail": {"SCHEDULE": "pingpong", "BM": 64, "BN": 240,
                                                        "EPILOGUE": "tma_warp"},
    "three consumers, 192x176 in pairs along N, warp epilogue": {"BM": 192, "BN": 176, "CTAS": 0, "CLUSTER": 2,
                                                                  "CLUSTER_DIM": "N", "EPILOGUE": "tma_warp",
                                                                  "CONSUMER_REGS": 160},
    "stream-K 256x160, warp epilogue": {"STREAMK": 1, "BM": 256, "BN": 160, "QSIZE": 4, "CTAS": 0,
                                        "EPILOGUE": "tma_warp", "PRODUCER_REGS": 40, "CONSUMER_REGS": 232},
    "128x256, pipe epilogue": {"EPILOGUE": "tma_pipe"},
    "256x152, pipe epilogue, 24-column tail": {"BM": 256, "BN": 152, "QSIZE": 4, "CTAS": 0, "EPILOGUE": "tma_pipe",
                                               "INFLIGHT": 0},
    "128x208, pipe epilogue, 16-column tail": {"BN": 208, "CTAS": 0, "EPILOGUE": "tma_pipe"},
    "ping-pong 128x128 in pairs along N, pipe epilogue": {"SCHEDULE": "pingpong", "BM": 128, "BN": 128,
                                                          "EPILOGUE": "tma_pipe", "CLUSTER": 2, "CLUSTER_DIM": "N"},
}


@pytest.mark.parametrize("shape", [(2048, 2048, 2048), (1000, 776, 520), (1100, 1288, 4104)])
@pytest.mark.parametrize("variant", list(CLUSTER_VARIANTS))
def test_cluster_family_variants_pass_the_gate(build_cache, variant, shape):
    """Clusters (odd cluster-tile counts leave a block with rows or columns past the edge), both TMA
    epilogues and both release orders, at a square and at ragged shapes."""
    M, N, K = shape
    h = harness_at(shape, build_cache)
    fam = Space("hopper_gemm").families["wgmma_cluster"]
    knobs = {**fam.default, **CLUSTER_VARIANTS[variant]}
    assert not fam.violations(knobs, {"M": M, "N": N, "K": K})
    out = evaluate(h, Space("hopper_gemm").render("wgmma_cluster", knobs))
    assert out.status == "ok", out.log


@pytest.mark.parametrize("K, knobs", [
    (2000, {}), (2008, {"INFLIGHT": 0}), (2024, {"CLUSTER": 2}), (2040, {"BN": 128, "QSIZE": 6}),
    (2120, {"BK": 128, "QSIZE": 2}), (1928, {"BK": 128, "QSIZE": 2, "SCHEDULE": "pingpong", "BM": 64}),
    (24, {"EPILOGUE": "tma_warp"}),
], ids=["1 step", "2 steps, nothing in flight", "3 steps, pairs", "4 steps, 8 columns past K", "BK 128, 5 steps",
        "BK 128, ping-pong, 1 step", "one k-tile of 2 steps"])
def test_cluster_family_last_k_tile_runs_only_the_steps_that_hold_data(build_cache, K, knobs):
    """Where K is not a multiple of BK the last k-tile, peeled from the loop, runs 1 to BK / 16 - 1 wgmma steps
    of 16 columns (a step past K would multiply TMA's zero fill; one too few would drop columns the gate sees)."""
    h = harness_at((520, 776, K), build_cache)
    fam = Space("hopper_gemm").families["wgmma_cluster"]
    k = {**fam.default, **knobs}
    assert not fam.violations(k, {"M": 520, "N": 776, "K": K})
    out = evaluate(h, Space("hopper_gemm").render("wgmma_cluster", k))
    assert out.status == "ok", out.log


def test_replay_of_a_short_real_run(tmp_path, build_cache):
    """`replay RUN`: the kept steps measured again in one process, each beside its recorded figure."""
    store = Store(tmp_path / "gpu.db")
    run_id = runner.run_campaign("hopper-gemm", ["budget.candidates=3", "problem.M=2048", "problem.N=2048",
                                          "problem.K=2048", f"harness.cache_dir={build_cache}"], store)
    chain = report.lineage(store, run_id)
    from autodiscovery.review.replay import replay

    data = replay(run_id, store)
    assert [s["seq"] for s in data["steps"]] == [r["seq"] for r in chain]
    assert data["same_machine"] and data["differences"] == {}
    for s in data["steps"]:
        assert s["replayed"]["status"] == "ok" and s["replayed"]["score"] > 0
        assert s["delta"] is not None and s["replayed"]["figures"]["pct_peak"] > 0
    # The structural steps are far apart; the replay ranks them the same way.
    assert [s["replayed"]["score"] for s in data["steps"]] == sorted(s["replayed"]["score"] for s in data["steps"])


SPLITK_VARIANTS = {
    "no split, 64x64": {"BM": 64, "BN": 64, "SPLIT": 1},
    "no split, 128x256, two consumers": {"BM": 128, "BN": 256, "SPLIT": 1, "CONSUMERS": 2},
    "pairs, 128x256, two consumers": {"BM": 128, "BN": 256, "SPLIT": 2, "CONSUMERS": 2},
    "pairs, 128x64, one consumer of two 64-row MMAs": {"BM": 128, "BN": 64, "SPLIT": 2},
    "fours, 64x256": {"BM": 64, "BN": 256, "SPLIT": 4},
    "fours, 128x64, two consumers, shallow ring": {"BM": 128, "BN": 64, "SPLIT": 4, "CONSUMERS": 2, "QSIZE": 3},
    "eights, 64x64 (8 rows a block)": {"BM": 64, "BN": 64, "SPLIT": 8},
    "eights, 128x256, two consumers, 40/232 registers": {"BM": 128, "BN": 256, "SPLIT": 8, "CONSUMERS": 2,
                                                         "PRODUCER_REGS": 40, "CONSUMER_REGS": 232},
    "eights, 128x64, one consumer, ungrouped, deep ring": {"BM": 128, "BN": 64, "SPLIT": 8, "GROUP_M": 1,
                                                           "QSIZE": 6},
    "two consumers on 64 rows (refused)": {"BM": 64, "BN": 64, "SPLIT": 2, "CONSUMERS": 2},
    "swapped, 16x64 pairs": {"BM": 16, "BN": 64, "SPLIT": 2, "SWAP": 1},
    "swapped, 16x256 fours, deep ring": {"BM": 16, "BN": 256, "SPLIT": 4, "SWAP": 1, "QSIZE": 6},
    "swapped, 32x128 unsplit": {"BM": 32, "BN": 128, "SPLIT": 1, "SWAP": 1},
    "swapped, 128x64 pairs": {"BM": 128, "BN": 64, "SPLIT": 2, "SWAP": 1},
    "swapped, 128x64 pairs, eight-stage ring": {"BM": 128, "BN": 64, "SPLIT": 2, "SWAP": 1, "QSIZE": 8},
    "unsplit 64x64, eight-stage ring": {"BM": 64, "BN": 64, "SPLIT": 1, "QSIZE": 8},
    "unsplit 64x64, fourteen-stage ring": {"BM": 64, "BN": 64, "SPLIT": 1, "QSIZE": 14},
    "unsplit 64x96, ten-stage ring": {"BM": 64, "BN": 96, "SPLIT": 1, "QSIZE": 10},
    "unsplit 64x96, ten-stage ring, L2 fills not promoted": {"BM": 64, "BN": 96, "SPLIT": 1, "QSIZE": 10, "L2_PROMO": 0},
    "unsplit 128x112, seven-stage ring": {"BM": 128, "BN": 112, "SPLIT": 1, "QSIZE": 7},
    "pairs, 128x96 (12 pieces a thread, in batches of 6)": {"BM": 128, "BN": 96, "SPLIT": 2, "QSIZE": 6},
    "swapped, 16x64 unsplit, fourteen-stage ring": {"BM": 16, "BN": 64, "SPLIT": 1, "SWAP": 1, "QSIZE": 14},
    "swapped, 256x128 fours, two consumers": {"BM": 256, "BN": 128, "SPLIT": 4, "SWAP": 1, "CONSUMERS": 2,
                                              "PRODUCER_REGS": 40, "CONSUMER_REGS": 232},
    "swapped, 160x128 pairs, two consumers (M of 320 in two tiles)": {
        "BM": 160, "BN": 128, "SPLIT": 2, "SWAP": 1, "CONSUMERS": 2, "PRODUCER_REGS": 40, "CONSUMER_REGS": 232,
        "QSIZE": 5},
    "swapped, 96x128 threes, two consumers": {"BM": 96, "BN": 128, "SPLIT": 3, "SWAP": 1, "CONSUMERS": 2,
                                              "PRODUCER_REGS": 40, "CONSUMER_REGS": 232, "QSIZE": 6},
    "swapped, 192x64 threes": {"BM": 192, "BN": 64, "SPLIT": 3, "SWAP": 1, "QSIZE": 6},
    "swapped, 224x64 unsplit": {"BM": 224, "BN": 64, "SPLIT": 1, "SWAP": 1, "QSIZE": 6},
}


@pytest.mark.parametrize("shape", [(128, 4096, 4096), (1000, 776, 520), (1000, 778, 520), (256, 512, 192),
                                   (16, 4096, 4096)])
@pytest.mark.parametrize("variant", list(SPLITK_VARIANTS))
def test_split_k_family_variants_pass_the_gate(build_cache, variant, shape):
    """K split across a cluster and added up through distributed shared memory: at skinny shapes (M of
    128 and 16), at ragged ones (N % 4 == 0 and == 2: the 8-byte and the 4-byte stores), and at a small
    K where some blocks of a cluster get no K tile at all (3 K tiles over 4 or 8 blocks); swapped tiles
    (Cᵀ = B·Aᵀ) at the same shapes."""
    M, N, K = shape
    fam = Space("hopper_gemm").families["wgmma_splitk"]
    knobs = {**fam.default, **SPLITK_VARIANTS[variant]}
    if why := fam.violations(knobs, {"M": M, "N": N, "K": K}):
        pytest.skip("; ".join(why))
    h = harness_at(shape, build_cache)
    out = evaluate(h, Space("hopper_gemm").render("wgmma_splitk", knobs))
    assert out.status == "ok", out.log


@pytest.mark.parametrize("split, swap", [(2, 0), (8, 0), (4, 1)])
def test_split_k_family_sums_the_same_way_every_time(build_cache, split, swap):
    """The partials are added in rank order: two launches on the same inputs give the same bits."""
    import cupy as cp

    from harnesses.hopper_gemm.gpu import Kernel, device_info

    M, N, K = 256, 4096, 4096
    h = harness_at((M, N, K), build_cache)
    space = Space("hopper_gemm")
    src = space.render("wgmma_splitk", space.families["wgmma_splitk"].default | {"SPLIT": split, "SWAP": swap})
    build = h.build(src)
    assert build.ok, build.log
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        def bf16(rows, cols):
            x = cp.random.normal(0, 1, (rows, cols), dtype=cp.float32)
            return (x.view(cp.uint32) >> 16).astype(cp.uint16)

        A, B = bf16(M, K), bf16(N, K)
        outs = [cp.empty((M, N), cp.uint16) for _ in range(2)]
        kernel = Kernel(build.artifact, h.check(src).model_dump(), stream, device_info())
        for C in outs:
            kernel(kernel.bind(A, B, C))
        stream.synchronize()
    assert bool(cp.array_equal(outs[0], outs[1]))


@pytest.mark.parametrize("shape", [(3000, 5000, 2000), (1000, 776, 520)])
def test_stream_k_adds_the_same_way_every_time_and_leaves_its_flags_zero(build_cache, shape):
    """Stream-K's shared tiles add the partials in CTA order: launches on the same inputs give the same
    bits (at 1000×776×520 a tile is shared by several CTAs), the workspace's flags are zero after each
    launch, and the answer is cuBLAS's within the gate's tolerance."""
    import cupy as cp

    from harnesses.hopper_gemm.gpu import Cublas, Kernel, device_info

    M, N, K = shape
    h = harness_at(shape, build_cache)
    space = Space("hopper_gemm")
    knobs = space.families["wgmma_cluster"].default | CLUSTER_VARIANTS["stream-K"]
    src = space.render("wgmma_cluster", knobs)
    build = h.build(src)
    assert build.ok, build.log
    launch = h.check(src)
    assert launch.stream_k and launch.workspace > 0
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        def bf16(rows, cols):
            x = cp.random.uniform(-1, 1, (rows, cols), dtype=cp.float32)
            return (x.view(cp.uint32) >> 16).astype(cp.uint16)

        A, B = bf16(M, K), bf16(N, K)
        outs = [cp.empty((M, N), cp.uint16) for _ in range(3)]
        kernel = Kernel(build.artifact, launch.model_dump(), stream, device_info())
        flags = kernel.workspace[launch.grid[0] * 128 * 256 * 4:].view(cp.uint32)
        for C in outs:
            kernel(kernel.bind(A, B, C))
            stream.synchronize()
            assert int(flags.sum()) == 0
        ref = cp.empty((M, N), cp.uint16)
        Cublas(stream).gemm(A, B, ref)
        stream.synchronize()
    assert bool(cp.array_equal(outs[0], outs[1])) and bool(cp.array_equal(outs[0], outs[2]))

    def f32(x):
        return (x.astype(cp.uint32) << 16).view(cp.float32)

    err = float(cp.linalg.norm(f32(outs[0]) - f32(ref)) / cp.linalg.norm(f32(ref)))
    assert err < 1e-2


@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="compute-sanitizer is not installed")
@pytest.mark.parametrize("knobs", [
    {"BM": 32, "BN": 64, "SPLIT": 1, "SWAP": 1, "QSIZE": 10},
    {"BM": 16, "BN": 64, "SPLIT": 1, "SWAP": 1, "QSIZE": 10},
    {"BM": 64, "BN": 128, "SPLIT": 1, "SWAP": 1, "CONSUMERS": 2, "QSIZE": 8},
    {"BM": 32, "BN": 128, "SPLIT": 2, "SWAP": 1, "QSIZE": 10},
], ids=["swapped 32x64", "swapped 16x64, two row tiles", "swapped, two consumers", "swapped, split in pairs"])
def test_split_k_family_reductions_pass_compute_sanitizer(build_cache, knobs):
    """The split-K family's reductions through shared memory under the four tools: swapped tiles of one
    block (SPLIT 1) once met at a __syncthreads in the consumers' branch and another in the producer's, which
    synccheck refuses (and a keep with it: 32×57344×8192 on an H100, 1.028× the best cuBLASLt algorithm);
    their consumers now have a barrier of their own."""
    h = harness_at((32, 8192, 4096), build_cache)
    space = Space("hopper_gemm")
    fam = space.families["wgmma_splitk"]
    source = space.render("wgmma_splitk", {**fam.default, **knobs})
    build = h.build(source)
    assert build.ok, build.log
    out = h.sanitize(source, build)
    assert out is not None and out.status == "ok", out.log if out else "sanitizing is off"
