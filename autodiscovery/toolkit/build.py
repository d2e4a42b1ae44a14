"""Builds and their cache, shared by the harnesses.

A build is keyed by everything that decides its result (source, compiler, flags, target). The cache
keeps each result in a folder of its own: the artifact and `report.json`, moved into place in one
rename, so a reader never sees half a build. One policy for failures: a compile error is a fact about
the source and is kept; a compiler that ran out of time says nothing about it and is never kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ENTRY_RE = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
PROPS_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED_RE = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


@dataclass
class BuildReport:
    ok: bool
    cache_key: str
    artifact: str | None = None
    """The built file (a cubin, an executable); None when the build failed."""
    registers: int | None = None
    smem_static: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack: int | None = None
    facts: dict = field(default_factory=dict)
    """What the harness learnt of the artifact beyond the compiler's report (its own names)."""
    compiler: str = ""
    flags: list[str] = field(default_factory=list)
    log: str = ""
    seconds: float = 0.0
    cached: bool = False
    timed_out: bool = False

    def stored(self) -> dict:
        """What the store (and the cache's report.json) keeps of a build."""
        d = asdict(self)
        for k in ("artifact", "cached", "timed_out"):
            d.pop(k)
        return d


def build_key(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


class BuildCache:
    """Build results by key under one folder; safe to use from several threads and processes."""

    def __init__(self, root: str | Path, artifact: str) -> None:
        self.root = Path(root)
        self.artifact = artifact
        """The artifact's file name inside a build's folder."""

    def folder(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> BuildReport | None:
        folder = self.folder(key)
        try:
            facts = json.loads((folder / "report.json").read_text())
        except (OSError, ValueError):
            return None
        fields = BuildReport.__dataclass_fields__
        report = BuildReport(**{k: v for k, v in facts.items() if k in fields})
        report.facts = {**report.facts, **{k: v for k, v in facts.items() if k not in fields and v is not None}}
        report.cached = True  # a report kept before `facts` existed holds them at the top level
        report.artifact = str(folder / self.artifact) if report.ok else None
        return report

    def workdir(self, key: str) -> Path:
        """A fresh private folder to build in; `put` moves it into place."""
        tmp = self.root / key[:2] / f"{key}.tmp{os.getpid()}.{time.monotonic_ns()}"
        tmp.mkdir(parents=True)
        return tmp

    def put(self, key: str, report: BuildReport, workdir: Path) -> BuildReport:
        """Keep `report` and the artifact built in `workdir` (never a timed-out build)."""
        folder = self.folder(key)
        if report.timed_out:
            shutil.rmtree(workdir, ignore_errors=True)
            return report
        (workdir / "report.json").write_text(json.dumps(report.stored(), indent=1))
        try:
            workdir.rename(folder)
        except OSError:  # another thread or process finished the same build first
            shutil.rmtree(workdir, ignore_errors=True)
        report.artifact = str(folder / self.artifact) if report.ok else None
        return report

    def update(self, key: str, report: BuildReport) -> None:
        """Rewrite a kept report (facts learnt later, e.g. from a disassembler installed since)."""
        path = self.folder(key) / "report.json"
        tmp = path.with_name(f"report.json.tmp{os.getpid()}")
        tmp.write_text(json.dumps(report.stored(), indent=1))
        tmp.replace(path)


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
