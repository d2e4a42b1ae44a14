"""A kernel checked against its campaign without a GPU: what `autodiscovery check` prints, and what
`measure` and `run --dry-run` do first.

The steps, each a line that says what held or what did not (naming the file and, for the manifest, the
line): the manifest read as the campaign's harness reads it; the sandbox and the launch plan at the
campaign's sizes (the `requires`, grids, blocks, shared memory, argument and output names, as far as
they are known before the GPU probes the problem); the build with nvcc; and the built cubin's kernels
against the plan: every kernel it launches defined, with the number and size of arguments it passes.
The first step that fails ends the check. Where the compiler is not there, the build and the cubin's
kernels are skipped, and the check says so and why; what came before them still holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autodiscovery import AutoDiscoveryError, registry
from autodiscovery.campaign import Campaign
from autodiscovery.roles import Checking, Evaluating, Inspecting
from autodiscovery.toolkit import cubin
from autodiscovery.toolkit.nvcc import ToolchainError
from autodiscovery.toolkit.text import plural


class CheckFailed(AutoDiscoveryError):
    pass


@dataclass
class Step:
    ok: bool
    name: str
    """manifest, plan, build or kernels."""
    text: str
    detail: str = ""
    """What goes with it (the compiler's diagnostics)."""
    note: bool = False
    """Not a failure, but worth a look (names taken on trust, a step skipped)."""


@dataclass
class KernelCheck:
    label: str
    """The kernel file, as the user named it."""
    campaign: str
    steps: list[Step] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.steps)

    def failure(self) -> str:
        """The failed step in one line, naming the file ('' when every step held)."""
        failed = next((s for s in self.steps if not s.ok), None)
        return f"{self.label}: {' '.join(failed.text.split())}" if failed else ""

    def add(self, ok: bool, name: str, text: str, detail: str = "", note: bool = False) -> None:
        self.steps.append(Step(ok, name, text, detail, note))


def check_file(kernel: str | Path, campaign: Campaign, harness: Evaluating | None = None) -> KernelCheck:
    """`check_source` of a kernel file; AutoDiscoveryError where there is no such file."""
    path = Path(kernel)
    if not path.is_file():
        raise AutoDiscoveryError(f"kernel file not found: {kernel}")
    return check_source(path.read_text(), str(kernel), campaign, harness)


def check_source(source: str, label: str, campaign: Campaign, harness: Evaluating | None = None) -> KernelCheck:
    """Every step a candidate's source goes through before a GPU sees it, against `campaign`."""
    harness = harness or registry.make_harness(campaign)
    report = KernelCheck(label, campaign.name)
    name = Path(label).name
    try:
        manifest = harness.manifest(source) if isinstance(harness, Inspecting) else None
    except AutoDiscoveryError as exc:
        report.add(False, "manifest", str(exc))
        return report
    if manifest is not None:
        report.add(True, "manifest", f"manifest read as the {harness.name} harness reads one")
    problem = campaign.problem.describe() or campaign.name
    if not isinstance(harness, Checking):
        report.add(True, "plan", f"skipped: the {harness.name} harness checks nothing before a build", note=True)
        plan = None
    else:
        try:
            plan = harness.check(source)
        except AutoDiscoveryError as exc:
            report.add(False, "plan", f"at {problem}: {exc}")
            return report
    sizes = ", ".join(f"{k}={v}" for k, v in campaign.problem.names().items())
    requires = list(manifest.requires) if manifest is not None else []  # none for a whole program
    held = f"; requires {', '.join(requires)} hold{'s' if len(requires) == 1 else ''}" if requires else ""
    if isinstance(harness, Checking):
        report.add(True, "plan", f"launch plan at {problem}" + (f" ({sizes})" if sizes else "") + held)
    entries = []
    if isinstance(harness, Inspecting):
        for line, checked in harness.check_notes():
            report.add(True, "module", line, note=not checked)
        entries = harness.entries(plan)
    trusted = sorted({name for e in entries for name in e.trusted})
    if trusted:
        report.add(True, "names", f"{', '.join(trusted)}: neither an input, an output nor a scratch buffer, taken to "
                                  "be the module's parameters or buffers until the GPU runs the problem (a misspelt "
                                  "name would be here)", note=True)
    try:
        build = harness.build(source)
    except ToolchainError as exc:  # no compiler here: what could be checked without it was
        report.add(True, "build", f"skipped: {exc}", note=True)
        report.add(True, "kernels", "skipped: no cubin to read without a build", note=True)
        return report
    if not build.ok or not build.artifact:
        log = (build.log or "").replace("kernel.cu", name).strip()
        lines = log.splitlines()
        error = next((line for line in lines if "error" in line), lines[0] if lines else "no compiler output")
        # The compiler's whole output below the line, where it says more than that line (Triton's, one line, not)
        more = log if [line.strip() for line in lines if line.strip()] != [error.strip()] else ""
        report.add(False, "build", f"does not compile: {error.strip()}", more)
        return report
    spills = (build.spill_stores or 0) + (build.spill_loads or 0)
    facts = [f"{build.registers} registers" if build.registers is not None else "",
             f"{spills} bytes spilled" if spills else ("no spills" if build.spill_stores is not None else "")]
    report.add(True, "build", f"built by {build.compiler or 'the compiler'}" +
               "".join(f", {f}" for f in facts if f) + (" (cached)" if build.cached else ""))
    for note in (build.facts or {}).get("notes", []):  # what the harness says of its build (a compiler's version)
        report.add(True, "build", note, note=True)
    if not entries:
        return report
    try:
        defined = cubin.kernels(build.artifact)
    except cubin.CubinError as exc:
        report.add(False, "kernels", f"the built cubin could not be read: {exc}")
        return report
    for entry in entries:
        launch = f"{entry.where} ({entry.kernel})" if entry.where else entry.kernel
        if entry.kernel not in defined:
            report.add(False, "kernels", f"{launch}: the cubin defines no kernel '{entry.kernel}' "
                                         f"({_defined(entry.kernel, defined)})")
            return report
        takes, passes = defined[entry.kernel], entry.arg_bytes
        if len(takes) != len(passes):
            report.add(False, "kernels", f"{launch}: the manifest passes {_args(passes)}, the kernel takes "
                                         f"{_args(takes)}")
            return report
        if takes != passes:
            i = next(i for i, (a, b) in enumerate(zip(passes, takes)) if a != b)
            report.add(False, "kernels", f"{launch}: argument {i + 1} of {len(takes)} is passed as {passes[i]} bytes, "
                                         f"the kernel's parameter is {takes[i]} bytes")
            return report
    names = sorted({e.kernel for e in entries})
    report.add(True, "kernels", f"the cubin defines {', '.join(names)}; each launch passes the arguments its "
                                "kernel takes (number and sizes)")
    return report


def _defined(kernel: str, defined: dict[str, list[int]]) -> str:
    """What the cubin has instead, with the likely cause where a C++ name holds the one looked for."""
    if not defined:
        return "it defines none: is the kernel __global__?"
    mangled = [d for d in defined if d.startswith("_Z") and kernel in d]
    if mangled:
        return f'it defines {mangled[0]}: declare the kernel extern "C"'
    return f"it defines {', '.join(sorted(defined))}"


def _args(sizes: list[int]) -> str:
    return plural(len(sizes), "argument") + (f" ({', '.join(map(str, sizes))} bytes)" if sizes else "")
