"""What the gate decides: an output against the truth (the reference evaluated in float64) and the
reference's own float32 output, and a time against the roofline.

A candidate's output is judged by its distance to the truth, the module evaluated in float64 on the same
inputs. PyTorch's own output has an error against that truth too, and on long reductions (norms and sums
over millions of elements) it can exceed the dtype's tolerance: so an output passes where its error is
within the dtype's tolerance or within `multiple` times PyTorch's own error on that launch, whichever is
larger. An output within the tolerance of PyTorch's output, as the gate judged before it had the truth,
passes too: nothing that passed that comparison fails this one. Where the truth cannot be had, the output
is judged against PyTorch's alone, and the verdict says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from harnesses.reference.launch import POISON, _bits

if TYPE_CHECKING:
    import torch


class Incorrect(Exception):
    pass


TOLERANCE_DEFAULT = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}
TRUTH_MULTIPLE = 4.0
"""How many times PyTorch's own error against the float64 truth a candidate's error may be, where that
exceeds the dtype's tolerance (see the README's calibration)."""
FAR = 10.0
"""No element may be off by more than FAR × the tolerance of the largest element (or, against the truth,
by more than the multiple of PyTorch's own largest error, where that is larger)."""

CHUNK = 1 << 25
"""Elements compared at a time: the comparison's float64 copies stay small whatever the output's size."""


@dataclass
class Errors:
    """One floating output of one launch: its relative (Frobenius) error and its largest element's error
    (over the largest element) against PyTorch's output, and, where the truth was had, the candidate's
    and PyTorch's against the truth."""

    rel_ref: float
    far_ref: float
    rel_truth: float | None = None
    far_truth: float | None = None
    rel_torch: float | None = None
    far_torch: float | None = None


def accept(e: Errors, tol: float, multiple: float = TRUTH_MULTIPLE) -> tuple[bool, str]:
    """The verdict on one output's errors, and the rule that gave it (or why it failed), in words."""
    against_ref = e.rel_ref <= tol and e.far_ref <= FAR * tol
    if e.rel_truth is None:
        if against_ref:
            return True, "within the tolerance of PyTorch's output"
        if not e.rel_ref <= tol:
            return False, f"relative error {e.rel_ref:.3g} over the tolerance {tol:g}"
        return False, f"an element off by {e.far_ref:.3g} of the largest (over {FAR * tol:g})"
    if e.rel_torch is None or e.far_torch is None or e.far_truth is None:  # measured with the truth, always
        raise ValueError("errors against the truth without PyTorch's own: the gate measures both together")
    bound = max(tol, multiple * e.rel_torch)
    far_bound = max(FAR * tol, multiple * e.far_torch)
    if e.rel_truth <= bound and e.far_truth <= far_bound:
        plain = e.rel_truth <= tol and e.far_truth <= FAR * tol
        return True, "within the tolerance of the truth" if plain else (
            f"within {multiple:g}× PyTorch's own error against the truth")
    if against_ref:
        return True, "within the tolerance of PyTorch's output"
    both = f"PyTorch's own error {e.rel_torch:.3g}"
    if not e.rel_truth <= bound:
        return False, (f"relative error {e.rel_truth:.3g} against the float64 truth, over the tolerance "
                       f"{bound:.3g} (the larger of {tol:g} and {multiple:g}× {both})")
    return False, (f"an element off by {e.far_truth:.3g} of the largest against the float64 truth (over "
                   f"{far_bound:.3g}; PyTorch's largest {e.far_torch:.3g})")


def _distance(torch: ModuleType, o: torch.Tensor, r: torch.Tensor, finite: torch.Tensor) -> tuple[float, float, float, float]:
    """Σ(o − r)², Σr², max|o − r| and max|r| over the elements where `finite`, in float64."""
    rf = torch.where(finite, r, torch.zeros_like(r)).double()
    d = torch.where(finite, o, torch.zeros_like(o)).double() - rf
    d = torch.nan_to_num(d, nan=0.0, posinf=0.0, neginf=0.0)
    if not d.numel():
        return 0.0, 0.0, 0.0, 0.0
    return float((d * d).sum()), float((rf * rf).sum()), float(d.abs().max()), float(rf.abs().max())


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


def compare(torch: ModuleType, name: str, out: torch.Tensor, ref: torch.Tensor, tolerance: dict, dist: str, worst: dict,
            truth: torch.Tensor | None = None, multiple: float = TRUTH_MULTIPLE) -> Errors | None:
    """One output against the reference's (and the truth's, where given): no element unwritten, integers
    equal, non-finite values where the reference has them, floats as `accept` rules. Returns the errors
    (None for an integer output); raises Incorrect with both errors where the output fails."""
    dtype = str(ref.dtype).removeprefix("torch.")
    if out.shape != ref.shape:
        raise Incorrect(f"output '{name}': shape {list(out.shape)}, the reference's is {list(ref.shape)}")
    o_all, r_all, bits = out.reshape(-1), ref.reshape(-1), _bits(torch, out).reshape(-1)
    t_all = truth.reshape(-1) if truth is not None else None
    n = r_all.numel()
    if not ref.is_floating_point():
        bad = unwritten = 0
        for i in range(0, n, CHUNK):
            bad += int((o_all[i:i + CHUNK] != r_all[i:i + CHUNK]).sum())
            unwritten += int((bits[i:i + CHUNK] == POISON[out.element_size()]).sum())
        if bad:
            raise Incorrect(f"output '{name}': {bad} of {n} elements differ from the reference "
                            f"({unwritten} unwritten; {dist} draw)")
        return None
    unwritten = nonfinite = mismatched = 0
    sums = {"ref": [0.0] * 4, "truth": [0.0] * 4, "torch": [0.0] * 4}
    for i in range(0, n, CHUNK):
        o, r, b = o_all[i:i + CHUNK], r_all[i:i + CHUNK], bits[i:i + CHUNK]
        finite = torch.isfinite(r)
        unwritten += int(((b == POISON[out.element_size()]) & finite).sum())
        nonfinite += int((~torch.isfinite(o) & finite).sum())
        if not bool(finite.all()):
            same = (o[~finite] == r[~finite]) | (torch.isnan(o[~finite]) & torch.isnan(r[~finite]))
            mismatched += int((~same).sum())
        pairs = [("ref", o, r, finite)]
        if t_all is not None:
            t = t_all[i:i + CHUNK]
            both = finite & torch.isfinite(t)
            pairs += [("truth", o, t, both), ("torch", r, t, both)]
        for key, a, b2, mask in pairs:
            e2, r2, far, peak = _distance(torch, a, b2, mask)
            s = sums[key]
            s[0] += e2
            s[1] += r2
            s[2], s[3] = max(s[2], far), max(s[3], peak)
    if unwritten:
        raise Incorrect(f"output '{name}': {unwritten} of {n} elements unwritten ({dist} draw)")
    if nonfinite:
        raise Incorrect(f"output '{name}': {nonfinite} non-finite elements where the reference is finite "
                        f"({dist} draw)")
    if mismatched:
        raise Incorrect(f"output '{name}': differs from the reference where it is inf or nan ({dist} draw)")

    def rel(key: str) -> tuple[float, float]:
        e2, r2, far, peak = sums[key]
        return math.sqrt(_ratio(e2, r2)), _ratio(far, peak)
    errors = Errors(*rel("ref"))
    if t_all is not None:
        errors.rel_truth, errors.far_truth = rel("truth")
        errors.rel_torch, errors.far_torch = rel("torch")
    record(worst, name, errors)
    tol = tolerance.get(dtype, 1e-5)
    ok, why = accept(errors, tol, multiple)
    if not ok:
        raise Incorrect(f"output '{name}': {why} ({dist} draw)")
    return errors


def record(worst: dict, name: str, e: Errors) -> None:
    """The largest errors seen for an output over a job's launches (stored with its metrics)."""
    w = worst.setdefault(name, {})
    for key in ("rel_ref", "rel_truth", "rel_torch"):
        v = getattr(e, key)
        if v is not None:
            w[key] = max(w.get(key, 0.0), v)


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
