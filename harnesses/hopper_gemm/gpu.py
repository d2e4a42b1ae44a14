"""The child process's view of the GPU: CuPy arrays, a candidate launched through cuda-python, cuBLAS
through ctypes, what the device is and what it allows. The harness's own kernels are `helpers.py`'s,
the clock and power samples `power.py`'s.

Imported only inside the evaluation child, never by the parent, so that a candidate that hangs or
corrupts the context costs the child alone.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cupy as cp
import numpy as np
from cuda.bindings import driver as cu

CUDA_R_16BF = 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1


class CudaError(RuntimeError):
    pass


class LaunchRefused(Exception):
    """The declared launch is beyond what this device (or this kernel's resources) allows."""


def check(result: Any) -> Any:
    """Unwrap a cuda-python (err, *values) tuple, raising CudaError with the error's name."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        raise CudaError(name.decode() if name else str(err))
    return rest[0] if len(rest) == 1 else (tuple(rest) if rest else None)


def load_library(name: str) -> ctypes.CDLL:
    """An NVIDIA library (cublas, cublasLt) from its wheel or the CUDA toolkit, by name."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        return ctypes.CDLL(load_nvidia_dynamic_lib(name).abs_path)
    except Exception as exc:  # not installed as a wheel: the toolkit's sonames follow, and the error says both
        why = f"{type(exc).__name__}: {exc}"
    for soname in (f"lib{name}.so.13", f"lib{name}.so.12", f"lib{name}.so"):
        try:
            return ctypes.CDLL(soname)
        except OSError:
            continue
    raise CudaError(f"{name} (lib{name}) not found: not as a wheel ({why}), nor as lib{name}.so.13, .so.12 or .so")


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
        return load_library("cublas")

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

    def __init__(self, cubin: str | Path, launch: dict, stream: cp.cuda.Stream, info: DeviceInfo | None = None,
                 workspace: Callable[..., cp.ndarray] | None = None) -> None:
        self.launch = launch
        self.stream = cu.CUstream(stream.ptr)
        self.module = check(cu.cuModuleLoad(str(cubin).encode()))
        try:
            self.func = check(cu.cuModuleGetFunction(self.module, launch["kernel"].encode()))
        except CudaError:
            raise LaunchRefused(f"the cubin has no kernel named '{launch['kernel']}' (extern \"C\" __global__)") from None
        info = info or device_info()
        self._check_limits(info)
        smem = launch["smem"]
        if smem > 48 * 1024:
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(cu.cuFuncSetAttribute(self.func, attr, smem))
        clustered = tuple(launch["cluster"]) != (1, 1, 1)
        self.config = self._config() if clustered or launch.get("pdl") else None
        if clustered:
            self._check_cluster()
        self._keep: list = []
        # Scratch memory the manifest asks for (argument W): zero before the first launch; `workspace(bytes)`
        # makes it where the bench guards it.
        make = workspace or (lambda n: cp.zeros(n, dtype=cp.uint8))
        self.workspace = make(launch["workspace"]) if launch.get("workspace") else None

    def attribute(self, name: str) -> int:
        return check(cu.cuFuncGetAttribute(getattr(cu.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}"), self.func))

    def _check_limits(self, info: DeviceInfo) -> None:
        """Refuse, with the reason, a launch this device cannot run (instead of failing at launch time)."""
        threads = int(np.prod(self.launch["block"]))
        most = self.attribute("MAX_THREADS_PER_BLOCK")
        regs = self.attribute("NUM_REGS")
        if threads > most:
            raise LaunchRefused(f"block of {threads} threads, but this kernel ({regs} registers a thread) can run "
                                f"at most {most} threads a block on {info.name}")
        static = self.attribute("SHARED_SIZE_BYTES")
        if static + self.launch["smem"] > info.max_smem_optin:
            raise LaunchRefused(f"{static} bytes of static + {self.launch['smem']} bytes of dynamic shared memory "
                                f"exceed the {info.max_smem_optin} bytes a block may have on {info.name}")
        for axis, (g, most) in enumerate(zip(self.launch["grid"], info.max_grid)):
            if g > most:
                raise LaunchRefused(f"grid dimension {'xyz'[axis]} = {g} exceeds {most} on {info.name}")

    def _check_cluster(self) -> None:
        n = check(cu.cuOccupancyMaxActiveClusters(self.func, self.config))
        if n < 1:
            raise LaunchRefused(f"a cluster of {self.launch['cluster']} blocks with {self.launch['smem']} bytes of "
                                "dynamic shared memory each cannot be resident at once on this device")

    def _config(self) -> cu.CUlaunchConfig:
        launch = self.launch
        cfg = launch_config(launch["grid"], launch["block"], launch["smem"], launch["cluster"], self.stream,
                            launch.get("pdl", False))
        if np.prod(launch["cluster"]) > 8:
            allow = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            try:
                check(cu.cuFuncSetAttribute(self.func, allow, 1))
            except CudaError as exc:
                raise LaunchRefused(f"cluster {launch['cluster']}: non-portable cluster sizes are not "
                                    f"allowed on this device ({exc})") from None
        return cfg

    def bind(self, A: cp.ndarray, B: cp.ndarray, C: cp.ndarray) -> int:
        """Pack the kernel arguments for these buffers; returns the void** address to launch with."""
        M, K = A.shape
        N = B.shape[0]
        values = {"A": A, "B": B, "C": C}
        storage: list[ctypes._SimpleCData] = []
        for arg in self.launch["args"]:
            if arg in values:
                storage.append(ctypes.c_void_p(values[arg].data.ptr))
            elif arg in ("M", "N", "K"):
                storage.append(ctypes.c_int32({"M": M, "N": N, "K": K}[arg]))
            elif arg == "W":
                assert self.workspace is not None  # a manifest passes W only with a workspace (manifest.resolve)
                storage.append(ctypes.c_void_p(self.workspace.data.ptr))
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


# Dense bf16 tensor-core FLOPs per SM per clock, by compute capability (Hopper: 1024 FMAs).
DENSE_BF16_FLOPS_PER_CLOCK = {"9.0": 4096}


@dataclass
class DeviceInfo:
    name: str
    sms: int
    l2_bytes: int
    pci_bus_id: str
    cc: str
    max_smem_optin: int = 232448
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    max_sm_clock_mhz: float = 0.0

    @property
    def peak_tflops(self) -> float | None:
        """The dense bf16 peak at the highest SM clock: no honest GEMM can go faster."""
        per_clock = DENSE_BF16_FLOPS_PER_CLOCK.get(self.cc)
        if per_clock is None or not self.max_sm_clock_mhz:
            return None
        return self.sms * self.max_sm_clock_mhz * 1e6 * per_clock / 1e12


def device_info() -> DeviceInfo:
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    attr = cp.cuda.runtime.deviceGetAttribute
    rt = cp.cuda.runtime
    return DeviceInfo(
        name=props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        sms=props["multiProcessorCount"], l2_bytes=props["l2CacheSize"],
        pci_bus_id=dev.pci_bus_id, cc=f"{props['major']}.{props['minor']}",
        max_smem_optin=attr(rt.cudaDevAttrMaxSharedMemoryPerBlockOptin, dev.id),
        max_grid=tuple(attr(a, dev.id) for a in (rt.cudaDevAttrMaxGridDimX, rt.cudaDevAttrMaxGridDimY,
                                                 rt.cudaDevAttrMaxGridDimZ)),
        max_sm_clock_mhz=_max_sm_clock_mhz(dev),
    )


CLUSTER_SIZES = (2, 4, 8)


def launch_config(grid: Sequence[int], block: Sequence[int], smem: int, cluster: Sequence[int], stream: cu.CUstream | None = None,
                  pdl: bool = False) -> cu.CUlaunchConfig:
    """A driver launch configuration with its cluster shape (where it has more than one block) and, with
    `pdl`, as a programmatic dependent launch (its blocks may start before the previous kernel in
    the stream has finished; they wait for it at griddepcontrol.wait)."""
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
    cfg.sharedMemBytes = smem
    if stream is not None:
        cfg.hStream = stream
    attrs = []
    if tuple(cluster) != (1, 1, 1):  # a cluster of one is not asked for: that launch is scheduled differently
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
        attrs.append(attr)
    if pdl:
        dep = cu.CUlaunchAttribute()
        dep.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        dep.value.programmaticStreamSerializationAllowed = 1
        attrs.append(dep)
    if attrs:
        cfg.attrs, cfg.numAttrs = attrs, len(attrs)
    return cfg


def cluster_slots(helpers_cubin: str | Path, info: DeviceInfo) -> dict[str, int]:
    """For each cluster size, the blocks of a one-block-an-SM kernel the GPU holds at once when they are
    launched in clusters of that size: the driver's count of active clusters times the size. A cluster's
    blocks share one GPC, so where a GPC's SMs are not a multiple of the size some SMs stay idle."""
    module = check(cu.cuModuleLoad(str(helpers_cubin).encode()))
    try:
        func = check(cu.cuModuleGetFunction(module, b"delay"))
        smem = info.max_smem_optin - check(cu.cuFuncGetAttribute(
            cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, func))
        check(cu.cuFuncSetAttribute(func, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    smem))
        out = {}
        for size in CLUSTER_SIZES:
            cfg = launch_config((size * info.sms, 1, 1), (128, 1, 1), smem, (size, 1, 1))
            out[str(size)] = size * check(cu.cuOccupancyMaxActiveClusters(func, cfg))
        return out
    finally:
        check(cu.cuModuleUnload(module))


def _max_sm_clock_mhz(dev: cp.cuda.Device) -> float:
    """The highest SM clock: NVML's maximum, else the driver's clock-rate attribute; neither is an error
    (a peak of 0 would void every roofline check)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByPciBusId(dev.pci_bus_id.encode())
        return float(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM))
    except Exception as exc:  # NVML is optional: the driver's clock rate follows, and its failure says both
        why = f"NVML: {type(exc).__name__}: {exc}"
    try:
        khz = check(cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev.id))
    except CudaError as exc:
        raise CudaError(f"the SM clock could not be read ({why}; the driver's clock rate: {exc})") from None
    return khz / 1000.0
