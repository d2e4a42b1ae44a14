"""What the evaluation child learns of the problem before any candidate runs (`probe`): the machine,
the work the problem must do, the distributions its reference stays finite on, and what its outputs
are judged against (the float64 truth, or PyTorch's own output and why)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harnesses.reference.inputs import DISTRIBUTIONS, Problem, ProblemFailure, _one

if TYPE_CHECKING:
    import torch

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
        if err != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"the driver's {name} attribute could not be read: {err}")
        return int(v)

    mem_khz, bus_bits, sm_khz = attr("MEMORY_CLOCK_RATE"), attr("GLOBAL_MEMORY_BUS_WIDTH"), attr("CLOCK_RATE")
    sms = props.multi_processor_count
    clock_hz, clock_source = sm_khz * 1e3, "the driver's clock rate"
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(dev)
        clock_hz = max(clock_hz, pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM) * 1e6)
        clock_source = "NVML's maximum SM clock"
    except Exception as exc:  # NVML is optional: the driver's clock rate stands, and the facts say why
        clock_source = f"the driver's clock rate (NVML: {type(exc).__name__}: {exc})"
    return {"gpu": props.name, "sms": sms, "cc": f"{props.major}.{props.minor}", "l2_bytes": props.L2_cache_size,
            "memory_bytes": props.total_memory, "smem_per_block": attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            "max_sm_clock_mhz": clock_hz / 1e6, "clock_source": clock_source,
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
    flops, counted = 0, {}
    try:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            problem.forward(tensors)
        flops = int(counter.get_total_flops())
    except Exception as exc:  # the roofline then counts bytes alone, and the facts say why
        counted = {"flops_not_counted": f"PyTorch's flop counter failed: {type(exc).__name__}: {exc}"}
    size = lambda t: t.numel() * t.element_size()  # noqa: E731
    read = sum(size(t) for t in tensors) + sum(size(p) for p in problem.params.values())
    written = sum(size(o) for o in outs)
    dtypes = {str(t.dtype).removeprefix("torch.") for t in [*tensors, *outs] if t.is_floating_point()}
    return {"outputs": [{"shape": list(o.shape), "dtype": str(o.dtype).removeprefix("torch.")} for o in outs],
            "bytes_read": read, "bytes_written": written, "flops": flops,
            "compute_dtype": min(dtypes, key=lambda d: FLOAT.index(d) if d in FLOAT else 9) if dtypes else "float32",
            **counted}


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
    facts["truth"], facts["truth_note"] = truth_of(problem, free - need)
    return facts


def truth_of(problem: Problem, spare: int) -> tuple[str, str]:
    """What outputs are judged against: "float64" (the module and its inputs cast to float64, evaluated on
    the same inputs) or "reference" (PyTorch's own output), and why not float64 where it is not."""
    torch = problem.torch
    tensors = [i["tensor"] for i in problem.inputs]
    outs = problem.forward(tensors)
    floating = [o for o in outs if o.is_floating_point()]
    if not floating:
        return "reference", "the outputs are integers: compared with the reference's exactly"
    if all(o.dtype == torch.float64 for o in floating):
        return "reference", "the reference computes in float64 itself"
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    try:
        outs64 = truth_forward(problem, to_float64(problem), tensors)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        return "reference", "not enough GPU memory for the float64 evaluation"
    except Exception as exc:
        return "reference", f"the module has no float64 evaluation ({type(exc).__name__}: {_one(exc)[:160]})"
    for i, (o, o64) in enumerate(zip(outs, outs64)):
        if o.is_floating_point() and o64.dtype != torch.float64:
            return "reference", (f"the module casts internally: evaluated in float64 its output {i} is "
                                 f"{str(o64.dtype).removeprefix('torch.')}")
    used = torch.cuda.max_memory_allocated() - base
    if used > spare:
        return "reference", (f"not enough GPU memory for the float64 evaluation ({used / 2**30:.1f} GiB beside "
                             f"the {spare / 2**30:.1f} GiB the evaluation leaves)")
    return "float64", ""


def to_float64(problem: Problem) -> torch.nn.Module:
    """A copy of the module with its floating parameters and buffers in float64."""
    import copy

    return copy.deepcopy(problem.model).double()


def truth_forward(problem: Problem, model64: torch.nn.Module, tensors: list) -> list:
    torch = problem.torch
    with torch.no_grad():
        out = model64(*[t.double() if t.is_floating_point() else t for t in tensors])
    return list(out) if isinstance(out, (list, tuple)) else [out]


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
