"""Nsight Compute: the command line, and reading back a real log (recorded on an H100)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from autodiscovery.review.sections import sections_table
from harnesses.hopper_gemm import ncu, report

LOG = (Path(__file__).parent / "data" / "ncu_h100_cluster.csv").read_text()


def test_a_real_log_splits_into_candidate_and_baseline():
    p = ncu.profile(LOG, "gemm")
    cand, base = p["candidate"], p["baseline"]
    assert cand["kernel"] == "gemm" and base["kernel"].startswith("nvjet_sm90")
    assert p["baseline_kernels"] == [base["kernel"]]
    assert cand["time_us"] == pytest.approx(300.096) and base["time_us"] < cand["time_us"]
    assert 1000 < cand["sm_clock_mhz"] < 2000  # read from the GPC clock when the SM one is absent
    assert cand["tensor_pipe_pct"] == pytest.approx(50.97) and base["tensor_pipe_pct"] > 90
    assert cand["grid"] == 128 and cand["registers"] == 168
    assert 100 < cand["dram_mb"] < 400  # bytes per second times the duration
    assert next(iter(cand["stalls"])) == "membar"  # the largest stall first
    assert list(cand["stalls"].values()) == sorted(cand["stalls"].values(), reverse=True)


def test_the_first_profiled_kernel_must_be_the_candidate():
    with pytest.raises(ncu.ProfileError, match="not the candidate"):
        ncu.profile(LOG, "my_gemm")


def test_a_log_without_kernels_says_why():
    with pytest.raises(ncu.ProfileError, match="ERR_NVGPUCTRPERM"):
        ncu.profile("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n", "gemm")


def test_only_the_candidate_profiled_is_an_error():
    head, units, first = LOG.splitlines()[2:5]
    with pytest.raises(ncu.ProfileError, match="no baseline"):
        ncu.profile("\n".join([head, units, first]), "gemm")


def test_a_missing_ncu_is_one_clear_error():
    with pytest.raises(ncu.ProfileError, match="not found"):
        ncu.command("/nonexistent/ncu", "/tmp/x.csv")


def test_the_table_shows_both_kernels_side_by_side():
    console = Console(width=200, record=True)
    console.print(sections_table([report.profile_section("3/7", ncu.profile(LOG, "gemm"))]))
    text = console.export_text()
    assert "tensor pipe busy" in text and "50.97" not in text and "51.0" in text and "94.9" in text
    assert "membar" in text


def test_a_baseline_of_two_kernels_is_summed_by_its_main_one_and_names_both():
    """16×4096×4096 (recorded on an H100): cuBLAS runs a split-K GEMM and a reduction kernel; the summary
    is the GEMM's, both are named; L2 throughput is read beside DRAM's."""
    log = (Path(__file__).parent / "data" / "ncu_h100_splitk_16x4096x4096.csv").read_text()
    p = ncu.profile(log, "gemm")
    cand, base = p["candidate"], p["baseline"]
    assert base["kernel"].startswith("nvjet_sm90") and len(p["baseline_kernels"]) == 2
    assert "splitKreduce" in p["baseline_kernels"][1]
    assert cand["time_us"] == pytest.approx(18.496) and cand["grid"] == 64
    assert cand["l2_throughput_pct"] == pytest.approx(54.34) and 0 < base["l2_throughput_pct"] < 100
    assert cand["dram_throughput_pct"] < base["dram_throughput_pct"]
