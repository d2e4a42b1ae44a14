"""The accelsim harness on CPU: parsing real simulator logs, config rendering and its echo, crashes,
the launch path with a stand-in program, the analytical model, and the phases driven by recorded results."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from replay import AT_512

from autodiscovery import campaign as campaigns
from harnesses.accelsim import WMMA_CHECK_KERNEL, AccelsimHarness, simlog, tensor_bound, wmma_verdict
from harnesses.accelsim import report as accelsim_report
from harnesses.accelsim.agent import CodesignAgent
from harnesses.accelsim.arch import (
    ArchError,
    Architecture,
    block,
    option_values,
    render_config,
    split,
)
from harnesses.accelsim.model import predict
from harnesses.hopper_gemm.build import BuildReport

GPGPUSIM = Path(__file__).parent / "data" / "gpgpusim"  # real simulator output, trimmed (see its README)
RUNS = GPGPUSIM / "A100_32SM_wmma"
BASE = GPGPUSIM / "SM80_A100" / "gpgpusim.config"
STANDIN = Path(__file__).parent / "standin_sim.py"
PHASES_512 = "agent.codesign.phases={B: 12, C: 3, D: 12, E_kernels: 2, E_archs: 2}"  # the recorded runs'


def log(name: str) -> str:
    return (RUNS / name / "sim.log").read_text(errors="replace")


def test_parse_a_real_512_run():
    s = simlog.parse(log("vec_512"))
    assert (s["cycles"], s["insn"], s["ipc"]) == (31033, 9053056, 291.7235)
    assert s["smem_bank_conflicts"] == 212992 and s["stall_smem_bank"] == 212992
    assert s["warp_stalls"] == {"stall": 671578, "idle": 129654, "scoreboard": 1908412}
    assert s["l1_miss_rate"] == 0.7778 and s["l2_accesses"] == 229376
    assert (s["ctas_per_sm"], s["occupancy_limiter"]) == (5, "regs")
    assert s["check"] == "PASS" and s["exit_detected"]


def test_dram_traffic_and_latency_sweeps():
    cold, warm = simlog.parse(log("cold_dram400")), simlog.parse(log("vec_256"))
    assert cold["dram_reads"] > 0 and warm["dram_reads"] == 0
    assert simlog.parse(log("sweep_gto"))["cycles"] == 13230
    assert simlog.parse(log("sweep_rop400"))["cycles"] > warm["cycles"]


def test_crash_is_detected():
    text = log("CRASH_tensor_initiation_gt_latency")
    assert "segmentation fault" in simlog.crashed(139, text) and "autodiscovery doctor" in simlog.crashed(-11, text)
    assert simlog.crashed(0, text) == "the simulator never printed '*** exit detected ***'"
    assert simlog.crashed(0, log("vec_512")) is None


def test_echo_matches_the_config_that_was_asked_for():
    for run in ("sweep_gto", "sweep_rop400", "cold_dram400", "vec_512"):
        cfg = option_values((RUNS / run / "gpgpusim.config").read_text())
        asked = {k: cfg[k] for k in ("-gpgpu_n_clusters", "-gpgpu_scheduler", "-dram_latency",
                                     "-gpgpu_l2_rop_latency", "-ptx_opcode_initiation_tensor")}
        assert simlog.echo_mismatches(log(run), asked) == []
    assert simlog.echo_mismatches(log("vec_512"), {"-gpgpu_scheduler": "gto"}) == [
        "-gpgpu_scheduler: asked gto, simulator used lrr"]


def test_config_rendering_appends_overrides_and_the_last_value_wins():
    arch = Architecture(scheduler="gto", dram_latency=100, l2_rop_latency=120, shmem_banks=64)
    text = render_config(BASE.read_text(), arch)
    values = option_values(text)
    assert values["-gpgpu_scheduler"] == "gto" and values["-dram_latency"] == "100"
    assert values["-gpgpu_n_clusters"] == "32" and values["-gpgpu_shmem_num_banks"] == "64"
    assert option_values(BASE.read_text())["-gpgpu_n_clusters"] == "108"  # the base is untouched
    assert text.startswith(BASE.read_text().rstrip("\n"))


def test_architecture_validation_and_the_arch_block():
    with pytest.raises(ValueError, match="initiation interval exceeds the latency"):
        Architecture(tensor_initiation=64, tensor_latency=25)
    program, arch = split("int main() {}\n" + block(Architecture(scheduler="gto")))
    assert arch.scheduler == "gto" and program.strip() == "int main() {}"
    with pytest.raises(ArchError, match="tensor_initiation"):
        split("x\n/* @arch\ntensor_initiation: 64\ntensor_latency: 25\n*/\n")
    with pytest.raises(ArchError, match="no /\\* @arch"):
        split("int main() {}")


def standin_harness(tmp_path, *sets: str, **env) -> AccelsimHarness:
    tmp_path.mkdir(parents=True, exist_ok=True)
    c = campaigns.load("edge-codesign", [*AT_512, f"harness.work_dir={tmp_path / 'sim'}", f"harness.cache_dir={tmp_path / 'c'}",
                                         "harness.parallel=2", *sets])
    h = AccelsimHarness(c)
    h.nvcc, h.root, h.base_config, h.accelsim = "/bin/true", str(tmp_path), None, None  # config rendered
    (tmp_path / "lib").mkdir(exist_ok=True)
    h.libcudart = str(tmp_path / "lib" / "libcudart.so")
    os.environ.update(env)
    return h


@pytest.fixture
def standin_env():
    keep = {k: os.environ.get(k) for k in ("STANDIN_LOG", "STANDIN_RC", "STANDIN_STALE", "STANDIN_OUTPUT")}
    yield
    for k, v in keep.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def test_launch_path_with_a_standin_program(tmp_path, standin_env):
    h = standin_harness(tmp_path, STANDIN_LOG=str(RUNS / "vec_512" / "sim.log"), STANDIN_RC="0")
    agent = CodesignAgent(campaigns.load("edge-codesign", AT_512))
    source = agent.seed_proposal().source
    build = BuildReport(ok=True, cache_key="x", artifact=str(STANDIN))
    out = h.evaluate(source, build)
    assert out.status == "ok", out.log
    assert out.metrics["cycles"] == 31033 and out.metrics["bound_cycles"] == 4096
    # gpu_sim_cycle holds the 5,000-cycle launch latency: kernel cycles leave it out, % of bound uses them.
    assert out.metrics["kernel_cycles"] == 31033 - 5000 and out.metrics["launch_latency"] == 5000
    assert out.metrics["pct_of_bound"] == pytest.approx(100 * 4096 / 26033, abs=0.01)
    assert out.metrics["check"] == "PASS" and out.metrics["area_pct"] == 0.0
    run_dir = Path(out.metrics["run_dir"])
    assert option_values((run_dir / "gpgpusim.config").read_text())["-gpgpu_n_clusters"] == "32"
    assert "argv=512 512 512" in (run_dir / "sim.log").read_text()
    assert str(tmp_path / "lib") in (run_dir / "sim.log").read_text()  # GPGPU-Sim's libcudart comes first

    gto = source.replace("scheduler: lrr", "scheduler: gto")
    assert h.evaluate(gto, build).status == "ok"
    # The simulator is deterministic: the same simulation again is read back from the cache, not rerun.
    os.environ["STANDIN_RC"] = "1"
    again = h.evaluate(gto, build)
    assert again.status == "ok" and again.metrics["cached"] and again.metrics["cycles"] == 31033
    os.environ["STANDIN_RC"] = "0"
    os.environ["STANDIN_STALE"] = "1"  # a simulator that ignored the overrides
    stale = standin_harness(tmp_path / "fresh").evaluate(gto, build)
    assert stale.status == "crashed" and "asked gto, simulator used lrr" in stale.log


def test_standin_crash_and_wrong_result(tmp_path, standin_env):
    agent = CodesignAgent(campaigns.load("edge-codesign", AT_512))
    build = BuildReport(ok=True, cache_key="x", artifact=str(STANDIN))
    h = standin_harness(tmp_path, STANDIN_LOG=str(RUNS / "CRASH_tensor_initiation_gt_latency" / "sim.log"),
                        STANDIN_RC="139")
    out = h.evaluate(agent.seed_proposal().source, build)
    assert out.status == "crashed" and "segmentation fault" in out.log
    assert "`autodiscovery doctor` checks the simulator" in out.log.splitlines()[0]  # what a failed run says
    # The harness checks C itself: a program whose log claims PASS but whose output is off by one
    # quarter in one place is incorrect, and so is one that writes no output at all.
    assert "PASS" in log("vec_512")
    for output, why in (("wrong", "1 of 262144 outputs differ from the reference; worst at row 3, column 5"),
                        ("none", "the program wrote no C.bin")):
        h = standin_harness(tmp_path / output, STANDIN_LOG=str(RUNS / "vec_512" / "sim.log"), STANDIN_RC="0",
                            STANDIN_OUTPUT=output)
        out = h.evaluate(agent.seed_proposal().source, build)
        assert out.status == "incorrect" and why in out.log, out.log
        assert out.metrics["check"] == "FAIL"


def test_the_wmma_check_names_the_operand_fix_when_the_simulator_crashes_or_gets_it_wrong(tmp_path, standin_env):
    """doctor's check: the campaign's kernel template at 32x32x16 on the stock architecture, simulated
    and its output checked by the harness; a crash (a build without the operand fix dies with signal 11
    on the first wmma.mma) or a wrong product names the fix."""
    agent = CodesignAgent(campaigns.load("edge-codesign", [*AT_512, "problem.M=32", "problem.N=32", "problem.K=16"]))
    source = agent.render(WMMA_CHECK_KERNEL, dict(agent.arch.default))
    assert "constexpr int BM = 32, BN = 32, BK = 16;" in source
    build = BuildReport(ok=True, cache_key="x", artifact=str(STANDIN))
    shape = ["problem.M=32", "problem.N=32", "problem.K=16"]
    cases = [("ok", "vec_512", "0", "right"), ("crash", "CRASH_tensor_initiation_gt_latency", "139", "right"),
             ("signal", "CRASH_tensor_initiation_gt_latency", "-11", "right"), ("wrong", "vec_512", "0", "wrong")]
    verdicts = {}
    for name, run, rc, output in cases:
        h = standin_harness(tmp_path / name, *shape, STANDIN_LOG=str(RUNS / run / "sim.log"), STANDIN_RC=rc,
                            STANDIN_OUTPUT=output)
        verdicts[name] = wmma_verdict(h.evaluate(source, build))
    found, hint = verdicts["ok"]
    assert found == "32x32x16 simulated, output checked (31033 cycles)" and hint == ""
    for name, said in (("crash", "exit code 139 (segmentation fault)"), ("signal", "signal 11 (segmentation fault)"),
                       ("wrong", "got the product wrong (output check FAIL: 1 of 1024 outputs differ")):
        found, hint = verdicts[name]
        assert found is None and said in hint, hint
        assert "src/cuda-sim/instructions.cc" in hint and "&hex_val" in hint
    # A program that cannot start is not the simulator's arithmetic: no fix named.
    h = standin_harness(tmp_path / "missing", *shape, STANDIN_LOG=str(RUNS / "vec_512" / "sim.log"), STANDIN_RC="0")
    gone = BuildReport(ok=True, cache_key="y", artifact=str(tmp_path / "no-such-program"))
    found, hint = wmma_verdict(h.evaluate(source, gone))
    assert found is None and hint.startswith("the simulator did not run the check kernel") and "hex_val" not in hint


def test_doctor_runs_the_wmma_check_once_the_tools_are_found(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import harnesses.accelsim as accelsim
    from autodiscovery.cli import app
    from harnesses.accelsim.tools import Found

    found = [Found(w, str(tmp_path / w.split()[0]), "hint") for w in
             ("GPGPU-Sim", "GPGPU-Sim libcudart", "base gpgpusim.config", "CUDA 11 nvcc")]
    monkeypatch.setattr(accelsim.tools, "survey", lambda s: [*found, Found("accel-sim.out (trace mode)", None, "x")])
    asked = []

    def check(campaign, verdict):
        asked.append((campaign.problem.M, campaign.problem.N, campaign.problem.K))
        return verdict

    for verdict, code in (((None, "the simulator crashed (segmentation fault): " + accelsim.OPERAND_FIX), 1),
                          (("32x32x16 simulated, output checked (31033 cycles)", ""), 0)):
        monkeypatch.setattr(accelsim, "wmma_check", lambda c, v=verdict: check(c, v))
        res = CliRunner().invoke(app, ["doctor", "--campaign", "edge-codesign", "--json"])
        assert res.exit_code == code, res.output
        row = {r["tool"]: r for r in json.loads(res.output)}[accelsim.WMMA_CHECK]
        assert row["needed"] and row["found"] == verdict[0] and row["if_missing"] == (verdict[1] or None)
    assert asked == [(1024, 1024, 1024)] * 2  # the campaign as it is: the check sets its own shape
    # Trace mode replays recorded traces: no PTX-mode check.
    res = CliRunner().invoke(app, ["doctor", "--campaign", "edge-codesign", "--json"])
    assert accelsim.WMMA_CHECK in res.output


def test_tensor_bound_matches_the_article():
    # 4096^3 on 32 SMs with 4 tensor units and a 16-cycle initiation interval: about 2.1M cycles.
    assert tensor_bound(4096, 4096, 4096, Architecture(), 4) == 2097152


def test_analytical_model_moves_the_right_way():
    base = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "FRAGS_M": 2, "FRAGS_N": 2, "STAGES": 1,
            "PERSISTENT": 64, "MIN_BLOCKS": 0}
    arch = Architecture()
    p = predict(base, arch, 512, 512, 512)["cycles"]
    assert predict(base | {"STAGES": 2}, arch, 512, 512, 512)["cycles"] <= p
    assert predict(base, Architecture(tensor_initiation=32, tensor_latency=32), 512, 512, 512)["cycles"] >= p
    assert predict(base, Architecture(l2_rop_latency=120), 512, 512, 512)["cycles"] < p
    assert predict(base, arch, 1024, 1024, 1024)["cycles"] > p


def test_phases_driven_by_recorded_results(tmp_path):
    from replay import SimReplay, offline_agent

    from autodiscovery.review import report
    from autodiscovery.running.loop import Loop
    from autodiscovery.store import Store

    c = campaigns.load("edge-codesign", [*AT_512, "harness.parallel=2", PHASES_512])
    store = Store(tmp_path / "cd.db")
    harness = SimReplay()
    loop = Loop(c, store, harness, offline_agent(c, tmp_path), workers=2)
    run_id = loop.start({"gpu": "simulated"})
    shown = report.show_run(store, run_id)
    phases_seen = [cand["knobs"]["phase"] for cand in shown["candidates"] if cand["status"] != "rejected"]
    assert phases_seen[0] == "A" and phases_seen == sorted(phases_seen)  # A, then B ... E in order
    counts = {p: phases_seen.count(p) for p in "ABCDE"}
    # The stand-in's cycles are the model's prior with up to 30% of noise per configuration: the model
    # fitted on A and B does not rank them well enough to be trusted, so phase C simulates its 3 picks.
    assert counts["A"] == 1 and counts["B"] == 12 and counts["C"] == 3 and counts["D"] == 12
    picks = [x["knobs"] for x in shown["candidates"] if x["knobs"]["phase"] == "C"]
    assert all(not p["model"]["trusted"] for p in picks)
    assert len({json.dumps(p["kernel"], sort_keys=True) for p in picks}) == 3
    assert 2 <= counts["E"] <= 5  # the crosses, and the stock kernel on the best architecture
    d = [x for x in shown["candidates"] if x["knobs"]["phase"] == "D"]
    stock_arch = shown["candidates"][0]["knobs"]["arch"]
    singles = [x for x in d if x["knobs"].get("change")]
    assert singles == d[:7]  # one change at a time from stock first: 8 singles, one of them over budget
    for x in singles:
        changed = {k for k, v in x["knobs"]["arch"].items() if stock_arch[k] != v}
        assert len(changed) == 1 and x["knobs"]["change"].split("=")[0] in changed
    # Then the pairs among the three best changes that bought something (one value a knob), and all
    # three together: four points, each its singles' values at once.
    combined = [x for x in d if x["knobs"].get("changes")]
    assert d[7:11] == combined and [len(x["knobs"]["changes"]) for x in combined] == [2, 2, 2, 3]
    single = {x["knobs"]["change"]: x["score"] for x in singles}
    for x in combined:
        assert {f"{k}={v}" for k, v in x["knobs"]["arch"].items() if stock_arch[k] != v} == set(x["knobs"]["changes"])
        assert all(single[ch] is not None for ch in x["knobs"]["changes"])
    three = combined[3]["knobs"]["changes"]
    assert len({ch.split("=")[0] for ch in three}) == 3
    # Phase D keeps the best kernel of A-C and changes only the architecture; B only the kernel.
    cands = [x for x in shown["candidates"] if x["status"] != "rejected"]
    stock = cands[0]["knobs"]["arch"]
    assert all(x["knobs"]["arch"] == stock for x in cands if x["knobs"]["phase"] in "BC")
    d_kernels = {str(x["knobs"]["kernel"]) for x in cands if x["knobs"]["phase"] == "D"}
    assert len(d_kernels) == 1
    data = accelsim_report.phases(store, run_id)
    assert len(data["attribution"]) == 7 and all(a["reference"] for a in data["attribution"])
    pairs = data["combined"]["points"]
    assert len(pairs) == 4 and not data["combined"]["left_out"]
    for p in pairs:  # the sum of the singles' savings, and what the point does beyond it
        parts = [next(a for a in data["attribution"] if a["change"] == ch) for ch in p["changes"]]
        assert p["additive"] == p["reference"] + sum(a["cycles"] - p["reference"] for a in parts)
        assert p["interaction"] == pytest.approx((p["cycles"] - p["additive"]) / p["reference"])
    # Twice the tensor throughput (+11% area) is past the +10% budget: listed, not simulated, and no
    # point of the run is over budget.
    assert [o["change"] for o in data["over_budget"]] == ["tensor_initiation=8"]
    assert "over the budget" in data["over_budget"][0]["why"]
    assert all(p["area_pct"] <= 10 for p in data["pareto"]["points"])
    front = data["pareto"]["front"]
    assert front and all(a["area_pct"] < b["area_pct"] and a["cycles"] > b["cycles"] for a, b in zip(front, front[1:]))
    c = data["cross"]
    assert c is not None and c["predicted"] == round(c["kernel_only"] * c["arch_only"] / c["baseline"])
    rows = {r["phase"]: r for r in data["phases"]}
    assert set(rows) == set("ABCDE") and rows["A"]["change"] == 0
    assert min(r["cycles"] for r in rows.values()) < data["baseline_cycles"]
    m = data["model"]
    assert not m["trusted"] and m["loo_rank_correlation"] < 0.8 and m["simulations_saved"] == 0
    assert len(m["points"]) == 16 and sum(p["held_out"] == "phase-C pick" for p in m["points"]) == 3
    assert shown["status"] == "finished" and "all phases done" in shown["stop_reason"]


def test_doctor_says_what_to_set(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from autodiscovery.cli import app

    for var in ("GPGPUSIM_ROOT", "ACCELSIM_ROOT", "AUTODISCOVERY_GPGPUSIM_ROOT", "AUTODISCOVERY_SIM_CONFIG",
                "AUTODISCOVERY_ACCELSIM_ROOT", "AUTODISCOVERY_CUDA11_NVCC"):
        monkeypatch.delenv(var, raising=False)
    # GPGPU-Sim's own setup_environment exports GPGPUSIM_CONFIG as a build name: it is not ours to read.
    monkeypatch.setenv("GPGPUSIM_CONFIG", "gpgpu-sim_git-commit-667834cf-modified_1.0")
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH: nothing found
    res = CliRunner().invoke(app, ["doctor", "--campaign", "edge-codesign", "--json"])
    assert res.exit_code == 1
    rows = {r["tool"]: r for r in json.loads(res.output)}
    assert rows["GPGPU-Sim"]["found"] is None
    assert "set AUTODISCOVERY_GPGPUSIM_ROOT" in rows["GPGPU-Sim"]["if_missing"]
    assert rows["GPGPU-Sim runs a WMMA GEMM"]["found"] is None and rows["GPGPU-Sim runs a WMMA GEMM"]["needed"]
    assert rows["GPGPU-Sim runs a WMMA GEMM"]["if_missing"] == "runs once the tools above are found"
    # No config file is needed: the harness renders it from the platform model.
    assert rows["base gpgpusim.config"]["found"] == "rendered from the platform model"
    assert CliRunner().invoke(app, ["doctor", "--campaign", "edge-codesign"]).exit_code == 1  # the table says the same
    monkeypatch.setenv("AUTODISCOVERY_SIM_CONFIG", str(BASE))
    res = CliRunner().invoke(app, ["doctor", "--campaign", "edge-codesign", "--json"])
    rows = {r["tool"]: r for r in json.loads(res.output)}
    assert rows["base gpgpusim.config"]["found"] == str(BASE) and rows["base gpgpusim.config"]["if_missing"] is None
    monkeypatch.setenv("AUTODISCOVERY_SIM_CONFIG", str(tmp_path / "missing.config"))
    res = CliRunner().invoke(app, ["doctor", "--campaign", "edge-codesign", "--json"])
    rows = {r["tool"]: r for r in json.loads(res.output)}
    assert rows["base gpgpusim.config"]["found"] is None and "missing.config" in rows["base gpgpusim.config"]["if_missing"]


def test_report_prints_the_phase_table(tmp_path):
    from replay import SimReplay, offline_agent
    from typer.testing import CliRunner

    from autodiscovery.cli import app
    from autodiscovery.running.loop import Loop
    from autodiscovery.store import Store

    c = campaigns.load("edge-codesign", [*AT_512, "agent.codesign.phases={B: 3, C: 1, D: 2, E_kernels: 1, E_archs: 1}"])
    db = tmp_path / "r.db"
    Loop(c, Store(db), SimReplay(), offline_agent(c, tmp_path), workers=2).start({"gpu": "simulated"})
    res = CliRunner().invoke(app, ["report", "1", "--db", str(db)])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "co-design phases of run 1" in flat and "baseline" in flat and "architecture" in flat


def test_replaying_the_real_512_run_gives_its_phase_table(tmp_path):
    """Cycles recorded by a real GPGPU-Sim run of the campaign drive the phases again."""
    import json

    from replay import SimReplay, offline_agent

    from autodiscovery.review import report
    from autodiscovery.running.loop import Loop
    from autodiscovery.store import Store

    data = json.loads((Path(__file__).parent / "data" / "edge_512_run.json").read_text())
    recorded = {json.dumps({"kernel": r["kernel"], "arch": r["arch"]}, sort_keys=True): r["cycles"]
                for r in data["results"]}
    c = campaigns.load("edge-codesign", [*AT_512, "harness.parallel=2", PHASES_512])
    store = Store(tmp_path / "real.db")
    harness = SimReplay(recorded=recorded)
    Loop(c, store, harness, offline_agent(c, tmp_path), workers=2).start({"gpu": "simulated"})
    table = {r["phase"]: r["cycles"] for r in accelsim_report.phases(store, 1)["phases"]}
    # The baseline is the recorded one. (The recorded run's B, D and E were 28773, 26265 and 23977
    # cycles; TPE is now told the cycles of a point it draws again, as the search agent's is, so its
    # later draws differ from the recording's, and the model picks kernels the recording lacks.)
    assert table["A"] == 35422
    assert min(table["B"], table["D"], table["E"]) < table["A"]
    cands = report.show_run(store, 1)["candidates"]
    model = next(x["knobs"]["model"] for x in cands if x["knobs"]["phase"] == "C")
    assert model["n"] == 13 and model["ptx"] and model["loo_rank_correlation"] is not None
    replayed = [x for x in cands if json.dumps({"kernel": x["knobs"]["kernel"], "arch": x["knobs"]["arch"]},
                                               sort_keys=True) in recorded]
    assert len(replayed) >= 5 and all(x["score"] == recorded[json.dumps(
        {"kernel": x["knobs"]["kernel"], "arch": x["knobs"]["arch"]}, sort_keys=True)] for x in replayed)


def test_a_co_design_run_speaks_in_cycles(tmp_path):
    """Its lineage, its decisions and `runs` give cycles, fewer being better; never × cuBLAS."""
    import json

    from replay import SimReplay, offline_agent
    from sqlalchemy import select
    from typer.testing import CliRunner

    from autodiscovery.cli import app
    from autodiscovery.running.loop import Loop
    from autodiscovery.store import Decision, Store

    data = json.loads((Path(__file__).parent / "data" / "edge_512_run.json").read_text())
    recorded = {json.dumps({"kernel": r["kernel"], "arch": r["arch"]}, sort_keys=True): r["cycles"]
                for r in data["results"]}
    c = campaigns.load("edge-codesign", [*AT_512, "harness.parallel=2"])
    db = tmp_path / "cycles.db"
    Loop(c, Store(db), SimReplay(recorded=recorded), offline_agent(c, tmp_path), workers=2).start({"gpu": "simulated"})
    chain = json.loads(CliRunner().invoke(app, ["lineage", "1", "--json", "--db", str(db)]).output)
    cycles = [r["score"] for r in chain]
    assert cycles[0] == 35422 and cycles == sorted(cycles, reverse=True) and len(set(cycles)) == len(cycles)
    assert all(r["score_text"] == f"{r['score']} cycles" for r in chain)
    with Store(db).session() as s:
        reasons = [d.reason for d in s.scalars(select(Decision))]
    assert reasons[0] == "first candidate to pass the gate (35422 cycles)"
    assert any("cycles does not beat the incumbent's" in r for r in reasons)
    assert not any("cuBLAS" in r for r in reasons)
    rows = json.loads(CliRunner().invoke(app, ["runs", "--json", "--db", str(db)]).output)
    assert rows[0]["objective"] == "cycles" and rows[0]["best_text"] == f"{cycles[-1]} cycles"
    out = CliRunner().invoke(app, ["lineage", "1", "--db", str(db)]).output
    assert "cuBLAS" not in out


def test_the_simulators_run_time_variables_are_set_by_the_harness(tmp_path, standin_env):
    h = standin_harness(tmp_path, STANDIN_LOG=str(RUNS / "vec_512" / "sim.log"), STANDIN_RC="0")
    agent = CodesignAgent(campaigns.load("edge-codesign", AT_512))
    out = h.evaluate(agent.seed_proposal().source, BuildReport(ok=True, cache_key="x", artifact=str(STANDIN)))
    log = (Path(out.metrics["run_dir"]) / "sim.log").read_text()
    assert "runtime=1.ptx,_1.ptx,jj" in log


def test_an_aborting_program_keeps_its_last_words(tmp_path, standin_env):
    """A program that prints its reason and aborts (as GPGPU-Sim's libcudart does without its run-time
    variables): stdout to a pipe is fully buffered, so without care the reason is lost."""
    import shutil
    import subprocess

    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    src = tmp_path / "abort.c"
    src.write_text('#include <stdio.h>\n#include <stdlib.h>\nint main(void) {\n'
                   '  printf("GPGPU-Sim PTX: ERROR ** No PTX sections found with sm capability\\n");\n  abort();\n}\n')
    subprocess.run(["gcc", "-o", str(tmp_path / "abort"), str(src)], check=True)
    h = standin_harness(tmp_path)
    agent = CodesignAgent(campaigns.load("edge-codesign", AT_512))
    out = h.evaluate(agent.seed_proposal().source, BuildReport(ok=True, cache_key="x", artifact=str(tmp_path / "abort")))
    assert out.status == "crashed"
    first = out.log.splitlines()[0]
    assert "signal 6" in first and "No PTX sections found" in first


def test_a_rebuilt_simulator_does_not_reuse_old_results(tmp_path, standin_env):
    h = standin_harness(tmp_path)
    lib = Path(h.libcudart)
    lib.write_bytes(b"build one")
    first = h.sim_key("src", "cfg")
    lib.write_bytes(b"build two, rebuilt")
    assert h.sim_key("src", "cfg") != first
    lib.write_bytes(b"build one")
    os.utime(lib, ns=(1, 1))
    assert h.sim_key("src", "cfg") == first  # the same build, whatever its timestamp


def test_a_cached_simulation_says_so(tmp_path, standin_env):
    h = standin_harness(tmp_path, STANDIN_LOG=str(RUNS / "vec_512" / "sim.log"), STANDIN_RC="0")
    source = CodesignAgent(campaigns.load("edge-codesign", AT_512)).seed_proposal().source
    build = BuildReport(ok=True, cache_key="x", artifact=str(STANDIN))
    fresh, again = h.evaluate(source, build), h.evaluate(source, build)
    assert "cache" not in fresh.device and again.device.endswith("(from the simulation cache)")
    assert again.metrics["cached"] and again.metrics["cycles"] == fresh.metrics["cycles"]


def test_doctor_exits_0_when_what_the_campaign_needs_is_there(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from autodiscovery.cli import app

    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 11.8, V11.8.89'\n")
    nvcc.chmod(0o755)
    (tmp_path / "sim" / "lib").mkdir(parents=True)
    (tmp_path / "sim" / "lib" / "libcudart.so").write_bytes(b"lib")
    monkeypatch.setenv("AUTODISCOVERY_CUDA11_NVCC", str(nvcc))
    monkeypatch.setenv("AUTODISCOVERY_GPGPUSIM_ROOT", str(tmp_path / "sim"))
    monkeypatch.delenv("AUTODISCOVERY_SIM_CONFIG", raising=False)
    for var in ("ACCELSIM_ROOT", "AUTODISCOVERY_ACCELSIM_ROOT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no accel-sim.out: trace mode is not what this campaign runs
    # This nvcc only names its release: the WMMA check's build says it wrote nothing, and doctor says so.
    res = CliRunner().invoke(app, ["doctor", "--campaign", "edge-codesign", "--json"])
    rows = {r["tool"]: r for r in json.loads(res.output)}
    assert res.exit_code == 1, res.output
    assert rows["GPGPU-Sim runs a WMMA GEMM"]["if_missing"] == (
        "the check kernel did not compile with the CUDA 11 nvcc: nvcc exited 0 but wrote no program")
    import harnesses.accelsim as accelsim

    monkeypatch.setattr(accelsim, "wmma_check", lambda c: ("32x32x16 simulated, output checked (31033 cycles)", ""))
    res = CliRunner().invoke(app, ["doctor", "--campaign", "edge-codesign", "--json"])
    rows = {r["tool"]: r for r in json.loads(res.output)}
    assert res.exit_code == 0, res.output
    assert rows["accel-sim.out (trace mode)"]["found"] is None and rows["accel-sim.out (trace mode)"]["needed"] is False
    assert all(r["found"] for r in rows.values() if r["needed"])


def test_a_knob_that_changes_nothing_is_left_at_stock(tmp_path):
    """Phase D's single changes are compared with the best kernel on stock: a knob whose change leaves
    the cycles exactly where they were (inert at this shape) is held at stock for the rest of D."""
    from autodiscovery.interfaces import History, Objective, Record

    c = campaigns.load("edge-codesign", [*AT_512, "agent.codesign.phases={B: 0, C: 0, D: 14, E_kernels: 1, E_archs: 1}",
                                         "harness.arch.budget.area_pct=null"])
    agent = CodesignAgent(c)
    seed = agent.seed_proposal()
    kernel, stock = seed.knobs["kernel"], seed.knobs["arch"]

    def rec(seq, knobs, cycles):
        return Record(seq=seq, family="wmma", knobs=knobs, status="reverted", score=cycles, kept=False,
                      source_hash=str(seq))
    records = [rec(0, seed.knobs, 1000)]
    singles = agent.propose(History(records, records[0], Objective("cycles", False, ("cycles",))), 20)
    assert len(singles) == 8 and all(p.knobs["change"] for p in singles)
    for i, p in enumerate(singles, 1):  # dram latency buys nothing here; the rest do something
        records.append(rec(i, p.knobs, 1000 if p.knobs["change"].startswith("dram_latency") else 1000 - i))
    h = History(records, records[0], Objective("cycles", False, ("cycles",)))
    later = agent.propose(h, 6)
    assert later and all(p.knobs["phase"] == "D" and "change" not in p.knobs for p in later)
    assert all(p.knobs["arch"]["dram_latency"] == stock["dram_latency"] for p in later)
    assert any(p.knobs["arch"] != stock for p in later) and all(p.knobs["kernel"] == kernel for p in later)


def test_phase_d_stays_within_the_area_budget():
    """Every architecture phase D proposes fits `harness.arch.budget.area_pct`; a single change that
    does not is listed with its cost instead of being simulated."""
    from autodiscovery.interfaces import History, Objective, Record
    from harnesses.accelsim.costs import estimate

    c = campaigns.load("edge-codesign", [*AT_512, "agent.codesign.phases={B: 0, C: 0, D: 16, E_kernels: 1, E_archs: 1}",
                                         "harness.arch.budget.area_pct=5"])
    agent = CodesignAgent(c)
    seed = agent.seed_proposal()

    def rec(seq, knobs, cycles):
        return Record(seq=seq, family="wmma", knobs=knobs, status="reverted", score=cycles, kept=False,
                      source_hash=str(seq))
    records = [rec(0, seed.knobs, 1000)]
    obj = Objective("cycles", False, ("cycles",))
    singles = agent.propose(History(records, records[0], obj), 20)
    left_out = {o["change"]: o for o in singles[0].knobs["over_budget"]}
    # +5%: twice the registers (+9.9%), twice the tensor throughput (+11%) and DRAM latency 100 (+6.75%)
    # do not fit; GTO, 64 banks, tensor latency 16 and L2 ROP 120 do.
    assert set(left_out) == {"registers_per_sm=131072", "tensor_initiation=8", "dram_latency=100"}
    assert left_out["registers_per_sm=131072"]["area_pct"] == pytest.approx(9.9)
    assert {p.knobs["change"] for p in singles} >= {"scheduler=gto", "shmem_banks=64", "l2_rop_latency=120"}
    for i, p in enumerate(singles, 1):
        records.append(rec(i, p.knobs, 1000 - i))
    later = agent.propose(History(records, records[0], obj), 8)
    assert later and all("change" not in p.knobs for p in later)
    for p in [*singles, *later]:
        assert estimate(Architecture(**p.knobs["arch"]))["area_pct"] <= 5 and p.rejected is None


def test_a_power_budget_bounds_phase_d_and_the_report_draws_both_fronts(tmp_path):
    """With `harness.arch.budget.power_pct` set (and no area limit), every design phase D simulates fits
    the power budget, and the report's fronts are cycles against area and against power."""
    from replay import SimReplay, offline_agent

    from autodiscovery.running.loop import Loop
    from autodiscovery.store import Store
    from harnesses.accelsim.costs import estimate

    c = campaigns.load("edge-codesign", [*AT_512, "agent.codesign.phases={B: 2, C: 1, D: 8, E_kernels: 1, E_archs: 1}",
                                         "harness.arch.budget.area_pct=null", "harness.arch.budget.power_pct=4"])
    store = Store(tmp_path / "power.db")
    Loop(c, store, SimReplay(), offline_agent(c, tmp_path), workers=2).start({"gpu": "simulated"})
    data = accelsim_report.phases(store, 1)
    assert all(p["power_pct"] <= 4 for p in data["pareto"]["points"])
    # +9% power for DRAM latency 100, +13.2% for twice the registers: listed, not simulated.
    assert {"dram_latency=100", "registers_per_sm=131072"} <= {o["change"] for o in data["over_budget"]}
    assert all("power" in o["why"] for o in data["over_budget"])
    for cost in ("area", "power"):
        front = data["pareto"]["front" if cost == "area" else "power_front"]
        assert front and all(a[f"{cost}_pct"] <= b[f"{cost}_pct"] and a["cycles"] > b["cycles"]
                             for a, b in zip(front, front[1:]))
        assert all(p["power_pct"] == estimate(Architecture(**p["arch"]))["power_pct"] for p in front)
    from rich.console import Console

    console = Console(width=400, record=True, file=open(os.devnull, "w"))
    console.print(accelsim_report.phases_table(1, data))
    text = console.export_text()
    assert "cycles against area: the Pareto front (budget on area: none)" in text
    assert "cycles against power: the Pareto front (budget +4% power)" in text


def test_a_model_check_run_simulates_every_pick_and_stops(tmp_path):
    """`model_trust=1.01` with no phase D: a run that only checks the model on its picks (held-out
    points), ending after phase C."""
    from replay import SimReplay, offline_agent

    from autodiscovery.review import report
    from autodiscovery.running.loop import Loop
    from autodiscovery.store import Store

    c = campaigns.load("edge-codesign", [*AT_512, "agent.codesign.phases={B: 4, C: 4, D: 0, E_kernels: 1, E_archs: 1}",
                                         "agent.codesign.model_trust=1.01", "agent.codesign.shortlist=8"])
    store = Store(tmp_path / "check.db")
    Loop(c, store, SimReplay(), offline_agent(c, tmp_path), workers=2).start({"gpu": "simulated"})
    shown = report.show_run(store, 1)
    phases = [x["knobs"]["phase"] for x in shown["candidates"]]
    assert phases == ["A"] + ["B"] * 4 + ["C"] * 4 and shown["status"] == "finished"
    m = accelsim_report.phases(store, 1)["model"]
    assert not m["trusted"] and sum(p["held_out"] == "phase-C pick" for p in m["points"]) == 4


def test_phase_d_says_which_changes_its_budget_never_tried(tmp_path):
    """A phase-D budget smaller than its one-change-at-a-time list: the changes left out are listed in
    the attribution table as never simulated, not silently missing."""
    from autodiscovery.interfaces import History, Objective, Record

    c = campaigns.load("edge-codesign", [*AT_512, "agent.codesign.phases={B: 0, C: 0, D: 3, E_kernels: 1, E_archs: 1}"])
    agent = CodesignAgent(c)
    seed = agent.seed_proposal()
    records = [Record(seq=0, family="wmma", knobs=seed.knobs, status="kept", score=1000, kept=True, source_hash="0")]
    obj = Objective("cycles", False, ("cycles",))
    singles = agent.propose(History(records, records[0], obj), 8)
    every = [p.knobs["change"] for p in agent._ablation(seed.knobs["kernel"], dict(agent.arch.default))]
    assert len(every) > 3 and [p.knobs["change"] for p in singles] == every[:3]
    assert singles[0].knobs["not_tried"] == every[3:]

    rows = [{"phase": "D", "change": ch, "not_tried": p.knobs.get("not_tried")} for ch, p in zip(every, singles)]
    left = accelsim_report.not_tried(rows, 3)
    assert [o["change"] for o in left] == every[3:]
    assert all(o["why"] == "not simulated: phase D's budget (3 simulations) ran out first" for o in left)
    table = accelsim_report.phases_table(1, {"phases": [], "baseline_cycles": None, "attribution": [],
                                              "not_tried": left})
    attribution = next(s for s in table if s.id == "attribution")
    assert [r[1] for r in attribution.rows] == every[3:] and all(r[2] == "not simulated" for r in attribution.rows)


@pytest.mark.parametrize("both, phase, says", [
    (800, "E", "super-additive: the cross beats the sum of its parts by 11.1%"),
    (900, "D", "additive: the cross is the sum of its parts"),
    (950, "E", "not super-additive: the cross is +5.6% against the sum of its parts"),
])
def test_the_cross_caption_says_what_the_numbers_say(both, phase, says):
    base = {"kernel": {"k": 0}, "kernel_cycles": 1000}
    stock = {"a": 0}
    rows = [{"phase": "A", "kernel": {"k": 0}, "arch": stock, "kernel_cycles": 1000, "seq": 0},
            {"phase": "B", "kernel": {"k": 1}, "arch": stock, "kernel_cycles": 950, "seq": 1},
            {"phase": "D", "kernel": {"k": 1}, "arch": {"a": 1}, "kernel_cycles": both if phase == "D" else 990, "seq": 2},
            {"phase": "E", "kernel": {"k": 0}, "arch": {"a": 1}, "kernel_cycles": 950, "seq": 3},
            {"phase": "E", "kernel": {"k": 2}, "arch": {"a": 1}, "kernel_cycles": both if phase == "E" else 999, "seq": 4}]
    c = accelsim_report.cross(rows, base, stock)
    assert c["additive"] == 900 and c["both"] == both and c["phase"] == phase
    caption = accelsim_report.cross_caption(c)
    assert caption.startswith(says)
    assert ("phase D's own #2" in caption) == (phase == "D")


def test_kernels_that_launch_the_same_work_are_one_point():
    """At 512³ with 64×64 tiles there are 64 tiles: PERSISTENT 64, 128 and 256 launch one block a tile, as
    0 does; the agent proposes none of them once one was simulated (TPE is told the shared result)."""
    from autodiscovery.interfaces import History, Objective, Record

    c = campaigns.load("edge-codesign", [*AT_512, "agent.codesign.phases={B: 40, C: 0, D: 0, E_kernels: 1, E_archs: 1}"])
    agent = CodesignAgent(c)
    seed = agent.seed_proposal()
    kernel, stock = seed.knobs["kernel"], seed.knobs["arch"]
    assert (kernel["BLOCK_M"], kernel["BLOCK_N"], kernel["PERSISTENT"]) == (64, 64, 64)
    same = {agent.key(kernel | {"PERSISTENT": p}, stock) for p in (0, 64, 128, 256)}
    assert len(same) == 1 and agent.key(kernel | {"PERSISTENT": 32}, stock) not in same
    records = [Record(seq=0, family="wmma", knobs=seed.knobs, status="kept", score=1000, kept=True, source_hash="0")]
    moves = agent.propose(History(records, records[0], Objective("cycles", False, ("cycles",))), 40)
    assert len(moves) > 10
    keys = [agent.key(p.knobs["kernel"], p.knobs["arch"]) for p in moves if p.rejected is None]
    assert agent.key(kernel, stock) not in keys and len(keys) == len(set(keys))


def test_phase_d_pairs_the_best_changes_one_value_a_knob_within_the_budget():
    """The combined points come from the three best single changes, one value a knob (the better
    scheduler only); the pairs with the largest sum of savings first, then all three together, each
    only where the design fits the budget; what does not fit is named. Where fewer than three changes
    bought anything, those that cost least alone fill the places; a change with no effect never does."""
    from harnesses.accelsim.agent import combinations

    singles = [("scheduler", "gto", 900), ("scheduler", "two_level_active", 880), ("shmem_banks", 64, 850),
               ("l2_rop_latency", 120, 950), ("tensor_latency", 16, 990), ("dram_latency", 100, 1000),
               ("registers_per_sm", 131072, 1010)]
    points, over = combinations(singles, 1000, 3)
    assert points == [[("shmem_banks", 64), ("scheduler", "two_level_active")],
                      [("shmem_banks", 64), ("l2_rop_latency", 120)],
                      [("scheduler", "two_level_active"), ("l2_rop_latency", 120)],
                      [("shmem_banks", 64), ("scheduler", "two_level_active"), ("l2_rop_latency", 120)]]
    assert over == []
    no_banks_with_rop = lambda changes: {"shmem_banks", "l2_rop_latency"} - {k for k, _ in changes} != set()  # noqa: E731
    points, over = combinations(singles, 1000, 3, no_banks_with_rop)
    assert over == [[("shmem_banks", 64), ("l2_rop_latency", 120)]]
    assert [("shmem_banks", 64), ("l2_rop_latency", 120)] not in points and all(no_banks_with_rop(p) for p in points)
    assert len(points) == 2  # together, the third change does not fit: no point of three
    assert combinations(singles, 1000, 1) == ([], [])  # one change: nothing to pair
    assert combinations([("scheduler", "gto", 1000)], 1000, 3) == ([], [])  # no effect: never paired
    # One change bought something (the banks); the two that cost least alone join it, not the knob
    # with no effect (DRAM latency) nor the scheduler's worse value (two-level) nor the costliest.
    hurt = [("shmem_banks", 64, 850), ("scheduler", "gto", 1004), ("scheduler", "two_level_active", 1021),
            ("tensor_latency", 16, 1017), ("dram_latency", 100, 1000), ("l2_rop_latency", 120, 1090)]
    points, over = combinations(hurt, 1000, 3)
    assert points == [[("shmem_banks", 64), ("scheduler", "gto")],
                      [("shmem_banks", 64), ("tensor_latency", 16)],
                      [("scheduler", "gto"), ("tensor_latency", 16)],
                      [("shmem_banks", 64), ("scheduler", "gto"), ("tensor_latency", 16)]] and over == []


def test_the_report_sets_each_combined_point_against_the_sum_of_its_singles():
    stock = {"a": 0, "b": 0, "c": 0}
    kernel = {"k": 1}
    row = lambda seq, phase, arch, cycles, **kw: {  # noqa: E731
        "seq": seq, "phase": phase, "kernel": kernel, "arch": {**stock, **arch}, "cycles": cycles,
        "change": kw.get("change"), "changes": kw.get("changes"), "combined_left_out": kw.get("left"),
        "area_pct": 1.0, "power_pct": 1.0}
    rows = [row(0, "B", {}, 1000), row(1, "D", {"a": 1}, 900, change="a=1"), row(2, "D", {"b": 1}, 950, change="b=1"),
            row(3, "D", {"a": 1, "b": 1}, 800, changes=["a=1", "b=1"],
                left=[{"changes": ["a=1", "c=1"], "why": "area +12.0% over the budget of +10%"}])]
    data = accelsim_report.combined(rows, accelsim_report.attribution(rows, stock))
    (p,) = data["points"]
    assert (p["additive"], p["interaction"]) == (850, pytest.approx(-0.05))
    assert data["left_out"] == [{"changes": ["a=1", "c=1"], "why": "area +12.0% over the budget of +10%"}]
    table = accelsim_report.phases_table(1, {"phases": [], "baseline_cycles": None, "attribution": [],
                                              "combined": data})
    section = next(s for s in table if s.id == "combined")
    assert [r[1] for r in section.rows] == ["a=1 + b=1", "a=1 + c=1"]
    assert section.rows[0][5] == "-5.0%" and section.rows[1][2] == "not simulated: area +12.0% over the budget of +10%"
