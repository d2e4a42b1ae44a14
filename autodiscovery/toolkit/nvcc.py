"""nvcc for every harness: which nvcc it is, and a build of a candidate into the build cache.

A build runs in an empty folder of the cache holding only the candidate, with `PATH` and a C locale as
its whole environment (`sandbox.build_env`); a candidate the sandbox refuses is never compiled; the log
keeps the compiler's diagnostics about the candidate's own file (and ptxas's), from which the registers,
shared memory, spills and stack of the entry are read. A compile error is kept in the cache; a compiler
that ran out of time is not.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

from autodiscovery import AutoDiscoveryError
from autodiscovery.toolkit import sandbox
from autodiscovery.toolkit.build import BuildCache, BuildReport, parse_ptxas


class ToolchainError(AutoDiscoveryError):
    pass


@cache
def release(nvcc: str) -> str | None:
    """The CUDA release of an nvcc ('13.0'), or None where it is not there or does not answer."""
    exe = shutil.which(nvcc) or nvcc
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


@cache
def version(nvcc: str) -> str:
    """'nvcc 13.0.88': the full version, as fingerprints and build keys record it."""
    exe = shutil.which(nvcc)
    if exe is None:
        raise ToolchainError(f"nvcc not found ('{nvcc}' is not on PATH): install the CUDA toolkit 12.8+")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return f"nvcc {m.group(2)}" if m else out.strip().splitlines()[-1]


def build(cache_: BuildCache, key: str, source: str, nvcc: str, flags: list[str], *, name: str, artifact: str,
          compiler: str, entry: str | None = None, timeout_s: float = 300.0,
          headers: frozenset[str] = sandbox.CUDA_HEADERS, inspect: Callable[[Path], dict] | None = None) -> BuildReport:
    """`source` built by `nvcc flags -o artifact name` into the cache under `key` (or the cached result):
    `name` is the file the source is written to, `artifact` the cache's artifact name; `headers` the
    includes the sandbox allows beyond the toolkit's (a whole program's host headers); `inspect` reads
    the harness's own facts off a built artifact (kept with the build)."""
    if (refused := sandbox.refusal(source, headers)) is not None:  # never compiled, whoever asks
        return BuildReport(ok=False, cache_key="", log=f"refused before compiling: {refused}")
    if (report := cache_.get(key)) is not None:
        return report
    work = cache_.workdir(key)
    (work / name).write_text(source)
    exe = shutil.which(nvcc)
    if exe is None:  # it was there when its version was read (kept for the process), and is gone
        raise ToolchainError(f"nvcc not found ('{nvcc}' is not on PATH): install the CUDA toolkit 12.8+")
    report = BuildReport(ok=False, cache_key=key, compiler=compiler, flags=list(flags))
    start = time.perf_counter()
    try:
        proc = subprocess.run([exe, *flags, "-o", artifact, name], cwd=work, capture_output=True, text=True,
                              timeout=timeout_s, env=sandbox.build_env(str(Path(exe).parent)))
        report.ok = proc.returncode == 0
        report.log = sandbox.own_diagnostics((proc.stdout + proc.stderr).strip(), name)
    except subprocess.TimeoutExpired:
        report.log, report.timed_out = f"nvcc did not finish within {timeout_s:.0f} s", True
    report.seconds = round(time.perf_counter() - start, 3)
    if report.ok and not (work / artifact).is_file():
        report.ok = False
        report.log = f"{report.log}\nnvcc exited 0 but wrote no {artifact}".strip()
    if report.ok:
        for k, v in parse_ptxas(report.log, entry).items():
            setattr(report, k, v)
        if inspect is not None:
            report.facts.update(inspect(work / artifact))
    return cache_.put(key, report, work)


def doctor(nvcc: str, gpu_label: str, probe: Callable[[], str],
           sanitize: bool = False) -> list[tuple[str, str | None, str, bool]]:
    """`doctor`'s rows for a harness that builds with nvcc and runs on an NVIDIA GPU: nvcc, the driver,
    compute-sanitizer where kept kernels are run under it (`sanitize`), and the GPU as `probe` (the
    harness's own preflight) finds it, so that doctor and run agree."""
    import ctypes.util

    try:
        found = version(nvcc)
    except ToolchainError:
        found = None
    driver = ctypes.util.find_library("cuda")
    gpu, why = None, "needs nvcc and the driver above"
    if found and driver:
        try:
            gpu = probe()
        except AutoDiscoveryError as exc:
            why = str(exc)
    rows = [("nvcc (CUDA 12.8+)", found, "install the CUDA toolkit and put nvcc on PATH", True),
            ("NVIDIA driver (libcuda)", driver, "install the NVIDIA driver", True)]
    if sanitize:
        from autodiscovery.toolkit.sanitize import locate

        rows.append(("compute-sanitizer", locate(nvcc), "install the CUDA toolkit's compute-sanitizer (kept kernels "
                     "run under it first), or set harness.sanitize=false", True))
    return [*rows, (gpu_label, gpu, why, True)]
