"""A GEMM candidate under compute-sanitizer before it is kept (`autodiscovery/toolkit/sanitize.py`).

It runs at a shape no larger than about 2048 a side that keeps each side's remainder modulo 1024 (so a
kernel's partial tiles at the edges are exercised as at the run's shape), where its manifest allows
that; else at the run's shape. A, B, C and the workspace are allocations of their own there. A kernel
whose grid follows the GPU's SM count (a persistent one) is launched as for a GPU of SANITIZE_SMS SMs:
there its few blocks walk several tiles each, so its load ring's stages and phases run on from one tile
into the next as they do at the run's shape, where at the small shape one tile a block would hide that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autodiscovery import ROOT
from autodiscovery.interfaces import Outcome
from autodiscovery.status import EvalStatus
from autodiscovery.toolkit import child
from autodiscovery.toolkit import sanitize as sanitizer
from autodiscovery.toolkit.build import BuildReport
from harnesses.hopper_gemm import WORKER
from harnesses.hopper_gemm.manifest import Launch, ManifestError, parse, resolve
from harnesses.hopper_gemm.pool import where

if TYPE_CHECKING:
    from harnesses.hopper_gemm import HopperGemmHarness


Shape = tuple[int, int, int]

SANITIZE_SMS = 4
"""The SMs a persistent kernel's grid is worked out for under the sanitizer."""


def smaller(side: int) -> int:
    """A side of at most about 2048 with the same remainder modulo 1024 (a side up to 2048 is kept)."""
    return side if side <= 2048 else 1024 + side % 1024


def sanitized_launch(source: str, shape: Shape, sms: int) -> tuple[Shape, Launch | None]:
    """The shape the sanitizer runs a kernel at for a run at `shape`, and its launch there (None where its
    manifest does not allow the smaller shape: then the run's own)."""
    M, N, K = small = (smaller(shape[0]), smaller(shape[1]), smaller(shape[2]))
    try:
        manifest = parse(source)
        launch = resolve(manifest, M, N, K, sms=sms)
    except ManifestError:
        return shape, None
    try:
        few = resolve(manifest, M, N, K, sms=min(sms, SANITIZE_SMS))
    except ManifestError:
        return small, launch
    return small, few if few.grid != launch.grid else launch  # a persistent grid: a few blocks walk the tiles


def sanitized(h: HopperGemmHarness, source: str, build: BuildReport) -> Outcome | None:
    if not h.settings.sanitize:
        return None
    if not build.ok or not build.artifact:
        return Outcome(EvalStatus.compile_error, log=build.log)
    exe = sanitizer.locate(h.settings.nvcc)
    if exe is None:
        return Outcome(EvalStatus.crashed, log="compute-sanitizer not found (on PATH or beside nvcc)")
    shape, launch = sanitized_launch(source, h.shape, h.sms)
    if launch is None:
        shape, launch = h.shape, h.check(source)
    job = {"mode": "sanitize", "shape": list(shape), "helpers": h.helpers(),
           "kernels": {"candidate": {"cubin": build.artifact, "launch": launch.model_dump()}},
           "settings": h.settings.model_dump(mode="json")}
    with h.pool.pinned() as gpu, child.posted(job) as folder:
        out = sanitizer.run(exe, child.command(WORKER, folder, "{tool}.json"), ROOT, child.environment(gpu),
                            [launch.kernel], h.settings.sanitize_timeout_s)
    out.metrics["shape"], out.metrics["grid"] = list(shape), list(launch.grid)
    out.device = where(h.device, gpu)
    return out
