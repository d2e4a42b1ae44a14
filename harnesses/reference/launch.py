"""A candidate's kernels loaded from its cubin through the driver API and launched as its plan says,
on buffers the harness owns, and the poison its outputs and scratch start as."""

from __future__ import annotations

import ctypes
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harnesses.reference.inputs import Problem

POISON = {8: 0x7FF5A5A5A5A5A5A5, 4: 0x7FA5A5A5, 2: 0x7FA5, 1: 0xA5}
"""Each output starts as this bit pattern (a NaN for floats): an element that still holds it after a
launch was never written."""


class Refused(Exception):
    """A launch this device cannot run, or a manifest the reference does not match."""


def _check(result):
    from cuda.bindings import driver as cu

    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        raise RuntimeError(name.decode() if name else str(err))
    return rest[0] if len(rest) == 1 else (tuple(rest) if rest else None)


class Candidate:
    """A candidate's cubin and plan, bound to buffers it owns: its outputs and scratch (poisoned before
    every launch) and the problem's inputs and parameters."""

    def __init__(self, problem: Problem, cubin: str, plan: dict, facts: dict) -> None:
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
        dtype = lambda name: getattr(torch, name)  # noqa: E731
        self.outputs = [torch.empty(o["shape"], dtype=dtype(o["dtype"]), device="cuda") for o in plan["outputs"]]
        self.scratch = {s["name"]: torch.empty(s["shape"], dtype=dtype(s["dtype"]), device="cuda")
                        for s in plan["scratch"]}
        self.tensors = {i["name"]: i["tensor"] for i in problem.inputs} | dict(problem.params)
        self.tensors |= {o["name"]: t for o, t in zip(plan["outputs"], self.outputs)} | self.scratch
        self.stream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
        self.packed = [self._pack(launch) for launch in plan["launches"]]

    def _limits(self, f, launch: dict, facts: dict) -> None:
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

    def _pack(self, launch: dict):
        storage = []
        for kind, value in launch["args"]:
            if kind == "tensor":
                storage.append(ctypes.c_void_p(self.tensors[value].data_ptr()))
            else:
                storage.append({"i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float,
                                "f64": ctypes.c_double}[kind](value))
        ptrs = (ctypes.c_void_p * len(storage))(*[ctypes.addressof(s) for s in storage])
        return storage, ptrs

    def poison(self) -> None:
        for t in [*self.outputs, *self.scratch.values()]:
            _poison(self.torch, t)

    def __call__(self) -> None:
        cu = self.cu
        for f, launch, (_, ptrs) in zip(self.funcs, self.plan["launches"], self.packed):
            (gx, gy, gz), (bx, by, bz) = launch["grid"], launch["block"]
            _check(cu.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, launch["smem"], self.stream, ctypes.addressof(ptrs), 0))


def _poison(torch, t) -> None:
    _bits(torch, t).fill_(POISON[t.element_size()])


def _bits(torch, t):
    return t.view({8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[t.element_size()])
