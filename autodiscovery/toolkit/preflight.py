"""What a GPU harness checks of the machine before anything runs, and the error that says what is missing.

The toolchain (nvcc, which every build and a dry run need), then, for a run on the GPU, the driver and,
where kept kernels are run under it first, compute-sanitizer. What the GPU itself is, the harness learns
from an evaluation child of its own (`child.py`).
"""

from __future__ import annotations

import ctypes

from autodiscovery import AutoDiscoveryError
from autodiscovery.toolkit import nvcc as toolkit_nvcc
from autodiscovery.toolkit import sanitize as sanitizer


class HarnessError(AutoDiscoveryError):
    """A harness cannot run here, or cannot go on; the message names what is missing."""


def toolchain(nvcc: str, arch: str) -> dict:
    """The fingerprint's toolchain: nvcc's full version and the architecture built for."""
    try:
        return {"nvcc": toolkit_nvcc.version(nvcc), "arch": arch}
    except toolkit_nvcc.ToolchainError as exc:
        raise HarnessError(str(exc)) from None


def driver(gpu: str, nvcc: str, sanitize: bool) -> None:
    """The NVIDIA driver loadable (`gpu`: what the harness needs, as the message names it: 'a GPU'), and
    compute-sanitizer found where kept kernels are `sanitize`d first."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise HarnessError(f"no NVIDIA driver found (libcuda.so.1 is not loadable): this harness needs {gpu} "
                           "with its driver") from None
    if sanitize and sanitizer.locate(nvcc) is None:
        raise HarnessError("compute-sanitizer not found (on PATH or beside nvcc): kept kernels are run under it "
                           "first; install the CUDA toolkit's, or set harness.sanitize=false")
