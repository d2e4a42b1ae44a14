"""nvcc builds the seed to a cubin for sm_90a; the ptxas report is parsed and cached."""

from __future__ import annotations

from pathlib import Path

from conftest import needs_nvcc

from autodiscovery import campaign as campaigns
from harnesses.hopper_gemm.build import Builder, parse_ptxas

PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'helper' for 'sm_90a'
ptxas info    : Function properties for helper
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers
ptxas info    : Compiling entry function 'gemm' for 'sm_90a'
ptxas info    : Function properties for gemm
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 16384 bytes smem, 400 bytes cmem[0]
"""


def test_parse_ptxas_picks_the_entry():
    assert parse_ptxas(PTXAS, "gemm") == {"stack": 0, "spill_stores": 0, "spill_loads": 0,
                                          "registers": 168, "smem_static": 16384}
    assert parse_ptxas(PTXAS, "helper")["spill_stores"] == 4
    assert parse_ptxas(PTXAS)["registers"] == 40


@needs_nvcc
def test_nvcc_builds_the_seed_and_caches_it(tmp_path):
    seed = campaigns.load("hopper-gemm").seed_path().read_text()
    builder = Builder(tmp_path)
    report = builder.build(seed, "gemm")
    assert report.ok, report.log
    assert Path(report.artifact).read_bytes()[:4] == b"\x7fELF"
    assert report.registers and report.registers > 0
    assert report.spill_stores == 0 and report.stack == 0
    assert "sm_90a" in report.log and report.compiler.startswith("nvcc ")
    again = builder.build(seed, "gemm")
    assert again.cached and again.artifact == report.artifact and again.registers == report.registers
    # The key covers flags: other flags, another build.
    assert Builder(tmp_path, flags=["-O2"]).key(seed) != builder.key(seed)


@needs_nvcc
def test_compile_errors_are_reported_with_the_log(tmp_path):
    report = Builder(tmp_path).build('extern "C" __global__ void gemm() { undefined_thing(); }')
    assert not report.ok and report.artifact is None
    assert "undefined_thing" in report.log


@needs_nvcc
def test_a_cuobjdump_that_cannot_read_the_cubin_leaves_the_sass_fact_unknown(tmp_path, monkeypatch):
    """An older toolkit's cuobjdump on PATH (CUDA 11 beside a CUDA 13 nvcc) says it cannot read an sm_90a
    cubin and exits 0 with no code: the build records has_hgmma as unknown, not as 'no HGMMA'."""
    import harnesses.hopper_gemm.build as build

    tool = tmp_path / "cuobjdump"
    tool.write_text("#!/bin/sh\necho \"cuobjdump fatal   : Support for 'sm_4' has been removed.\" >&2\nexit 0\n")
    tool.chmod(0o755)
    monkeypatch.setattr(build, "cuobjdump", lambda nvcc: str(tool))
    seed = campaigns.load("hopper-gemm").seed_path().read_text()
    report = Builder(tmp_path / "cache").build(seed, "gemm")
    assert report.ok and report.facts["has_hgmma"] is None
    # One that reads it: the fact is what the code says.
    tool.write_text("#!/bin/sh\nprintf '\\t\\tFunction : gemm\\n        /*0000*/  HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;\\n'\n")
    assert Builder(tmp_path / "cache2").build(seed, "gemm").facts["has_hgmma"] is True
