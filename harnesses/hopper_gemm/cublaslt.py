"""cuBLASLt through ctypes: bf16 in and out, fp32 compute, with the algorithm chosen once by timing.

The same product as `gpu.Cublas` (row-major C = A · Bᵀ), but the candidates that
cublasLtMatmulAlgoGetHeuristic proposes are each timed on the real buffers and the fastest is kept,
so the reference is the best cuBLAS offers for the shape rather than its first pick.
Imported only inside the evaluation child, like `gpu.py`.
"""

from __future__ import annotations

import ctypes
import statistics

import cupy as cp

from harnesses.hopper_gemm.gpu import (
    CUBLAS_COMPUTE_32F,
    CUBLAS_OP_N,
    CUBLAS_OP_T,
    CUDA_R_16BF,
    CudaError,
    load_library,
)

# Enum values from cublasLt.h (cublasLtMatmulDescAttributes_t, cublasLtMatmulPreferenceAttributes_t)
# and library_types.h (cudaDataType_t); CUBLAS_OP_* and CUBLAS_COMPUTE_32F (cublas_api.h) come from gpu.py.
CUDA_R_32F = 0
CUBLASLT_MATMUL_DESC_TRANSA = 3  # int32_t
CUBLASLT_MATMUL_DESC_TRANSB = 4  # int32_t
CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1  # uint64_t
CUBLAS_STATUS_SUCCESS = 0


class MatmulAlgo(ctypes.Structure):
    """cublasLtMatmulAlgo_t: opaque, uint64_t data[8]."""

    _fields_ = [("data", ctypes.c_uint64 * 8)]


class HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t."""

    _fields_ = [
        ("algo", MatmulAlgo),
        ("workspaceSize", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("wavesCount", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


assert ctypes.sizeof(MatmulAlgo) == 64
assert ctypes.sizeof(HeuristicResult) == 96
assert HeuristicResult.state.offset == 72 and HeuristicResult.wavesCount.offset == 76


class CublasLt:
    """cuBLASLt matmul, bf16 in and out, fp32 compute, on the given stream, with a timed algorithm choice."""

    def __init__(self, stream: cp.cuda.Stream, workspace_bytes: int = 32 << 20) -> None:
        self.lib = load_library("cublasLt")
        self._prototypes()
        self.stream = stream
        self.handle = ctypes.c_void_p()
        self._ok(self.lib.cublasLtCreate(ctypes.byref(self.handle)), "cublasLtCreate")
        self.workspace_bytes = workspace_bytes
        self.workspace = cp.empty(max(workspace_bytes, 1), dtype=cp.uint8)
        self.alpha, self.beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        vp = ctypes.c_void_p
        self.matmul, self.a_layout, self.b_layout, self.c_layout, self.pref = vp(), vp(), vp(), vp(), vp()
        """The descriptors of the shape set up last (NULL pointers before one is)."""
        self.shape: tuple[int, int, int] | None = None
        self.algo: MatmulAlgo | None = None
        self.choice: dict | None = None

    def _prototypes(self) -> None:
        L, vp, i32, u64, sz = self.lib, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_size_t
        L.cublasLtGetVersion.restype = sz
        L.cublasLtGetVersion.argtypes = []
        L.cublasLtGetStatusName.restype = ctypes.c_char_p
        L.cublasLtGetStatusName.argtypes = [i32]
        L.cublasLtCreate.argtypes = [ctypes.POINTER(vp)]
        L.cublasLtDestroy.argtypes = [vp]
        L.cublasLtMatmulDescCreate.argtypes = [ctypes.POINTER(vp), i32, i32]
        L.cublasLtMatmulDescDestroy.argtypes = [vp]
        L.cublasLtMatmulDescSetAttribute.argtypes = [vp, i32, vp, sz]
        L.cublasLtMatrixLayoutCreate.argtypes = [ctypes.POINTER(vp), i32, u64, u64, ctypes.c_int64]
        L.cublasLtMatrixLayoutDestroy.argtypes = [vp]
        L.cublasLtMatmulPreferenceCreate.argtypes = [ctypes.POINTER(vp)]
        L.cublasLtMatmulPreferenceDestroy.argtypes = [vp]
        L.cublasLtMatmulPreferenceSetAttribute.argtypes = [vp, i32, vp, sz]
        L.cublasLtMatmulAlgoGetHeuristic.argtypes = [vp, vp, vp, vp, vp, vp, vp, i32,
                                                    ctypes.POINTER(HeuristicResult), ctypes.POINTER(i32)]
        L.cublasLtMatmul.argtypes = [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp,
                                     ctypes.POINTER(MatmulAlgo), vp, sz, vp]
        for f in ("cublasLtCreate", "cublasLtDestroy", "cublasLtMatmulDescCreate", "cublasLtMatmulDescDestroy",
                  "cublasLtMatmulDescSetAttribute", "cublasLtMatrixLayoutCreate", "cublasLtMatrixLayoutDestroy",
                  "cublasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceDestroy",
                  "cublasLtMatmulPreferenceSetAttribute", "cublasLtMatmulAlgoGetHeuristic", "cublasLtMatmul"):
            getattr(L, f).restype = i32

    def _ok(self, status: int, what: str) -> None:
        if status != CUBLAS_STATUS_SUCCESS:
            name = self.lib.cublasLtGetStatusName(status)
            raise CudaError(f"{what} failed with cuBLAS status {status} ({name.decode() if name else '?'})")

    @property
    def version(self) -> int:
        return int(self.lib.cublasLtGetVersion())

    @staticmethod
    def _shape_of(A: cp.ndarray, B: cp.ndarray, C: cp.ndarray) -> tuple[int, int, int]:
        M, K = A.shape
        N, KB = B.shape
        if KB != K or C.shape != (M, N):
            raise ValueError(f"shapes do not multiply: A {A.shape}, B {B.shape}, C {C.shape} (want C = A · Bᵀ)")
        for t in (A, B, C):
            if t.dtype != cp.uint16 or not t.flags.c_contiguous:
                raise ValueError("operands must be C-contiguous uint16 arrays of bf16 bits")
        return M, N, K

    def _describe(self, M: int, N: int, K: int) -> None:
        """Descriptors for column-major Cᵀ (N×M) = op_T(B) · A, as in `Cublas.gemm`."""
        self._destroy_descriptors()
        vp = ctypes.c_void_p
        self.matmul, self.a_layout, self.b_layout, self.c_layout, self.pref = vp(), vp(), vp(), vp(), vp()
        L = self.lib
        self._ok(L.cublasLtMatmulDescCreate(ctypes.byref(self.matmul), CUBLAS_COMPUTE_32F, CUDA_R_32F),
                 "cublasLtMatmulDescCreate")
        for attr, op in ((CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T), (CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N)):
            v = ctypes.c_int32(op)
            self._ok(L.cublasLtMatmulDescSetAttribute(self.matmul, attr, ctypes.byref(v), ctypes.sizeof(v)),
                     "cublasLtMatmulDescSetAttribute")
        # Layouts give the stored (pre-op) column-major matrices: Lt's A is our B (K×N, ld K),
        # Lt's B is our A (K×M, ld K), C and D are Cᵀ (N×M, ld N).
        for out, rows, cols, ld in ((self.a_layout, K, N, K), (self.b_layout, K, M, K), (self.c_layout, N, M, N)):
            self._ok(L.cublasLtMatrixLayoutCreate(ctypes.byref(out), CUDA_R_16BF, rows, cols, ld),
                     "cublasLtMatrixLayoutCreate")
        self._ok(L.cublasLtMatmulPreferenceCreate(ctypes.byref(self.pref)), "cublasLtMatmulPreferenceCreate")
        ws = ctypes.c_uint64(self.workspace_bytes)
        self._ok(L.cublasLtMatmulPreferenceSetAttribute(self.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                        ctypes.byref(ws), ctypes.sizeof(ws)),
                 "cublasLtMatmulPreferenceSetAttribute")
        self.shape = (M, N, K)

    def _launch(self, A: cp.ndarray, B: cp.ndarray, C: cp.ndarray, algo: MatmulAlgo) -> int:
        """One cublasLtMatmul; returns its status (D is C, in place)."""
        return self.lib.cublasLtMatmul(
            self.handle, self.matmul, ctypes.addressof(self.alpha),
            B.data.ptr, self.a_layout, A.data.ptr, self.b_layout, ctypes.addressof(self.beta),
            C.data.ptr, self.c_layout, C.data.ptr, self.c_layout, ctypes.byref(algo),
            self.workspace.data.ptr, self.workspace_bytes, self.stream.ptr)

    def _time(self, A: cp.ndarray, B: cp.ndarray, C: cp.ndarray, algo: MatmulAlgo, reps: int,
              warmup: int = 2) -> float | None:
        """Median per-launch milliseconds of one algorithm, or None if it will not launch."""
        for _ in range(warmup):
            if self._launch(A, B, C, algo) != CUBLAS_STATUS_SUCCESS:
                return None
        events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
        for start, end in events:
            start.record(self.stream)
            status = self._launch(A, B, C, algo)
            end.record(self.stream)
            if status != CUBLAS_STATUS_SUCCESS:
                self.stream.synchronize()
                return None
        self.stream.synchronize()
        return statistics.median(cp.cuda.get_elapsed_time(s, e) for s, e in events)

    def _heuristics(self, A: cp.ndarray, B: cp.ndarray, C: cp.ndarray, candidates: int) -> list[HeuristicResult]:
        M, N, K = self._shape_of(A, B, C)
        self._describe(M, N, K)
        results = (HeuristicResult * candidates)()
        returned = ctypes.c_int(0)
        self._ok(self.lib.cublasLtMatmulAlgoGetHeuristic(
            self.handle, self.matmul, self.a_layout, self.b_layout, self.c_layout, self.c_layout, self.pref,
            candidates, results, ctypes.byref(returned)), "cublasLtMatmulAlgoGetHeuristic")
        return list(results)[: returned.value]

    def use(self, A: cp.ndarray, B: cp.ndarray, C: cp.ndarray, index: int, candidates: int = 8) -> dict:
        """Take the heuristic's `index`-th algorithm for this shape (a choice made earlier by `choose`)."""
        results = self._heuristics(A, B, C, candidates)
        if not 0 <= index < len(results):
            raise CudaError(f"cuBLASLt offers {len(results)} algorithms for this shape, not #{index}")
        self.algo = MatmulAlgo.from_buffer_copy(results[index].algo)
        self.choice = choice = {"algo_index": index, "heuristics": len(results), "workspace_bytes": self.workspace_bytes}
        return choice

    def choose(self, A: cp.ndarray, B: cp.ndarray, C: cp.ndarray, candidates: int = 8, reps: int = 20) -> dict:
        """Ask the heuristic for up to `candidates` algorithms, time each on these buffers, keep the fastest."""
        M, N, K = self._shape_of(A, B, C)
        results = self._heuristics(A, B, C, candidates)
        n = len(results)
        ms: dict[int, float] = {}
        for i in range(n):
            r = results[i]
            if r.state != CUBLAS_STATUS_SUCCESS or r.workspaceSize > self.workspace_bytes:
                continue
            t = self._time(A, B, C, r.algo, reps)
            if t is not None:
                ms[i] = t
        if not ms:
            self.algo = self.choice = None
            raise CudaError(f"cuBLASLt: none of the {n} heuristic algorithms launched for M={M} N={N} K={K} "
                            f"with {self.workspace_bytes} bytes of workspace")
        best = min(ms, key=ms.__getitem__)
        self.algo = MatmulAlgo.from_buffer_copy(results[best].algo)
        self.choice = {
            "algo_index": best, "heuristics": n, "workspace_bytes": self.workspace_bytes,
            "algo_workspace_bytes": int(results[best].workspaceSize), "ms": ms,
            "waves": float(results[best].wavesCount),
        }
        return self.choice

    def gemm(self, A: cp.ndarray, B: cp.ndarray, C: cp.ndarray) -> None:
        """Row-major C (M×N) = A (M×K) · Bᵀ (B N×K) with the chosen algorithm (chosen now if not yet)."""
        if self.algo is None:
            self.choose(A, B, C)
        shape = self._shape_of(A, B, C)
        if shape != self.shape or self.algo is None:
            raise ValueError(f"CublasLt was set up for (M, N, K) = {self.shape}, not {shape}; call choose() again")
        self._ok(self._launch(A, B, C, self.algo), "cublasLtMatmul")

    def _destroy_descriptors(self) -> None:
        L = self.lib
        for attr, destroy in (("pref", L.cublasLtMatmulPreferenceDestroy), ("c_layout", L.cublasLtMatrixLayoutDestroy),
                              ("b_layout", L.cublasLtMatrixLayoutDestroy), ("a_layout", L.cublasLtMatrixLayoutDestroy),
                              ("matmul", L.cublasLtMatmulDescDestroy)):
            d = getattr(self, attr, None)
            if d:  # a c_void_p whose value is not NULL
                destroy(d)
            setattr(self, attr, ctypes.c_void_p())
        self.shape = None
        self.algo = None

    def close(self) -> None:
        """Destroy the descriptors and the handle; the object is unusable after."""
        self._destroy_descriptors()
        if getattr(self, "handle", None):
            self.lib.cublasLtDestroy(self.handle)
            self.handle = ctypes.c_void_p()
        self.workspace = None
