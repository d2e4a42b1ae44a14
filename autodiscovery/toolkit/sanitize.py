"""A candidate run under NVIDIA's compute-sanitizer before it is kept: memcheck (accesses outside an
allocation, misaligned), racecheck (shared-memory hazards), synccheck (barriers not every thread
reaches) and initcheck (reads of global memory nothing wrote), one process each, side by side.

A harness supplies the command of an evaluation child that launches the candidate a few times on
buffers that are allocations of their own (a caching allocator's sub-allocations hide their bounds from
memcheck), and the candidate's kernel names. memcheck, racecheck and synccheck check only those kernels;
initcheck checks every kernel (a write by an unchecked kernel would look like no write at all) and a
finding counts only where it is in a candidate's kernel. Any finding blocks the keep.
"""

from __future__ import annotations

import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from autodiscovery.interfaces import Outcome
from autodiscovery.status import EvalStatus, ToolStatus
from autodiscovery.toolkit.child import read_result
from autodiscovery.toolkit.proc import Finished, run_child
from autodiscovery.toolkit.text import first_line, tail

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
PADDING = 16 << 20
"""Bytes memcheck leaves unmapped after every allocation (`--padding`): a write up to this far past a
buffer lands in no other buffer, so memcheck sees it, where without it the bytes 1 MiB past an output
may belong to its neighbour and pass for an access inside an allocation."""
PREFIX = "========= "
EXIT_ON_ERROR = 86
SKIP = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY", "Saved host backtrace",
        "Program hit", "Target application returned", "Error: process didn't terminate successfully")


def locate(nvcc: str = "nvcc") -> str | None:
    """compute-sanitizer on the PATH, else beside the nvcc in use (bin/, or the toolkit's own folder)."""
    if found := shutil.which("compute-sanitizer"):
        return found
    compiler = shutil.which(nvcc)
    if compiler:
        bin_dir = Path(os.path.realpath(compiler)).parent
        for cand in (bin_dir / "compute-sanitizer", bin_dir.parent / "compute-sanitizer" / "compute-sanitizer"):
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    return None


@dataclass
class Finding:
    """One error a tool reported: what (its first line) and where (the kernel and the lines after it)."""

    tool: str
    what: str
    kernel: str | None
    detail: list[str] = field(default_factory=list)

    def line(self) -> str:
        where = "; ".join(self.detail[:3])
        return f"{self.tool}: {self.what}" + (f" ({where})" if where else "")


def command(exe: str, tool: str, kernels: list[str], argv: list[str]) -> list[str]:
    cmd = [exe, "--tool", tool, "--error-exitcode", str(EXIT_ON_ERROR), "--print-limit", "20",
           "--show-backtrace", "no", "--report-api-errors", "no"]
    if tool != "initcheck":
        for k in kernels:
            cmd += ["--kernel-name", f"kne={k}"]  # the exact name (extern "C": not mangled)
    if tool == "racecheck":
        # One line a race (its accesses and hazard count), not one a hazard: a warp-synchronous reduction
        # over 2,048 blocks makes a million hazards, which "all" takes minutes to report and this seconds.
        cmd += ["--racecheck-report", "analysis"]
    if tool == "memcheck":
        cmd += ["--padding", str(PADDING)]
    return [*cmd, *argv]


AT = re.compile(r"\bat (?:0x[0-9a-f]+ in )?([A-Za-z_][\w:<>, ]*?)\+0x[0-9a-f]+")


def parse(tool: str, output: str, kernels: list[str]) -> list[Finding]:
    """The errors in a tool's report that lie in the candidate's kernels. A report is lines prefixed
    '========= ': an error's first line starts right after the prefix, its details are indented."""
    found: list[Finding] = []
    for raw in output.splitlines():
        if not raw.startswith(PREFIX.rstrip()):
            continue
        text = raw[len(PREFIX):] if raw.startswith(PREFIX) else ""
        if not text.strip():
            continue
        if not text.startswith(" "):
            if text.startswith(SKIP) or text.startswith("Host Frame"):
                found.append(Finding(tool, "", None))  # a block that is no error: its details are dropped
                continue
            found.append(Finding(tool, text.strip(), None))
            m = AT.search(text)
            if m:
                found[-1].kernel = m.group(1).strip()
            continue
        if found and found[-1].what:
            detail = text.strip()
            if detail.startswith(("Host Frame", "Device Frame", "Saved host backtrace")):
                continue
            found[-1].detail.append(detail)
            if found[-1].kernel is None and (m := AT.search(detail)):
                found[-1].kernel = m.group(1).strip()
    mine = set(kernels)

    def ours(f: Finding) -> bool:
        if f.kernel is None:  # no kernel named: only the filtered tools' reports are all the candidate's
            return tool != "initcheck"
        return f.kernel.split("(")[0].strip() in mine
    return [f for f in found if f.what and ours(f)]


def run(exe: str, argv: list[str], cwd: str | Path, env: dict[str, str], kernels: list[str],
        timeout_s: float, tools: tuple[str, ...] = TOOLS) -> Outcome:
    """Every tool on `argv` (an evaluation child whose last argument is its result file, with `{tool}` in
    it), side by side. `ok` only where every tool ran to its end, the child launched the candidate
    (its result says `ok`) and no tool found anything in the candidate's kernels; `incorrect` with the
    findings (a tool's findings count where it ran out of time after them); `timeout` where a tool ran
    out of time first; `crashed` where a tool or the child failed without a finding (a sanitizer that
    did not check is no clean bill)."""
    env = env | {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}

    def one(tool: str) -> tuple[str, Finished]:
        cmd = command(exe, tool, kernels, [a.replace("{tool}", tool) for a in argv])
        return tool, run_child(cmd, cwd, env, timeout_s, grace_s=30)

    with ThreadPoolExecutor(len(tools)) as pool:
        done = list(pool.map(one, tools))
    findings: list[Finding] = []
    tools_out: dict[str, dict] = {}
    logs, failed = [], []
    for tool, fin in done:
        mine = parse(tool, fin.output, kernels)
        findings += mine
        child = _result(argv[-1].replace("{tool}", tool))
        summary = any(marker in fin.output for marker in ("ERROR SUMMARY", "RACECHECK SUMMARY"))
        if mine:  # what a tool found before it ran out of time is found all the same
            status = ToolStatus.findings
        elif fin.timed_out:
            status = ToolStatus.timeout
        elif fin.returncode not in (0, EXIT_ON_ERROR) or not summary or child.get("status") != EvalStatus.ok:
            status = ToolStatus.failed
            failed.append(f"{tool}: " + (f"the child said {child.get('status')}: {first_line(child.get('log', ''))}"
                                         if child.get("status") not in (None, EvalStatus.ok) else
                                         f"exit code {fin.returncode}, {'no summary' if not summary else 'no result'}"))
        else:
            status = ToolStatus.clean
        tools_out[tool] = {"status": status, "errors": len(mine), "seconds": round(fin.seconds, 2)}
        if fin.timed_out:
            tools_out[tool]["timed_out"] = True
        logs.append(f"--- {tool}: {status} ({fin.seconds:.1f} s)\n" + tail(fin.output, 60))
    seconds = max((fin.seconds for _, fin in done), default=0.0)
    metrics = {"tools": tools_out, "findings": [f.line() for f in findings[:20]], "kernels": kernels}
    if findings:
        head = "; ".join(dict.fromkeys(f.line() for f in findings))
        return Outcome(EvalStatus.incorrect, metrics, f"compute-sanitizer found {len(findings)} error(s): {head}\n\n"
                       + "\n".join(logs), seconds)
    late = [t for t, v in tools_out.items() if v["status"] == ToolStatus.timeout]
    if late:
        return Outcome(EvalStatus.timeout, metrics, f"compute-sanitizer's {', '.join(late)} did not finish in "
                       f"{timeout_s:g} s\n\n" + "\n".join(logs), seconds)
    if failed:
        return Outcome(EvalStatus.crashed, metrics, "compute-sanitizer did not check the candidate: "
                       + "; ".join(failed) + "\n\n" + "\n".join(logs), seconds)
    return Outcome(EvalStatus.ok, metrics, "\n".join(logs), seconds)


def _result(path: str) -> dict:
    """The child's result, {} where it wrote none that reads."""
    try:
        return read_result(Path(path))
    except (OSError, ValueError):
        return {}
