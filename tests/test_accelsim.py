"""The accelsim harness on CPU: parsing real simulator logs, config rendering and its echo, crashes,
the launch path with a stand-in program, doctor, and the analytical model (the co-design phases and
their report: test_codesign_phases.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from replay import AT_512

from autodiscovery import campaign as campaigns
from harnesses.accelsim import WMMA_CHECK_KERNEL, AccelsimHarness, simlog, tensor_bound, wmma_verdict
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
    keep = {k: os.environ.get(k) for k in ("STANDIN_LOG", "STANDIN_RC", "STANDIN_STALE", "STANDIN_OUTPUT",
                                            "STANDIN_TILE_CYCLES", "STANDIN_CTAS")}
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
    # The same check on the same build again is read back, and says so.
    again = standin_harness(tmp_path / "ok", *shape, STANDIN_LOG=str(RUNS / "vec_512" / "sim.log"), STANDIN_RC="0",
                            STANDIN_OUTPUT="right")
    assert wmma_verdict(again.evaluate(source, build)) == (
        "32x32x16 simulated, output checked (31033 cycles, from the simulation cache of this build)", "")
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


def test_a_co_design_run_speaks_in_cycles(tmp_path):
    """Its lineage, its decisions and `runs` give cycles, fewer being better; never × cuBLAS."""
    import json

    from replay import SimReplay, offline_agent
    from sqlalchemy import select
    from typer.testing import CliRunner

    from autodiscovery.cli import app
    from autodiscovery.running.driver import Driver
    from autodiscovery.store import Decision, Store

    data = json.loads((Path(__file__).parent / "data" / "edge_512_run.json").read_text())
    recorded = {json.dumps({"kernel": r["kernel"], "arch": r["arch"]}, sort_keys=True): r["cycles"]
                for r in data["results"]}
    c = campaigns.load("edge-codesign", [*AT_512, "harness.parallel=2"])
    db = tmp_path / "cycles.db"
    Driver(c, Store(db), SimReplay(recorded=recorded), offline_agent(c, tmp_path), workers=2).new_run({"gpu": "simulated"})
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




def test_replay_says_when_the_simulator_was_built_again(tmp_path):
    """The simulator's build is part of what a co-design measurement was made with: replaying the shipped
    512³ run on another build of it is not "the same machine", and the difference names the build."""
    import dataclasses
    import shutil

    from replay import SimReplay

    from autodiscovery.review.replay import replay
    from autodiscovery.store import Store
    from harnesses.accelsim import AccelsimHarness

    db = tmp_path / "run.db"
    shutil.copy(Path(__file__).parent.parent / "docs" / "codesign-512" / "run.db", db)
    with Store(db).session() as s:
        from autodiscovery.store import Run

        recorded = dict(s.get(Run, 1).fingerprint)

    @dataclasses.dataclass
    class OnThisMachine(SimReplay):
        fingerprint: dict = dataclasses.field(default_factory=dict)
        toolchain = AccelsimHarness.toolchain

        def preflight(self, need_gpu: bool = True) -> dict:
            return dict(self.fingerprint)

    same = replay(1, Store(db), harness=OnThisMachine(fingerprint=recorded))
    assert same["same_machine"] and same["differences"] == {}
    rebuilt = replay(1, Store(db), harness=OnThisMachine(fingerprint=recorded | {"simulator_build": "0123456789abcdef"}))
    assert not rebuilt["same_machine"]
    assert rebuilt["differences"] == {"simulator_build": [recorded["simulator_build"], "0123456789abcdef"]}


SAMPLED = "harness.sample={rounds: [1, 2], min_rounds: 4}"


def test_a_persistent_grid_is_simulated_in_part_and_extrapolated(tmp_path, standin_env):
    """With `harness.sample`, a persistent kernel whose tiles fill whole rounds (64 tiles of 64x64 over 16
    blocks at 512³: 4 rounds) is simulated for its first round and its first two, and its cycles are the
    first's plus each further round at the two's difference; only the sampled tiles' outputs are checked
    (the stand-in leaves the rest unwritten). A kernel of one block a tile is simulated whole, saying why."""
    h = standin_harness(tmp_path, SAMPLED, STANDIN_LOG=str(RUNS / "vec_512" / "sim.log"), STANDIN_RC="0",
                        STANDIN_TILE_CYCLES="100")
    agent = CodesignAgent(campaigns.load("edge-codesign", AT_512))
    build = BuildReport(ok=True, cache_key="x", artifact=str(STANDIN))
    kernel = dict(agent.kernel.default) | {"BLOCK_M": 64, "BLOCK_N": 64, "PERSISTENT": 16}
    out = h.evaluate(agent.render(kernel, dict(agent.arch.default)), build)
    assert out.status == "ok", out.log
    s = out.metrics["sample"]
    assert s["rounds"] == [1, 2] and s["of"] == 4 and s["tiles"] == 64 and s["blocks"] == 16
    assert s["cycles"] == [32633, 34233] and s["per_round"] == 1600.0 and not s["waves"]  # 16 tiles a round
    assert out.metrics["cycles"] == 32633 + 3 * 1600 == out.score
    assert out.metrics["kernel_cycles"] == 27633 + 3 * 1600
    assert out.metrics["pct_of_bound"] == pytest.approx(100 * 4096 / 32433, abs=0.01)
    assert "check" in out.metrics and out.metrics["check"] == "PASS"
    whole = h.evaluate(agent.seed_proposal().source, build)  # one block a tile
    assert whole.metrics["cycles"] == 31033 and whole.metrics["sample"]["whole"].startswith("one block a tile")
    os.environ["STANDIN_OUTPUT"] = "wrong"  # a sampled tile's output off: the sample is not taken on trust
    wrong = standin_harness(tmp_path / "w", SAMPLED).evaluate(agent.render(kernel, dict(agent.arch.default)), build)
    assert wrong.status == "incorrect" and "of the sampled tiles" not in wrong.log
    assert "outputs differ from the reference" in wrong.log


def test_a_grid_of_one_block_a_tile_is_sampled_by_waves_of_the_blocks_the_gpu_holds(tmp_path, standin_env):
    """At 2048² a kernel of one 128x128 block a tile has 256 tiles; the GPU holds `resident` of them at once
    (its 32 SMs times the blocks an SM holds, by the simulator's rule), so its first waves are the grid's
    first blocks, launched alone: simulated for one wave and two, extrapolated over all. Where the
    simulator says it held another count of blocks an SM than the plan's, the grid is simulated whole."""
    from autodiscovery.interfaces import Outcome
    from autodiscovery.status import EvalStatus
    from harnesses.accelsim import sample

    at_2048 = [f"problem.{k}=2048" for k in "MNK"]
    agent = CodesignAgent(campaigns.load("edge-codesign", at_2048))
    kernel = dict(agent.kernel.default) | {"BLOCK_M": 128, "BLOCK_N": 128, "FRAGS_M": 2, "FRAGS_N": 4, "PERSISTENT": 0}
    source = agent.render(kernel, dict(agent.arch.default))
    program, arch = split(source)
    resident = sample.resident_blocks(program, arch, None)
    assert resident is not None and resident % 32 == 0 and 256 % resident == 0 and 256 // resident >= 4
    per_sm = str(resident // 32)
    h = standin_harness(tmp_path, SAMPLED, *at_2048, STANDIN_LOG=str(RUNS / "vec_512" / "sim.log"), STANDIN_RC="0",
                        STANDIN_TILE_CYCLES="10", STANDIN_CTAS=per_sm)
    build = BuildReport(ok=True, cache_key="x", artifact=str(STANDIN))
    out = h.evaluate(source, build)
    assert out.status == "ok", out.log
    s = out.metrics["sample"]
    assert s["waves"] and s["blocks"] == resident and s["of"] == 256 // resident and s["rounds"] == [1, 2]
    assert s["per_round"] == 10.0 * resident  # a wave: `resident` tiles at 10 cycles each
    assert out.metrics["cycles"] == s["cycles"][0] + (s["of"] - 1) * s["per_round"]
    os.environ["STANDIN_CTAS"] = str(int(per_sm) + 1)  # the simulator held more than the plan: not a wave sample
    other = standin_harness(tmp_path / "o", SAMPLED, *at_2048).evaluate(source, build)
    assert other.status == "ok" and "sample" in other.metrics and "whole" in other.metrics["sample"]
    assert other.metrics["sample"]["whole"].startswith(f"the simulator held {int(per_sm) + 1} blocks an SM")
    planned = sample.plan(program, 2048, 2048, h.s.sample, resident)
    assert isinstance(planned, sample.Plan)
    unsaid = sample.held(planned, Outcome(EvalStatus.ok, {}), 32)  # a log without CTA/core: not on trust
    assert unsaid is not None and "did not say" in unsaid


def test_what_a_sample_cannot_represent_is_simulated_whole():
    """The plan: whole rounds of a persistent grid only, and enough of them."""
    from harnesses.accelsim import sample
    from harnesses.accelsim.settings import Sample

    agent = CodesignAgent(campaigns.load("edge-codesign", AT_512))
    program = lambda **k: agent.render(dict(agent.kernel.default) | k, dict(agent.arch.default))  # noqa: E731
    s = Sample()  # samples of 2 and 3 rounds, for grids of 6 rounds or more
    assert isinstance(sample.plan(program(BLOCK_M=64, BLOCK_N=64, PERSISTENT=8), 512, 512, s), sample.Plan)
    assert "partly idle" in sample.plan(program(BLOCK_M=64, BLOCK_N=64, PERSISTENT=24), 512, 512, s)
    assert "fewer than harness.sample.min_rounds" in sample.plan(program(BLOCK_M=64, BLOCK_N=64, PERSISTENT=16), 512, 512, s)
    assert "one block a tile" in sample.plan(program(BLOCK_M=64, BLOCK_N=64, PERSISTENT=0), 512, 512, s)
    one = program(BLOCK_M=64, BLOCK_N=64, PERSISTENT=0)  # 64 tiles at 512², 1024 at 2048²
    assert "one wave of the 64 blocks" in sample.plan(one, 512, 512, s, resident=64)
    assert "leave the last wave partly idle" in sample.plan(one, 2048, 2048, s, resident=96)
    waves = sample.plan(one, 2048, 2048, s, resident=128)
    assert isinstance(waves, sample.Plan) and waves.waves and waves.rounds == 8 and waves.computed(2) == 256
    older = one.replace("const int asked = argc > 4 ? atoi(argv[4]) : 0;", "const int rounds = argc > 4 ? atoi(argv[4]) : 0;")
    assert "older co-design kernel" in sample.plan(older, 2048, 2048, s, resident=128)
    assert sample.knobs(one) == {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "FRAGS_M": 2, "FRAGS_N": 2, "STAGES": 1,
                                 "MIN_BLOCKS": 0}
    assert sample.plan(program(), 512, 512, None) == "harness.sample is not set"
    with pytest.raises(campaigns.CampaignError, match="harness.sample: rounds: two rounds R1 < R2"):
        campaigns.load("edge-codesign", ["harness.sample={rounds: [2, 1]}"])
    with pytest.raises(campaigns.CampaignError, match="together must be fewer rounds than min_rounds"):
        campaigns.load("edge-codesign", ["harness.sample={rounds: [2, 3], min_rounds: 5}"])
    mask = sample.plan(program(BLOCK_M=64, BLOCK_N=64, PERSISTENT=16), 512, 512, Sample(rounds=(1, 2), min_rounds=4)).mask(512, 512, 1)
    assert mask[:128].all() and not mask[128:].any()  # the first 16 tiles: two rows of 8, 64 high



def test_the_sample_check_sets_a_campaigns_winner_in_waves_on_a_small_gpu():
    """`sample_check --sms 8 --knobs ...`: the 1024³ campaigns' winner (128×128×16 tiles, two stages, two
    blocks an SM, one block a tile) runs 2048³ in 16 waves of 16 on 8 SMs, enough to sample; on the stock
    32 SMs it is 4 waves of 64, too few, and is not a point."""
    from harnesses.accelsim.sample_check import points

    agent = CodesignAgent(campaigns.load("edge-codesign", [f"problem.{k}=2048" for k in "MNK"]))
    winner = {"BLOCK_K": 16, "STAGES": 2, "MIN_BLOCKS": 2}
    small = {label: kernel for label, kernel, _ in points(agent, 2048, 6, 8, winner)}
    label = "128x128 P0 (16 waves of 16), stock, 8 SMs, BLOCK_K 16, STAGES 2, MIN_BLOCKS 2"
    assert small[label] == dict(agent.kernel.default) | winner | {"BLOCK_M": 128, "BLOCK_N": 128, "FRAGS_M": 2,
                                                                   "FRAGS_N": 4, "PERSISTENT": 0}
    stock = [label for label, _, _ in points(agent, 2048, 6, None, winner)]
    assert not any(x.startswith("128x128 P0") for x in stock) and any(x.startswith("128x128 P32") for x in stock)
