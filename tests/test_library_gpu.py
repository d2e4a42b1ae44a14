"""On an H100/H200 with PyTorch: an exported library loaded in a fresh process, its gemm checked against
cuBLAS (torch.matmul) on tuned shapes and on others, its fallbacks (alignment, a kernel measured slower
than cuBLAS), and its time per call against cuBLAS and against launching the same kernel with no
dispatch at all."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_library import record, two_shape_suite
from typer.testing import CliRunner

from autodiscovery.cli import app
from autodiscovery.store import Store

pytestmark = pytest.mark.gpu

PROBE = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import tuned_gemm as t
out = {}
torch.manual_seed(0)
def rel(c, ref):
    return float((c.float() - ref.float()).norm() / ref.float().norm())
# a shape whose tuned kernel measured slower than cuBLAS in its run goes to cuBLAS
A = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16)
B = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
out["slower"] = {"path": t.path(A, B), "rel_err": rel(t.gemm(A, B), torch.matmul(A, B.t()))}
t.use_slower_kernels()  # from here on the tuned kernels themselves, slower in their runs or not
for M, N, K in t.shapes() + [(300, 1000, 1024)]:
    A = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    B = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    C, ref = t.gemm(A, B), torch.matmul(A, B.t())
    row = {"path": t.path(A, B), "rel_err": rel(C, ref)}
    C2 = torch.full_like(ref, float("nan")); t.gemm(A, B, out=C2); row["rel_err_out"] = rel(C2, ref)
    if (M, N, K) in t.KERNELS:
        # timed: back to back, as a program calls it; events around 200 calls of each, interleaved
        dev = t._devices[A.device.index]
        a, b, c = (t._View(x, None, "x") for x in (A, B, C))
        raw = dev.launcher((M, N, K), a, b, c, torch.cuda.current_stream().cuda_stream)
        fns = {"gemm": lambda: t.gemm(A, B, out=C), "cublas": lambda: torch.matmul(A, B.t(), out=ref),
               "raw": raw, "gemm_new_out": lambda: t.gemm(A, B)}
        times = {k: [] for k in fns}
        for f in fns.values():
            for _ in range(20): f()
        for r in range(15):
            for k, f in (fns.items() if r % 2 == 0 else reversed(list(fns.items()))):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(200): f()
                e1.record(); e1.synchronize()
                times[k].append(e0.elapsed_time(e1) / 200 * 1000)
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        row |= {"us": med, "x_cublas": med["cublas"] / med["gemm"], "overhead": med["gemm"] / med["raw"] - 1}
        import time
        t0 = time.perf_counter()
        for _ in range(200): t.gemm(A, B, out=C)
        row["host_us"] = (time.perf_counter() - t0) / 200 * 1e6  # the host's cost of a call (queued, not waited)
        torch.cuda.synchronize()
    out["x".join(map(str, (M, N, K)))] = row
# release(): the scratch memory goes back (the stream-K kernel's, on one stream), and a later call works
before = torch.cuda.mem_get_info()[0]
freed = t.release()
out["release"] = {"freed": freed, "free_gained": torch.cuda.mem_get_info()[0] - before,
                  "left": sum(len(d.workspaces) + len(d.funcs) for d in t._devices.values())}
for M, N, K in t.shapes():
    A = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    B = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    out["x".join(map(str, (M, N, K)))]["rel_err_after_release"] = rel(t.gemm(A, B), torch.matmul(A, B.t()))
A = torch.randn(256 * 4096 + 1, device="cuda", dtype=torch.bfloat16)[1:].view(256, 4096)  # 2 bytes off
B = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
out["misaligned"] = {"path": t.path(A, B), "rel_err": rel(t.gemm(A, B), torch.matmul(A, B.t()))}
try:
    t.gemm(A.float(), B)
except TypeError as e:
    out["float32"] = str(e)
# another GPU model than the table's: cuBLAS, saying why, until use_on_any_hopper()
M, N, K = t.shapes()[0]
A = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
B = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
t.TABLE["device"] = "Another GPU"
t.use_on_any_hopper(False)
out["other_gpu"] = {"path": t.path(A, B), "rel_err": rel(t.gemm(A, B), torch.matmul(A, B.t()))}
t.use_on_any_hopper()
out["any_hopper"] = {"path": t.path(A, B), "rel_err": rel(t.gemm(A, B), torch.matmul(A, B.t()))}
print(json.dumps(out))
"""


def this_gpu() -> dict:
    """The fingerprint a run on this machine records: the GPU's name and SM count."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    return {"gpu": props["name"].decode(), "sms": props["multiProcessorCount"]}


def test_an_exported_library_in_a_fresh_process(tmp_path, build_cache):
    store = Store(tmp_path / "runs.db")
    pid = two_shape_suite(store)
    gpu = this_gpu()
    record(store, (256, 4096, 4096), "wgmma_cluster", {"BM": 64, "BN": 128, "SCHEDULE": "pingpong"}, 0.97,
           build_cache, pid, "a", fingerprint=gpu)
    record(store, (4096, 4096, 4096), "wgmma_cluster", {}, 1.01, build_cache, pid, "b", fingerprint=gpu)
    # Stream-K: a workspace of the library's own, its flags left zero by each call for the next.
    record(store, (2048, 2048, 2048), "wgmma_cluster", {"STREAMK": 1, "CTAS": 0, "PRODUCER_REGS": 40,
                                                       "CONSUMER_REGS": 232}, 0.9, build_cache, pid, "c",
           fingerprint=gpu)
    lib = tmp_path / "lib"
    res = CliRunner().invoke(app, ["--db", str(tmp_path / "runs.db"), "export", str(pid), "--library", str(lib)])
    assert res.exit_code == 0, res.output
    done = subprocess.run([sys.executable, "-c", PROBE, str(lib)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    print(json.dumps(out, indent=1))
    assert out["slower"]["path"].startswith("cuBLAS: its tuned kernel measured 0.970× cuBLAS (run "), out["slower"]
    assert out["slower"]["rel_err"] < 1e-2
    for shape in ("256x4096x4096", "4096x4096x4096", "2048x2048x2048"):
        assert out[shape]["path"].startswith("tuned: wgmma_cluster"), out[shape]
        assert out[shape]["rel_err"] < 1e-2 and out[shape]["rel_err_out"] < 1e-2
        assert out[shape]["x_cublas"] > 0.5  # a real kernel, not a no-op: its time is reported, not judged here
        assert out[shape]["rel_err_after_release"] < 1e-2
    assert out["release"]["freed"] > 0 and out["release"]["left"] == 0
    assert out["release"]["free_gained"] >= out["release"]["freed"] - (2 << 20)  # the driver's granularity
    assert out["300x1000x1024"]["path"] == "cuBLAS: 300×1000×1024 was not tuned"
    assert out["300x1000x1024"]["rel_err"] < 1e-2
    assert out["misaligned"]["path"].startswith("cuBLAS: A is not 16-byte aligned")
    assert out["misaligned"]["rel_err"] < 1e-2
    assert "gemm takes bfloat16 operands" in out["float32"]
    gpu = this_gpu()
    assert out["other_gpu"]["path"] == (f"cuBLAS: CUDA device 0 ({gpu['gpu']}, {gpu['sms']} SMs) is not the GPU the "
                                        f"kernels were tuned on (Another GPU, {gpu['sms']} SMs); use_on_any_hopper() "
                                        "runs them anyway")
    assert out["other_gpu"]["rel_err"] < 1e-2
    assert out["any_hopper"]["path"].startswith("tuned: wgmma_cluster") and out["any_hopper"]["rel_err"] < 1e-2
