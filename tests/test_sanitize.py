"""Sanitizing before a keep, without a GPU: how compute-sanitizer's reports are read (excerpts of real
ones), what each tool is asked, that a finding blocks the keep and is recorded as an evaluation of its
own, and that export says whether a kernel was sanitized."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from typer.testing import CliRunner

from autodiscovery.cli import app
from autodiscovery.toolkit import sanitize

HERE = Path(__file__).parent

SYNCCHECK = """========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in warp.
=========     at rowsum+0x8d0
=========     by thread (97,0,0) in block (100,0,0)
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame:  [0x55b15] in cydriver.cpython-312-x86_64-linux-gnu.so
=========
========= ERROR SUMMARY: 1 error
"""
INITCHECK = """========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at rowsum+0x390
=========     by thread (64,0,0) in block (100,0,0)
=========     Address 0x7fbf36190100
=========
========= Uninitialized __global__ memory read of size 16 bytes
=========     at void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T2, T3)+0x70
=========     by thread (32,0,0) in block (60,0,0)
=========
========= ERROR SUMMARY: 2 errors
"""
RACECHECK_CLEAN = """========= COMPUTE-SANITIZER
correct: True
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""


def test_a_finding_names_its_tool_what_and_where():
    (f,) = sanitize.parse("synccheck", SYNCCHECK, ["rowsum"])
    assert f.kernel == "rowsum"
    assert f.line() == ("synccheck: Barrier error detected. Divergent thread(s) in warp. "
                        "(at rowsum+0x8d0; by thread (97,0,0) in block (100,0,0))")


def test_initcheck_counts_only_what_lies_in_the_candidates_kernels():
    found = sanitize.parse("initcheck", INITCHECK, ["rowsum"])
    assert [f.what for f in found] == ["Uninitialized __global__ memory read of size 4 bytes"]
    assert sanitize.parse("racecheck", RACECHECK_CLEAN, ["rowsum"]) == []


def test_each_tool_checks_the_candidates_kernels_by_name_but_initcheck_every_kernel():
    argv = ["python", "child.py"]
    mem = sanitize.command("/x/compute-sanitizer", "memcheck", ["a", "b"], argv)
    assert mem[mem.index("--tool") + 1] == "memcheck" and mem[-2:] == argv
    assert [mem[i + 1] for i, a in enumerate(mem) if a == "--kernel-name"] == ["kne=a", "kne=b"]
    assert "--kernel-name" not in sanitize.command("/x/compute-sanitizer", "initcheck", ["a"], argv)
    assert "analysis" == (r := sanitize.command("cs", "racecheck", ["a"], argv))[r.index("--racecheck-report") + 1]
    # memcheck pads every allocation: a write a MiB past a buffer lands in no neighbour
    assert int(mem[mem.index("--padding") + 1]) > 1 << 20
    assert "--padding" not in r


def stand_in(tmp_path: Path, reports: dict[str, str], exit_codes: dict[str, int] | None = None,
             hang: tuple[str, ...] = ()) -> str:
    """An executable in compute-sanitizer's place (it runs where there is no GPU): it runs the child,
    then prints the tool's report (a recorded one) and exits as compute-sanitizer does (the tools in
    `hang` print theirs and then hang)."""
    path = tmp_path / "compute-sanitizer"
    path.write_text(f"""#!{sys.executable}
import subprocess, sys
args = sys.argv[1:]
tool = args[args.index("--tool") + 1]
child = args[args.index("--report-api-errors") + 2:]
while child and child[0].startswith("--"):
    child = child[2:]
subprocess.run(child)
reports, codes = {json.dumps(reports)}, {json.dumps(exit_codes or {})}
print(reports.get(tool, "========= COMPUTE-SANITIZER\\n========= ERROR SUMMARY: 0 errors"), flush=True)
if tool in {list(hang)!r}:
    import time
    time.sleep(600)
sys.exit(codes.get(tool, 0))
""")
    path.chmod(0o755)
    return str(path)


def child(tmp_path: Path, status: str = "ok") -> list[str]:
    code = f"import json, sys; json.dump({{'status': '{status}', 'log': 'launched'}}, open(sys.argv[1], 'w'))"
    return [sys.executable, "-c", code, str(tmp_path / "{tool}.json")]


def test_every_tool_clean_is_ok_and_a_finding_is_incorrect(tmp_path):
    exe = stand_in(tmp_path, {})
    out = sanitize.run(exe, child(tmp_path), tmp_path, {}, ["rowsum"], timeout_s=60)
    assert out.status == "ok", out.log
    assert {t: v["status"] for t, v in out.metrics["tools"].items()} == dict.fromkeys(sanitize.TOOLS, "clean")
    exe = stand_in(tmp_path, {"synccheck": SYNCCHECK}, {"synccheck": sanitize.EXIT_ON_ERROR})
    out = sanitize.run(exe, child(tmp_path), tmp_path, {}, ["rowsum"], timeout_s=60)
    assert out.status == "incorrect" and out.metrics["tools"]["synccheck"]["status"] == "findings"
    assert out.log.startswith("compute-sanitizer found 1 error(s): synccheck: Barrier error detected")


def test_a_tool_that_did_not_check_is_no_clean_bill(tmp_path):
    """A child that failed, or a tool that printed no summary, is `crashed`, never `ok`."""
    out = sanitize.run(stand_in(tmp_path, {}), child(tmp_path, "rejected"), tmp_path, {}, ["rowsum"], timeout_s=60)
    assert out.status == "crashed" and "the child said rejected" in out.log
    exe = stand_in(tmp_path, {"racecheck": "========= COMPUTE-SANITIZER\nbad option"}, {"racecheck": 1})
    out = sanitize.run(exe, child(tmp_path), tmp_path, {}, ["rowsum"], timeout_s=60)
    assert out.status == "crashed" and out.metrics["tools"]["racecheck"]["status"] == "failed"


RACECHECK_CUT = """========= COMPUTE-SANITIZER
========= Error: Potential RAW hazard detected at __shared__ 0x840 in block (28,1,0) :
=========     Write Thread (0,0,0) at gemm+0x300
=========     Read Thread (0,14,0) at gemm+0x310
=========     Current Value : 0
"""


def test_what_a_tool_found_before_its_time_ran_out_is_a_finding(tmp_path):
    """racecheck on a kernel that races everywhere can run past its time after its first reports: the
    hazards it reported stand (the candidate is refused for them), and the tool is marked as cut off."""
    exe = stand_in(tmp_path, {"racecheck": RACECHECK_CUT}, hang=("racecheck",))
    # 6 s: the stand-ins print their reports well within it, busy machine or not
    out = sanitize.run(exe, child(tmp_path), tmp_path, {}, ["gemm"], timeout_s=6)
    race = out.metrics["tools"]["racecheck"]
    assert out.status == "incorrect" and race["status"] == "findings" and race["timed_out"], out.log
    assert out.log.startswith("compute-sanitizer found 1 error(s): racecheck: Error: Potential RAW hazard")
    exe = stand_in(tmp_path, {"racecheck": "========= COMPUTE-SANITIZER"}, hang=("racecheck",))
    out = sanitize.run(exe, child(tmp_path), tmp_path, {}, ["gemm"], timeout_s=6)
    assert out.status == "timeout" and out.metrics["tools"]["racecheck"]["status"] == "timeout"


def campaign(tmp_path: Path, harness: str) -> Path:
    path = tmp_path / "toy.yaml"
    path.write_text("name: toy-sum\n"
                    f"harness: {{name: 'toy_harness:{harness}', repeats: 20}}\n"
                    f"seed: {HERE / 'toy_harness.py'}\n"
                    "agent: {kind: 'toy_harness:ToyAgent', toy: {variants: [loop, builtin]}}\n"
                    "budget: {candidates: 3, minutes: 5}\n"
                    "stop: {patience: 5, min_gain: 0.05}\n")
    return path


def test_a_finding_blocks_the_keep_and_is_recorded(tmp_path):
    db = tmp_path / "run.db"
    res = CliRunner().invoke(app, ["--db", str(db), "run", "--quiet", "--campaign", str(campaign(tmp_path, "SanitizedToy"))])
    assert res.exit_code == 0, res.output
    con = sqlite3.connect(db)
    rows = con.execute("select c.family, e.status, d.verdict, d.reason from candidates c join evaluations e on "
                       "e.candidate_id = c.id left join decisions d on d.candidate_id = c.id where e.kind = 'sanitize' "
                       "order by c.seq").fetchall()
    families = {f: (status, verdict, reason) for f, status, verdict, reason in rows}
    assert families["builtin"][:2] == ("incorrect", "revert")  # faster, and not kept
    assert families["builtin"][2].startswith("sanitize incorrect: compute-sanitizer found 1 error(s): memcheck: "
                                             "Invalid __global__ read")
    assert families["loop"][:2] == ("ok", "keep")
    out = tmp_path / "best.py"
    res = CliRunner().invoke(app, ["--db", str(db), "export", "1", "--out", str(out)])
    assert "sanitized: clean" in res.output, res.output
    assert json.loads(Path(f"{out}.json").read_text())["sanitized"]["state"] == "clean"


def test_export_says_a_kernel_was_never_sanitized(tmp_path):
    db = tmp_path / "run.db"
    CliRunner().invoke(app, ["--db", str(db), "run", "--quiet", "--campaign", str(campaign(tmp_path, "ToyHarness"))])
    out = tmp_path / "best.py"
    res = CliRunner().invoke(app, ["--db", str(db), "export", "1", "--out", str(out)])
    assert "never sanitized" in res.output, res.output
    assert json.loads(Path(f"{out}.json").read_text())["sanitized"] == {"state": "never"}


def test_a_keep_holds_a_device_for_the_check_only_where_the_harness_checks(tmp_path, monkeypatch):
    """A decision takes a device for each head-to-head and each sanitizer run, and for nothing else: with
    the checker off, a keep does not wait for a device the measurements are using."""
    from autodiscovery.running import driver, lifecycle

    uses: list[bool] = []

    class Counted(lifecycle.Devices):
        def __call__(self, first: bool = False):
            uses.append(first)
            return super().__call__(first)

    monkeypatch.setattr(driver, "Devices", Counted)
    for harness in ("ToyHarness", "SanitizedToy"):
        uses.clear()
        db = tmp_path / f"{harness}.db"
        res = CliRunner().invoke(app, ["--db", str(db), "run", "--quiet", "--campaign", str(campaign(tmp_path, harness))])
        assert res.exit_code == 0, res.output
        kinds = [k for (k,) in sqlite3.connect(db).execute("select kind from evaluations")]
        decisions = sum(k in ("head_to_head", "sanitize") for k in kinds)
        assert uses.count(True) == decisions and uses.count(False) == kinds.count("benchmark"), (harness, uses, kinds)
        assert ("sanitize" in kinds) == (harness == "SanitizedToy")


def test_a_persistent_kernel_is_sanitized_on_a_few_blocks_that_each_walk_several_tiles():
    """At the sanitizer's small shape a persistent grid of one block an SM would give each block one tile
    and hide how its load ring runs on from one tile into the next: it is launched as for a GPU of a few
    SMs instead. A grid of a fixed size keeps it."""
    from autodiscovery.agents.space import Space
    from harnesses.hopper_gemm.sanitized import SANITIZE_SMS, sanitized_launch

    space = Space("hopper_gemm")
    fam = space.families["wgmma_persistent"]
    shape, launch = sanitized_launch(space.render("wgmma_persistent", {**fam.default, "CTAS": 0}), (4096, 4096, 4096), 132)
    assert shape == (1024, 1024, 1024) and launch is not None
    tiles = (1024 // 128) * (1024 // 256)
    assert launch.grid == (SANITIZE_SMS, 1, 1) and tiles >= 2 * launch.grid[0]
    shape, launch = sanitized_launch(space.render("wgmma_persistent", {**fam.default, "CTAS": 128}), (4096, 4096, 4096), 132)
    assert shape == (1024, 1024, 1024) and launch is not None and launch.grid == (tiles, 1, 1)
    _, launch = sanitized_launch(space.render("wgmma_persistent", {**fam.default, "CTAS": 0}), (1024, 1024, 1024), 2)
    assert launch is not None and launch.grid == (2, 1, 1)  # a GPU of fewer SMs than that keeps its own
