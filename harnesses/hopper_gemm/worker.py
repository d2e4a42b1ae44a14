"""Evaluation child: `python -m harnesses.hopper_gemm.worker JOB.json RESULT.json`.

Runs one job (fingerprint, benchmark or head_to_head) and writes one JSON result: the child's side of
`autodiscovery/toolkit/child.py`. The parent kills it after the campaign's timeout; a crash leaves no
result and the parent records that.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NoReturn

import numpy as np

from autodiscovery.status import EvalStatus
from autodiscovery.toolkit import child
from harnesses.hopper_gemm.device import NoDevice, devices, fingerprint

if TYPE_CHECKING:
    from harnesses.hopper_gemm.gpu import Kernel
    from harnesses.hopper_gemm.measure import Bench
    from harnesses.hopper_gemm.screen import Precise
    from harnesses.hopper_gemm.verdict import Tolerance

T0 = time.perf_counter()


def benchmark(job: dict) -> dict:
    from autodiscovery.toolkit.stats import summarize_ratio
    from harnesses.hopper_gemm import timing
    from harnesses.hopper_gemm.gpu import Kernel, LaunchRefused, device_info
    from harnesses.hopper_gemm.measure import (
        GATE_PHASES,
        Bench,
        GateFailure,
        Tolerance,
        elapsed,
        failure,
    )
    from harnesses.hopper_gemm.power import PowerSampler
    from harnesses.hopper_gemm.screen import Screen, slow_estimate

    s, (M, N, K) = job["settings"], job["shape"]
    tol = Tolerance.of(s, K)
    info = device_info()
    both = job["mode"] == "benchmark" and job.get("lt_algo") is not None and s.get("both_baselines", True)
    bench = Bench(M, N, K, info, job["helpers"], s["baseline"], job.get("lt_algo"), both)
    t_init = time.perf_counter() - child.job_started()
    metrics: dict = {"device": info.name}
    t = time.perf_counter()
    kernels = {}
    for name, spec in job["kernels"].items():
        try:
            kernels[name] = Kernel(spec["cubin"], spec["launch"], bench.stream, info,
                                   lambda n, name=name: bench.workspace(name, n))
        except LaunchRefused as exc:
            return {"status": EvalStatus.rejected, "log": f"{name}: launch refused: {exc}" if len(job["kernels"]) > 1
                    else f"launch refused: {exc}", "metrics": metrics}
    def prefix(name: str) -> str:  # head to head: say which of the two
        return f"{name}: " if len(kernels) > 1 else ""

    metrics["gate"] = {}
    for name, k in kernels.items():
        try:
            metrics["gate"][name] = bench.gate(k, name, s["gate_draws"], tol)
        except GateFailure as exc:
            return {"status": EvalStatus.incorrect, "log": f"{prefix(name)}{exc}", "metrics": metrics}
    t_gate = elapsed(t)
    t = time.perf_counter()
    order = list(kernels) + (["cublas"] if job["mode"] == "benchmark" else []) + [bench.other_kind] * both
    bar = job.get("bar")
    screen = Screen(bar, s["screen_pairs"], s["screen_slack"], s["screen_far"], s["screen_far_pairs"]) \
        if bar and job["mode"] == "benchmark" else None
    known = {n: ms for n, g in metrics["gate"].items()
             if (ms := slow_estimate([d["ms"] for d in g if "ms" in d], s["sample_ms"])) is not None}
    with PowerSampler(info.pci_bus_id) as sampler:
        times, inner, stopped = timing.interleave(bench, {n: kernels.get(n) for n in order}, s["repetitions"],
                                                 s["warmup_ms"], s["sample_ms"], s["timing_budget_s"], screen,
                                                 known, precise(s))
    if stopped == "precise":
        metrics["precise"] = {"pairs": len(times), "within": s["precision"]}
    elif stopped and screen is not None:
        metrics["screened"] = {"pairs": len(times), "bar": round(screen.bar, 5), "below": round(screen.limit(stopped), 5),
                               "far": stopped == "far"}
    metrics["estimates_ms"] = {n: round(ms, 5) for n, ms in zip(order, bench.estimates)}
    if known:
        metrics["estimated_from_gate_ms"] = known
    results = bench.results(tol)
    checked = [(c, r) for c, r in results if c.phase not in GATE_PHASES]
    t_time = elapsed(t)
    metrics["checked_launches"] = {n: sum(c.kernel == n for c, _ in results) for n in kernels}
    metrics["worst_rel_err"] = {n: max((r["rel_err"] for c, r in checked if c.kernel == n), default=None)
                                for n in kernels}
    bad = [(c, r) for c, r in checked if not r["ok"]]
    if bad:
        c, r = bad[0]
        failed = sum(1 for b in bad if b[0].kernel == c.kernel)
        after_gate = sum(1 for b in checked if b[0].kernel == c.kernel)
        return {"status": EvalStatus.incorrect, "metrics": metrics,
                "log": f"{prefix(c.kernel)}{failure(c, r, tol)} ({failed} of the {after_gate} launches checked after the gate failed)"}
    flops = 2 * M * N * K
    med = {name: float(np.median(times[:, k])) for k, name in enumerate(order)}
    metrics |= {
        "ms": med, "tflops": {n: flops / (ms * 1e-3) / 1e12 for n, ms in med.items()},
        "pairs": len(times), "launches_per_sample": dict(zip(order, inner)), "input_sets": max(inner),
        "power": sampler.summary(), "peak_tflops": info.peak_tflops, "baseline": s["baseline"],
        "tolerance": {"rel": tol.rel, "max": tol.max_rel},
        "timed_gpu_s": round(float((times * np.array(inner)).sum()) / 1000, 4),
        "phases_s": {"init": round(t_init, 4), "gate": t_gate, "timing": t_time},
    }
    # Ratio > 1: the first kernel is faster than the second (× cuBLAS, or speedup over the incumbent).
    ratios = times[:, 1] / times[:, 0]
    metrics["ratio"] = summarize_ratio(ratios.tolist(), s["confidence"])
    metrics["ratios"] = [round(float(r), 5) for r in ratios]
    if both:  # × each cuBLAS, from the same rotation: no claim rests on the weaker one
        metrics["vs"] = {s["baseline"]: metrics["ratio"],
                         bench.other_kind: summarize_ratio((times[:, 2] / times[:, 0]).tolist(), s["confidence"])}
    peak = info.peak_tflops
    for name in order:
        if peak and metrics["tflops"][name] > peak:
            return {"status": EvalStatus.rejected, "metrics": metrics,
                    "log": (f"{name} timed at {metrics['tflops'][name]:.0f} TFLOP/s, above the dense bf16 peak of "
                            f"{info.name} ({peak:.0f} TFLOP/s: {info.sms} SMs at {info.max_sm_clock_mhz:.0f} MHz): "
                            "no honest kernel runs that fast, so the measurement was fooled")}
    return {"status": EvalStatus.ok, "metrics": metrics, "log": ""}


def precise(settings: dict) -> Precise:
    """Timing until the noise is known (`screen.Precise`), as the campaign's harness settings ask."""
    from harnesses.hopper_gemm.screen import Precise

    return Precise(settings.get("precision", 0.0), max(10, settings["screen_pairs"]), confidence=settings["confidence"])


def replay(job: dict) -> dict:
    """Several kernels (a lineage's steps) in one process: each gated on its own, then every one that
    passed timed in one interleaved rotation with the baseline. metrics["steps"][name] holds each
    kernel's own outcome, with its × baseline from the pairs it shared with the baseline."""
    from autodiscovery.toolkit.stats import summarize_ratio
    from harnesses.hopper_gemm import timing
    from harnesses.hopper_gemm.gpu import Kernel, LaunchRefused, device_info
    from harnesses.hopper_gemm.measure import GATE_PHASES, Bench, GateFailure, Tolerance, failure

    s, (M, N, K) = job["settings"], job["shape"]
    tol = Tolerance.of(s, K)
    info = device_info()
    both = job.get("lt_algo") is not None and s.get("both_baselines", True)
    bench = Bench(M, N, K, info, job["helpers"], s["baseline"], job.get("lt_algo"), both)
    steps: dict[str, dict] = {}
    kernels = {}
    for name, spec in job["kernels"].items():
        try:
            kernel = Kernel(spec["cubin"], spec["launch"], bench.stream, info,
                            lambda n, name=name: bench.workspace(name, n))
            bench.gate(kernel, name, s["gate_draws"], tol)
            kernels[name] = kernel
        except LaunchRefused as exc:
            steps[name] = {"status": EvalStatus.rejected, "log": f"launch refused: {exc}"}
        except GateFailure as exc:
            steps[name] = {"status": EvalStatus.incorrect, "log": str(exc)}
    if kernels:
        order = [*kernels, "cublas"] + [bench.other_kind] * both
        times, inner, _ = timing.interleave(bench, {n: kernels.get(n) for n in order}, s["repetitions"], s["warmup_ms"],
                                           s["sample_ms"], s["timing_budget_s"])
        results = bench.results(tol)
        flops = 2 * M * N * K
        base = times[:, len(kernels)]
        for k, name in enumerate(kernels):
            bad = [(c, r) for c, r in results if c.kernel == name and c.phase not in GATE_PHASES and not r["ok"]]
            if bad:
                steps[name] = {"status": EvalStatus.incorrect, "log": failure(*bad[0], tol)}
                continue
            ms = {"candidate": float(np.median(times[:, k])), "cublas": float(np.median(base))}
            ratios = base / times[:, k]
            metrics = {"ms": ms, "tflops": {n: flops / (v * 1e-3) / 1e12 for n, v in ms.items()},
                       "pairs": len(times), "ratio": summarize_ratio(ratios.tolist(), s["confidence"]),
                       "peak_tflops": info.peak_tflops, "baseline": s["baseline"]}
            if both:  # × the other cuBLAS too, from the same rotation
                other = summarize_ratio((times[:, -1] / times[:, k]).tolist(), s["confidence"])
                metrics["vs"] = {s["baseline"]: metrics["ratio"], bench.other_kind: other}
            if info.peak_tflops and metrics["tflops"]["candidate"] > info.peak_tflops:
                steps[name] = {"status": EvalStatus.rejected, "metrics": metrics,
                               "log": f"timed above the dense bf16 peak of {info.name}: the measurement was fooled"}
            else:
                steps[name] = {"status": EvalStatus.ok, "metrics": metrics, "log": ""}
    return {"status": EvalStatus.ok, "metrics": {"device": info.name, "steps": steps}, "log": ""}


def errors(bench: Bench, kernel: Kernel, name: str, per_dist: int, tolerance: Tolerance) -> dict[str, list[dict]]:
    """Gate-like launches of a kernel that never stop at a failure: results by distribution."""
    from harnesses.hopper_gemm.measure import DISTRIBUTIONS, Draw

    first = len(bench.checks)
    for d in range(per_dist * len(DISTRIBUTIONS)):
        draw = Draw(d % 2, bench.seed(), d % len(DISTRIBUTIONS))
        bench.prepare(draw)
        kernel(kernel.bind(*bench.slot(draw.slot)))
        bench.check(draw.slot, name, "gate", d)
    out: dict[str, list[dict]] = {dist: [] for dist in DISTRIBUTIONS}
    for c, r in bench.results(tolerance)[first:]:
        out[DISTRIBUTIONS[c.dist]].append(r)
    return out


def calibrate(job: dict) -> dict:
    """Errors of each kernel on every distribution, failures included (no timing)."""
    from harnesses.hopper_gemm.gpu import Kernel, device_info
    from harnesses.hopper_gemm.measure import Bench, Tolerance

    (M, N, K), s = job["shape"], job["settings"]
    info = device_info()
    bench = Bench(M, N, K, info, job["helpers"])
    out = {}
    for name, spec in job["kernels"].items():
        k = Kernel(spec["cubin"], spec["launch"], bench.stream, info)
        out[name] = {dist: [{key: r[key] for key in ("rel_err", "max_err", "nonfinite")} for r in rs]
                     for dist, rs in errors(bench, k, name, job["per_dist"], Tolerance.of(s, K)).items()}
    return {"status": EvalStatus.ok, "metrics": {"errors": out, "device": info.name, "tolerance": Tolerance.of(s, K).rel},
            "log": ""}


def profile(job: dict) -> dict:
    """The candidate, then the baseline, once each inside a profiler range (for Nsight Compute).

    Run under `ncu --profile-from-start off`: the gate's and the input fills' launches stay outside
    the ranges, so the profile holds the candidate's kernel first and the baseline's kernel(s) after it.
    """
    from cuda.bindings import driver as cu

    from harnesses.hopper_gemm.gpu import Kernel, LaunchRefused, check, device_info
    from harnesses.hopper_gemm.measure import Bench, Draw, GateFailure, Tolerance

    s, (M, N, K) = job["settings"], job["shape"]
    info = device_info()
    bench = Bench(M, N, K, info, job["helpers"], s["baseline"], job.get("lt_algo"))
    (spec,) = job["kernels"].values()
    try:
        kernel = Kernel(spec["cubin"], spec["launch"], bench.stream, info)
    except LaunchRefused as exc:
        return {"status": EvalStatus.rejected, "log": f"launch refused: {exc}", "metrics": {"device": info.name}}
    try:
        bench.gate(kernel, "candidate", 2, Tolerance.of(s, K))  # a kernel that fails is not worth profiling
    except GateFailure as exc:
        return {"status": EvalStatus.incorrect, "log": str(exc), "metrics": {"device": info.name}}
    launch = bench.launchers({"candidate": kernel, "cublas": None})
    for name in ("candidate", "cublas"):
        bench.prepare(Draw(0, bench.seed(), 0))
        bench.stream.synchronize()
        check(cu.cuProfilerStart())
        launch[name](0)
        bench.stream.synchronize()
        check(cu.cuProfilerStop())
    return {"status": EvalStatus.ok, "metrics": {"device": info.name, "kernel": spec["launch"]["kernel"]}, "log": ""}


def sanitize(job: dict) -> dict:
    """The candidate launched for compute-sanitizer, which runs this child: A, B, C and the workspace
    allocations of their own (CuPy's pool is off), two launches on fresh draws, no checks."""
    import cupy as cp

    from harnesses.hopper_gemm.gpu import Kernel, LaunchRefused, device_info
    from harnesses.hopper_gemm.measure import Bench, Draw

    cp.cuda.set_allocator(None)
    M, N, K = job["shape"]
    info = device_info()
    bench = Bench(M, N, K, info, job["helpers"], guarded=False)
    (spec,) = job["kernels"].values()
    try:
        kernel = Kernel(spec["cubin"], spec["launch"], bench.stream, info)
    except LaunchRefused as exc:
        return {"status": EvalStatus.rejected, "log": f"launch refused: {exc}", "metrics": {"device": info.name}}
    for i in range(job.get("launches", 2)):
        bench.prepare(Draw(i % 2, bench.seed(), i % 2))
        kernel(kernel.bind(*bench.slot(i % 2)))
    bench.stream.synchronize()
    return {"status": EvalStatus.ok, "metrics": {"device": info.name, "shape": [M, N, K]}, "log": ""}


def sticky_error() -> str:
    """The context's error after a fault (an illegal address, say), which later calls only echo."""
    try:
        from cuda.bindings import driver as cu

        err, = cu.cuCtxSynchronize()
        if err != cu.CUresult.CUDA_SUCCESS:
            _, name = cu.cuGetErrorName(err)
            return name.decode() if name else str(err)
    except Exception as exc:  # the fault stands as reported; only its name could not be read
        return f"(the context's error could not be read: {type(exc).__name__}: {exc})"
    return ""


MODES = {"calibrate": calibrate, "profile": profile, "replay": replay, "sanitize": sanitize}


def work(job: dict) -> dict:
    if job["mode"] == "fingerprint":
        return child.result(EvalStatus.ok, metrics=fingerprint(job))
    if job["mode"] == "count":
        return child.result(EvalStatus.ok, metrics={"device_count": devices()})
    return MODES.get(job["mode"], benchmark)(job)


def crashed(job: dict, exc: Exception) -> str:
    """A CUDA error or a failed launch: the candidate crashed, and the context's error says whether a
    kernel faulted."""
    fault = sticky_error() if job["mode"] not in ("fingerprint", "count") else ""
    said = f"the GPU reported {fault} (a fault in a kernel: most likely the candidate's)\n" if fault else ""
    return said + child.crash_log(exc)


def warm() -> None:
    """What a spare child loads before its job (`child.serve`): CuPy, the driver's bindings and NVML, and
    the harness's modules; the driver initialised. Nothing of it touches the GPU: no context is made
    until the job, so a spare disturbs no measurement running beside it."""
    import cupy  # noqa: F401
    import pynvml
    from cuda.bindings import driver as cu

    import harnesses.hopper_gemm.measure  # noqa: F401
    import harnesses.hopper_gemm.power  # noqa: F401
    from autodiscovery.toolkit import stats  # noqa: F401

    cu.cuInit(0)
    pynvml.nvmlInit()


def main() -> NoReturn:
    """The child's side of `toolkit/child.py`; NoDevice is a crash of the machine, not of a kernel (nothing
    ran), said in its own words."""
    child.serve(work, T0, known={NoDevice: EvalStatus.crashed}, crashed=crashed, warm=warm)


if __name__ == "__main__":
    main()
