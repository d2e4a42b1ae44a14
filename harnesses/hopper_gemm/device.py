"""Where an evaluation child runs: the CUDA devices it sees (and why none, in words), and the
fingerprint of the one it was given: the GPU, its clocks and caches, the driver, CUDA, cuBLAS, and the
baseline a run times against."""

from __future__ import annotations

import os


class NoDevice(Exception):
    """CUDA cannot start, or sees no device: no kernel ran, so nothing is anyone's fault but the set-up's."""


WHY_NO_DEVICE = {
    "CUDA_ERROR_NO_DEVICE": "no CUDA device is visible to this process",
    "CUDA_ERROR_STUB_LIBRARY": "the libcuda loaded is the CUDA toolkit's stub, not a driver: install the NVIDIA driver",
    "CUDA_ERROR_INSUFFICIENT_DRIVER": "the NVIDIA driver is older than this CUDA needs: update the driver",
    "CUDA_ERROR_NOT_PERMITTED": "this process may not use the GPU",
    "CUDA_ERROR_DEVICE_UNAVAILABLE": "the GPU is busy or unavailable (exclusive mode, or held by another process)",
}


def no_device(error: str, visible: str | None) -> str:
    """Why CUDA sees no device, in words: `error` is the driver's error name, `visible` the
    CUDA_VISIBLE_DEVICES this process was given (None: unset)."""
    why = WHY_NO_DEVICE.get(error, f"CUDA cannot start ({error})")
    if visible is not None and error in ("CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_INVALID_DEVICE"):
        why = f"no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES is '{visible}')"
    return why


def devices() -> int:
    """How many CUDA devices this process sees, through the driver; NoDevice with the reason in words
    when CUDA cannot start or sees none."""
    from cuda.bindings import driver as cu

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    err, = cu.cuInit(0)
    if err == cu.CUresult.CUDA_SUCCESS:
        err, count = cu.cuDeviceGetCount()
        if err == cu.CUresult.CUDA_SUCCESS and count == 0:
            err = cu.CUresult.CUDA_ERROR_NO_DEVICE
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        raise NoDevice(no_device(name.decode() if name else str(err), visible))
    return count


def fingerprint(job: dict) -> dict:
    import cupy as cp
    from cuda.bindings import driver as cu

    from harnesses.hopper_gemm.gpu import Cublas, check, device_info

    devices()
    info = device_info()
    drv = check(cu.cuDriverGetVersion())
    out = {
        "gpu": info.name, "sms": info.sms, "cc": info.cc, "l2_bytes": info.l2_bytes,
        "smem_per_block": info.max_smem_optin,
        "cuda_driver": f"{drv // 1000}.{drv % 1000 // 10}",
        "cuda_runtime": version(cp.cuda.runtime.runtimeGetVersion()),
        "cublas": version(Cublas(cp.cuda.Stream()).version, cublas=True),
        "cupy": cp.__version__,
        "max_sm_clock_mhz": info.max_sm_clock_mhz,
        "peak_tflops": round(info.peak_tflops, 1) if info.peak_tflops else None,
    }
    if job.get("helpers"):
        from harnesses.hopper_gemm.gpu import CudaError, cluster_slots

        try:
            out["cluster_slots"] = cluster_slots(job["helpers"], info)
        except CudaError:  # the fit then counts every SM as a slot
            pass
    try:
        import pynvml

        pynvml.nvmlInit()
        drv_str = pynvml.nvmlSystemGetDriverVersion()
        out["driver"] = drv_str.decode() if isinstance(drv_str, bytes) else drv_str
        h = pynvml.nvmlDeviceGetHandleByPciBusId(info.pci_bus_id.encode())
        out["power_limit_w"] = pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000
    except Exception as exc:  # NVML is optional: the fingerprint notes its absence
        out["driver"] = f"unknown (NVML: {exc})"
    out["baseline"] = {"kind": job.get("baseline") or "gemmex"}
    if job.get("baseline") == "best_lt" or job.get("both"):  # chosen once per shape, then named in every evaluation
        from harnesses.hopper_gemm.gpu import CudaError
        from harnesses.hopper_gemm.measure import Bench

        M, N, K = job["shape"]
        try:
            bench = Bench(M, N, K, info, job["helpers"], "best_lt")
        except CudaError as exc:
            if job.get("baseline") == "best_lt":
                raise
            out["best_lt"] = {"kind": "best_lt", "error": str(exc)}  # then only cublasGemmEx is timed
            return out
        choice = {"kind": "best_lt", "shape": [M, N, K], "cublaslt": version(bench.lt.version, True),
                  **{k: v for k, v in bench.lt_choice.items() if k != "ms"},
                  "ms": {str(k): round(v, 5) for k, v in bench.lt_choice["ms"].items()}}
        out["baseline" if job.get("baseline") == "best_lt" else "best_lt"] = choice
    return out


def version(v: int, cublas: bool = False) -> str:
    if cublas:  # e.g. 130001 -> 13.0.1
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 10}"
