"""The CUDA driver's side of `tuned_gemm`: a device's primary context, the tuned kernels' cubins loaded on
it, their tensor maps encoded and their launches (one ctypes call each once packed)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .tuned_gemm import _View


def prod(xs: Iterable[int]) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


class Device:
    """The tuned kernels loaded on one CUDA device (its primary context)."""

    def __init__(self, index: int, kernels: dict, folder: Path, other_gpu: Callable[[int, str, int], str]) -> None:
        """`kernels`: (M, N, K) -> the dispatch table's entry; `folder`: where its cubins lie; `other_gpu`:
        (index, name, SMs) -> why the kernels do not run on this GPU ('' where they do)."""
        from cuda.bindings import driver as cu

        self.cu, self.kernels, self.folder, self.other_gpu = cu, kernels, folder, other_gpu
        ok(cu.cuInit(0))
        dev = ok(cu.cuDeviceGet(index))
        major = ok(cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
        minor = ok(cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
        self.index, self.cc = index, (major, minor)
        self.name = ok(cu.cuDeviceGetName(128, dev)).split(b"\0", 1)[0].decode()
        self.sms = ok(cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
        self.judge()
        self.ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
        self.funcs: dict[tuple, tuple[Any, Any]] = {}
        """(M, N, K) -> (the loaded module, its kernel)."""
        self.workspaces: dict[tuple, int] = {}

    def judge(self) -> None:
        """Whether the tuned kernels run here (`usable`), and if not, why."""
        major, minor = self.cc
        self.why = (f"CUDA device {self.index} is sm_{major}{minor}; the tuned kernels are sm_90a"
                    if self.cc != (9, 0) else self.other_gpu(self.index, self.name, self.sms))
        self.usable = not self.why

    def current(self) -> None:
        if int(ok(self.cu.cuCtxGetCurrent())) != int(self.ctx):
            ok(self.cu.cuCtxSetCurrent(self.ctx))

    def func(self, shape: tuple) -> Any:
        """The loaded kernel of `shape` (its cubin loaded on first use)."""
        if shape not in self.funcs:
            cu, entry = self.cu, self.kernels[shape]
            module = ok(cu.cuModuleLoadData((self.folder / entry["cubin"]).read_bytes()))
            kernel = ok(cu.cuModuleGetFunction(module, entry["launch"]["kernel"].encode()))
            smem = entry["launch"]["smem"]
            if smem > 48 * 1024:
                ok(cu.cuFuncSetAttribute(kernel, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          smem))
            if prod(entry["launch"]["cluster"]) > 8:
                ok(cu.cuFuncSetAttribute(
                    kernel, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1))
            self.funcs[shape] = (module, kernel)
        return self.funcs[shape][1]

    def launcher(self, shape: tuple, a: _View, b: _View, c: Any, stream: int) -> Callable[[], None]:
        """A call with no arguments that launches the kernel of `shape` on these buffers and stream: its
        arguments (tensor maps included) packed once, the launch itself one ctypes call."""
        launch = self.kernels[shape]["launch"]
        self.current()
        params = self._params(launch, shape, a, b, c, stream)
        f = self.func(shape)
        (gx, gy, gz), (bx, by, bz) = launch["grid"], launch["block"]
        ctx, current, lib = int(self.ctx), ctypes.c_void_p(), _libcuda()
        args: tuple[Any, ...]
        # `keep`: the argument block (and a launch configuration) lives as long as the launcher.
        if tuple(launch["cluster"]) == (1, 1, 1) and not launch.get("pdl"):
            args = (int(f), gx, gy, gz, bx, by, bz, launch["smem"], stream, params["address"], None)

            def go(run: Any = lib.cuLaunchKernel, keep: dict = params) -> None:
                lib.cuCtxGetCurrent(ctypes.byref(current))
                if current.value != ctx:
                    lib.cuCtxSetCurrent(ctypes.c_void_p(ctx))
                if rc := run(*args):
                    raise CudaError(f"cuLaunchKernel failed with CUDA error {rc}")
        else:  # a cluster or a dependent launch: cuLaunchKernelEx, its configuration packed once
            params["config"] = cfg = _config(launch, stream)
            args = (ctypes.addressof(cfg), int(f), params["address"], None)

            def go(run: Any = lib.cuLaunchKernelEx, keep: dict = params) -> None:
                lib.cuCtxGetCurrent(ctypes.byref(current))
                if current.value != ctx:
                    lib.cuCtxSetCurrent(ctypes.c_void_p(ctx))
                if rc := run(*args):
                    raise CudaError(f"cuLaunchKernelEx failed with CUDA error {rc}")
        return go

    def workspace(self, shape: tuple, stream: int) -> int:
        """The scratch memory (argument W) of `shape`'s kernel on `stream`: zeroed once, then left as the
        kernel leaves it (zero where it needs zero); launches on one stream take turns with it, another
        stream has its own."""
        key = (shape, stream)
        if key not in self.workspaces:
            size = self.kernels[shape]["launch"]["workspace"]
            ptr = ok(self.cu.cuMemAlloc(size))
            ok(self.cu.cuMemsetD8(ptr, 0, size))
            ok(self.cu.cuCtxSynchronize())  # zero before any stream's first launch, blocking or not
            self.workspaces[key] = int(ptr)
        return self.workspaces[key]

    def release(self) -> int:
        """Free the scratch memory and unload the cubins, once the work queued on the device is done;
        returns the bytes of scratch memory freed."""
        self.current()
        ok(self.cu.cuCtxSynchronize())
        freed = 0
        for (shape, _), ptr in self.workspaces.items():
            ok(self.cu.cuMemFree(ptr))
            freed += self.kernels[shape]["launch"]["workspace"]
        for module, _ in self.funcs.values():
            ok(self.cu.cuModuleUnload(module))
        self.workspaces.clear()
        self.funcs.clear()
        return freed

    def _params(self, launch: dict, shape: tuple, a: _View, b: _View, c: Any, stream: int = 0) -> dict:
        cu = self.cu
        M, N, K = shape
        ptrs = {"A": a.ptr, "B": b.ptr, "C": c.ptr}
        if launch.get("workspace"):
            ptrs["W"] = self.workspace(shape, stream)
        storage: list[Any] = []
        for arg in launch["args"]:
            if arg in ptrs:
                storage.append(ctypes.c_void_p(ptrs[arg]))
            elif arg in ("M", "N", "K"):
                storage.append(ctypes.c_int32({"M": M, "N": N, "K": K}[arg]))
            else:
                spec = launch["tensor_maps"][arg]
                rows, cols = {"A": (M, K), "B": (N, K), "C": (M, N)}[spec["tensor"]]
                storage.append(_tensor_map(cu, spec, ptrs[spec["tensor"]], rows, cols))
        array = (ctypes.c_void_p * len(storage))(
            *[s.getPtr() if isinstance(s, cu.CUtensorMap) else ctypes.addressof(s) for s in storage])
        return {"storage": storage, "array": array, "address": ctypes.addressof(array)}


class _Attribute(ctypes.Structure):
    """CUlaunchAttribute: an id, padding to 8 bytes, a 64-byte value (cuda.h)."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint32 * 16)]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h)."""

    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem_bytes", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_Attribute)), ("num_attrs", ctypes.c_uint)]


CLUSTER_DIMENSION, PROGRAMMATIC_STREAM_SERIALIZATION = 4, 6  # CUlaunchAttributeID


def _config(launch: dict, stream: int) -> _LaunchConfig:
    """The launch configuration of a cluster (more than one block) and/or a dependent launch, as the run
    measured the kernel: a dependent launch waits for the kernel before itself (griddepcontrol.wait)."""
    attrs = []
    if tuple(launch["cluster"]) != (1, 1, 1):
        a = _Attribute(id=CLUSTER_DIMENSION)
        a.value[0], a.value[1], a.value[2] = launch["cluster"]
        attrs.append(a)
    if launch.get("pdl"):
        a = _Attribute(id=PROGRAMMATIC_STREAM_SERIALIZATION)
        a.value[0] = 1
        attrs.append(a)
    array = (_Attribute * len(attrs))(*attrs)
    cfg = _LaunchConfig((ctypes.c_uint * 3)(*launch["grid"]), (ctypes.c_uint * 3)(*launch["block"]), launch["smem"],
                        stream or None, ctypes.cast(array, ctypes.POINTER(_Attribute)), len(attrs))
    cfg._attrs = array  # kept alive with the configuration
    return cfg


def _tensor_map(cu: Any, spec: dict, ptr: int, rows: int, cols: int) -> Any:
    """A 2-D bf16 tiled tensor map over a row-major operand, as the run measured the kernel with."""
    swz = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}[spec["swizzle"]]
    l2 = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}[spec["l2_promotion"]]
    u32, u64 = cu.cuuint32_t, cu.cuuint64_t
    box_rows, box_cols = spec["box"]
    return ok(cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, u32(2), ptr, [u64(cols), u64(rows)],
        [u64(cols * 2)], [u32(box_cols), u32(box_rows)], [u32(1), u32(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, getattr(cu.CUtensorMapSwizzle,
                                                                        f"CU_TENSOR_MAP_SWIZZLE_{swz}"),
        getattr(cu.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{l2}"),
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))


class CudaError(RuntimeError):
    pass


_lib = None


def _libcuda() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL("libcuda.so.1")
        _lib.cuLaunchKernel.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_void_p]
        _lib.cuLaunchKernelEx.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        _lib.cuCtxGetCurrent.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        _lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
    return _lib


def ok(result: Any) -> Any:
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        from cuda.bindings import driver as cu

        _, name = cu.cuGetErrorName(err)
        raise CudaError(f"CUDA driver call failed: {name.decode() if name else err}")
    return rest[0] if len(rest) == 1 else (tuple(rest) if rest else None)
