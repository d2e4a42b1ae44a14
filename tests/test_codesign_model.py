"""The co-design platform, costs and model on CPU: the gpgpusim.config rendered from the platform model
against the public A100 file and the simulator's own echo, area/power costs and the Pareto front,
PTX facts, and the phase-C model fitted and judged on the recorded 512³ runs."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from replay import AT_512, offline_agent, recorded_facts

from autodiscovery import campaign as campaigns
from autodiscovery.toolkit.text import canon
from harnesses.accelsim import simlog
from harnesses.accelsim.agent import CodesignAgent
from harnesses.accelsim.arch import Architecture, option_values
from harnesses.accelsim.costs import ArchSettings, Budget, estimate, pareto
from harnesses.accelsim.model import (
    Fit,
    blocks_per_sm,
    conflict_degree,
    layout,
    leave_one_out,
    nnls,
    per_step,
    predict,
    ptx_counts,
    spearman,
)
from harnesses.accelsim.platform import STOCK, Platform

GPGPUSIM = Path(__file__).parent / "data" / "gpgpusim"  # real simulator output, trimmed (see its README)
A100 = GPGPUSIM / "SM80_A100" / "gpgpusim.config"
RECORDED_LOG = GPGPUSIM / "A100_32SM_wmma" / "vec_512" / "sim.log"
MODEL_DATA = json.loads((Path(__file__).parent / "data" / "edge_512_model.json").read_text())
STOCK_ARCH = {"scheduler": "lrr", "dram_latency": 190, "l2_rop_latency": 200, "shmem_banks": 32, "tensor_latency": 25,
              "tensor_initiation": 16, "registers_per_sm": 65536, "sms": 32}


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


def test_the_platform_is_the_public_a100_config_with_32_sms():
    public = option_values(A100.read_text())
    ours = STOCK.options()
    assert set(ours) == set(public)
    differ = {k: (public[k], ours[k]) for k in ours if ours[k] != public[k]}
    assert differ == {"-gpgpu_n_clusters": ("108", "32"), "-gpgpu_memlatency_stat": ("14", "0"),
                      "-enable_ptx_file_line_stats": ("1", "0")}


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
    rows = [{"tensor": t, "issue": i, "load_chain": c} for t, i, c in
            [(100, 50, 10), (200, 20, 30), (150, 80, 5), (300, 10, 60), (120, 90, 27), (260, 40, 45)]]
    cycles = [1000 + 2 * r["tensor"] + 3 * r["load_chain"] for r in rows]
    fit = Fit(rows, cycles)
    assert fit.terms()["intercept"] == pytest.approx(1000) and fit.terms()["tensor"] == pytest.approx(2)
    assert fit.terms()["issue"] == pytest.approx(0, abs=1e-6)
    loo = leave_one_out(rows, cycles)
    assert loo["rank_correlation"] == pytest.approx(1.0) and loo["median_abs_error"] < 1e-9
    # A law that needs a negative weight: the term is dropped, not given one; nor is the fixed cost.
    anti = [1000 - 2 * r["issue"] for r in rows]
    assert all(v >= 0 for v in Fit(rows, anti).terms().values())
    assert Fit(rows, [-500 + 2 * r["tensor"] for r in rows]).terms()["intercept"] == 0
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1) and spearman([1, 1], [1, 2]) is None


def test_nnls_is_the_best_non_negative_solution():
    """Against every subset of free terms solved by plain least squares: none that stays non-negative
    fits better than what nnls returns."""
    rng = np.random.default_rng(0)
    for _ in range(40):
        A, b = rng.normal(size=(12, 5)), rng.normal(size=12) * 3
        x = nnls(A, b)
        assert (x >= 0).all()
        best = np.linalg.norm(b)
        for mask in itertools.product([0, 1], repeat=5):
            cols = [i for i in range(5) if mask[i]]
            if cols:
                z = np.linalg.lstsq(A[:, cols], b, rcond=None)[0]
                if (z >= 0).all():
                    best = min(best, float(np.linalg.norm(A[:, cols] @ z - b)))
        assert np.linalg.norm(A @ x - b) == pytest.approx(best, rel=1e-9, abs=1e-9)


def test_the_bank_conflict_degree_of_a_fragment_load():
    # A 16x16 fp16 fragment is 16 rows of 32 bytes; rows BLOCK_K halves apart. 32 four-byte banks:
    # 32-byte rows fill all banks every 4 rows (4-way), 64-byte rows every 8 (8-way), 128-byte rows
    # land on the same 8 banks (16-way). 64 banks halve each.
    assert [conflict_degree(bk, 32) for bk in (16, 32, 64)] == [4, 8, 16]
    assert [conflict_degree(bk, 64) for bk in (16, 32, 64)] == [2, 4, 8]
    assert conflict_degree(24, 32) < conflict_degree(32, 32)  # a padded stride spreads the rows


def test_the_model_knows_what_the_simulator_counted():
    """On the recorded run: the blocks per SM from ptxas's registers are the simulator's own, and the
    bank-conflict degree is the simulator's count of conflicts per fragment load (to within a quarter:
    the simulator also counts the tile stores' conflicts)."""
    arch = Architecture()
    for p in MODEL_DATA["runs"]["docs/codesign-512"]:
        k, facts = p["kernel"], recorded_facts(p["kernel"])
        assert blocks_per_sm(k, arch, facts["registers"])[0] == p["ctas_per_sm"], k
        lay = layout(k, arch, 512, 512, 512, facts["registers"])
        frag_loads = lay.warp_steps * per_step(k, facts)["frag_loads"]
        per_load = p["smem_bank_conflicts"] / (frag_loads * min(lay.blocks, arch.sms))
        if lay.blocks >= arch.sms:  # every SM as busy as the busiest
            degree = conflict_degree(k["BLOCK_K"], 32)
            assert degree <= per_load + 0.25 <= 1.25 * degree + 0.25, (k, per_load)


def test_the_layout_and_the_steps_of_a_warp():
    arch = Architecture()
    best = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 16, "FRAGS_M": 2, "FRAGS_N": 1, "STAGES": 2,
            "PERSISTENT": 32, "MIN_BLOCKS": 0}
    lay = layout(best, arch, 512, 512, 512, 54)
    # 32 tiles on 32 SMs, one each; 16 warps; 32 k-steps in order.
    assert (lay.tiles, lay.blocks_per_sm, lay.resident, lay.warps, lay.sequential) == (32, 1, 1, 16, 32)
    narrow = layout(best | {"BLOCK_M": 32, "BLOCK_N": 128}, arch, 512, 512, 512, 62)
    assert (narrow.tiles, narrow.tiles_per_block, narrow.sequential) == (64, 2, 64)  # two tiles per block
    # The compiler unrolled two k-steps into the loop: counts per step are half the loop's.
    step = per_step(best, {"insn": 131, "mma": 4, "wmma_load": 6, "global_load": 4, "shared_store": 4})
    assert (step["mma"], step["frag_loads"], step["insn"], step["global_load"]) == (2, 3, 65.5, 2)
    # More latency or slower tensor units never make the prior faster; more banks never slower.
    base = predict(best, arch, 512, 512, 512)["cycles"]
    assert predict(best, Architecture(l2_rop_latency=120), 512, 512, 512)["cycles"] <= base
    assert predict(best, Architecture(tensor_initiation=32, tensor_latency=32), 512, 512, 512)["cycles"] >= base
    assert predict(best, Architecture(shmem_banks=64), 512, 512, 512)["cycles"] < base


def nvcc() -> str | None:
    return shutil.which("nvcc")


@pytest.mark.skipif(nvcc() is None, reason="needs an nvcc for PTX")
def test_ptx_facts_of_the_main_loop(tmp_path):
    agent = CodesignAgent(campaigns.load("edge-codesign", [*AT_512, f"harness.cache_dir={tmp_path}"]))
    base = dict(agent.kernel.default)  # 64x64x32 tiles, 2x2 fragments: 4 warps of 128 threads
    facts = agent.ptx(base)
    # Per k-step of 32 a warp does 2 x (2 + 2) fragment loads and 2 x 2 x 2 MMAs; 64x32 + 64x32 halves
    # in 16-byte chunks over 128 threads are 4 global loads each.
    assert (facts["mma"], facts["wmma_load"], facts["global_load"], facts["barrier"]) == (8, 8, 4, 2)
    assert 32 <= facts["registers"] <= 255  # from ptxas
    bigger = agent.ptx(base | {"BLOCK_K": 64})
    assert bigger["mma"] == 16 and bigger["insn"] > facts["insn"]
    # The device code does not depend on the persistent blocks: one compile serves every value.
    assert agent.facts_path(base | {"PERSISTENT": 256}) == agent.facts_path(base)
    assert len(list(tmp_path.glob("ptx/*.ptx"))) == len(list(tmp_path.glob("ptx/*.json"))) == 2  # kept
    # A launch bound of 4 blocks of 128 threads caps ptxas at 128 registers.
    assert agent.ptx(base | {"MIN_BLOCKS": 4, "FRAGS_M": 4, "BLOCK_M": 128})["registers"] <= 128
    # No loop with MMAs: the whole kernel is counted.
    assert ptx_counts("\tadd.s32 %r1, %r2, %r3;\n\t@%p1 ld.global.u32 %r4, [%rd1];\n\tret;\n") == {
        "insn": 2, "mma": 0, "wmma_load": 0, "global_load": 1, "shared_store": 0, "barrier": 0}


def agent_with_recorded_facts(tmp_path) -> CodesignAgent:
    return offline_agent(campaigns.load("edge-codesign", [*AT_512, f"harness.cache_dir={tmp_path}"]), tmp_path)


def records(points: list[dict], phases: str = "AB") -> list:
    from autodiscovery.interfaces import Record

    return [Record(seq=p["seq"], family="wmma", knobs={"phase": p["phase"], "kernel": p["kernel"], "arch": STOCK_ARCH},
                   status="reverted", score=p["cycles"], kept=False, source_hash=str(p["seq"]))
            for p in points if p["phase"] in phases]


@pytest.mark.parametrize("run, trusted", [("docs/codesign-512", True), ("tests/data/edge_512_run.json", False)])
def test_the_model_on_the_recorded_512_runs(tmp_path, run, trusted):
    """Fitted on the real A and B points of a recorded run and judged on each point left out of its own
    fit. On the run in docs/ it ranks them well enough to be trusted (one pick simulated, the others
    saved); on the first run, where it ranks the two fastest kernels wrongly, it is not, and phase C
    simulates three picks the model can tell apart."""
    agent = agent_with_recorded_facts(tmp_path)
    assert dict(agent.arch.default) == STOCK_ARCH
    recs = records(MODEL_DATA["runs"][run])
    fit, info = agent.fit(recs)
    assert info["n"] == 13 and len(info["points"]) == 13 and info["ptx"]
    assert {p["seq"] for p in info["points"]} == {r.seq for r in recs}
    rho = info["loo_rank_correlation"]
    assert info["trusted"] is trusted and (rho >= 0.85 if trusted else 0.6 < rho < 0.8)
    assert info["loo_median_abs_error"] < 0.1
    done = {(canon(r.knobs["kernel"]), canon(STOCK_ARCH)) for r in recs}
    picks = agent._model_picks(3, STOCK_ARCH, set(done), recs)
    assert len(picks) == (1 if trusted else 3)
    assert all(p.knobs["model"]["trusted"] is trusted for p in picks)
    assert all(p.knobs["phase"] == "C" and p.knobs["predicted"] > 0 and p.rejected is None for p in picks)
    assert not {(canon(p.knobs["kernel"]), canon(STOCK_ARCH)) for p in picks} & done  # nothing simulated again
    terms = {canon(agent._features(p.knobs["kernel"], STOCK_ARCH)) for p in picks}
    assert len(terms) == len(picks)  # no two picks the model cannot tell apart
    known = {canon(agent._features(r.knobs["kernel"], STOCK_ARCH)) for r in recs}
    assert not terms & known  # nor one it cannot tell from a kernel already simulated
    # Picks come a batch at a time: the next batch repeats none of the first, under any launch bound.
    first = records([{"seq": 100 + i, "phase": "C", "kernel": p.knobs["kernel"], "cycles": 30000}
                     for i, p in enumerate(picks)], "C")
    more = agent._model_picks(2, STOCK_ARCH, done | {(canon(p.knobs["kernel"]), canon(STOCK_ARCH)) for p in picks},
                              recs, first)
    assert not {canon(agent._features(p.knobs["kernel"], STOCK_ARCH)) for p in more} & (terms | known)
    # The picks are the model's best: no simulated kernel is predicted faster than the first.
    assert picks[0].knobs["predicted"] <= min(fit.predict(agent._features(r.knobs["kernel"], STOCK_ARCH)) for r in recs)


@pytest.mark.parametrize("beats", [True, False])
def test_the_model_is_trusted_only_once_its_held_out_pick_beats_a_and_b(tmp_path, beats):
    """On the run in docs/ the model ranks A and B well left out one at a time, so phase C simulates
    only its first pick: a point the model never saw. Phase C ends there (its other picks saved) only
    when that pick beats every point of A and B, as the model said by picking it; otherwise the rest
    of C's picks are simulated. (The real pick, 29,053 cycles, did not beat B's 28,773.)"""
    from autodiscovery.interfaces import History, Objective

    agent = agent_with_recorded_facts(tmp_path)
    recs = records(MODEL_DATA["runs"]["docs/codesign-512"])
    best_ab = min(r.score for r in recs)
    obj = Objective("cycles", False, ("cycles",))
    first = agent.propose(History(recs, None, obj), 3)
    assert [p.knobs["phase"] for p in first] == ["C"] and first[0].knobs["model"]["trusted"]
    assert "trusted if this pick, held out, beats every point of A and B" in first[0].hypothesis
    pick = records([{"seq": 50, "phase": "C", "kernel": first[0].knobs["kernel"],
                     "cycles": best_ab - 1 if beats else best_ab + 1}], "C")
    for r in pick:
        r.knobs.update(model=first[0].knobs["model"])
    after = agent.propose(History([*recs, *pick], None, obj), 3)
    assert agent.trusted({"A": [], "B": recs, "C": pick}) is beats
    if beats:
        assert after and all(p.knobs["phase"] == "D" for p in after)
    else:
        assert [p.knobs["phase"] for p in after] == ["C"] * (agent.phases.C - 1) and agent.phases.C > 1
        assert all("simulated to check it" in p.hypothesis for p in after)


def test_the_prior_ranks_a_run_it_was_not_fitted_on():
    """The prior's weights come from the run in docs/; on the first run's points it still ranks the
    kernels better than chance."""
    arch = Architecture()
    pts = [p for p in MODEL_DATA["runs"]["tests/data/edge_512_run.json"] if p["phase"] in "AB"]
    predicted = [predict(p["kernel"], arch, 512, 512, 512, recorded_facts(p["kernel"]))["cycles"] for p in pts]
    assert spearman(predicted, [p["cycles"] for p in pts]) > 0.5


def recorded_run(tmp_path: Path, name: str) -> dict:
    """The report of a real co-design run in docs/ (GPGPU-Sim dev 667834cf), read from a copy."""
    from autodiscovery.store import Store
    from harnesses.accelsim import report as accelsim_report

    db = tmp_path / f"{name}.db"
    shutil.copy(Path(__file__).parents[1] / "docs" / name / "run.db", db)
    return accelsim_report.phases(Store(db), 1)


@pytest.mark.parametrize("name", ["codesign-512", "codesign-1024"])
def test_the_recorded_runs_phase_attribution_and_cross(tmp_path, name):
    data = recorded_run(tmp_path, name)
    table = {r["phase"]: r for r in data["phases"]}
    assert list(table) == list("ABCDE")
    assert table["A"]["cycles"] == data["baseline_cycles"]
    # Phase E's row is the best kernel × architecture point, phase D's own points included, so it is
    # never behind D's row; at 1024³ E only had to add the stock kernel on D's best design.
    assert table["E"]["cycles"] <= table["D"]["cycles"] < table["A"]["cycles"]
    # Attribution: every single change is measured against the frozen kernel on stock; the inputs sit
    # in L2 and one block fits per SM at both shapes, so DRAM latency and registers buy nothing.
    rows = {r["change"].split("=")[0]: r for r in data["attribution"]}
    assert rows["dram_latency"]["inert"] and rows["registers_per_sm"]["inert"]
    assert rows["l2_rop_latency"]["vs_reference"] < 0 and not rows["l2_rop_latency"]["inert"]
    assert all(r["cycles"] == r["reference"] for r in rows.values() if r["inert"])
    assert [c["change"].split("=")[0] for c in data["over_budget"]] == ["tensor_initiation"]
    x = data["cross"]
    assert x["additive"] == x["kernel_only"] + x["arch_only"] - x["baseline"]
    assert x["kernel_only"] < x["baseline"] and x["arch_only"] < x["baseline"]
    assert not x["super_additive"] and x["both"] > x["additive"]
    m = data["model"]
    assert m["trusted"] and m["simulations_saved"] >= 1 and m["loo_rank_correlation"] >= 0.85
    # Its first pick was the held-out test: at 1024³ it beat every point of A and B; at 512³ it did not
    # (29,053 cycles against B's 28,773), and today's rule would have simulated the other picks.
    assert m["held_out_confirms"] is (name == "codesign-1024")
    best = data["pareto"]["best_within_budget"]
    assert best["area_pct"] <= data["budget"]["area_pct"] and best["cycles"] == table["D"]["cycles"]
    assert best in data["pareto"]["front"]


def test_the_model_check_run_reports_its_held_out_picks(tmp_path):
    data = recorded_run(tmp_path, "codesign-512-model-check")
    m = data["model"]
    picks = [p for p in m["points"] if p["held_out"] == "phase-C pick"]
    assert len(picks) == 6 and not m["trusted"] and m["simulations_saved"] == 0
    errors = [abs(p["predicted"] - p["simulated"]) / p["simulated"] for p in picks]
    assert m["picks_median_abs_error"] == pytest.approx(float(np.median(errors)))
    assert -1 <= m["picks_rank_correlation"] <= 1
    # Two of the model's picks simulate faster than the best kernel TPE found in B.
    table = {r["phase"]: r for r in data["phases"]}
    assert table["C"]["cycles"] < table["B"]["cycles"]
