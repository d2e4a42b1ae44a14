"""A tuned BF16 GEMM: C = A·Bᵀ for the shapes an AutoDiscovery run tuned, cuBLAS for every other.

    import sys; sys.path.insert(0, "path/to/this/folder")
    from tuned_gemm import gemm
    C = gemm(A, B)            # A: M×K, B: N×K, both bf16, row-major, on one CUDA device; C: M×N bf16

A and B are PyTorch tensors or CuPy arrays (or anything with `__dlpack__`, then with `out=`). Where
(M, N, K) is in `dispatch.json`, the kernel tuned for it is launched from its cubin (sm_90a) on the
caller's current stream; every other shape, device or alignment goes to the framework's own matmul
(cuBLAS). The tuned kernels run only on the GPU model they were tuned on (its name and SM count, as
`dispatch.json` records them): a kernel tuned on an H100 can be slower than cuBLAS on an H200.
`use_on_any_hopper()` lifts that (they are right on any sm_90a GPU). A shape whose tuned kernel its run
measured slower than cuBLAS goes to cuBLAS too, unless `use_slower_kernels()`. `path(A, B)` says which
one a call would take, and why; `release()` frees what the tuned kernels hold on the GPU. Needs `cuda-python`
(`cuda.bindings`) for the tuned kernels; without it every call goes to cuBLAS, and `path` says so.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

try:  # the CUDA driver's side: loading the cubins, tensor maps, launches
    from . import tuned_gemm_driver as _driver
except ImportError:  # the folder is on sys.path, not a package
    import tuned_gemm_driver as _driver  # type: ignore[no-redef]

CudaError = _driver.CudaError
"""A CUDA driver call failed (loading a kernel, encoding a tensor map, a launch)."""
HERE = Path(__file__).resolve().parent
TABLE = json.loads((HERE / "dispatch.json").read_text())
KERNELS = {tuple(k["shape"]): k for k in TABLE["kernels"]}
"""(M, N, K) -> the tuned kernel's entry: its cubin, launch (grid, block, cluster, shared memory,
arguments, tensor maps) and the figures it was measured at."""
MAX_CACHED = 256
"""Launchers kept (keyed by the buffers, shapes and stream): a call like one seen before launches with
no check made and no tensor map encoded again."""

_DL_CUDA, _DL_BFLOAT, _DL_UINT = 2, 4, 1


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


class _View:
    """What gemm needs of an operand: address, shape, element strides, dtype, device."""

    __slots__ = ("ptr", "shape", "strides", "bf16", "dtype", "device", "cuda", "owner")

    def __init__(self, x: Any, stream: int | None, name: str) -> None:
        self.owner = x
        mod = type(x).__module__.split(".")[0]
        if mod == "torch":
            import torch

            self.cuda = x.is_cuda
            self.ptr, self.shape, self.strides = x.data_ptr(), tuple(x.shape), tuple(x.stride())
            self.bf16, self.dtype, self.device = x.dtype == torch.bfloat16, str(x.dtype), x.device.index
            return
        if not hasattr(x, "__dlpack__"):
            raise TypeError(f"{name} is a {type(x).__name__}: give a PyTorch tensor, a CuPy array or an array with "
                            "__dlpack__")
        capsule = x.__dlpack__(stream=stream) if stream is not None else x.__dlpack__()
        t = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
        self.cuda = t.device.device_type == _DL_CUDA
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        n = t.ndim
        self.strides = tuple(t.strides[i] for i in range(n)) if t.strides else \
            tuple(int(_driver.prod(self.shape[i + 1:])) for i in range(n))
        self.ptr, self.device = (t.data or 0) + t.byte_offset, t.device.device_id
        code, bits = t.dtype.code, t.dtype.bits
        # CuPy has no bfloat16: its bf16 arrays are uint16 arrays of the same bits
        self.bf16 = bits == 16 and t.dtype.lanes == 1 and (code == _DL_BFLOAT or (code == _DL_UINT and mod == "cupy"))
        kind = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}.get(code, f"type {code}/")
        self.dtype = f"{kind}{bits}" + (" (bf16 bits)" if self.bf16 and code == _DL_UINT else "")


def _current_stream(x: Any) -> int | None:
    mod = type(x).__module__.split(".")[0]
    if mod == "torch":
        import torch

        return torch.cuda.current_stream(x.device).cuda_stream
    if mod == "cupy":
        import cupy

        return cupy.cuda.get_current_stream().ptr
    return None


def _check(a: _View, b: _View, c: _View | None) -> tuple[int, int, int]:
    for v, name in ((a, "A"), (b, "B")):
        if len(v.shape) != 2:
            raise ValueError(f"{name} has {len(v.shape)} dimensions; gemm takes 2-D A (M×K) and B (N×K)")
        if v.strides[1] != 1 or v.strides[0] != v.shape[1]:
            raise ValueError(f"{name} is not row-major contiguous (strides {v.strides}, shape {v.shape}); "
                             "call .contiguous() first")
    (M, K), (N, K2) = a.shape, b.shape
    if K != K2:
        raise ValueError(f"A is {M}×{K} and B is {N}×{K2}: C = A·Bᵀ needs the same K")
    for v, name in ((a, "A"), (b, "B")):
        if not v.bf16:
            raise TypeError(f"{name} is {v.dtype}; gemm takes bfloat16 operands")
        if not v.cuda:
            raise ValueError(f"{name} is not in CUDA device memory")
    if a.device != b.device:
        raise ValueError(f"A is on CUDA device {a.device}, B on {b.device}")
    if c is not None:
        if c.shape != (M, N) or not c.bf16 or c.strides != (N, 1) or not c.cuda:
            raise ValueError(f"out must be a row-major contiguous bfloat16 {M}×{N} array; got {c.dtype} "
                             f"{'×'.join(map(str, c.shape))} with strides {c.strides}")
        if c.device != a.device:
            raise ValueError(f"out is on CUDA device {c.device}, A on {a.device}")
    return M, N, K


def _cublas(A: Any, B: Any, out: Any) -> Any:
    """The framework's own matmul: cuBLAS."""
    mod = type(A).__module__.split(".")[0]
    if mod == "torch":
        import torch

        return torch.matmul(A, B.t(), out=out) if out is not None else torch.matmul(A, B.t())
    if mod == "cupy":
        import cupy

        with cupy.cuda.Device(A.device.id):
            try:  # cupy has no bf16 matmul: through PyTorch's cuBLAS, on the same memory
                import torch
            except ImportError:
                raise TypeError("the cuBLAS fallback for CuPy bf16 arrays goes through PyTorch, which is not "
                                "installed") from None
            a, b = (torch.from_dlpack(x).view(torch.bfloat16) for x in (A, B))
            c = torch.matmul(a, b.t())
            res = cupy.from_dlpack(c.view(torch.int16)).view(cupy.uint16)
            if out is None:
                return res
            out[...] = res
            return out
    raise TypeError(f"{type(A).__name__}: no cuBLAS fallback for this array type (only PyTorch and CuPy)")


_devices: dict[int, _driver.Device] = {}
_missing = ""
_any_hopper = False
_slower_too = False


def _other_gpu(index: int, name: str, sms: int) -> str:
    """'' where device `index` (`name`, `sms` SMs) is the GPU the kernels were tuned on, else why not."""
    tuned = TABLE.get("device")
    if _any_hopper or not tuned or (name == tuned and sms == TABLE.get("sms", sms)):
        return ""
    where = f"{tuned}, {TABLE['sms']} SMs" if TABLE.get("sms") else tuned
    return (f"CUDA device {index} ({name}, {sms} SMs) is not the GPU the kernels were tuned on ({where}); "
            "use_on_any_hopper() runs them anyway")


def use_on_any_hopper(on: bool = True) -> None:
    """Launch the tuned kernels on any sm_90a GPU, not only the model they were tuned on: they compute the
    same product there, at a speed nobody measured."""
    global _any_hopper
    _any_hopper = on
    _launchers.clear()  # the decisions made so far
    for d in _devices.values():
        d.judge()


def _slower(shape: tuple) -> str:
    """'' where the tuned kernel for `shape` measured at least as fast as cuBLAS in its run (or
    use_slower_kernels() is on), else why cuBLAS."""
    e = KERNELS[shape]
    x = e.get("x_cublas")
    if _slower_too or x is None or x >= 1:
        return ""
    return (f"its tuned kernel measured {x:.3f}× cuBLAS (run {e['run']} #{e['seq']}); "
            "use_slower_kernels() runs it anyway")


def use_slower_kernels(on: bool = True) -> None:
    """Launch the tuned kernels also at the shapes where their runs measured them slower than cuBLAS (by
    default those go to cuBLAS)."""
    global _slower_too
    _slower_too = on
    _launchers.clear()  # the decisions made so far


def _device(index: int) -> _driver.Device | None:
    global _missing
    d = _devices.get(index)
    if d is None and not _missing:
        try:
            d = _devices[index] = _driver.Device(index, KERNELS, HERE, _other_gpu)
        except ImportError:
            _missing = "cuda-python (cuda.bindings) is not installed: pip install cuda-python"
    return d


def _route(a: _View, b: _View, c: _View | None, shape: tuple) -> str:
    """'' for the tuned kernel, else why cuBLAS."""
    if shape not in KERNELS:
        return f"{'×'.join(map(str, shape))} was not tuned"
    slower = _slower(shape)
    if slower:
        return slower
    d = _device(a.device)
    if d is None:
        return _missing
    if not d.usable:
        return d.why
    for v, name in ((a, "A"), (b, "B"), *(((c, "out"),) if c is not None else ())):
        if v.ptr % 16:
            return f"{name} is not 16-byte aligned (the tuned kernel's tensor maps need it)"
    return ""


def path(A: Any, B: Any, out: Any = None) -> str:
    """Which implementation gemm(A, B, out) takes, and why: 'tuned: …' or 'cuBLAS: …'."""
    a, b = _View(A, None, "A"), _View(B, None, "B")
    c = _View(out, None, "out") if out is not None else None
    shape = _check(a, b, c)
    why = _route(a, b, c, shape)
    if why:
        return f"cuBLAS: {why}"
    e = KERNELS[shape]
    return f"tuned: {e['family']} (run {e['run']} #{e['seq']}, measured {e['x_cublas']:.3f}× cuBLAS)"


_launchers: dict[tuple, Callable[[], None] | None] = {}
"""What a call on PyTorch tensors does, by everything its checks read (addresses, shapes, strides, dtypes,
devices, the stream): a launcher, or None for cuBLAS. A call like one made before skips the checks."""


def gemm(A: Any, B: Any, out: Any = None, stream: int | None = None) -> Any:
    """C = A·Bᵀ (A: M×K, B: N×K, bf16, row-major): the tuned kernel for a tuned shape, else cuBLAS. With
    `out`, the result is written there (M×N bf16, row-major); `stream` (a CUDA stream handle) defaults
    to the framework's current stream."""
    torch = _torch()
    if torch is not None and type(A) is torch.Tensor and type(B) is torch.Tensor:
        return _gemm_torch(torch, A, B, out, stream)
    stream = _current_stream(A) if stream is None else stream
    a, b = _View(A, stream, "A"), _View(B, stream, "B")
    c = _View(out, stream, "out") if out is not None else None
    shape = _check(a, b, c)
    if _route(a, b, c, shape):
        return _cublas(A, B, out)
    if out is None:
        out = _empty_like(A, shape[0], shape[1])
        c = _View(out, stream, "out")
        if c.ptr % 16:  # allocators hand out aligned blocks; should one not, the answer is still right
            return _cublas(A, B, out)
    _devices[a.device].launcher(shape, a, b, c, stream or 0)()
    return out


def _gemm_torch(torch: ModuleType, A: Any, B: Any, out: Any, stream: int | None) -> Any:
    dev = A.get_device()
    if out is None and dev >= 0 and A.dim() == 2 and B.dim() == 2:
        out = torch.empty((A.shape[0], B.shape[0]), dtype=torch.bfloat16, device=A.device)
    if stream is None:
        stream = torch._C._cuda_getCurrentRawStream(dev) if dev >= 0 else 0
    if out is None:  # a bad argument: the checks below say which
        key = None
    else:
        key = (A.data_ptr(), B.data_ptr(), out.data_ptr(), A.shape, B.shape, out.shape, A.stride(), B.stride(),
               out.stride(), A.dtype, B.dtype, out.dtype, dev, B.get_device(), out.get_device(), stream)
        if key in _launchers:
            if (known := _launchers[key]) is None:
                return _cublas(A, B, out)
            known()
            return out
    a, b = _View(A, stream, "A"), _View(B, stream, "B")
    c = _View(out, stream, "out") if out is not None else None
    shape = _check(a, b, c)
    go = None if _route(a, b, c, shape) else _devices[a.device].launcher(shape, a, b, c, stream)
    if key is not None:
        if len(_launchers) >= MAX_CACHED:
            _launchers.pop(next(iter(_launchers)))
        _launchers[key] = go
    if go is None:
        return _cublas(A, B, out)
    go()
    return out


_torch_module = None


def _torch() -> ModuleType | None:
    """PyTorch, if this process has imported it (a program that uses only CuPy never pays for it)."""
    global _torch_module
    if _torch_module is None:
        import sys

        _torch_module = sys.modules.get("torch")
    return _torch_module


def _empty_like(A: Any, M: int, N: int) -> Any:
    mod = type(A).__module__.split(".")[0]
    if mod == "torch":
        import torch

        return torch.empty((M, N), dtype=torch.bfloat16, device=A.device)
    if mod == "cupy":
        import cupy

        with cupy.cuda.Device(A.device.id):
            return cupy.empty((M, N), dtype=A.dtype)
    raise TypeError(f"{type(A).__name__}: give out= (an M×N bf16 array) for this array type")


def release() -> int:
    """Give back what the tuned kernels hold on the GPUs: the scratch memory some keep (one buffer per shape
    and stream that launched such a kernel) and the loaded cubins, after the work queued on each device is
    done. Returns the bytes of scratch memory freed. A later call loads and allocates again."""
    _launchers.clear()
    return sum(d.release() for d in _devices.values())


def shapes() -> list[tuple[int, int, int]]:
    """The tuned shapes, (M, N, K) each."""
    return sorted(KERNELS)
