"""The simulated program's inputs and the harness's own check of its output.

The harness writes A.bin (M x K) and B.bin (N x K), fp16, into the simulation's folder; the program
writes C.bin (M x N, fp32) = A B^T. The inputs are quarter steps in [-1, 1], drawn from a seed tied to
the simulation, so every product and partial sum is exact in fp16 and fp32 whatever order the simulated
tensor cores add in: the check is exact, and a kernel that drops or repeats one product fails it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def inputs(M: int, N: int, K: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = (rng.integers(-4, 5, size=(M, K)) / 4).astype(np.float16)
    b = (rng.integers(-4, 5, size=(N, K)) / 4).astype(np.float16)
    return a, b


def write_inputs(folder: Path, a: np.ndarray, b: np.ndarray) -> None:
    a.tofile(folder / "A.bin")
    b.tofile(folder / "B.bin")


def check_output(folder: Path, a: np.ndarray, b: np.ndarray, only: np.ndarray | None = None) -> tuple[bool, str]:
    """(passed, one line saying why) for the C.bin the program left in `folder`; with `only` (a mask of
    M x N), the outputs it marks alone (a sample's tiles)."""
    M, N = a.shape[0], b.shape[0]
    path = folder / "C.bin"
    if not path.exists():
        return False, "output check FAIL: the program wrote no C.bin"
    got = np.fromfile(path, dtype=np.float32)
    if got.size != M * N:
        return False, f"output check FAIL: C.bin holds {got.size} floats, expected {M} x {N} = {M * N}"
    got = got.reshape(M, N)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    keep = np.ones((M, N), dtype=bool) if only is None else only
    n = int(keep.sum())
    what = f"all {M} x {N} outputs" if only is None else f"the {n} outputs of the sampled tiles"
    bad = ~np.isfinite(got) & keep
    if bad.any():
        r, c = np.argwhere(bad)[0]
        return False, f"output check FAIL: {int(bad.sum())} of {n} outputs not finite (first at row {r}, column {c})"
    err = np.where(keep, np.abs(np.nan_to_num(got) - ref), 0.0)
    if err.max() > 0:
        r, c = np.unravel_index(int(err.argmax()), err.shape)
        wrong = int((err > 0).sum())
        return False, (f"output check FAIL: {wrong} of {n} outputs differ from the reference; worst at row {r}, "
                       f"column {c}: {got[r, c]:g} against {ref[r, c]:g}")
    return True, f"output check PASS: {what} equal the harness's reference"
