"""Evaluation child: `python -m harnesses.hopper_gemm.worker JOB.json RESULT.json`.

Runs one job (fingerprint, benchmark or head_to_head) and writes one JSON result. The parent
kills it after the campaign's timeout; a crash leaves no result and the parent records that.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

T0 = time.perf_counter()


def fingerprint() -> dict:
    import cupy as cp
    from cuda.bindings import driver as cu

    from harnesses.hopper_gemm.gpu import Cublas, check, device_info

    info = device_info()
    check(cu.cuInit(0))
    drv = check(cu.cuDriverGetVersion())
    out = {
        "gpu": info.name, "sms": info.sms, "cc": info.cc, "l2_bytes": info.l2_bytes,
        "cuda_driver": f"{drv // 1000}.{drv % 1000 // 10}",
        "cuda_runtime": _version(cp.cuda.runtime.runtimeGetVersion()),
        "cublas": _version(Cublas(cp.cuda.Stream()).version, cublas=True),
        "cupy": cp.__version__,
    }
    try:
        import pynvml

        pynvml.nvmlInit()
        drv_str = pynvml.nvmlSystemGetDriverVersion()
        out["driver"] = drv_str.decode() if isinstance(drv_str, bytes) else drv_str
        h = pynvml.nvmlDeviceGetHandleByPciBusId(info.pci_bus_id.encode())
        out["power_limit_w"] = pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000
        out["max_sm_clock_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
    except Exception as exc:  # NVML is optional: the fingerprint notes its absence
        out["driver"] = f"unknown (NVML: {exc})"
    return out


def _version(v: int, cublas: bool = False) -> str:
    if cublas:  # e.g. 130001 -> 13.0.1
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 10}"


def _kernel(spec: dict, bench):
    from harnesses.hopper_gemm.gpu import Kernel

    return Kernel(spec["cubin"], spec["launch"], bench.stream)


def benchmark(job: dict) -> dict:
    from autodiscovery.stats import summarize_ratio
    from harnesses.hopper_gemm.gpu import PowerSampler, device_info
    from harnesses.hopper_gemm.measure import Bench, GateFailure, elapsed

    s, (M, N, K) = job["settings"], job["shape"]
    info = device_info()
    bench = Bench(M, N, K, info.l2_bytes)
    t_init = time.perf_counter() - T0
    metrics: dict = {"device": info.name}
    t = time.perf_counter()
    kernels = {name: _kernel(spec, bench) for name, spec in job["kernels"].items()}
    try:
        metrics["gate"] = {name: bench.gate(k, s["gate_draws"], s["tolerance"]) for name, k in kernels.items()}
    except GateFailure as exc:
        return {"status": "incorrect", "log": str(exc), "metrics": metrics}
    t_gate = elapsed(t)
    t = time.perf_counter()
    order = list(kernels) + (["cublas"] if job["mode"] == "benchmark" else [])
    runners = bench.runners({name: kernels.get(name) for name in order})
    with PowerSampler(info.pci_bus_id) as sampler:
        times, inner, last = bench.interleave([runners[n][0] for n in order], s["repetitions"], s["warmup_ms"],
                                              s["sample_ms"], s["timing_budget_s"])
    t_time = elapsed(t)
    for k, name in enumerate(order):
        if name in kernels:
            check = bench.recheck(runners[name][1], last[k], s["tolerance"])
            if not check["ok"]:
                return {"status": "incorrect", "metrics": metrics,
                        "log": f"output of the timed launches is wrong: rel error {check['rel_err']:.3g}"}
    flops = 2 * M * N * K
    med = {name: float(sorted(times[:, k])[len(times) // 2]) for k, name in enumerate(order)}
    metrics |= {
        "ms": med, "tflops": {n: flops / (ms * 1e-3) / 1e12 for n, ms in med.items()},
        "pairs": len(times), "launches_per_sample": dict(zip(order, inner)), "input_sets": len(bench.timing_sets()),
        "power": sampler.summary(),
        "timed_gpu_s": round(float((times * inner).sum()) / 1000, 4),
        "phases_s": {"init": round(t_init, 4), "gate": t_gate, "timing": t_time},
    }
    # Ratio > 1: the first kernel is faster than the second (× cuBLAS, or speedup over the incumbent).
    ratios = times[:, 1] / times[:, 0]
    metrics["ratio"] = summarize_ratio(ratios.tolist(), s["confidence"])
    metrics["ratios"] = [round(float(r), 5) for r in ratios]
    return {"status": "ok", "metrics": metrics, "log": ""}


def main() -> int:
    job_path, result_path = sys.argv[1], sys.argv[2]
    job = json.loads(open(job_path).read())
    try:
        if job["mode"] == "fingerprint":
            result = {"status": "ok", "metrics": fingerprint(), "log": ""}
        else:
            result = benchmark(job)
    except Exception as exc:  # a CUDA error or a failed launch: this candidate crashed
        result = {"status": "crashed", "metrics": {}, "log": f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"}
    result["child_s"] = round(time.perf_counter() - T0, 4)
    with open(result_path, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    os._exit(0)  # skip library exit handlers: after a CUDA fault they only add noise


if __name__ == "__main__":
    sys.exit(main())
