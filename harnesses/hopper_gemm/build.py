"""nvcc builds of device code to a cubin, cached by source, compiler, flags and target."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path

from autodiscovery.toolkit import nvcc as toolkit_nvcc
from autodiscovery.toolkit.build import BuildCache, BuildReport, build_key, parse_ptxas
from autodiscovery.toolkit.nvcc import ToolchainError
from autodiscovery.toolkit.nvcc import version as nvcc_version

__all__ = ["Builder", "BuildReport", "ToolchainError", "cuobjdump", "gencode", "nvcc_version", "parse_ptxas"]


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
        key = self.key(source)
        report = toolkit_nvcc.build(self.cache, key, source, self.nvcc, self.all_flags(), name="kernel.cu",
                                    artifact="kernel.cubin", compiler=self.compiler, entry=entry,
                                    timeout_s=self.timeout_s,
                                    inspect=lambda cubin: {"has_hgmma": self._has_hgmma(cubin)})
        if report.cached and report.ok and report.artifact and report.facts.get("has_hgmma") is None \
                and cuobjdump(self.nvcc):
            report.facts["has_hgmma"] = self._has_hgmma(Path(report.artifact))  # built where it was missing
            self.cache.update(key, report)
        return report

    def _has_hgmma(self, cubin: Path) -> bool | None:
        tool = cuobjdump(self.nvcc)
        if tool is None:
            return None
        try:
            done = subprocess.run([tool, "--dump-sass", str(cubin)], capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return None
        # A cuobjdump of an older toolkit found on PATH cannot read an sm_90a cubin: it says so on stderr
        # (and may still exit 0) and prints no code. That leaves the fact unknown, not false.
        if done.returncode != 0 or "Function :" not in done.stdout:
            return None
        return "HGMMA" in done.stdout
