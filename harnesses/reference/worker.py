"""Evaluation child of the reference harness: `python -m harnesses.reference.worker JOB.json RESULT.json`.

It imports the user's problem (PyTorch), builds the reference, and runs one job:
- `probe`: what the problem is (inputs, parameters, outputs, sizes, bytes and FLOPs, the machine's
  bandwidth and peak), for the parent, which imports no PyTorch;
- `benchmark`: the gate, then timing interleaved with the reference in eager mode and compiled;
- `head_to_head`: two candidates gated, then timed against each other;
- `replay`: several candidates, each gated and timed as in `benchmark`.

Every launch of a candidate, gated or timed, is prepared the same way: its inputs hold content drawn
for it alone (from one of the distributions the reference stays finite on), its outputs and scratch
buffers start poisoned, and L2 is flushed and left clean. After it, untimed: its inputs and the reference's parameters
are checked unchanged, and the reference runs on the same inputs (after the candidate, so its answer
cannot be read) and each output is compared with it. A time under the problem's roofline floor is a
fooled measurement, never a result.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

from harnesses.reference.gate import (
    TOLERANCE_DEFAULT,
    Incorrect,
    _median,
    compare,
    roofline,
)
from harnesses.reference.inputs import DISTRIBUTIONS, Problem, ProblemFailure, _one
from harnesses.reference.launch import POISON, Candidate, Refused, _bits, _poison

__all__ = ["DISTRIBUTIONS", "POISON", "TOLERANCE_DEFAULT", "Incorrect", "Problem", "ProblemFailure", "Refused",
           "compare", "roofline", "_bits", "_poison"]

T0 = time.perf_counter()
FLOAT = ("float64", "float32", "float16", "bfloat16")


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


# ---- the gate and the timing ------------------------------------------------------------------------
HOST_AHEAD_CYCLES = 1_000_000
"""How far the GPU is kept ahead of each timed launch's host dispatch (see `cold`): 0.5 ms at 2 GHz,
longer at a lower clock."""


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
        self.clean = torch.zeros(2 * self.facts["l2_bytes"] // 8, dtype=torch.int64, device="cuda")
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

    def cold(self) -> None:
        """L2 flushed and clean: a write of twice its size evicts everything, then a read of another twice
        its size replaces the write's dirty lines with clean ones, so the timed launch pays for no
        write-back of ours (a memory-bound kernel would lose ~10% of its time to it). Then the GPU spins
        for HOST_AHEAD_CYCLES, so the host has queued the timed launch before the GPU reaches its start event:
        the time is the GPU's, never the host's dispatch (a compiled module's guards and wrapper take
        tens of µs of host time, more than a 90 µs kernel's flush leaves it)."""
        self.flush.zero_()
        self.clean.max()
        self.torch.cuda._sleep(HOST_AHEAD_CYCLES)

    def run_candidate(self, cand: Candidate, dist: str, time_it: bool) -> float | None:
        torch = self.torch
        state = self.draw(dist)
        cand.poison()
        self.cold()
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
        self.cold()
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
