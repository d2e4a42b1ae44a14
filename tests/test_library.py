"""`export RUN --library DIR`: the best kernels of a run or of a suite's runs, built and resolved at their
shapes, as a dispatch table with cubins and a module that needs no AutoDiscovery; the module's argument
checks, in a fresh process (no GPU needed to refuse a bad argument)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import needs_nvcc
from typer.testing import CliRunner

from autodiscovery import campaign as campaigns
from autodiscovery.agents.space import Space
from autodiscovery.cli import app
from autodiscovery.store import Store
from autodiscovery.store.models import Candidate, Evaluation, Run

H100 = {"gpu": "NVIDIA H100 80GB HBM3", "sms": 132}


def record(store, shape, family, knobs, ratio, cache, parent=None, label=None, fingerprint=H100, baseline="gemmex"):
    """A finished run of one kept candidate measured `ratio` × its baseline (and 0.01 less × the other)."""
    space = Space("hopper_gemm")
    knobs = space.families[family].default | knobs
    overrides = [f"problem.{k}={v}" for k, v in zip("MNK", shape)] + [f"harness.cache_dir={cache}",
                                                                      f"harness.baseline={baseline}"]
    other = "best_lt" if baseline == "gemmex" else "gemmex"
    campaign = campaigns.load("hopper-gemm", overrides)
    with store.session() as s:
        run = Run(campaign=f"llama/{label}" if label else "hopper-gemm", agent="search",
                  config=campaign.model_dump(mode="json"), fingerprint=dict(fingerprint),
                  status="finished", parent_id=parent)
        s.add(run)
        s.flush()
        c = Candidate(run_id=run.id, seq=3, family=family, knobs=knobs, source=space.render(family, knobs),
                      source_hash="h", status="kept")
        s.add(c)
        s.flush()
        s.add(Evaluation(candidate_id=c.id, status="ok", metrics={
            "ratio": {"median": ratio}, "baseline": baseline, "vs": {other: {"median": ratio - 0.01}},
            "tflops": {"candidate": 700.0, "cublas": 690.0}}))
        run.best_candidate_id = c.id
        return run.id


def two_shape_suite(store) -> int:
    """A finished suite's run of two problems, a (256×4096×4096) and b (4096³), with no runs under it yet."""
    suite = campaigns.load("hopper-gemm", ["suite=[{label: a, problem: {M: 256, N: 4096, K: 4096}}, "
                                           "{label: b, problem: {M: 4096, N: 4096, K: 4096}}]"])
    with store.session() as s:
        parent = Run(campaign="llama", agent="suite of search", config=suite.model_dump(mode="json"),
                     fingerprint={}, status="finished")
        s.add(parent)
        s.flush()
        return parent.id


@needs_nvcc
def test_a_suite_exports_a_library_of_its_tuned_shapes(tmp_path):
    store = Store(tmp_path / "runs.db")
    cache = tmp_path / "cache"
    pid = two_shape_suite(store)
    slower = record(store, (256, 4096, 4096), "wgmma_cluster",
                    {"BM": 64, "BN": 128, "SCHEDULE": "pingpong", "L2_PROMO": 256}, 0.97, cache, pid, "a")
    record(store, (4096, 4096, 4096), "wgmma_ws", {}, 1.01, cache, pid, "b")

    out = tmp_path / "lib"
    res = CliRunner().invoke(app, ["--db", str(tmp_path / "runs.db"), "export", str(pid), "--library", str(out)])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "2 tuned shapes (256×4096×4096, 4096×4096×4096)" in said
    assert ("1 measured slower than cuBLAS in their runs (256×4096×4096 0.970×), which gemm leaves to cuBLAS unless "
            "use_slower_kernels()") in said
    table = json.loads((out / "dispatch.json").read_text())
    first = table["kernels"][0]
    assert first["shape"] == [256, 4096, 4096] and first["family"] == "wgmma_cluster" and first["x_cublas"] == 0.97
    assert first["x_best_lt"] == pytest.approx(0.96)
    assert first["launch"]["kernel"] and first["launch"]["tile"] == [64, 128]
    maps = first["launch"]["tensor_maps"]  # how the module encodes them: L2 fills promoted as the kernel was tuned
    assert (maps["tmA"]["l2_promotion"], maps["tmB"]["l2_promotion"], maps["tmC"]["l2_promotion"]) == (256, 256, 0)
    assert (out / first["cubin"]).read_bytes()[:4] == b"\x7fELF"
    assert table["arch"] == "sm_90a" and table["device"] == "NVIDIA H100 80GB HBM3" and table["sms"] == 132
    assert (out / "tuned_gemm.py").is_file() and (out / "tuned_gemm_driver.py").is_file()

    # the module, in a fresh process with nothing of AutoDiscovery on its path
    probe = f"""
import sys, numpy as np
sys.path[:] = [p for p in sys.path if 'work/main' not in p and p not in ('', '.')]
sys.path.insert(0, {str(out)!r})
import tuned_gemm as t
assert 'autodiscovery' not in sys.modules and 'harnesses' not in sys.modules
print(t.shapes())
def err(*a):
    try:
        t.gemm(*a)
    except (TypeError, ValueError) as e:
        print(type(e).__name__ + ':', e)
f = np.zeros((256, 4096), np.float32)
err(np.zeros((2, 256, 4096), np.float32), f)
err(np.zeros((4096, 256), np.float32).T, f)
err(f, np.zeros((4096, 4000), np.float32))
err(f, np.zeros((4096, 4096), np.float32))
err([[1.0]], f)
# a shape whose tuned kernel measured slower than cuBLAS goes to cuBLAS, unless told otherwise
print(t._slower((256, 4096, 4096)))
print(repr(t._slower((4096, 4096, 4096))))
t.use_slower_kernels()
print(repr(t._slower((256, 4096, 4096))))
t.use_slower_kernels(False)
print(t._route(None, None, None, (256, 4096, 4096)))
# the tuned kernels run on the GPU model they were tuned on (name and SM count), unless told otherwise
print(repr(t._other_gpu(0, "NVIDIA H100 80GB HBM3", 132)))
print(t._other_gpu(1, "NVIDIA H200", 132))
print(t._other_gpu(0, "NVIDIA H100 80GB HBM3", 114))
t.use_on_any_hopper()
print(repr(t._other_gpu(1, "NVIDIA H200", 132)))
"""
    out_lines = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                               env={"PATH": "/usr/bin:/bin"}).stdout.splitlines()
    assert out_lines == [
        "[(256, 4096, 4096), (4096, 4096, 4096)]",
        "ValueError: A has 3 dimensions; gemm takes 2-D A (M×K) and B (N×K)",
        "ValueError: A is not row-major contiguous (strides (1, 256), shape (256, 4096)); call .contiguous() first",
        "ValueError: A is 256×4096 and B is 4096×4000: C = A·Bᵀ needs the same K",
        "TypeError: A is float32; gemm takes bfloat16 operands",
        "TypeError: A is a list: give a PyTorch tensor, a CuPy array or an array with __dlpack__",
        f"its tuned kernel measured 0.970× cuBLAS (run {slower} #3); use_slower_kernels() runs it anyway",
        "''",
        "''",
        f"its tuned kernel measured 0.970× cuBLAS (run {slower} #3); use_slower_kernels() runs it anyway",
        "''",
        "CUDA device 1 (NVIDIA H200, 132 SMs) is not the GPU the kernels were tuned on (NVIDIA H100 80GB HBM3, "
        "132 SMs); use_on_any_hopper() runs them anyway",
        "CUDA device 0 (NVIDIA H100 80GB HBM3, 114 SMs) is not the GPU the kernels were tuned on (NVIDIA H100 "
        "80GB HBM3, 132 SMs); use_on_any_hopper() runs them anyway",
        "''",
    ]


@needs_nvcc
def test_runs_measured_on_different_gpus_are_not_one_library(tmp_path):
    """A dispatch table states the one GPU its kernels were tuned on: a suite whose runs ran on two models
    is refused with both named."""
    store = Store(tmp_path / "runs.db")
    cache = tmp_path / "cache"
    pid = two_shape_suite(store)
    record(store, (256, 4096, 4096), "wgmma_cluster", {}, 0.97, cache, pid, "a")
    record(store, (4096, 4096, 4096), "wgmma_cluster", {}, 1.01, cache, pid, "b",
           fingerprint={"gpu": "NVIDIA H200", "sms": 132})
    res = CliRunner().invoke(app, ["--db", str(tmp_path / "runs.db"), "export", str(pid), "--library",
                                   str(tmp_path / "lib")])
    assert res.exit_code != 0 and "Traceback" not in res.output
    said = " ".join(res.output.split())
    assert ("the runs were measured on different GPUs (NVIDIA H100 80GB HBM3 with 132 SMs, NVIDIA H200 with 132 "
            "SMs): export each GPU's runs on their own") in said, res.output
    assert not (tmp_path / "lib" / "dispatch.json").exists()


@needs_nvcc
def test_several_suites_make_one_library_with_the_better_kernel_of_a_shape_tuned_twice(tmp_path):
    """`export 1 4 --library DIR`: the shapes of both suites; where both tuned a shape, the kernel whose run
    measured more (here the second suite's); `--out` still takes one run."""
    store = Store(tmp_path / "runs.db")
    cache = tmp_path / "cache"
    first = two_shape_suite(store)
    record(store, (256, 4096, 4096), "wgmma_cluster", {}, 0.97, cache, first, "a")
    record(store, (4096, 4096, 4096), "wgmma_cluster", {}, 1.01, cache, first, "b")
    again = two_shape_suite(store)
    better = record(store, (256, 4096, 4096), "wgmma_cluster", {"BN": 128}, 0.99, cache, again, "a")
    record(store, (4096, 4096, 4096), "wgmma_cluster", {"QSIZE": 3}, 0.95, cache, again, "b")
    db, out = str(tmp_path / "runs.db"), tmp_path / "lib"
    res = CliRunner().invoke(app, ["--db", db, "export", str(first), str(again), "--library", str(out)])
    assert res.exit_code == 0, res.output
    assert "2 tuned shapes (256×4096×4096, 4096×4096×4096)" in res.output
    kernels = {tuple(k["shape"]): k for k in json.loads((out / "dispatch.json").read_text())["kernels"]}
    assert kernels[(256, 4096, 4096)]["run"] == better and kernels[(256, 4096, 4096)]["x_cublas"] == 0.99
    assert kernels[(256, 4096, 4096)]["launch"]["tile"] == [128, 128]
    assert kernels[(4096, 4096, 4096)]["x_cublas"] == 1.01
    res = CliRunner().invoke(app, ["--db", db, "export", str(first), str(again), "--out", str(tmp_path / "b.cu")])
    assert res.exit_code != 0 and "give one run, not 2" in " ".join(res.output.split())


def test_export_says_what_it_needs(tmp_path):
    db = str(tmp_path / "runs.db")
    Store(db)
    res = CliRunner().invoke(app, ["--db", db, "export", "1"])
    assert res.exit_code == 2 and "give --out FILE" in res.output
    res = CliRunner().invoke(app, ["--db", db, "export", "1", "--library", str(tmp_path / "lib")])
    assert res.exit_code != 0 and "no run 1" in res.output


@needs_nvcc
def test_a_run_measured_against_the_best_cublaslt_algorithm_states_both_in_the_library(tmp_path):
    """A run whose objective is × the best cuBLASLt algorithm (`harness.baseline=best_lt`): its dispatch entry
    states × cublasGemmEx from the figures timed beside it, and the fallback to cuBLAS reads that one."""
    store = Store(tmp_path / "runs.db")
    cache = tmp_path / "cache"
    pid = two_shape_suite(store)
    lt = record(store, (256, 4096, 4096), "wgmma_cluster", {}, 1.005, cache, pid, "a", baseline="best_lt")
    record(store, (4096, 4096, 4096), "wgmma_cluster", {}, 1.01, cache, pid, "b")
    out = tmp_path / "lib"
    res = CliRunner().invoke(app, ["--db", str(tmp_path / "runs.db"), "export", str(pid), "--library", str(out)])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "1 measured slower than cuBLAS in their runs (256×4096×4096 0.995×)" in said, said
    kernels = {tuple(k["shape"]): k for k in json.loads((out / "dispatch.json").read_text())["kernels"]}
    assert kernels[(256, 4096, 4096)]["run"] == lt
    assert kernels[(256, 4096, 4096)]["x_cublas"] == pytest.approx(0.995)
    assert kernels[(256, 4096, 4096)]["x_best_lt"] == 1.005
    assert kernels[(4096, 4096, 4096)]["x_cublas"] == 1.01
    assert kernels[(4096, 4096, 4096)]["x_best_lt"] == pytest.approx(1.0)
