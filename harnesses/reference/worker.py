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

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from autodiscovery.status import EvalStatus
from autodiscovery.toolkit import child
from harnesses.reference.gate import (
    TOLERANCE_DEFAULT,
    TRUTH_MULTIPLE,
    Incorrect,
    _median,
    compare,
    roofline,
)
from harnesses.reference.inputs import DISTRIBUTIONS, Problem, ProblemFailure, _one
from harnesses.reference.launch import POISON, Arena, Candidate, Refused, _bits, _poison, bind
from harnesses.reference.probe import probe, to_float64, truth_forward
from harnesses.reference.problem import PROBLEM_FAILED

if TYPE_CHECKING:
    import torch

__all__ = ["DISTRIBUTIONS", "POISON", "TOLERANCE_DEFAULT", "Incorrect", "Problem", "ProblemFailure", "Refused",
           "compare", "roofline", "_bits", "_poison"]

T0 = time.perf_counter()


# ---- the gate and the timing ------------------------------------------------------------------------
HOST_AHEAD_CYCLES = 1_000_000
"""How far the GPU is kept ahead of each timed launch's host dispatch (see `cold`): 0.5 ms at 2 GHz,
longer at a lower clock."""


class Bench:
    """One problem on the GPU with everything a launch needs. `guarded`: the inputs, and the copies of the
    parameters the candidates are given, live in one arena between guard zones (verified after every
    launch); else (under compute-sanitizer) each is an allocation of its own and the candidates get the
    module's own parameters."""

    def __init__(self, job: dict, guarded: bool = True) -> None:
        import torch

        self.torch = torch
        self.job, self.s = job, job["settings"]
        self.problem = Problem(job)
        self.facts = job["facts"]
        self.dists = [d for d in self.facts["dists"] if d in DISTRIBUTIONS]
        self.gen = torch.Generator(device="cuda")
        self.gen.manual_seed(int.from_bytes(os.urandom(6), "little"))
        self.guarded = guarded
        self.arena = None
        self.given = {i["name"]: i["tensor"] for i in self.problem.inputs} | dict(self.problem.params)
        if guarded:
            p = self.problem
            specs = [(i["name"], list(i["tensor"].shape), i["tensor"].dtype) for i in p.inputs]
            specs += [(k, list(v.shape), v.dtype) for k, v in p.params.items()]
            self.arena = Arena(torch, specs)
            for i in p.inputs:  # the inputs are the arena's from now on, for the reference too
                self.arena.tensors[i["name"]].copy_(i["tensor"])
                i["tensor"] = self.arena.tensors[i["name"]]
            for k, v in p.params.items():
                self.arena.tensors[k].copy_(v)
            self.given = dict(self.arena.tensors)
        self.flush = torch.empty(2 * self.facts["l2_bytes"], dtype=torch.uint8, device="cuda")
        self.clean = torch.zeros(2 * self.facts["l2_bytes"] // 8, dtype=torch.int64, device="cuda")
        # The parameters as they must stay, on the host: no kernel can reach (and rewrite) this copy.
        self.params0 = {k: v.cpu() for k, v in self.problem.params.items()}
        self.tolerance = {**TOLERANCE_DEFAULT, **self.s.get("tolerance", {})}
        self.multiple = float(self.s.get("truth_multiple", TRUTH_MULTIPLE))
        self.truth = self.facts.get("truth", "reference")
        self.model64 = to_float64(self.problem) if self.truth == "float64" else None
        self.truth_note = self.facts.get("truth_note", "") if self.truth != "float64" else ""
        self.compiled: Callable[..., Any] | None = None
        """torch.compile of the reference, once `compile` made it (None: not asked for, or it failed)."""
        self.checked = 0
        self.worst: dict[str, dict] = {}
        self.poisoner = SmemPoison(job["helpers"], self.facts["smem_per_block"]) if job.get("helpers") else None

    # one launch, prepared as every launch is --------------------------------------------------
    def draw(self, dist: str) -> torch.Tensor:
        """Fresh content in the inputs; returns the generator's state before the draw (on the host), from
        which the same content can be drawn again."""
        state = self.gen.get_state()
        for spec in self.problem.inputs:
            self.problem.fill(spec["tensor"], spec, dist, self.gen)
        if self.arena is not None:
            self.arena.arm(self.gen)
        return state

    def redraw(self, state: torch.Tensor, dist: str) -> list:
        """The inputs of a draw made again into new tensors, allocated after the candidate ran: what the
        inputs must still hold, and what the reference computes on (no copy a kernel could rewrite)."""
        after = self.gen.get_state()
        self.gen.set_state(state)
        tensors = [self.torch.empty_like(i["tensor"]) for i in self.problem.inputs]
        for t, spec in zip(tensors, self.problem.inputs):
            self.problem.fill(t, spec, dist, self.gen)
        if self.arena is not None:  # the arming's draw, so the generator moves on as after `draw`
            self.torch.randint(1, 256, (self.arena.index.numel(),), generator=self.gen, dtype=self.torch.uint8,
                               device="cuda")
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

    def run_candidate(self, cand: Candidate, dist: str) -> float:
        """One launch on a fresh draw, from a cold L2, verified: its time in ms."""
        torch = self.torch
        state = self.draw(dist)
        cand.poison(self.gen)
        self.cold()
        if self.poisoner is not None:  # after the flush, whose reduction uses shared memory
            self.poisoner(cand.stream)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        cand()
        end.record()
        torch.cuda.synchronize()
        self.verify(cand, self.redraw(state, dist), dist)
        return start.elapsed_time(end)

    def run_reference(self, which: str, dist: str) -> float:
        torch = self.torch
        self.draw(dist)
        tensors = [i["tensor"] for i in self.problem.inputs]
        fn = self.problem.model if which == "eager" else self.compiled
        if fn is None:
            raise RuntimeError("the reference under torch.compile is timed only where it compiled")
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
        breaches = [*(self.arena.breaches() if self.arena is not None else []),
                    *(cand.arena.breaches() if cand.arena is not None else [])]
        if breaches:
            raise Incorrect(f"guard zone: {'; '.join(breaches)} ({dist} draw)")
        for spec, again in zip(self.problem.inputs, drawn):
            if not torch.equal(_bits(torch, spec["tensor"]), _bits(torch, again)):
                raise Incorrect(f"input '{spec['name']}' was changed by the kernel ({dist} draw)")
        for k in self.problem.params:
            if not torch.equal(_bits(torch, self.given[k].cpu()), _bits(torch, self.params0[k])):
                raise Incorrect(f"parameter '{k}' was changed by the kernel")
        refs = self.problem.forward(drawn)
        truths = truth_forward(self.problem, self.model64, drawn) if self.model64 is not None else [None] * len(refs)
        for spec, out, ref, truth in zip(cand.plan["outputs"], cand.outputs, refs, truths):
            compare(torch, spec["name"], out, ref, self.tolerance, dist, self.worst, truth, self.multiple)
        self.checked += 1

    def verdict_facts(self) -> dict:
        """What the outputs were judged against, and the largest errors seen: the candidate's against its
        judge (`worst_rel_err`), and each output's errors against PyTorch's output and the truth, with
        PyTorch's own against the truth (`errors`)."""
        judge = "rel_truth" if self.model64 is not None else "rel_ref"
        return {"truth": self.truth, "truth_note": self.truth_note, "truth_multiple": self.multiple,
                "worst_rel_err": {k: w.get(judge, w.get("rel_ref")) for k, w in self.worst.items()},
                "errors": {k: dict(w) for k, w in self.worst.items()}}

    def compile(self) -> str:
        """torch.compile of the reference, warmed; '' or why it could not be had."""
        if not self.s.get("compile", True):
            return "not asked for (harness.compile false)"
        try:
            compiled = self.torch.compile(self.problem.model)
            with self.torch.no_grad():
                for _ in range(2):
                    compiled(*[i["tensor"] for i in self.problem.inputs])
            self.torch.cuda.synchronize()
            self.compiled = compiled
            return ""
        except Exception as exc:  # its absence is stated with every result; the candidate is not at fault
            self.compiled = None
            return f"torch.compile failed: {type(exc).__name__}: {_one(exc)}"

    # the jobs ------------------------------------------------------------------------------------
    def gate(self, cand: Candidate) -> None:
        for i in range(self.s["gate_draws"]):
            self.run_candidate(cand, self.dists[i % len(self.dists)])
            child.beat()  # a slow candidate finishing its launches is never taken for a hung one

    def benchmark(self, cand: Candidate) -> dict:
        from autodiscovery.toolkit.stats import summarize_ratio

        self.gate(cand)
        timed = self.dists[0]
        for _ in range(2):  # warm: module load, first launches
            self.run_candidate(cand, timed)
            self.run_reference("eager", timed)
        once = self.run_reference("eager", timed) / 1e3
        pairs = max(5, min(self.s["pairs"], int(self.s["timing_budget_s"] / max(once * 4, 1e-6))))
        ms: dict[str, list[float]] = {"candidate": [], "eager": [], "compile": []}
        for i in range(pairs):
            order = ["candidate", "eager", "compile"] if i % 2 == 0 else ["compile", "eager", "candidate"]
            for who in order:
                if who == "candidate":
                    ms["candidate"].append(self.run_candidate(cand, timed))
                elif who == "eager" or self.compiled is not None:
                    ms[who].append(self.run_reference(who, timed))
            child.beat()
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
            ta = self.run_candidate(a, timed)
            tb = self.run_candidate(b, timed)
            t_ch, t_inc = (ta, tb) if a is challenger else (tb, ta)
            ratios.append(t_inc / t_ch)
            child.beat()
        return {"ratio": summarize_ratio(ratios, self.s["confidence"])}


class SmemPoison:
    """The harness's kernel that sets every SM's shared memory to 0xFF bytes (NaN) before a candidate's
    launch (kernels/helpers.cu): a candidate that reads shared memory it never wrote computes from NaN."""

    def __init__(self, cubin: str, smem_bytes: int) -> None:
        import ctypes

        from cuda.bindings import driver as cu

        from harnesses.reference.launch import _check

        self.cu, self.ctypes, self.smem = cu, ctypes, int(smem_bytes)
        self.module = _check(cu.cuModuleLoad(cubin.encode()))
        self.f = _check(cu.cuModuleGetFunction(self.module, b"smem_poison"))
        _check(cu.cuFuncSetAttribute(self.f, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     self.smem))
        _, self.sms = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0)
        self.args = [ctypes.c_uint32(self.smem // 4)]
        self.ptrs = (ctypes.c_void_p * 1)(ctypes.addressof(self.args[0]))

    def __call__(self, stream: Any) -> None:
        from harnesses.reference.launch import _check

        _check(self.cu.cuLaunchKernel(self.f, int(self.sms), 1, 1, 1024, 1, 1, self.smem, stream,
                                      self.ctypes.addressof(self.ptrs), 0))


# ---- the child's main --------------------------------------------------------------------------
def sanitize(job: dict) -> dict:
    """Launches for compute-sanitizer, which runs this child: every buffer an allocation of its own
    (the parent turns PyTorch's caching allocator off), each launch on a draw of another distribution,
    the inputs written by a copy from the host so that its initcheck sees them written."""
    bench = Bench(job, guarded=False)
    torch = bench.torch
    (name, k), = job["kernels"].items()
    cand = bind(bench.problem, k["cubin"], k["plan"], bench.facts, bench.given, guarded=False)
    for dist in bench.dists[:job.get("launches", 2)]:
        state = bench.gen.get_state()
        for spec, again in zip(bench.problem.inputs, bench.redraw(state, dist)):
            spec["tensor"].copy_(again.cpu())
        for t in [*cand.outputs, *cand.scratch.values()]:
            t.copy_(torch.full_like(t, float("nan"), device="cpu") if t.is_floating_point() else torch.zeros_like(t, device="cpu"))
        cand()
        torch.cuda.synchronize()
    return {"status": EvalStatus.ok, "metrics": {"kernels": [launch["kernel"] for launch in k["plan"]["launches"]]}, "log": ""}


def evaluate(job: dict) -> dict:
    bench = Bench(job)
    torch = bench.torch
    cands = {name: bind(bench.problem, k["cubin"], k["plan"], bench.facts, bench.given)
             for name, k in job["kernels"].items()}
    if job["mode"] == "head_to_head":
        metrics = bench.head_to_head(cands["challenger"], cands["incumbent"])
        return {"status": EvalStatus.ok, "metrics": metrics | {"checked_launches": bench.checked}, "log": ""}
    note = bench.compile()
    steps = {}
    for name, cand in cands.items():
        try:
            metrics = bench.benchmark(cand)
            metrics |= bench.verdict_facts() | {"checked_launches": bench.checked, "device": bench.facts["gpu"],
                                                "compile_note": note}
            if metrics["ms"]["candidate"] < metrics["floor_ms"]:
                steps[name] = {"status": EvalStatus.rejected, "metrics": metrics,
                               "log": f"faster than this problem's roofline floor: {metrics['ms']['candidate'] * 1e3:.1f} µs "
                                      f"against {metrics['floor_ms'] * 1e3:.1f} µs ({metrics['gbps']:.0f} GB/s over the "
                                      f"{bench.facts['peak_gbps']:.0f} GB/s peak): a fooled measurement"}
            else:
                steps[name] = {"status": EvalStatus.ok, "metrics": metrics, "log": note}
        except Incorrect as exc:
            steps[name] = {"status": EvalStatus.incorrect, "metrics": bench.verdict_facts() | {"checked_launches": bench.checked},
                           "log": "\n".join(filter(None, [str(exc), bench.truth_note and
                                                           f"judged against PyTorch's output: {bench.truth_note}"]))}
        bench.worst = {}
        torch.cuda.synchronize()
    if job["mode"] == "replay":
        return {"status": EvalStatus.ok, "metrics": {"steps": steps}, "log": ""}
    return steps["candidate"]


def work(job: dict) -> dict:
    if job["mode"] == "probe":
        return child.result(EvalStatus.ok, metrics=probe(job))
    if job["mode"] == "sanitize":
        return sanitize(job)
    return evaluate(job)


def warm() -> None:
    """What a spare child loads before its job (`child.serve`): PyTorch, which touches no GPU until the job
    asks it to."""
    import torch  # noqa: F401


def main() -> NoReturn:
    """The child's side of `toolkit/child.py`: the problem failing is its own status, a refused launch and
    a wrong answer theirs; any other exception (a CUDA error in a candidate's launch) is a crash."""
    child.serve(work, T0, known={ProblemFailure: PROBLEM_FAILED, Refused: EvalStatus.rejected,
                                 Incorrect: EvalStatus.incorrect},
                crashed=lambda job, exc: child.crash_log(exc, _one(exc)), warm=warm)


if __name__ == "__main__":
    main()
