"""The child process's view of the GPU: CuPy arrays, cuda-python launches, cuBLAS through ctypes.

Imported only inside the evaluation child, never by the parent, so that a candidate that hangs or
corrupts the context costs the child alone.
"""

from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import cupy as cp
import numpy as np
from cuda.bindings import driver as cu

BF16_NAN = 0xFFFF
CUDA_R_16BF = 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1


class CudaError(RuntimeError):
    pass


def check(result):
    """Unwrap a cuda-python (err, *values) tuple, raising CudaError with the error's name."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        raise CudaError(name.decode() if name else str(err))
    return rest[0] if len(rest) == 1 else (tuple(rest) if rest else None)


def to_bf16_bits(x: cp.ndarray) -> cp.ndarray:
    """float32 -> bf16 bit patterns (uint16), round to nearest even."""
    u = x.view(cp.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(cp.uint16)


def from_bf16_bits(bits: cp.ndarray) -> cp.ndarray:
    return (bits.astype(cp.uint32) << 16).view(cp.float32)


def random_bf16(shape: tuple[int, int], rng: cp.random.Generator) -> cp.ndarray:
    """Uniform in [-1, 1), never zeros; stored as bf16 bits."""
    return to_bf16_bits(rng.uniform(-1.0, 1.0, size=shape, dtype=cp.float32))


class Cublas:
    """cuBLAS GemmEx, bf16 in and out, fp32 compute, on the given stream."""

    def __init__(self, stream: cp.cuda.Stream) -> None:
        self.lib = self._load()
        self.handle = ctypes.c_void_p()
        self._ok(self.lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        self._ok(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream.ptr)), "cublasSetStream")
        self.alpha, self.beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        f = self.lib.cublasGemmEx
        f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                      ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_int]

    @staticmethod
    def _load() -> ctypes.CDLL:
        try:
            from cuda.pathfinder import load_nvidia_dynamic_lib

            return ctypes.CDLL(load_nvidia_dynamic_lib("cublas").abs_path)
        except Exception:
            for name in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
                try:
                    return ctypes.CDLL(name)
                except OSError:
                    continue
        raise CudaError("cuBLAS (libcublas) not found")

    @staticmethod
    def _ok(status: int, what: str) -> None:
        if status != 0:
            raise CudaError(f"{what} failed with cuBLAS status {status}")

    @property
    def version(self) -> int:
        v = ctypes.c_int()
        self._ok(self.lib.cublasGetVersion_v2(self.handle, ctypes.byref(v)), "cublasGetVersion")
        return v.value

    def gemm(self, A: cp.ndarray, B: cp.ndarray, C: cp.ndarray) -> None:
        """Row-major C (M×N) = A (M×K) · Bᵀ (B N×K): column-major Cᵀ = op_T(B) · A."""
        M, K = A.shape
        N = B.shape[0]
        self._ok(self.lib.cublasGemmEx(
            self.handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, ctypes.addressof(self.alpha),
            B.data.ptr, CUDA_R_16BF, K, A.data.ptr, CUDA_R_16BF, K, ctypes.addressof(self.beta),
            C.data.ptr, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), "cublasGemmEx")


class Kernel:
    """A candidate's cubin loaded through the driver API, launched as its manifest says."""

    def __init__(self, cubin: str | Path, launch: dict, stream: cp.cuda.Stream) -> None:
        self.launch = launch
        self.stream = cu.CUstream(stream.ptr)
        self.module = check(cu.cuModuleLoad(str(cubin).encode()))
        self.func = check(cu.cuModuleGetFunction(self.module, launch["kernel"].encode()))
        smem = launch["smem"]
        if smem > 48 * 1024:
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(cu.cuFuncSetAttribute(self.func, attr, smem))
        self.config = self._config() if tuple(launch["cluster"]) != (1, 1, 1) else None
        self._keep: list = []

    def _config(self) -> cu.CUlaunchConfig:
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = self.launch["grid"]
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = self.launch["block"]
        cfg.sharedMemBytes = self.launch["smem"]
        cfg.hStream = self.stream
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = self.launch["cluster"]
        cfg.attrs = [attr]
        cfg.numAttrs = 1
        if np.prod(self.launch["cluster"]) > 8:
            allow = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            check(cu.cuFuncSetAttribute(self.func, allow, 1))
        return cfg

    def bind(self, A: cp.ndarray, B: cp.ndarray, C: cp.ndarray) -> int:
        """Pack the kernel arguments for these buffers; returns the void** address to launch with."""
        M, K = A.shape
        N = B.shape[0]
        values = {"A": A, "B": B, "C": C}
        storage = []
        for arg in self.launch["args"]:
            if arg in values:
                storage.append(ctypes.c_void_p(values[arg].data.ptr))
            elif arg in ("M", "N", "K"):
                storage.append(ctypes.c_int32({"M": M, "N": N, "K": K}[arg]))
            else:
                storage.append(tensor_map(self.launch["tensor_maps"][arg], values))
        ptrs = (ctypes.c_void_p * len(storage))(
            *[s.getPtr() if isinstance(s, cu.CUtensorMap) else ctypes.addressof(s) for s in storage]
        )
        self._keep.append((storage, ptrs))
        return ctypes.addressof(ptrs)

    def __call__(self, params: int) -> None:
        if self.config is not None:
            check(cu.cuLaunchKernelEx(self.config, self.func, params, 0))
            return
        (gx, gy, gz), (bx, by, bz) = self.launch["grid"], self.launch["block"]
        check(cu.cuLaunchKernel(self.func, gx, gy, gz, bx, by, bz, self.launch["smem"], self.stream, params, 0))


def tensor_map(spec: dict, values: dict[str, cp.ndarray]) -> cu.CUtensorMap:
    """A 2-D bf16 tiled tensor map over a row-major operand."""
    t = values[spec["tensor"]]
    rows, cols = t.shape
    box_rows, box_cols = spec["box"]
    swz = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}[spec["swizzle"]]
    l2 = {0: "NONE", 64: "64B", 128: "128B", 256: "256B"}[spec["l2_promotion"]]
    u32, u64 = cu.cuuint32_t, cu.cuuint64_t
    return check(cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, u32(2), t.data.ptr,
        [u64(cols), u64(rows)], [u64(cols * 2)], [u32(box_cols), u32(box_rows)], [u32(1), u32(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(cu.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swz}"),
        getattr(cu.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{'L2_' + l2 if l2 != 'NONE' else 'NONE'}"),
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    ))


@dataclass
class DeviceInfo:
    name: str
    sms: int
    l2_bytes: int
    pci_bus_id: str
    cc: str


def device_info() -> DeviceInfo:
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    return DeviceInfo(
        name=props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        sms=props["multiProcessorCount"], l2_bytes=props["l2CacheSize"],
        pci_bus_id=cp.cuda.Device().pci_bus_id, cc=f"{props['major']}.{props['minor']}",
    )


class PowerSampler:
    """Samples SM clock, power and temperature through NVML in a thread while timing runs."""

    def __init__(self, pci_bus_id: str, period_s: float = 0.01) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode())
        except Exception:
            self.nvml = None

    def _run(self) -> None:
        n = self.nvml
        while not self._stop.is_set():
            try:
                self.samples.append((
                    n.nvmlDeviceGetClockInfo(self.handle, n.NVML_CLOCK_SM),
                    n.nvmlDeviceGetPowerUsage(self.handle) / 1000.0,
                    n.nvmlDeviceGetTemperature(self.handle, n.NVML_TEMPERATURE_GPU),
                ))
            except Exception:
                return
            time.sleep(self.period_s)

    def __enter__(self) -> PowerSampler:
        if self.nvml is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def summary(self) -> dict:
        if not self.samples:
            return {}
        a = np.array(self.samples)
        return {
            "sm_clock_mhz": {"mean": float(a[:, 0].mean()), "min": float(a[:, 0].min()), "max": float(a[:, 0].max())},
            "power_w": {"mean": float(a[:, 1].mean()), "max": float(a[:, 1].max())},
            "temperature_c": float(a[:, 2].max()),
            "samples": len(a),
        }
