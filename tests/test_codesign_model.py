"""The co-design platform, costs and model on CPU: the gpgpusim.config rendered from the platform model
against the public A100 file and the simulator's own echo, area/power costs and the Pareto front,
PTX instruction counts, and the phase-C model fitted and judged on the recorded 512³ run."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from autodiscovery import campaign as campaigns
from harnesses.accelsim import simlog
from harnesses.accelsim.agent import CodesignAgent
from harnesses.accelsim.arch import Architecture, option_values
from harnesses.accelsim.costs import ArchSettings, Budget, estimate, pareto
from harnesses.accelsim.model import Fit, leave_one_out, ptx_counts, spearman
from harnesses.accelsim.platform import STOCK, Platform

SHARED = Path(__file__).resolve().parents[2] / "shared" / "accelsim"
A100 = SHARED / "SM80_A100" / "gpgpusim.config"
RECORDED_LOG = SHARED / "sample-logs" / "own-ptx-mode-runs_SM80_A100_32SM_wmma" / "vec_512" / "sim.log"
RUN_512 = Path(__file__).parent / "data" / "edge_512_run.json"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/accelsim")


def test_every_field_of_the_platform_is_written_once_with_its_description():
    text = STOCK.render()
    lines = [x for x in text.splitlines() if x.startswith("-")]
    fields = [o for s in STOCK.sections() for o, _, _ in s.options()]
    assert len(lines) == len(fields) == len(set(fields)) and len(fields) > 90
    for section in STOCK.sections():
        for option, value, doc in section.options():
            assert doc, f"{option} has no description"
            at = text.index(f"\n{option} {value}\n")
            assert text[:at].splitlines()[-1].startswith("# ")  # its description just above it
    assert text.isascii()  # the simulator's option parser reads bytes


@needs_shared
def test_the_platform_is_the_public_a100_config_with_32_sms():
    public = option_values(A100.read_text())
    ours = STOCK.options()
    assert set(ours) == set(public)
    differ = {k: (public[k], ours[k]) for k in ours if ours[k] != public[k]}
    assert differ == {"-gpgpu_n_clusters": ("108", "32"), "-gpgpu_memlatency_stat": ("14", "0"),
                      "-enable_ptx_file_line_stats": ("1", "0")}


@needs_shared
def test_the_rendered_config_round_trips_through_the_simulators_echo():
    """A real GPGPU-Sim run of the 32-SM A100 config printed every option as it parsed it: each value we
    render is the value it used."""
    echo = simlog.echoed_config(RECORDED_LOG.read_text(errors="replace"))
    rendered = option_values(STOCK.with_options(Architecture().overrides()).render())
    missing = [k for k in rendered if k not in echo]
    assert not missing
    statistics_only = {"-gpgpu_memlatency_stat", "-enable_ptx_file_line_stats"}  # that run kept them on
    assert {k: (v, echo[k]) for k, v in rendered.items() if echo[k].split() != v.split()
            and k not in statistics_only} == {}


def test_knobs_replace_their_fields_and_unknown_options_are_refused():
    arch = Architecture(scheduler="gto", dram_latency=100, shmem_banks=64, tensor_latency=16, tensor_initiation=8,
                        registers_per_sm=131072, sms=16)
    values = option_values(STOCK.with_options(arch.overrides()).render())
    for option, value in arch.overrides().items():
        assert values[option] == value
    assert values["-gpgpu_n_mem"] == "40" and STOCK.options()["-gpgpu_scheduler"] == "lrr"  # stock untouched
    with pytest.raises(KeyError, match="-gpgpu_no_such_option"):
        STOCK.with_options({"-gpgpu_no_such_option": "1"})
    assert isinstance(Platform(), Platform)


def test_costs_of_each_knob_and_the_budget():
    assert estimate(Architecture())["area_pct"] == 0 and estimate(Architecture(scheduler="gto"))["area_pct"] == 0
    regs = estimate(Architecture(registers_per_sm=131072))
    assert regs["area_pct"] == pytest.approx(9.9) and regs["area_by_knob"] == {"registers_per_sm": 9.9}
    fast_tensor = estimate(Architecture(tensor_initiation=8))
    assert fast_tensor["area_pct"] == pytest.approx(11.0) and fast_tensor["power_pct"] > fast_tensor["area_pct"]
    # A slower DRAM interface saves; a faster one costs; fewer SMs save in proportion.
    assert estimate(Architecture(dram_latency=250))["area_pct"] < 0 < estimate(Architecture(dram_latency=100))["area_pct"]
    assert estimate(Architecture(sms=16))["area_pct"] == pytest.approx(-27.5)
    both = Architecture(registers_per_sm=131072, dram_latency=150)
    assert estimate(both)["area_pct"] == pytest.approx(regs["area_pct"] + estimate(Architecture(dram_latency=150))["area_pct"])
    budget = Budget()
    assert budget.over(regs) is None and "over the budget of +10%" in budget.over(fast_tensor)
    assert Budget(area_pct=None, power_pct=10).over(regs) is not None  # power +13.2%
    settings = ArchSettings.model_validate({"area_shares": {"register_file": 0.09}})
    assert settings.cost(Architecture(registers_per_sm=131072))["area_pct"] == pytest.approx(4.95)


def test_pareto_front():
    pts = [{"seq": i, "area_pct": a, "cycles": c} for i, (a, c) in
           enumerate([(0, 100), (2, 90), (1, 95), (3, 95), (5, 80), (4, 85), (6, 80)])]
    assert [p["seq"] for p in pareto(pts)] == [0, 2, 1, 5, 4]


def test_the_fit_recovers_a_linear_law_and_keeps_terms_non_negative():
    rows = [{"tensor": t, "issue": i, "chain": c} for t, i, c in
            [(100, 50, 10), (200, 20, 30), (150, 80, 5), (300, 10, 60), (120, 90, 27), (260, 40, 45)]]
    cycles = [1000 + 2 * r["tensor"] + 3 * r["chain"] for r in rows]
    fit = Fit(rows, cycles)
    assert fit.terms()["intercept"] == pytest.approx(1000) and fit.terms()["tensor"] == pytest.approx(2)
    assert fit.terms()["issue"] == pytest.approx(0, abs=1e-6)
    loo = leave_one_out(rows, cycles)
    assert loo["rank_correlation"] == pytest.approx(1.0) and loo["median_abs_error"] < 1e-9
    # A law that needs a negative weight: the term is dropped, not given one.
    anti = [1000 - 2 * r["issue"] for r in rows]
    assert all(v >= 0 for k, v in Fit(rows, anti).terms().items() if k != "intercept")
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1) and spearman([1, 1], [1, 2]) is None


def nvcc() -> str | None:
    return shutil.which("nvcc")


@pytest.mark.skipif(nvcc() is None, reason="needs an nvcc for PTX")
def test_ptx_counts_of_the_main_loop(tmp_path):
    agent = CodesignAgent(campaigns.load("edge-codesign", [f"harness.cache_dir={tmp_path}"]))
    base = dict(agent.kernel.default)  # 64x64x32 tiles, 2x2 fragments: 4 warps of 128 threads
    counts = agent.ptx(base)
    # Per k-step of 32 a warp does 2 x (2 + 2) fragment loads and 2 x 2 x 2 MMAs; 64x32 + 64x32 halves
    # in 16-byte chunks over 128 threads are 4 global loads each.
    assert (counts["mma"], counts["wmma_load"], counts["global_load"], counts["barrier"]) == (8, 8, 4, 2)
    bigger = agent.ptx(base | {"BLOCK_K": 64})
    assert bigger["mma"] == 16 and bigger["insn"] > counts["insn"]
    assert list(tmp_path.glob("ptx/*.ptx"))  # compiled once, kept
    out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    assert "release" in out
    # No loop with MMAs: the whole kernel is counted.
    assert ptx_counts("\tadd.s32 %r1, %r2, %r3;\n\t@%p1 ld.global.u32 %r4, [%rd1];\n\tret;\n") == {
        "insn": 2, "mma": 0, "wmma_load": 0, "global_load": 1, "shared_store": 0, "barrier": 0}


def test_the_model_on_the_recorded_512_run(tmp_path):
    """Fitted on the real A and B points of the recorded run and judged on each point left out of its own
    fit: at 512³ it does not rank them well enough to be trusted, so phase C must simulate its picks."""
    from autodiscovery.agents import Record

    results = json.loads(RUN_512.read_text())["results"]
    agent = CodesignAgent(campaigns.load("edge-codesign", [f"harness.cache_dir={tmp_path}"]))
    recs = [Record(seq=r["seq"], family="wmma", knobs={"phase": r["phase"], "kernel": r["kernel"], "arch": r["arch"]},
                   status="reverted", score=r["cycles"], kept=False, source_hash=str(r["seq"]))
            for r in results if r["phase"] in "AB"]
    fit, info = agent.fit(recs)
    assert info["n"] == 13 and len(info["points"]) == 13
    assert info["trusted"] is False and info["loo_rank_correlation"] < 0.8
    assert {p["seq"] for p in info["points"]} == {r.seq for r in recs}
    assert fit.predict(agent._features(recs[0].knobs["kernel"], recs[0].knobs["arch"])) > 0
    picks = agent._model_picks(3, dict(agent.arch.default), set(), recs)
    assert len(picks) == 3 and all(p.knobs["model"]["simulations_saved"] == 0 for p in picks)
    assert all(p.knobs["phase"] == "C" and p.knobs["predicted"] > 0 for p in picks)
