"""On a GPU: the reference harness against hostile kernels, on a row sum of the tests' own.

`tests/kernels/reference/problem_rowsum.py` is the problem (x [2048, 4096] float32 summed along its
rows); `honest.cu` solves it and must be `ok`; each kernel in `hostile/` tries one way to look correct
or fast without being so, and its first line states what the harness must make of it and what the
log must show: `// expect: <status>: <regular expression>`. They run in file order, so the honest
kernel runs after the hang and the fault: an evaluation after them is normal.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autodiscovery import campaign as campaigns
from autodiscovery.running.evaluate import evaluate
from harnesses.reference import ReferenceHarness

pytestmark = pytest.mark.gpu
KERNELS = Path(__file__).parent / "kernels" / "reference"
PROBLEM = KERNELS / "problem_rowsum.py"
HONEST = KERNELS / "honest.cu"
HONEST_TRITON = KERNELS / "honest.py"
HOSTILE = sorted([*(KERNELS / "hostile").glob("*.cu"), *(KERNELS / "hostile").glob("*.py")])
"""CUDA kernels and Triton files (`.py`), each with the status it must get on its first line."""
UNSAFE = sorted((KERNELS / "unsafe").glob("*.cu"))
"""Kernels whose outputs are right and whose guard zones stay whole, but that read out of bounds, race on
shared memory, miss a barrier or read memory nothing wrote: compute-sanitizer refuses them at keep. The
first line: `// expect-sanitize: <tool>[|<tool>]: <regular expression>`."""
STATUSES = ("incorrect", "rejected", "crashed", "timeout")
KNOWN_GAPS: dict[str, str] = {}
"""Kernels the harness does not yet judge as their first line says, and why."""


def expectation(kernel: Path) -> tuple[str, str]:
    """The status a hostile kernel must get and the evidence its log must hold, from its first line."""
    m = re.fullmatch(r"(?://|#) expect: ([\w|]+): (.+)", kernel.read_text().splitlines()[0])
    assert m, f"{kernel.name}: the first line must be '// expect: <status>[|<status>]: <regular expression>' ('#' in Triton)"
    return m.group(1), m.group(2)


def campaign_file(folder: Path, cache_dir: Path) -> Path:
    """A campaign of the reference harness on the row sum: no torch.compile (not needed to judge), a hang
    killed after 60 s, the gate's six draws (the last, "ties", is the one a sampled fingerprint fails)."""
    path = folder / "rowsum.yaml"
    path.write_text(f"name: rowsum-hostile\n"
                    f"problem: {{file: '{PROBLEM}'}}\n"
                    f"harness: {{name: reference, timeout_s: 60, compile: false, gate_draws: 6, "
                    f"cache_dir: '{cache_dir}'}}\n"
                    f"seed: '{HONEST}'\n")
    return path


@pytest.fixture(scope="module")
def harness(tmp_path_factory, build_cache) -> ReferenceHarness:
    h = ReferenceHarness(campaigns.load(str(campaign_file(tmp_path_factory.mktemp("campaign"), build_cache))))
    h.preflight()
    return h


def outcome(h: ReferenceHarness, kernel: Path):
    return evaluate(h, kernel.read_text())[1]  # the path every candidate takes: check (refused: rejected), build, evaluate


@pytest.mark.parametrize("kernel", [pytest.param(k, id=k.name, marks=pytest.mark.xfail(reason=KNOWN_GAPS[k.name],
                                                                                        strict=True))
                                    if k.name in KNOWN_GAPS else pytest.param(k, id=k.name) for k in HOSTILE])
def test_hostile_kernel_gets_its_status(harness, kernel):
    status, evidence = expectation(kernel)
    out = outcome(harness, kernel)
    assert out.status in status.split("|"), f"{kernel.name}: {out.status}: {out.log[:2000]}"
    assert re.search(evidence, out.log), f"{kernel.name}: no '{evidence}' in its log:\n{out.log[:2000]}"


def test_the_honest_kernel_is_ok(harness):
    out = outcome(harness, HONEST)
    assert out.status == "ok", out.log[:2000]
    assert out.score > 0 and out.metrics["checked_launches"] > out.metrics["pairs"]  # the timed launches checked too


def test_the_honest_triton_kernel_is_ok(harness):
    """The same problem in Triton, through the same gate and timing: the hostile Triton files beside it
    differ from it only in their cheat."""
    out = outcome(harness, HONEST_TRITON)
    assert out.status == "ok", out.log[:2000]
    assert out.score > 0 and out.metrics["checked_launches"] > out.metrics["pairs"]


def test_a_time_under_the_roofline_floor_is_refused(harness, monkeypatch):
    """With the memory's peak taken as 1 GB/s, the honest kernel beats the floor: a fooled measurement."""
    monkeypatch.setitem(harness.facts, "peak_gbps", 1.0)
    out = outcome(harness, HONEST)
    assert out.status == "rejected" and "faster than this problem's roofline floor" in out.log, out.log[:2000]


def sanitize_expectation(kernel: Path) -> tuple[list[str], str]:
    m = re.fullmatch(r"// expect-sanitize: ([\w|]+): (.+)", kernel.read_text().splitlines()[0])
    assert m, f"{kernel.name}: the first line must be '// expect-sanitize: <tool>[|<tool>]: <regular expression>'"
    return m.group(1).split("|"), m.group(2)


@pytest.mark.parametrize("kernel", [pytest.param(k, id=k.name) for k in UNSAFE])
def test_an_unsafe_kernel_is_refused_at_keep(harness, kernel):
    """Its gate may pass (nothing in its outputs or guard zones shows it); the sanitizer finds it."""
    tools, evidence = sanitize_expectation(kernel)
    source = kernel.read_text()
    out = harness.sanitize(source, harness.build(source))
    assert out.status == "incorrect", f"{kernel.name}: {out.status}: {out.log[:3000]}"
    found = [t for t, v in out.metrics["tools"].items() if v["status"] == "findings"]
    assert set(found) & set(tools), f"{kernel.name}: found by {found}, expected {tools}: {out.log[:3000]}"
    assert re.search(evidence, out.log), f"{kernel.name}: no '{evidence}' in its log:\n{out.log[:3000]}"


def test_the_honest_kernel_sanitizes_clean(harness):
    out = harness.sanitize(HONEST.read_text(), harness.build(HONEST.read_text()))
    assert out.status == "ok", out.log[:3000]
    assert {t: v["status"] for t, v in out.metrics["tools"].items()} == dict.fromkeys(
        ("memcheck", "racecheck", "synccheck", "initcheck"), "clean")
