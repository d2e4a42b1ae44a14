"""A GEMM candidate under compute-sanitizer before it is kept (`autodiscovery/toolkit/sanitize.py`).

It runs at a shape no larger than about 2048 a side that keeps each side's remainder modulo 1024 (so a
kernel's partial tiles at the edges are exercised as at the run's shape), where its manifest allows
that; else at the run's shape. A, B, C and the workspace are allocations of their own there.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from autodiscovery import ROOT
from autodiscovery.interfaces import Outcome
from autodiscovery.store import EvalStatus
from autodiscovery.toolkit import sanitize as sanitizer
from autodiscovery.toolkit.build import BuildReport
from harnesses.hopper_gemm.manifest import ManifestError, parse, resolve

if TYPE_CHECKING:
    from harnesses.hopper_gemm import HopperGemmHarness


def smaller(side: int) -> int:
    """A side of at most about 2048 with the same remainder modulo 1024 (a side up to 2048 is kept)."""
    return side if side <= 2048 else 1024 + side % 1024


def sanitized(h: HopperGemmHarness, source: str, build: BuildReport) -> Outcome | None:
    if not h.settings.sanitize:
        return None
    if not build.ok or not build.artifact:
        return Outcome(EvalStatus.compile_error, log=build.log)
    exe = sanitizer.locate(h.settings.nvcc)
    if exe is None:
        return Outcome(EvalStatus.crashed, log="compute-sanitizer not found (on PATH or beside nvcc)")
    shape = tuple(smaller(v) for v in h.shape)
    try:
        launch = resolve(parse(source), *shape, sms=h.sms)
    except ManifestError:
        shape, launch = h.shape, h.check(source)
    job = {"mode": "sanitize", "shape": list(shape), "helpers": h.helpers(),
           "kernels": {"candidate": {"cubin": build.artifact, "launch": launch.model_dump()}},
           "settings": h.settings.model_dump(mode="json")}
    gpu = h._take()
    try:
        with tempfile.TemporaryDirectory(prefix="autodiscovery-san-") as tmp:
            job_file = Path(tmp) / "job.json"
            job_file.write_text(json.dumps(job))
            env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
            if gpu is not None:
                visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
                env["CUDA_VISIBLE_DEVICES"] = visible[gpu] if gpu < len(visible) else str(gpu)
            argv = [sys.executable, "-m", "harnesses.hopper_gemm.worker", str(job_file), str(Path(tmp) / "{tool}.json")]
            out = sanitizer.run(exe, argv, ROOT, env, [launch.kernel], h.settings.sanitize_timeout_s)
    finally:
        if gpu is not None:
            h._free.put(gpu)
    out.metrics["shape"] = list(shape)
    out.device = h._where(gpu)
    return out
