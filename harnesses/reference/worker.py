"""Evaluation child of the reference harness: `python -m harnesses.reference.worker JOB.json RESULT.json`.

It imports the user's problem (PyTorch), builds the reference, and runs one job:
- `probe`: what the problem is (inputs, parameters, outputs, sizes, bytes and FLOPs, the machine's
  bandwidth and peak), for the parent, which imports no PyTorch;
- `benchmark`: the gate, then timing interleaved with the reference in eager mode and compiled;
- `head_to_head`: two candidates gated, then timed against each other;
- `replay`: several candidates, each gated and timed as in `benchmark`.

Every launch of a candidate, gated or timed, is prepared the same way: its inputs hold content drawn
for it alone (from one of the distributions the reference stays finite on), its outputs and scratch
buffers start poisoned, and L2 is flushed. After it, untimed: its inputs and the reference's parameters
are checked unchanged, and the reference runs on the same inputs (after the candidate, so its answer
cannot be read) and each output is compared with it. A time under the problem's roofline floor is a
fooled measurement, never a result.
"""

from __future__ import annotations

import ctypes
import importlib.util
import inspect
import json
import math
import os
import sys
import time
import traceback

T0 = time.perf_counter()
FLOAT = ("float64", "float32", "float16", "bfloat16")
POISON = {8: 0x7FF5A5A5A5A5A5A5, 4: 0x7FA5A5A5, 2: 0x7FA5, 1: 0xA5}
"""Each output starts as this bit pattern (a NaN for floats): an element that still holds it after a
launch was never written."""
DISTRIBUTIONS = ("own", "normal", "uniform", "wide", "offset", "ties")


class ProblemFailure(Exception):
    """The problem itself fails (its file, its Model, its inputs): nothing a candidate did."""


class Refused(Exception):
    """A launch this device cannot run, or a manifest the reference does not match."""


class Incorrect(Exception):
    pass


# ---- the problem ------------------------------------------------------------------------------
class Problem:
    """The user's module, built on the GPU: the model, its inputs' shapes and how to draw them."""

    def __init__(self, job: dict) -> None:
        import torch

        self.torch = torch
        self.path = job["problem"]["path"]
        name = os.path.basename(self.path)
        self.name = name
        spec = importlib.util.spec_from_file_location("autodiscovery_problem", self.path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise ProblemFailure(f"{name}: importing it raised {type(exc).__name__}: {_one(exc)}") from None
        for k, v in job["problem"].get("sizes", {}).items():
            setattr(module, k, v)
        self.module = module
        self.dtype = getattr(torch, job["problem"]["dtype"]) if job["problem"].get("dtype") else None
        torch.manual_seed(job.get("seed", 0))
        self.device = torch.device("cuda")
        try:
            init = list(module.get_init_inputs())
        except Exception as exc:
            raise ProblemFailure(f"{name}: get_init_inputs() raised {type(exc).__name__}: {_one(exc)}") from None
        try:
            model = module.Model(*init)
        except Exception as exc:
            raise ProblemFailure(f"{name}: Model(*get_init_inputs()) raised {type(exc).__name__}: {_one(exc)}") from None
        self.model = model.to(self.device).eval()
        if self.dtype is not None:
            self.model = self.model.to(self.dtype)
        try:
            sample = module.get_inputs()
        except Exception as exc:
            raise ProblemFailure(f"{name}: get_inputs() raised {type(exc).__name__}: {_one(exc)}") from None
        if not isinstance(sample, (list, tuple)) or not sample:
            raise ProblemFailure(f"{name}: get_inputs() returned {type(sample).__name__}, not a list of tensors")
        for i, x in enumerate(sample):
            if not isinstance(x, torch.Tensor):
                raise ProblemFailure(f"{name}: get_inputs() returned a {type(x).__name__} at position {i}: "
                                     "the inputs must be tensors")
        names = self._names(len(sample))
        self.inputs = []
        for n, x in zip(names, sample):
            x = x.to(self.device)
            if self.dtype is not None and x.is_floating_point():
                x = x.to(self.dtype)
            self.inputs.append({"name": n, "tensor": x.contiguous(), **self._stats(x)})
        named = dict(self.model.named_parameters()) | dict(self.model.named_buffers())
        self.params = {k: v.detach() for k, v in named.items()}
        """The module's parameters and buffers (non-persistent ones too), by name: arguments a kernel may
        take, checked unchanged after every launch."""

    def _names(self, n: int) -> list[str]:
        try:
            ps = list(inspect.signature(self.model.forward).parameters.values())
        except (TypeError, ValueError):
            ps = []
        if len(ps) == n and all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in ps):
            return [p.name for p in ps]
        return [f"input{i}" for i in range(n)]

    def _stats(self, x) -> dict:
        torch = self.torch
        kind = "float" if x.is_floating_point() else "bool" if x.dtype == torch.bool else "int"
        out = {"shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch."), "kind": kind}
        if x.numel():
            v = x.double() if kind != "bool" else x.to(torch.float64)
            out |= {"low": float(v.min()), "high": float(v.max()), "mean": float(v.mean()),
                    "std": float(v.std()) if x.numel() > 1 else 0.0}
        return out

    def forward(self, tensors: list):
        with self.torch.no_grad():
            out = self.model(*tensors)
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def fill(self, x, spec: dict, dist: str, gen) -> None:
        """Draw fresh content into input `x` (in place) from `dist`, in its shape and dtype."""
        torch = self.torch
        if spec["kind"] == "bool":
            x.copy_(torch.randint(0, 2, x.shape, generator=gen, device=x.device).bool())
            return
        if spec["kind"] == "int":
            lo, hi = int(spec.get("low", 0)), int(spec.get("high", 1))
            x.copy_(torch.randint(lo, hi + 1, x.shape, generator=gen, device=x.device, dtype=x.dtype))
            return
        if dist == "own":  # the problem's own distribution, by its sample's moments: fresh content
            if spec.get("low", 0.0) >= 0.0:
                x.uniform_(spec.get("low", 0.0), max(spec.get("high", 1.0), spec.get("low", 0.0) + 1e-6), generator=gen)
            else:
                x.normal_(spec.get("mean", 0.0), spec.get("std", 1.0) or 1.0, generator=gen)
        elif dist == "normal":
            x.normal_(0.0, 1.0, generator=gen)
        elif dist == "uniform":
            x.uniform_(-1.0, 1.0, generator=gen)
        elif dist == "wide":  # exponents spread over 2^±e: sums of lost magnitudes, overflow in low precision
            e = 4.0 if x.dtype == torch.float16 else 8.0
            scale = torch.empty(x.shape, device=x.device, dtype=torch.float32).uniform_(-e, e, generator=gen)
            x.copy_(torch.randn(x.shape, generator=gen, device=x.device) * torch.exp2(scale))
        elif dist == "offset":  # a large common offset: cancellation, and exp() of large values
            x.normal_(0.0, 1.0, generator=gen).add_(100.0)
        elif dist == "ties":  # few distinct values: ties for max/argmax, exact sums
            x.copy_(torch.randint(-1, 3, x.shape, generator=gen, device=x.device).to(x.dtype))
        else:
            raise ValueError(dist)


def _one(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


# ---- the machine --------------------------------------------------------------------------------
def machine() -> dict:
    """The device's name, SMs, L2, bandwidth and peaks, from the driver."""
    import torch
    from cuda.bindings import driver as cu

    cu.cuInit(0)
    dev = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(dev)

    def attr(name: str) -> int:
        err, v = cu.cuDeviceGetAttribute(getattr(cu.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"), dev)
        return int(v)

    mem_khz, bus_bits, sm_khz = attr("MEMORY_CLOCK_RATE"), attr("GLOBAL_MEMORY_BUS_WIDTH"), attr("CLOCK_RATE")
    sms = props.multi_processor_count
    clock_hz = sm_khz * 1e3
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(dev)
        clock_hz = max(clock_hz, pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM) * 1e6)
    except Exception:
        pass
    return {"gpu": props.name, "sms": sms, "cc": f"{props.major}.{props.minor}", "l2_bytes": props.L2_cache_size,
            "memory_bytes": props.total_memory, "smem_per_block": attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            "max_sm_clock_mhz": clock_hz / 1e6,
            "peak_gbps": 2 * mem_khz * 1e3 * bus_bits / 8 / 1e9,
            # dense tensor-core FLOPs per SM per clock on Hopper: 4096 for 16-bit types, 2048 for tf32, and
            # 256 for fp32 FMA on the CUDA cores (fp64: 128)
            "peak_tflops": {"float16": sms * clock_hz * 4096 / 1e12, "bfloat16": sms * clock_hz * 4096 / 1e12,
                            "float32": sms * clock_hz * 2048 / 1e12, "float64": sms * clock_hz * 128 / 1e12},
            "torch": torch.__version__, "cuda_runtime": torch.version.cuda}


def work(problem: Problem) -> dict:
    """The least the problem must move and compute: every input, parameter and output once; the FLOPs
    PyTorch counts for its forward (matrix products and convolutions)."""
    torch = problem.torch
    tensors = [i["tensor"] for i in problem.inputs]
    outs = problem.forward(tensors)
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            raise ProblemFailure(f"{problem.name}: forward() returned a {type(o).__name__} at position {i}: "
                                 "the outputs must be tensors")
    flops = 0
    try:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            problem.forward(tensors)
        flops = int(counter.get_total_flops())
    except Exception:
        pass
    size = lambda t: t.numel() * t.element_size()  # noqa: E731
    read = sum(size(t) for t in tensors) + sum(size(p) for p in problem.params.values())
    written = sum(size(o) for o in outs)
    dtypes = {str(t.dtype).removeprefix("torch.") for t in [*tensors, *outs] if t.is_floating_point()}
    return {"outputs": [{"shape": list(o.shape), "dtype": str(o.dtype).removeprefix("torch.")} for o in outs],
            "bytes_read": read, "bytes_written": written, "flops": flops,
            "compute_dtype": min(dtypes, key=lambda d: FLOAT.index(d) if d in FLOAT else 9) if dtypes else "float32"}


def probe(job: dict) -> dict:
    import torch

    torch.cuda.init()
    free_before, _ = torch.cuda.mem_get_info()
    problem = Problem(job)
    facts = machine() | work(problem)
    facts |= {"inputs": [{k: v for k, v in i.items() if k != "tensor"} for i in problem.inputs],
              "params": [{"name": k, "shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")}
                         for k, v in problem.params.items()],
              "sizes": {k: v for k, v in vars(problem.module).items() if type(v) is int and not k.startswith("_")},
              "dists": finite_dists(problem)}
    need = 4 * (facts["bytes_read"] + facts["bytes_written"])
    free = free_before
    if need > free:
        raise ProblemFailure(f"{problem.name}: these sizes need about {need / 2**30:.1f} GiB of GPU memory for the "
                             f"inputs, outputs and their copies, {free / 2**30:.1f} GiB are free: choose smaller sizes")
    return facts


def finite_dists(problem: Problem) -> list[str]:
    """The distributions the reference stays finite on (a problem defined on positive inputs, say, keeps
    only those), each tried on draws that no candidate will see."""
    torch = problem.torch
    gen = torch.Generator(device="cuda")
    gen.manual_seed(12345)
    kept = []
    for dist in DISTRIBUTIONS:
        tensors = [torch.empty_like(i["tensor"]) for i in problem.inputs]
        for t, spec in zip(tensors, problem.inputs):
            problem.fill(t, spec, dist, gen)
        outs = problem.forward(tensors)
        if all(not o.is_floating_point() or bool(torch.isfinite(o).all()) for o in outs):
            kept.append(dist)
    if not kept:
        raise ProblemFailure(f"{problem.name}: the reference gives non-finite outputs on every input distribution")
    return kept


# ---- the candidate's kernels ----------------------------------------------------------------------
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


# ---- the gate and the timing ------------------------------------------------------------------------
class Bench:
    def __init__(self, job: dict) -> None:
        import torch

        self.torch = torch
        self.job, self.s = job, job["settings"]
        self.problem = Problem(job)
        self.facts = job["facts"]
        self.dists = [d for d in self.facts["dists"] if d in DISTRIBUTIONS]
        self.gen = torch.Generator(device="cuda")
        self.gen.manual_seed(int.from_bytes(os.urandom(6), "little"))
        self.flush = torch.empty(2 * self.facts["l2_bytes"], dtype=torch.uint8, device="cuda")
        # The parameters as they must stay, on the host: no kernel can reach (and rewrite) this copy.
        self.params0 = {k: v.cpu() for k, v in self.problem.params.items()}
        self.tolerance = {**TOLERANCE_DEFAULT, **self.s.get("tolerance", {})}
        self.compiled = None
        self.checked = 0
        self.worst: dict[str, float] = {}

    # one launch, prepared as every launch is --------------------------------------------------
    def draw(self, dist: str):
        """Fresh content in the inputs; returns the generator's state before the draw (on the host), from
        which the same content can be drawn again."""
        state = self.gen.get_state()
        for spec in self.problem.inputs:
            self.problem.fill(spec["tensor"], spec, dist, self.gen)
        return state

    def redraw(self, state, dist: str) -> list:
        """The inputs of a draw made again into new tensors, allocated after the candidate ran: what the
        inputs must still hold, and what the reference computes on (no copy a kernel could rewrite)."""
        after = self.gen.get_state()
        self.gen.set_state(state)
        tensors = [self.torch.empty_like(i["tensor"]) for i in self.problem.inputs]
        for t, spec in zip(tensors, self.problem.inputs):
            self.problem.fill(t, spec, dist, self.gen)
        self.gen.set_state(after)
        return tensors

    def run_candidate(self, cand: Candidate, dist: str, time_it: bool) -> float | None:
        torch = self.torch
        state = self.draw(dist)
        cand.poison()
        self.flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        cand()
        end.record()
        torch.cuda.synchronize()
        self.verify(cand, self.redraw(state, dist), dist)
        return start.elapsed_time(end) if time_it else None

    def run_reference(self, which: str, dist: str) -> float:
        torch = self.torch
        self.draw(dist)
        tensors = [i["tensor"] for i in self.problem.inputs]
        fn = self.problem.model if which == "eager" else self.compiled
        self.flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.no_grad():
            start.record()
            fn(*tensors)
            end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    def verify(self, cand: Candidate, drawn: list, dist: str) -> None:
        """Inputs and parameters unchanged; every output as the reference computes it, now, on the inputs
        drawn again."""
        torch = self.torch
        for spec, again in zip(self.problem.inputs, drawn):
            if not torch.equal(_bits(torch, spec["tensor"]), _bits(torch, again)):
                raise Incorrect(f"input '{spec['name']}' was changed by the kernel ({dist} draw)")
        for k, v in self.problem.params.items():
            if not torch.equal(_bits(torch, v.cpu()), _bits(torch, self.params0[k])):
                raise Incorrect(f"parameter '{k}' was changed by the kernel")
        refs = self.problem.forward(drawn)
        for spec, out, ref in zip(cand.plan["outputs"], cand.outputs, refs):
            compare(torch, spec["name"], out, ref, self.tolerance, dist, self.worst)
        self.checked += 1

    def compile(self) -> str:
        """torch.compile of the reference, warmed; '' or why it could not be had."""
        if not self.s.get("compile", True):
            return "not asked for (harness.compile false)"
        try:
            self.compiled = self.torch.compile(self.problem.model)
            with self.torch.no_grad():
                for _ in range(2):
                    self.compiled(*[i["tensor"] for i in self.problem.inputs])
            self.torch.cuda.synchronize()
            return ""
        except Exception as exc:  # its absence is stated with every result; the candidate is not at fault
            self.compiled = None
            return f"torch.compile failed: {type(exc).__name__}: {_one(exc)}"

    # the jobs ------------------------------------------------------------------------------------
    def gate(self, cand: Candidate) -> None:
        for i in range(self.s["gate_draws"]):
            self.run_candidate(cand, self.dists[i % len(self.dists)], time_it=False)

    def benchmark(self, cand: Candidate) -> dict:
        from autodiscovery.toolkit.stats import summarize_ratio

        self.gate(cand)
        timed = self.dists[0]
        for _ in range(2):  # warm: module load, first launches
            self.run_candidate(cand, timed, time_it=False)
            self.run_reference("eager", timed)
        once = self.run_reference("eager", timed) / 1e3
        pairs = max(5, min(self.s["pairs"], int(self.s["timing_budget_s"] / max(once * 4, 1e-6))))
        ms = {"candidate": [], "eager": [], "compile": []}
        for i in range(pairs):
            order = ["candidate", "eager", "compile"] if i % 2 == 0 else ["compile", "eager", "candidate"]
            for who in order:
                if who == "candidate":
                    ms["candidate"].append(self.run_candidate(cand, timed, time_it=True))
                elif who == "eager" or self.compiled is not None:
                    ms[who].append(self.run_reference(who, timed))
        out = {"ms": {k: _median(v) for k, v in ms.items() if v}, "pairs": pairs, "timed_dist": timed}
        out["speedup"] = {k: summarize_ratio([r / c for r, c in zip(ms[k], ms["candidate"])], self.s["confidence"])
                          for k in ("eager", "compile") if ms[k]}
        out |= roofline(self.facts, out["ms"]["candidate"] / 1e3)
        return out

    def head_to_head(self, challenger: Candidate, incumbent: Candidate) -> dict:
        from autodiscovery.toolkit.stats import summarize_ratio

        self.gate(challenger)
        self.gate(incumbent)
        timed = self.dists[0]
        ratios = []
        for i in range(self.s["pairs"]):
            a, b = (challenger, incumbent) if i % 2 == 0 else (incumbent, challenger)
            ta = self.run_candidate(a, timed, time_it=True)
            tb = self.run_candidate(b, timed, time_it=True)
            t_ch, t_inc = (ta, tb) if a is challenger else (tb, ta)
            ratios.append(t_inc / t_ch)
        return {"ratio": summarize_ratio(ratios, self.s["confidence"])}


TOLERANCE_DEFAULT = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}


CHUNK = 1 << 25
"""Elements compared at a time: the comparison's float64 copies stay small whatever the output's size."""


def compare(torch, name: str, out, ref, tolerance: dict, dist: str, worst: dict) -> None:
    """One output against the reference's: no element unwritten, integers equal, floats within the
    relative error of their dtype (and no element far off), non-finite values where the reference has them."""
    dtype = str(ref.dtype).removeprefix("torch.")
    if out.shape != ref.shape:
        raise Incorrect(f"output '{name}': shape {list(out.shape)}, the reference's is {list(ref.shape)}")
    o_all, r_all, bits = out.reshape(-1), ref.reshape(-1), _bits(torch, out).reshape(-1)
    n = r_all.numel()
    if not ref.is_floating_point():
        bad = unwritten = 0
        for i in range(0, n, CHUNK):
            bad += int((o_all[i:i + CHUNK] != r_all[i:i + CHUNK]).sum())
            unwritten += int((bits[i:i + CHUNK] == POISON[out.element_size()]).sum())
        if bad:
            raise Incorrect(f"output '{name}': {bad} of {n} elements differ from the reference "
                            f"({unwritten} unwritten; {dist} draw)")
        return
    unwritten = nonfinite = mismatched = 0
    err2 = ref2 = far = peak = 0.0
    for i in range(0, n, CHUNK):
        o, r, b = o_all[i:i + CHUNK], r_all[i:i + CHUNK], bits[i:i + CHUNK]
        finite = torch.isfinite(r)
        unwritten += int(((b == POISON[out.element_size()]) & finite).sum())
        nonfinite += int((~torch.isfinite(o) & finite).sum())
        if not bool(finite.all()):
            same = (o[~finite] == r[~finite]) | (torch.isnan(o[~finite]) & torch.isnan(r[~finite]))
            mismatched += int((~same).sum())
        rf = torch.where(finite, r, torch.zeros_like(r)).double()
        d = torch.where(finite, o, torch.zeros_like(o)).double() - rf
        d = torch.nan_to_num(d, nan=0.0, posinf=0.0, neginf=0.0)
        err2 += float((d * d).sum())
        ref2 += float((rf * rf).sum())
        far = max(far, float(d.abs().max())) if d.numel() else far
        peak = max(peak, float(rf.abs().max())) if rf.numel() else peak
    if unwritten:
        raise Incorrect(f"output '{name}': {unwritten} of {n} elements unwritten ({dist} draw)")
    if nonfinite:
        raise Incorrect(f"output '{name}': {nonfinite} non-finite elements where the reference is finite "
                        f"({dist} draw)")
    if mismatched:
        raise Incorrect(f"output '{name}': differs from the reference where it is inf or nan ({dist} draw)")
    rel = math.sqrt(err2 / ref2) if ref2 > 0 else math.sqrt(err2)
    worst[name] = max(worst.get(name, 0.0), rel)
    tol = tolerance.get(dtype, 1e-5)
    if not rel <= tol:
        raise Incorrect(f"output '{name}': relative error {rel:.3g} over the {dtype} tolerance {tol:g} ({dist} draw)")
    if peak > 0 and not far / peak <= 10 * tol:
        raise Incorrect(f"output '{name}': an element off by {far / peak:.3g} of the largest (over {10 * tol:g}; "
                        f"{dist} draw)")


def roofline(facts: dict, seconds: float) -> dict:
    """Achieved bandwidth and rate; the roofline (every byte of the inputs, parameters and outputs once at
    the memory's peak, or every FLOP at the peak rate of the problem's type, whichever takes longer) and
    how close the kernel came to it; and the floor no measurement may beat, the roofline with the outputs
    that fit in L2 not counted as reaching memory (a time under it is a fooled measurement)."""
    moved = facts["bytes_read"] + facts["bytes_written"]
    dram = facts["bytes_read"] + max(0, facts["bytes_written"] - facts["l2_bytes"])
    bw = facts["peak_gbps"] * 1e9
    peak_flops = facts["peak_tflops"].get(facts.get("compute_dtype", "float32"), facts["peak_tflops"]["float16"])
    compute = facts["flops"] / (peak_flops * 1e12) if peak_flops else 0.0
    line = max(moved / bw, compute)
    return {"gbps": moved / seconds / 1e9, "tflops": facts["flops"] / seconds / 1e12,
            "roofline_ms": line * 1e3, "floor_ms": max(dram / bw, compute) * 1e3,
            "roofline_pct": 100 * line / seconds if seconds > 0 else None,
            "bound": "memory" if moved / bw >= compute else "compute"}


def _median(v: list[float]) -> float:
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


# ---- the child's main --------------------------------------------------------------------------
def evaluate(job: dict) -> dict:
    bench = Bench(job)
    torch = bench.torch
    cands = {name: Candidate(bench.problem, k["cubin"], k["plan"], bench.facts) for name, k in job["kernels"].items()}
    if job["mode"] == "head_to_head":
        metrics = bench.head_to_head(cands["challenger"], cands["incumbent"])
        return {"status": "ok", "metrics": metrics | {"checked_launches": bench.checked}, "log": ""}
    note = bench.compile()
    steps = {}
    for name, cand in cands.items():
        try:
            metrics = bench.benchmark(cand)
            metrics |= {"worst_rel_err": dict(bench.worst), "checked_launches": bench.checked, "device": bench.facts["gpu"],
                        "compile_note": note}
            if metrics["ms"]["candidate"] < metrics["floor_ms"]:
                steps[name] = {"status": "rejected", "metrics": metrics,
                               "log": f"faster than this problem's roofline floor: {metrics['ms']['candidate'] * 1e3:.1f} µs "
                                      f"against {metrics['floor_ms'] * 1e3:.1f} µs ({metrics['gbps']:.0f} GB/s over the "
                                      f"{bench.facts['peak_gbps']:.0f} GB/s peak): a fooled measurement"}
            else:
                steps[name] = {"status": "ok", "metrics": metrics, "log": note}
        except Incorrect as exc:
            steps[name] = {"status": "incorrect", "metrics": {"checked_launches": bench.checked}, "log": str(exc)}
        bench.worst = {}
        torch.cuda.synchronize()
    if job["mode"] == "replay":
        return {"status": "ok", "metrics": {"steps": steps}, "log": ""}
    return steps["candidate"]


def main() -> int:
    job_path, result_path = sys.argv[1], sys.argv[2]
    job = json.loads(open(job_path).read())
    try:
        if job["mode"] == "probe":
            result = {"status": "ok", "metrics": probe(job), "log": ""}
        else:
            result = evaluate(job)
    except ProblemFailure as exc:
        result = {"status": "problem", "metrics": {}, "log": str(exc)}
    except Refused as exc:
        result = {"status": "rejected", "metrics": {}, "log": str(exc)}
    except Incorrect as exc:
        result = {"status": "incorrect", "metrics": {}, "log": str(exc)}
    except Exception as exc:  # a CUDA error in a candidate's launch: it crashed
        result = {"status": "crashed", "metrics": {},
                  "log": f"{type(exc).__name__}: {_one(exc)}\n{traceback.format_exc(limit=4)}"}
    result["child_s"] = round(time.perf_counter() - T0, 4)
    with open(result_path, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    os._exit(0)  # skip library exit handlers: after a CUDA fault they only add noise


if __name__ == "__main__":
    sys.exit(main())
