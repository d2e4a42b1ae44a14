"""nvcc builds of device code to a cubin, cached by source, compiler, flags and target."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

from autodiscovery import AutoDiscoveryError

ENTRY_RE = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
PROPS_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED_RE = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


class ToolchainError(AutoDiscoveryError):
    pass


@dataclass
class BuildReport:
    ok: bool
    cache_key: str
    cubin: str | None = None
    registers: int | None = None
    smem_static: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack: int | None = None
    has_hgmma: bool | None = None
    compiler: str = ""
    flags: list[str] = field(default_factory=list)
    log: str = ""
    seconds: float = 0.0
    cached: bool = False

    def facts(self) -> dict:
        """What the store keeps of a build."""
        d = asdict(self)
        for k in ("cubin", "cached"):
            d.pop(k)
        return d


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


def parse_ptxas(log: str, entry: str | None = None) -> dict:
    """Registers, static smem, stack and spills of `entry` (or the first entry) from `-Xptxas -v`."""
    facts: dict = {}
    current = None
    for line in log.splitlines():
        if m := ENTRY_RE.search(line):
            current = m.group(1)
            continue
        if entry is not None and current not in (entry, None):
            continue
        if m := PROPS_RE.search(line):
            facts.setdefault("stack", int(m.group(1)))
            facts.setdefault("spill_stores", int(m.group(2)))
            facts.setdefault("spill_loads", int(m.group(3)))
        elif m := USED_RE.search(line):
            facts.setdefault("registers", int(m.group(1)))
            facts.setdefault("smem_static", int(m.group(2) or 0))
        if entry is None and "registers" in facts and "stack" in facts:
            break
    return facts


def gencode(arch: str) -> list[str]:
    num = arch.removeprefix("sm_")
    return ["-gencode", f"arch=compute_{num},code=sm_{num}"]


class Builder:
    """Compiles sources to cubins under `cache_dir`; safe to call from several threads."""

    def __init__(self, cache_dir: str | Path, nvcc: str = "nvcc", flags: list[str] | None = None,
                 arch: str = "sm_90a", timeout_s: float = 300.0) -> None:
        self.cache_dir = Path(cache_dir)
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
        h = hashlib.sha256()
        for part in (source, self.compiler, " ".join(self.all_flags()), self.arch):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def build(self, source: str, entry: str | None = None) -> BuildReport:
        key = self.key(source)
        folder = self.cache_dir / key[:2] / key
        report_file = folder / "report.json"
        if report_file.exists():
            report = BuildReport(**json.loads(report_file.read_text()))
            report.cached = True
            report.cubin = str(folder / "kernel.cubin") if report.ok else None
            if report.ok and report.has_hgmma is None and cuobjdump(self.nvcc):  # built where cuobjdump was missing
                report.has_hgmma = self._has_hgmma(folder / "kernel.cubin")
                report_file.write_text(json.dumps(report.facts() | {"cubin": None}, indent=1))
            return report
        tmp = folder.with_name(f"{key}.tmp{os.getpid()}.{time.monotonic_ns()}")
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "kernel.cu").write_text(source)
        cmd = [self.nvcc, *self.all_flags(), "-o", "kernel.cubin", "kernel.cu"]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=self.timeout_s)
            log, ok = proc.stdout + proc.stderr, proc.returncode == 0
        except subprocess.TimeoutExpired:  # says nothing about the source (a loaded machine): never cached
            shutil.rmtree(tmp, ignore_errors=True)
            return BuildReport(ok=False, cache_key=key, compiler=self.compiler, flags=self.all_flags(),
                               log=f"nvcc did not finish within {self.timeout_s:.0f} s",
                               seconds=round(time.perf_counter() - start, 3))
        report = BuildReport(ok=ok, cache_key=key, compiler=self.compiler, flags=self.all_flags(),
                             log=log.strip(), seconds=round(time.perf_counter() - start, 3))
        if ok:
            for k, v in parse_ptxas(log, entry).items():
                setattr(report, k, v)
            report.has_hgmma = self._has_hgmma(tmp / "kernel.cubin")
        (tmp / "report.json").write_text(json.dumps(report.facts() | {"cubin": None}, indent=1))
        if folder.exists():
            shutil.rmtree(tmp, ignore_errors=True)  # another thread finished the same build first
        else:
            tmp.rename(folder)
        if ok:
            report.cubin = str(folder / "kernel.cubin")
        return report

    def cubin_path(self, report: BuildReport) -> Path:
        return self.cache_dir / report.cache_key[:2] / report.cache_key / "kernel.cubin"

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
