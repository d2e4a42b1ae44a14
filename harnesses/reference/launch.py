"""A candidate's kernels loaded from its cubin through the driver API and launched as its plan says,
on buffers the harness owns, and the poison its outputs and scratch start as.

Every buffer a candidate can reach is an `Arena`'s: one allocation that holds the buffers between
guard zones (autodiscovery/toolkit/guard.py), so the bytes next to each buffer are the harness's, never
another live tensor that a caching allocator placed there. Under compute-sanitizer the buffers are
allocations of their own instead (`guarded=False`), so that its memory checker sees their bounds."""

from __future__ import annotations

import ctypes
import math
from types import ModuleType
from typing import TYPE_CHECKING, Any

from autodiscovery.toolkit import guard

if TYPE_CHECKING:
    import torch

    from harnesses.reference.inputs import Problem

POISON = {8: 0x7FF5A5A5A5A5A5A5, 4: 0x7FA5A5A5, 2: 0x7FA5, 1: 0xA5}
"""Each output starts as this bit pattern (a NaN for floats): an element that still holds it after a
launch was never written."""


class Refused(Exception):
    """A launch this device cannot run, or a manifest the reference does not match."""


def _check(result: Any) -> Any:
    from cuda.bindings import driver as cu

    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        raise RuntimeError(name.decode() if name else str(err))
    return rest[0] if len(rest) == 1 else (tuple(rest) if rest else None)


class Arena:
    """Named tensors in one allocation, each between guard zones; `arm` fills the zones with a pattern
    drawn afresh, `breaches` says which zones no longer hold it."""

    def __init__(self, torch: ModuleType, specs: list[tuple[str, list[int], object]]) -> None:
        self.torch = torch
        sizes = [(name, math.prod(shape) * torch.empty((), dtype=dtype).element_size()) for name, shape, dtype in specs]
        total, self.slots = guard.layout(sizes)
        self.raw = torch.empty(max(total, 1), dtype=torch.uint8, device="cuda")
        self.tensors = {s.name: self.raw[s.start:s.end].view(dtype).view(shape)
                        for s, (_, shape, dtype) in zip(self.slots, specs)}
        spans = [torch.arange(lo, hi, device="cuda") for _, _, lo, hi in guard.zones(self.slots)]
        self.index = torch.cat(spans) if spans else torch.empty(0, dtype=torch.int64, device="cuda")
        self.pattern = torch.empty(0, dtype=torch.uint8, device="cuda")

    def arm(self, gen: torch.Generator) -> None:
        """A fresh pattern in every zone (bytes 1-255: a write of zeros always shows)."""
        self.pattern = self.torch.randint(1, 256, (self.index.numel(),), generator=gen, dtype=self.torch.uint8,
                                          device="cuda")
        self.raw[self.index] = self.pattern

    def breaches(self) -> list[str]:
        """Each zone written since `arm`, in words (empty: none)."""
        changed = (self.raw[self.index] != self.pattern).nonzero().flatten()
        if not changed.numel():
            return []
        return guard.findings(self.slots, self.index[changed].tolist())


class Candidate:
    """A candidate's cubin and plan, bound to buffers it owns: its outputs and scratch (poisoned before
    every launch, in an arena of their own where `guarded`) and the inputs and parameters it is `given`."""

    def __init__(self, problem: Problem, cubin: str, plan: dict, facts: dict, given: dict,
                 guarded: bool = True) -> None:
        from cuda.bindings import driver as cu

        torch = problem.torch
        self.cu, self.torch, self.problem, self.plan = cu, torch, problem, plan
        self.module = _check(cu.cuModuleLoad(cubin.encode()))
        self.funcs = []
        for launch in plan["launches"]:
            try:
                f = _check(cu.cuModuleGetFunction(self.module, launch["kernel"].encode()))
            except RuntimeError:
                raise Refused(f"the cubin has no kernel named '{launch['kernel']}' (extern \"C\" __global__)") from None
            self._limits(f, launch, facts)
            self.funcs.append(f)
        self._buffers(plan, given, guarded)
        self.stream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
        self.packed = [self._pack(launch) for launch in plan["launches"]]

    def _buffers(self, plan: dict, given: dict, guarded: bool) -> None:
        """Its outputs and scratch, in an arena of their own where `guarded`, beside what it is given."""
        torch = self.torch
        dtype = lambda name: getattr(torch, name)  # noqa: E731
        specs = [(t["name"], t["shape"], dtype(t["dtype"])) for t in [*plan["outputs"], *plan["scratch"]]]
        self.arena = Arena(torch, specs) if guarded else None
        made = self.arena.tensors if self.arena is not None else \
            {n: torch.empty(shape, dtype=d, device="cuda") for n, shape, d in specs}
        self.outputs = [made[o["name"]] for o in plan["outputs"]]
        self.scratch = {s["name"]: made[s["name"]] for s in plan["scratch"]}
        self.tensors = dict(given) | made

    def _limits(self, f: Any, launch: dict, facts: dict) -> None:
        cu = self.cu
        a = lambda n: _check(cu.cuFuncGetAttribute(getattr(cu.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{n}"), f))  # noqa: E731
        threads = math.prod(launch["block"])
        most, regs, static = a("MAX_THREADS_PER_BLOCK"), a("NUM_REGS"), a("SHARED_SIZE_BYTES")
        if threads > most:
            raise Refused(f"{launch['kernel']}: a block of {threads} threads, but with {regs} registers a thread it "
                          f"can run at most {most}")
        if static + launch["smem"] > facts["smem_per_block"]:
            raise Refused(f"{launch['kernel']}: {static} B static + {launch['smem']} B dynamic shared memory exceed the "
                          f"{facts['smem_per_block']} B a block may have")
        for axis, (g, largest) in enumerate(zip(launch["grid"], (2**31 - 1, 65535, 65535))):
            if g > largest:
                raise Refused(f"{launch['kernel']}: grid dimension {'xyz'[axis]} = {g} exceeds {largest}")
        for axis, (b, largest) in enumerate(zip(launch["block"], (1024, 1024, 64))):
            if b > largest:
                raise Refused(f"{launch['kernel']}: block dimension {'xyz'[axis]} = {b} exceeds {largest}")
        if launch["smem"] > 48 * 1024:
            _check(cu.cuFuncSetAttribute(f, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         launch["smem"]))

    def _pack(self, launch: dict) -> tuple[list[ctypes._SimpleCData], ctypes.Array[ctypes.c_void_p]]:
        storage: list[ctypes._SimpleCData] = []
        for kind, value in launch["args"]:
            if kind == "tensor":
                storage.append(ctypes.c_void_p(self.tensors[value].data_ptr()))
            else:
                scalars: dict[str, type[ctypes._SimpleCData]] = {"i32": ctypes.c_int32, "i64": ctypes.c_int64,
                                                                 "f32": ctypes.c_float, "f64": ctypes.c_double}
                storage.append(scalars[kind](value))
        ptrs = (ctypes.c_void_p * len(storage))(*[ctypes.addressof(s) for s in storage])
        return storage, ptrs

    def poison(self, gen: torch.Generator | None = None) -> None:
        """Outputs and scratch to the poison; with `gen`, the guard zones around them armed afresh."""
        for t in [*self.outputs, *self.scratch.values()]:
            _poison(self.torch, t)
        if gen is not None and self.arena is not None:
            self.arena.arm(gen)

    def __call__(self) -> None:
        cu = self.cu
        for f, launch, (_, ptrs) in zip(self.funcs, self.plan["launches"], self.packed):
            (gx, gy, gz), (bx, by, bz) = launch["grid"], launch["block"]
            _check(cu.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, launch["smem"], self.stream, ctypes.addressof(ptrs), 0))


class TritonCandidate(Candidate):
    """A Triton candidate: its file (checked again by the static rule before it is imported) and plan,
    bound to buffers as a CUDA candidate's are; each launch calls the @triton.jit function with the
    tensors and sizes its plan names, its constexprs, `num_warps` and `num_stages`, on the current stream
    (Triton compiles each kernel on its first launch, which the gate's first draw makes)."""

    def __init__(self, problem: Problem, path: str, plan: dict, facts: dict, given: dict,
                 guarded: bool = True) -> None:
        import importlib.util

        from autodiscovery.toolkit import triton_rule

        torch = problem.torch
        self.torch, self.problem, self.plan = torch, problem, plan
        if importlib.util.find_spec("triton") is None:
            raise Refused("Triton is not installed on this machine (pip install 'autodiscovery[triton]'): a Triton "
                          "candidate cannot run here")
        try:
            module = triton_rule.load(path)
        except triton_rule.RefusedTriton as exc:
            raise Refused(str(exc)) from None
        self.kernels = []
        for launch in plan["launches"]:
            fn = getattr(module, launch["kernel"], None)
            if fn is None:
                raise Refused(f"the Triton file has no @triton.jit function named '{launch['kernel']}'")
            self.kernels.append(fn)
        self._buffers(plan, given, guarded)
        from cuda.bindings import driver as cu

        self.stream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
        for fn, launch in zip(self.kernels, plan["launches"]):  # compiled now, not inside a timed launch
            try:
                fn.warmup(*self._args(launch), grid=tuple(launch["grid"]), **launch["constexprs"],
                          num_warps=launch["num_warps"], num_stages=launch["num_stages"])
            except Exception as exc:  # the candidate's own code: Triton refuses to compile it
                raise Refused(f"Triton could not compile {launch['kernel']}: {type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:300]}") from None

    def _args(self, launch: dict) -> list:
        return [self.tensors[value] if kind == "tensor" else value for kind, value in launch["args"]]

    def __call__(self) -> None:
        for fn, launch in zip(self.kernels, self.plan["launches"]):
            fn[tuple(launch["grid"])](*self._args(launch), **launch["constexprs"], num_warps=launch["num_warps"],
                                      num_stages=launch["num_stages"])


def bind(problem: Problem, artifact: str, plan: dict, facts: dict, given: dict, guarded: bool = True) -> Candidate:
    """The candidate an artifact and plan make: a cubin's kernels, or a Triton file's."""
    kind = TritonCandidate if plan.get("language") == "triton" else Candidate
    return kind(problem, artifact, plan, facts, given, guarded)


def _poison(torch: ModuleType, t: torch.Tensor) -> None:
    _bits(torch, t).fill_(POISON[t.element_size()])


def _bits(torch: ModuleType, t: torch.Tensor) -> torch.Tensor:
    return t.view({8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[t.element_size()])
