"""nvcc builds of device code to a cubin, cached by source, compiler, flags and target."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from functools import cache
from pathlib import Path

from autodiscovery import AutoDiscoveryError
from autodiscovery.toolkit import sandbox
from autodiscovery.toolkit.build import BuildCache, BuildReport, build_key, parse_ptxas

__all__ = ["Builder", "BuildReport", "ToolchainError", "cuobjdump", "gencode", "nvcc_version", "parse_ptxas"]


class ToolchainError(AutoDiscoveryError):
    pass


@cache
def nvcc_version(nvcc: str) -> str:
    exe = shutil.which(nvcc)
    if exe is None:
        raise ToolchainError(f"nvcc not found ('{nvcc}' is not on PATH): install the CUDA toolkit 12.8+")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return f"nvcc {m.group(2)}" if m else out.strip().splitlines()[-1]


@cache
def cuobjdump(nvcc: str) -> str | None:
    """cuobjdump beside nvcc or on PATH; the SASS check is skipped without it."""
    exe = shutil.which(nvcc)
    beside = Path(exe).parent / "cuobjdump" if exe else None
    if beside and beside.exists():
        return str(beside)
    return shutil.which("cuobjdump")


def gencode(arch: str) -> list[str]:
    num = arch.removeprefix("sm_")
    return ["-gencode", f"arch=compute_{num},code=sm_{num}"]


class Builder:
    """Compiles sources to cubins under `cache_dir`; safe to call from several threads."""

    def __init__(self, cache_dir: str | Path, nvcc: str = "nvcc", flags: list[str] | None = None,
                 arch: str = "sm_90a", timeout_s: float = 300.0) -> None:
        self.cache = BuildCache(cache_dir, "kernel.cubin")
        self.nvcc = nvcc
        self.flags = list(flags or ["-O3", "-std=c++17"])
        self.arch = arch
        self.timeout_s = timeout_s

    @property
    def compiler(self) -> str:
        return nvcc_version(self.nvcc)

    def all_flags(self) -> list[str]:
        return ["-cubin", *gencode(self.arch), *self.flags, "-Xptxas", "-v"]

    def key(self, source: str) -> str:
        return build_key(source, self.compiler, " ".join(self.all_flags()), self.arch)

    def build(self, source: str, entry: str | None = None) -> BuildReport:
        if (why := sandbox.refusal(source)) is not None:  # never compiled, whoever asks
            return BuildReport(ok=False, cache_key="", log=f"refused before compiling: {why}")
        key = self.key(source)
        report = self.cache.get(key)
        if report is not None:
            if report.ok and report.facts.get("has_hgmma") is None and cuobjdump(self.nvcc):  # built without it
                report.facts["has_hgmma"] = self._has_hgmma(Path(report.artifact))
                self.cache.update(key, report)
            return report
        work = self.cache.workdir(key)
        (work / "kernel.cu").write_text(source)
        cmd = [self.nvcc, *self.all_flags(), "-o", "kernel.cubin", "kernel.cu"]
        start = time.perf_counter()
        report = BuildReport(ok=False, cache_key=key, compiler=self.compiler, flags=self.all_flags())
        try:
            exe = shutil.which(self.nvcc) or self.nvcc
            proc = subprocess.run([exe, *cmd[1:]], cwd=work, capture_output=True, text=True, timeout=self.timeout_s,
                                  env=sandbox.build_env(str(Path(exe).parent)))
            report.ok = proc.returncode == 0
            report.log = sandbox.own_diagnostics((proc.stdout + proc.stderr).strip(), "kernel.cu")
        except subprocess.TimeoutExpired:
            report.log, report.timed_out = f"nvcc did not finish within {self.timeout_s:.0f} s", True
        report.seconds = round(time.perf_counter() - start, 3)
        if report.ok:
            for k, v in parse_ptxas(report.log, entry).items():
                setattr(report, k, v)
            report.facts["has_hgmma"] = self._has_hgmma(work / "kernel.cubin")
        return self.cache.put(key, report, work)

    def _has_hgmma(self, cubin: Path) -> bool | None:
        tool = cuobjdump(self.nvcc)
        if tool is None:
            return None
        try:
            out = subprocess.run([tool, "--dump-sass", str(cubin)], capture_output=True, text=True,
                                 timeout=120).stdout
        except subprocess.TimeoutExpired:
            return None
        return "HGMMA" in out
