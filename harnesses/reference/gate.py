"""What the gate decides: an output against the reference's, and a time against the roofline."""

from __future__ import annotations

import math

from harnesses.reference.launch import POISON, _bits


class Incorrect(Exception):
    pass


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
