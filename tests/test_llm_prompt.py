"""What the LLM agent tells the model, and what it draws each proposal from: the rendered prompts as
whole texts (snapshots), their fitting to a context, and the program database's draws."""

from __future__ import annotations

import os
import random
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from autodiscovery import campaign as campaigns
from autodiscovery.agents.client import LlmError
from autodiscovery.agents.llm import LlmAgent
from autodiscovery.agents.programs import Draw, Entry, Programs
from autodiscovery.agents.prompting import tokens
from autodiscovery.interfaces import History, Record
from harnesses.hopper_gemm import HopperGemmHarness

GEMM = HopperGemmHarness.objective

DATA = Path(__file__).parent / "data"
UPDATE = bool(os.environ.get("AUTODISCOVERY_UPDATE_SNAPSHOTS"))
"""Set to write the snapshots afresh (then read the diff before committing it)."""
H100 = {"gpu": "NVIDIA H100 80GB HBM3", "sms": 132, "cc": "9.0", "l2_bytes": 52428800, "smem_per_block": 232448,
        "max_sm_clock_mhz": 1980.0, "peak_tflops": 1070.5, "nvcc": "nvcc 13.0.88", "cuda_driver": "13.0",
        "driver": "580.159.04", "cublas": "13.1.0"}
PROFILE = {"candidate": {"time_us": 173.2, "sm_clock_mhz": 1755, "tensor_pipe_pct": 88.1, "l2_hit_pct": 81.5,
                         "dram_mb": 402, "stalls": {"long_scoreboard": 0.41, "barrier": 0.22}},
           "baseline": {"time_us": 175.0, "sm_clock_mhz": 1755, "tensor_pipe_pct": 86.9, "l2_hit_pct": 84.0,
                        "dram_mb": 388, "stalls": {"barrier": 0.3, "wait": 0.1}}}
KERNEL = """/* @manifest
kernel: gemm
grid: [128, 1, 1]
*/
extern "C" __global__ void gemm() {
  constexpr int STAGES = 4;
  // main loop
}
"""


def agent(*overrides: str, fingerprint: dict | None = None) -> LlmAgent:
    c = campaigns.load("hopper-gemm", ["agent.kind=llm", "agent.llm.base_url=http://127.0.0.1:1/v1",
                                       "agent.llm.models=[{name: a}]", "harness.nvcc_flags=[-O3]", *overrides])
    a = LlmAgent(c)
    a.harness, a.fingerprint = HopperGemmHarness(c), dict(H100 if fingerprint is None else fingerprint)
    return a


def rec(seq: int, score: float | None, status: str, source: str = KERNEL, **kw) -> Record:
    return Record(seq=seq, family=kw.pop("family", "wgmma_ws"), knobs={}, status=status, score=score,
                  kept=status == "kept", source_hash=f"h{seq}", source=source,
                  metrics={"tflops": {"candidate": 775 * score}} if score else {},
                  **kw)


def history() -> History:
    build = {"registers": 168, "smem_static": 0, "spill_stores": 0, "spill_loads": 0, "stack": 0, "has_hgmma": True}
    records = [
        rec(0, 0.5, "kept", hypothesis="The seed.", family="wgmma_tma", build=dict(build, has_hgmma=True)),
        rec(1, 0.9, "kept", KERNEL.replace("STAGES = 4", "STAGES = 5"), hypothesis="A fifth stage hides latency.",
            build=build, parent_seq=0, verdict="keep", reason="beats #0 head to head by 80.0%", profile=PROFILE),
        rec(2, 0.88, "reverted", KERNEL.replace("STAGES = 4", "STAGES = 3"), hypothesis="Three stages free smem.",
            build=dict(build, spill_stores=24, spill_loads=24), parent_seq=1, verdict="revert",
            reason="slower than #1 head to head (0.978×, CI 0.975–0.981)"),
        rec(3, None, "compile_error", KERNEL.replace("// main loop", "// main loop\n  undefined();"),
            hypothesis="Call a helper.", parent_seq=1, log="kernel.cu(7): error: identifier \"undefined\" is undefined"),
        rec(4, None, "rejected", "", hypothesis="(no hypothesis)", parent_seq=1,
            reason="no usable edit: SEARCH block 1 does not match the kernel"),
    ]
    return History(records=records, incumbent=records[1], objective=GEMM)


def snapshot(name: str, text: str) -> None:
    path = DATA / name
    if UPDATE or not path.exists():
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed: rerun with AUTODISCOVERY_UPDATE_SNAPSHOTS=1 and read the diff"


def test_the_prompt_says_everything_in_its_place():
    """The whole rendered text: hardware and toolchain from the fingerprint, the kernel to change with its
    ptxas facts and its profile beside cuBLAS's, the lineage with each step's gain, an inspiration as a
    diff, the attempts with verdicts, reasons, logs and diffs."""
    h = history()
    programs = Programs.of(h)
    draw = Draw(programs.entries[0], (Entry(h.records[0], "best of wgmma_tma"),))
    system, user = (m["content"] for m in agent().messages(h, draw))
    snapshot("prompt_system.txt", system)
    snapshot("prompt_user.txt", user)
    # What the snapshot must hold, whatever it is updated to:
    assert "NVIDIA H100 80GB HBM3 (compute capability 9.0): 132 SMs at up to 1980 MHz, 50 MiB of L2" in user
    assert "Toolchain: nvcc 13.0.88, CUDA driver 13.0, driver 580.159.04, cuBLAS 13.1.0." in user
    assert "ptxas: 168 registers, 0 B static shared memory, no spills, 0 B stack, wgmma (HGMMA) in the SASS." in user
    assert "| tensor pipe busy (%) | 88.1 | 86.9 |" in user and "| stall: wait (warps per issue) | – | 0.10 |" in user
    assert "- #1 wgmma_ws, 0.900× cuBLAS, 697.5 TFLOP/s (1.80× over #0): A fifth stage hides latency." in user
    assert "Verdict: slower than #1 head to head" in user and "24 B spill stores, 24 B spill loads" in user
    assert "-  constexpr int STAGES = 5;\n  +  constexpr int STAGES = 3;" in user
    assert 'error: identifier "undefined" is undefined' in user and "Verdict: no usable edit" in user
    assert user.count("```") % 2 == 0 and all(line.startswith(("```", "  ```")) or "```" not in line
                                              for line in user.splitlines())
    assert "NVIDIA NVIDIA" not in system and "compile" not in user.split("## The kernel")[0].lower()


def test_a_parent_other_than_the_incumbent_is_named_and_measured_against_it():
    h = history()
    draw = Draw(Entry(h.records[2], "near miss (-2.2% against the incumbent)"), (), variant=1)
    user = agent().messages(h, draw)[1]["content"]
    assert "## The kernel to change: #2, near miss (-2.2% against the incumbent) (wgmma_ws): 0.880× cuBLAS" in user
    assert "It is measured against the best kernel so far, #1 (0.900× cuBLAS, 697.5 TFLOP/s)" in user
    assert "Propose the next change to kernel #2" in user
    assert "not the first one everybody would try" in user  # a repeated draw of a batch is nudged apart


def test_a_real_candidates_prompt(tmp_path):
    """The prompt for the real H100 run's incumbent (tests/data/h100_run.db): well-formed, with its
    fingerprint's hardware, every kept step and its gain, the kernel whole."""
    from autodiscovery.running.ledger import Ledger
    from autodiscovery.store import Run, Store
    from harnesses.hopper_gemm import HopperGemmHarness

    shutil.copy(DATA / "h100_run.db", tmp_path / "run.db")  # opening a store migrates it: never the original
    store = Store(tmp_path / "run.db")
    with store.session() as s:
        fp = dict(Run.find(s, 1).fingerprint)
    a = agent(fingerprint=fp)
    a.harness = HopperGemmHarness(a.campaign)
    h = Ledger(store, 1, HopperGemmHarness.objective, lambda: 0.0).history()
    programs = Programs.of(h)
    draw = programs.draws(random.Random(0), 1, exploit=1.0)[0]
    user = a.messages(h, draw)[1]["content"]
    assert user.count("```") % 2 == 0
    assert h.incumbent.source.strip() in user and f"## The kernel to change: #{h.incumbent.seq}, the incumbent" in user
    assert "NVIDIA H100 80GB HBM3 (compute capability 9.0): 132 SMs at up to 1980 MHz" in user
    kept = [r for r in h.records if r.kept]
    chain = user.split("## How the best kernel got here")[1].split("\n## ")[0]
    steps = re.findall(r"^- #(\d+) (\w+), ([0-9.]+)× cuBLAS.*?(?:\(([0-9.]+)× over #(\d+)\))?:", chain, re.M)
    assert [int(s[0]) for s in steps] == [r.seq for r in kept]
    for (_seq, _fam, _score, gain, over), r in zip(steps[1:], kept[1:]):
        before = next(k for k in kept if k.seq == int(over))
        assert abs(float(gain) - r.score / before.score) < 0.01


def test_fitting_leaves_out_diffs_then_attempts_then_inspirations_then_lineage():
    base = KERNEL.replace("// main loop", "// main loop\n" + "  // a long comment line of the kernel body\n" * 30)
    records = [rec(0, 0.5, "kept", base, hypothesis="The seed.")]
    for i in range(1, 9):
        records.append(rec(i, 0.4 + 0.001 * i, "reverted", base.replace("STAGES = 4", f"STAGES = {i}  // try {i}"),
                           hypothesis=f"attempt number {i}: " + "an explanation of the idea " * 10, parent_seq=0,
                           reason="slower"))
    h = History(records=records, incumbent=records[0], objective=GEMM)
    draw = Draw(Entry(records[0], "the incumbent"), (Entry(records[8], "near miss"),))
    full = agent()
    text = full.messages(h, draw)[1]["content"]
    system = tokens(full.messages(h, draw)[0]["content"])

    def fitted(room: int) -> str:
        return agent("agent.llm.max_tokens=1000", f"agent.llm.context_tokens={1000 + system + room}").messages(h, draw)[1]["content"]

    some_diffs = fitted(tokens(text) - 30)
    assert "attempt number 1:" in some_diffs and "try 1" not in some_diffs and "try 8" in some_diffs
    assert tokens(some_diffs) <= tokens(text) - 30
    no_attempts = fitted(tokens(text.split("## The last attempts")[0]) + 40)
    assert "attempt number 2" not in no_attempts and "## Other kernels" in no_attempts
    bare = fitted(tokens(text.split("## Other kernels")[0]) + 30)
    assert "## Other kernels" not in bare and base.strip() in bare
    with pytest.raises(LlmError, match="agent.llm.context_tokens"):
        fitted(50)


def test_the_program_database_and_its_draws():
    records = [rec(0, 0.001, "kept", family="naive"), rec(1, 0.4, "kept", family="mma_sync"),
               rec(2, 0.38, "reverted", family="mma_sync"), rec(3, 0.6, "reverted", family="wgmma_tma"),
               rec(4, 0.7, "kept", family="wgmma_ws"), rec(5, 0.69, "reverted"), rec(6, 0.5, "reverted"),
               rec(7, None, "compile_error")]
    h = History(records=records, incumbent=records[4], objective=GEMM)
    db = Programs.of(h, near=0.03)
    roles = {e.record.seq: e.role for e in db.entries}
    # the incumbent first; each family's best (the slower of mma_sync not); the near miss #5 (-1.4%), not #6
    assert list(roles) == [4, 3, 1, 0, 5] and roles[4] == "the incumbent" and roles[3] == "best of wgmma_tma"
    assert roles[5].startswith("near miss (-1.4%")
    rng = random.Random(7)
    draws = [db.draw(rng, inspirations=2, exploit=0.5) for _ in range(2000)]
    parents = Counter(d.parent.record.seq for d in draws)
    assert 0.45 < parents[4] / 2000 < 0.55  # exploit
    assert parents[3] > parents[0] * 5  # by weight: the 0.001× naive kernel is rarely worth a request
    assert all(d.parent not in d.inspirations and len({e.record.seq for e in d.inspirations}) == 2 for d in draws)
    batch = db.draws(random.Random(1), 4)
    keys = {(d.parent.record.seq, frozenset(e.record.seq for e in d.inspirations)) for d in batch}
    assert len(keys) == 4 and all(d.variant == 0 for d in batch)  # a batch's proposals differ
    lone = Programs.of(History(records=records[:1], incumbent=records[0], objective=GEMM)).draws(random.Random(1), 3)
    assert [d.variant for d in lone] == [0, 1, 2]  # one program only: the repeats are marked (temperature)
    assert Programs.of(h).draws(random.Random(5), 3) == Programs.of(h).draws(random.Random(5), 3)


def test_cycles_are_better_lower():
    from autodiscovery.interfaces import Objective

    records = [rec(0, 900.0, "kept"), rec(1, 1000.0, "reverted"), rec(2, 905.0, "reverted", family="x")]
    h = History(records=records, incumbent=records[0], objective=Objective("cycles", False, ("cycles",)))
    db = Programs.of(h, near=0.03)
    assert [e.record.seq for e in db.entries] == [0, 2]
    assert db.weight(db.entries[1]) == pytest.approx(900 / 905)


def test_the_prompt_command_renders_a_recorded_candidates_prompt(tmp_path):
    import json

    from typer.testing import CliRunner

    from autodiscovery.cli import app

    shutil.copy(DATA / "h100_run.db", tmp_path / "run.db")
    cli = CliRunner()
    out = cli.invoke(app, ["prompt", "1", "--json", "--db", str(tmp_path / "run.db")])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["seq"] == 6 and data["role"] == "the incumbent" and len(data["inspirations"]) == 2
    assert "## The kernel to change: #6, the incumbent (wgmma_cluster)" in data["user"]
    plain = cli.invoke(app, ["prompt", "1/23", "--db", str(tmp_path / "run.db")])
    assert plain.exit_code == 0 and "## The kernel to change: #23, near miss" in plain.output
    missing = cli.invoke(app, ["prompt", "1/99", "--db", str(tmp_path / "run.db")])
    assert missing.exit_code == 2 and "no candidate #99" in missing.output
