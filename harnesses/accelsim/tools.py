"""Finding the simulator and a CUDA 11 compiler; `autodiscovery doctor` reports what this finds."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from autodiscovery.toolkit.nvcc import release
from harnesses.accelsim.settings import Settings as AccelsimSettings


@dataclass
class Found:
    what: str
    path: str | None
    hint: str

    @property
    def ok(self) -> bool:
        return self.path is not None


def find_nvcc11(s: AccelsimSettings) -> Found:
    hint = "set AUTODISCOVERY_CUDA11_NVCC (or harness.nvcc) to a CUDA 11.x nvcc, e.g. Debian's nvidia-cuda-toolkit 11.8"
    candidates = [s.nvcc, os.environ.get("AUTODISCOVERY_CUDA11_NVCC")]
    for folder in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/bin", "/usr/local/cuda-11.8/bin"]:
        candidates.append(str(Path(folder) / "nvcc"))
    for c in candidates:
        if c and Path(c).is_file() and (release(c) or "").startswith("11."):
            return Found("CUDA 11 nvcc", c, hint)
    return Found("CUDA 11 nvcc", None, hint)


def find_root(s: AccelsimSettings) -> Found:
    root = s.gpgpusim_root or os.environ.get("AUTODISCOVERY_GPGPUSIM_ROOT") or os.environ.get("GPGPUSIM_ROOT")
    hint = ("build GPGPU-Sim (github.com/accel-sim/gpgpu-sim_distribution, its README) and set "
            "AUTODISCOVERY_GPGPUSIM_ROOT to the checkout (or harness.gpgpusim_root)")
    return Found("GPGPU-Sim", root if root and Path(root).is_dir() else None, hint)


def find_libcudart(root: str | None) -> Found:
    hint = "build GPGPU-Sim (`source setup_environment release && make`): its lib/ holds libcudart.so"
    if root:
        libs = sorted(Path(root, "lib").glob("**/libcudart.so*"))
        if libs:
            return Found("GPGPU-Sim libcudart", str(libs[0]), hint)
    return Found("GPGPU-Sim libcudart", None, hint)


RENDERED = "rendered from the platform model"


def find_config(s: AccelsimSettings) -> Found:
    """A user's own base config, if one is named; else the config is rendered from the platform model
    (so this is never missing unless a named file is)."""
    named = s.base_config or os.environ.get("AUTODISCOVERY_SIM_CONFIG")
    if not named:
        return Found("base gpgpusim.config", RENDERED, "")
    hint = f"{named} does not exist: fix harness.base_config / AUTODISCOVERY_SIM_CONFIG, or unset it"
    return Found("base gpgpusim.config", named if Path(named).is_file() else None, hint)


def find_accelsim(s: AccelsimSettings) -> Found:
    root = s.accelsim_root or os.environ.get("AUTODISCOVERY_ACCELSIM_ROOT") or os.environ.get("ACCELSIM_ROOT")
    hint = "for trace mode: build Accel-Sim (accel-sim-framework) and set AUTODISCOVERY_ACCELSIM_ROOT"
    if root:
        exe = Path(root, "gpu-simulator/bin/release/accel-sim.out")
        if exe.is_file():
            return Found("accel-sim.out (trace mode)", str(exe), hint)
    found = shutil.which("accel-sim.out")
    return Found("accel-sim.out (trace mode)", found, hint)


def survey(s: AccelsimSettings) -> list[Found]:
    root = find_root(s)
    return [root, find_libcudart(root.path), find_config(s), find_nvcc11(s), find_accelsim(s)]
