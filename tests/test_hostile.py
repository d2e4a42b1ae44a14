"""On a Hopper GPU: every kernel in tests/kernels/hostile/ through the real harness, with the status it must get.

Each one tries a way to look faster or correct without being so; the evidence the harness records
must say what gave it away. Kernels that can find no way to cheat under the new timing are `ok` at
an honest speed (a naive kernel's: far below cuBLAS).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autodiscovery import campaign as campaigns
from autodiscovery.running.evaluate import evaluate
from harnesses.hopper_gemm import HopperGemmHarness
from harnesses.hopper_gemm.sanitized import SANITIZE_SMS

pytestmark = pytest.mark.gpu
HOSTILE = Path(__file__).parent / "kernels" / "hostile"
HONEST_NAIVE = 0.1  # × cuBLAS: a naive kernel is far below this

# kernel -> (status, evidence in the log)
EXPECTED = {
    "wrong_layout.cu": ("incorrect", r"draw 0 \(uniform\): relative error"),
    "writes_nothing.cu": ("incorrect", r"outputs never written"),
    "half_the_rows.cu": ("incorrect", r"outputs never written"),
    "scribbles_on_input.cu": ("incorrect", r"modified its inputs"),
    "first_launch_only.cu": ("incorrect", r"draw 1 .*never written"),
    "low_precision.cu": ("incorrect", r"relative error .* exceeds the tolerance"),
    "fp16_accumulate.cu": ("incorrect", r"draw 0 \(uniform\): relative error .* exceeds the tolerance"),
    "fp16_chunk_accumulate.cu": ("incorrect", r"draw 0 \(uniform\): relative error .* exceeds the tolerance"),
    "small_integers_only.cu": ("incorrect", r"relative error .* exceeds the tolerance"),
    "fixed_point.cu": ("incorrect", r"draw \d \(\w+\): relative error"),
    "cached_by_pointer.cu": ("incorrect", r"draw 2 .*never written"),
    "honest_then_idle.cu": ("incorrect", r"(estimate|warmup|timed) launch \d+ .*never written"),
    "rewrites_inputs_when_timed.cu": ("incorrect", r"modified its inputs"),  # launches close together
    "data_race.cu": ("incorrect", r"relative error .* exceeds the tolerance|the largest error is|non-finite outputs"),
    "illegal_address.cu": ("crashed", r"the GPU reported CUDA_ERROR_ILLEGAL_ADDRESS"),
    "hangs.cu": ("timeout", r"killed after"),
    "spins_on_flag.cu": ("timeout", r"killed after"),
    "child_grid.cu": ("compile_error", r"separate compilation"),
    "too_much_smem.cu": ("rejected", r"smem 240000 bytes exceeds"),
    "too_many_threads.cu": ("rejected", r"1 to 1024 threads"),
    "grid_too_large.cu": ("rejected", r"grid .* out of range"),
    "too_many_registers.cu": ("rejected", r"launch refused: block of 1024 threads, but this kernel \(\d+ registers"),
    "cluster_too_large.cu": ("rejected", r"cluster \(32, 1, 1\) must hold 1 to 16 blocks"),
    "skips_dependency_wait.cu": ("incorrect", r"draw 1 \(normal\), launched while the kernel writing its inputs still ran"),
    "waits_late.cu": ("incorrect", r"draw 1 \(normal\), launched while the kernel writing its inputs still ran"),
    "writes_past_c.cu": ("incorrect", r"draw 0 \(uniform\): guard zone: wrote 65536 bytes past the end of C"),
    "writes_before_c.cu": ("incorrect", r"draw 0 \(uniform\): guard zone: wrote 512 bytes before the start of C"),
    "reads_unwritten_smem.cu": ("incorrect", r"draw 0 \(uniform\): \d+ non-finite outputs \(NaN/Inf in the output\)"),
    "writes_past_workspace.cu": ("incorrect", r"draw 0 \(uniform\): guard zone: wrote \d+ bytes past the end of W"),
    # No way left to cheat: each computes honestly, at a naive kernel's speed.
    "result_cache.cu": ("ok", None),
    "computes_only_when_poisoned.cu": ("ok", None),
    "dependent_launch_honest.cu": ("ok", None),
}


@pytest.fixture(scope="module")
def harness(build_cache):
    c = campaigns.load("hopper-gemm", ["problem.M=512", "problem.N=512", "problem.K=512",
                                       "harness.timeout_s=20", "harness.repetitions=10", "harness.sanitize_timeout_s=60",
                                       f"harness.cache_dir={build_cache}"])
    h = HopperGemmHarness(c)
    h.preflight()
    return h


def outcome(h, source):
    return evaluate(h, source)[1]  # the path every candidate takes: check, build, evaluate


def test_every_hostile_kernel_has_an_expectation():
    assert sorted(p.name for p in HOSTILE.glob("*.cu")) == sorted(EXPECTED)


@pytest.mark.parametrize("kernel", sorted(EXPECTED))
def test_hostile_kernel_gets_its_status(harness, kernel):
    status, evidence = EXPECTED[kernel]
    out = outcome(harness, (HOSTILE / kernel).read_text())
    assert out.status == status, f"{kernel}: {out.status}: {out.log[:2000]}"
    if evidence:
        assert re.search(evidence, out.log), out.log[:2000]
    if status == "ok":
        assert out.score < HONEST_NAIVE, f"{kernel} gained from its trick: {out.score:.3f}× cuBLAS"
        assert sum(out.metrics["checked_launches"].values()) > out.metrics["pairs"]


def test_the_next_candidate_evaluates_normally(harness):
    """After the hang, the crash and the refusals, a fresh evaluation of the seed is ok."""
    for kernel in ("illegal_address.cu",):
        outcome(harness, (HOSTILE / kernel).read_text())
    seed = campaigns.load("hopper-gemm").seed_path().read_text()
    out = outcome(harness, seed)
    assert out.status == "ok", out.log


UNSAFE = Path(__file__).parent / "kernels" / "unsafe"


@pytest.mark.parametrize("kernel", sorted(p.name for p in UNSAFE.glob("*.cu")))
def test_an_unsafe_kernel_is_refused_at_keep(harness, kernel):
    """Right answers and whole guard zones; compute-sanitizer finds what it does (see the first line)."""
    source = (UNSAFE / kernel).read_text()
    m = re.fullmatch(r"// expect-sanitize: ([\w|]+): (.+)", source.splitlines()[0])
    tools, evidence = m.group(1).split("|"), m.group(2)
    out = harness.sanitize(source, harness.build(source))
    assert out.status == "incorrect", f"{kernel}: {out.status}: {out.log[:3000]}"
    found = [t for t, v in out.metrics["tools"].items() if v["status"] == "findings"]
    assert set(found) & set(tools), f"{kernel}: found by {found}: {out.log[:3000]}"
    assert re.search(evidence, out.log), out.log[:3000]


@pytest.mark.parametrize("family", ["naive", "mma_sync", "wgmma_ws", "wgmma_persistent", "wgmma_cluster"])
def test_honest_kernels_sanitize_clean(harness, family):
    """The seed and the families' defaults (TMA, wgmma, mbarriers, clusters): no finding, every tool ran.
    The persistent family's grid is the SMs': it runs on a few blocks that walk two tiles each."""
    from autodiscovery.agents.space import Space

    space = Space("hopper_gemm")
    source = (campaigns.load("hopper-gemm").seed_path().read_text() if family == "naive"
              else space.render(family, space.families[family].default))
    out = harness.sanitize(source, harness.build(source))
    assert out.status == "ok", f"{family}: {out.log[:4000]}"
    if family == "wgmma_persistent":
        assert out.metrics["grid"] == [SANITIZE_SMS, 1, 1]
