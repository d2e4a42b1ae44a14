"""The harness's own kernels (`bench_kernels.cu`) as the evaluation child launches them: input draws and
their checks, output comparison, poison for outputs and for shared memory, the read that leaves L2
clean, the delay and the kernel before a dependent launch."""

from __future__ import annotations

import ctypes
from pathlib import Path

import cupy as cp
from cuda.bindings import driver as cu

from harnesses.hopper_gemm.gpu import check

BF16_NAN = 0xFFFF


class Helpers:
    """The harness's own kernels (bench_kernels.cu): input draws, input checks, output comparison, poison,
    the read that leaves L2 clean, the delay."""

    THREADS = 256

    def __init__(self, cubin: str | Path, stream: cp.cuda.Stream, sms: int) -> None:
        self.module = check(cu.cuModuleLoad(str(cubin).encode()))
        self.fns = {n: check(cu.cuModuleGetFunction(self.module, n.encode()))
                    for n in ("fill", "verify", "poison", "compare", "scrub", "delay", "upstream", "smem_poison",
                                "fill_many", "verify_many")}
        self.sms = sms
        self._smem_set = 0
        self.stream = cu.CUstream(stream.ptr)
        self.blocks = 4 * sms

    def _launch(self, name: str, args: list, blocks: int | None = None, rows: int = 1) -> None:
        ptrs = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        check(cu.cuLaunchKernel(self.fns[name], blocks or self.blocks, rows, 1, self.THREADS, 1, 1, 0, self.stream,
                                ctypes.addressof(ptrs), 0))

    def fill_many(self, jobs: int, count: int, base: int, dist: int, blocks: int) -> None:
        """Every buffer of `count` jobs (a device table of bench_kernels.cu's Job, at address `jobs`) drawn
        from `base` (or poisoned), `blocks` blocks a job."""
        self._launch("fill_many", [ctypes.c_void_p(jobs), ctypes.c_uint64(base), ctypes.c_int(dist)], blocks, count)

    def verify_many(self, jobs: int, count: int, base: int, dist: int, stats: int, blocks: int) -> None:
        """The buffers of `count` jobs checked against what fill_many drew from `base`, each job's mismatches
        counted at its row and column of the stats table at address `stats`."""
        self._launch("verify_many", [ctypes.c_void_p(jobs), ctypes.c_uint64(base), ctypes.c_int(dist),
                                     ctypes.c_void_p(stats)], blocks, count)

    def fill(self, out: cp.ndarray, seed: int, dist: int, flip: bool) -> None:
        u64 = ctypes.c_uint64
        self._launch("fill", [ctypes.c_void_p(out.data.ptr), u64(out.size), u64(seed), ctypes.c_int(dist),
                              u64(out.shape[1]), ctypes.c_int(int(flip))])

    def verify(self, data: cp.ndarray, seed: int, dist: int, flip: bool, counter: int) -> None:
        u64 = ctypes.c_uint64
        self._launch("verify", [ctypes.c_void_p(data.data.ptr), u64(data.size), u64(seed), ctypes.c_int(dist),
                                u64(data.shape[1]), ctypes.c_int(int(flip)), ctypes.c_void_p(counter)])

    def poison(self, out: cp.ndarray) -> None:
        self._launch("poison", [ctypes.c_void_p(out.data.ptr), ctypes.c_uint64(out.size // 2)])
        if out.size % 2:
            out.ravel()[-1] = BF16_NAN

    def compare(self, c: cp.ndarray, ref: cp.ndarray, stats: int) -> None:
        self._launch("compare", [ctypes.c_void_p(c.data.ptr), ctypes.c_void_p(ref.data.ptr),
                                 ctypes.c_uint64(c.size), ctypes.c_void_p(stats)])

    def scrub(self, data: cp.ndarray, sink: cp.ndarray) -> None:
        """Read `data` (zeros, a multiple of 16 bytes) end to end; `sink` is never written."""
        self._launch("scrub", [ctypes.c_void_p(data.data.ptr), ctypes.c_uint64(data.nbytes // 16),
                               ctypes.c_void_p(sink.data.ptr)])

    def smem_poison(self, smem_bytes: int) -> None:
        """Every SM's shared memory to 0xFF bytes (NaN): one block an SM, each with `smem_bytes`."""
        f = self.fns["smem_poison"]
        if self._smem_set != smem_bytes:
            check(cu.cuFuncSetAttribute(f, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        smem_bytes))
            self._smem_set = smem_bytes
        args = [ctypes.c_uint32(smem_bytes // 4)]
        ptrs = (ctypes.c_void_p * 1)(ctypes.addressof(args[0]))
        check(cu.cuLaunchKernel(f, self.sms, 1, 1, 1024, 1, 1, smem_bytes, self.stream, ctypes.addressof(ptrs), 0))

    def delay(self, seconds: float) -> None:
        self._launch("delay", [ctypes.c_uint64(int(seconds * 1e9))], blocks=1)

    def upstream(self, go: int, epoch: int, a_src: cp.ndarray, a: cp.ndarray, b_src: cp.ndarray, b: cp.ndarray,
                 c: cp.ndarray, seconds: float, blocks: int) -> None:
        """The kernel before a dependent launch: lets it start, waits for the host to write `epoch` into
        the mapped word at `go` (once it has queued that launch), waits `seconds` more, then copies the
        inputs into a and b and poisons c. `blocks` few, so the dependent kernel's blocks find SMs free."""
        p, u32, u64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64
        self._launch("upstream", [p(go), u32(epoch), p(a_src.data.ptr), p(a.data.ptr), u64(a.size), p(b_src.data.ptr),
                                  p(b.data.ptr), u64(b.size), p(c.data.ptr), u64(c.size), u64(int(seconds * 1e9))],
                     blocks=blocks)
