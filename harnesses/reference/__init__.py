"""The reference harness: any CUDA op, checked and timed against the user's PyTorch module.

The problem is a Python file in KernelBench's format (`problem.file`, with `problem.sizes` and
`problem.dtype` to change it). A candidate is device code with a launch manifest (`manifest.py`): the
harness allocates every tensor and launches the kernels itself, so no host code of a candidate runs.
The parent process imports no PyTorch: what the problem is comes from a probe in the evaluation child
(`worker.py`), kept in the run's fingerprint, and every evaluation runs in a fresh child with a hard
timeout: the gate on fresh inputs of several distributions, then timing interleaved with the reference
in PyTorch eager and compiled, every launch checked, a time under the roofline floor refused.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

from autodiscovery import ROOT, AutoDiscoveryError, registry
from autodiscovery.campaign import SEEDS, Campaign, validated
from autodiscovery.interfaces import Entry, History, Objective, Outcome
from autodiscovery.status import EvalStatus
from autodiscovery.toolkit import child, sandbox, triton_rule
from autodiscovery.toolkit import nvcc as toolkit_nvcc
from autodiscovery.toolkit import preflight as host
from autodiscovery.toolkit import sanitize as sanitizer
from autodiscovery.toolkit.build import BuildCache, BuildReport, build_key
from autodiscovery.toolkit.preflight import HarnessError
from autodiscovery.toolkit.text import first_line
from harnesses.reference import manifest, problem, report
from harnesses.reference.problem import PROBLEM_FAILED
from harnesses.reference.settings import Problem, Settings

__all__ = ["ReferenceHarness", "HarnessError"]
HELPERS = Path(__file__).parent / "kernels" / "helpers.cu"
WORKER = "harnesses.reference.worker"


def _objective(baseline: str) -> Objective:
    name = {"eager": "PyTorch eager", "compile": "torch.compile"}[baseline]
    return Objective(f"× {baseline}", higher_is_better=True, path=("speedup", baseline, "median"), spec=".3f",
                     interval=(("speedup", baseline, "ci_low"), ("speedup", baseline, "ci_high")),
                     reference=1.0, reference_name=name, noise=0.03)


class ReferenceHarness:
    """Its roles: all but the search's fit, profiles and the report's tables (`autodiscovery.roles`)."""

    name = "reference"
    needs_gpu = True
    Settings = Settings
    Problem = Problem
    objective = _objective("eager")
    columns = report.columns("eager")
    resumable = ("timeout_s", "build_workers", "cache_dir", "compile", "sanitize", "sanitize_timeout_s")
    toolchain = ("nvcc", "torch", "cuda_runtime")
    charts = staticmethod(report.charts)

    def __init__(self, campaign: Campaign) -> None:
        self.settings = validated(campaign.harness, Settings)
        self.problem = validated(campaign.problem, Problem)
        self.static = problem.read(self.problem.file, self.problem.sizes)
        self.facts: dict = {"sizes": self.static.sizes, "input_names": self.static.inputs}
        """What the problem is: its sizes and input names from its text, then everything the probe found."""
        cache = Path(self.settings.cache_dir)
        self.cache_dir = cache if cache.is_absolute() else ROOT / cache
        self.cache = BuildCache(self.cache_dir, "kernel.cubin")
        self.build_workers = self.settings.build_workers
        self.seed_hint = _seed_hint(campaign, self.settings.languages)
        """Where the campaign's seed is in a language it does not take: the shipped seed that is ('')."""
        self.sms = 132
        self._helpers: str | None = None
        self._meta: tuple[dict, str] | None = None
        """The module's inputs, parameters and outputs from the meta device, or why not (`_meta_facts`)."""

    @property
    def sanitizes(self) -> bool:
        return self.settings.sanitize

    # ---- before anything runs -------------------------------------------------------------
    def preflight(self, need_gpu: bool = True) -> dict:
        s = self.settings
        fp = host.toolchain(s.nvcc, s.arch)
        if not need_gpu:
            return fp
        host.driver("a GPU", s.nvcc, s.sanitize)
        out = self._child({"mode": "probe"}, timeout_s=max(s.timeout_s, 300))
        if out.status == PROBLEM_FAILED:
            raise HarnessError(out.log)
        if out.status != EvalStatus.ok:
            why = first_line(out.log) or out.status
            if "No module named 'torch'" in out.log:
                why = "PyTorch is not installed where the evaluations run (the reference harness runs the problem's module)"
            raise HarnessError(f"the problem could not be probed on this machine: {why}")
        facts = out.metrics
        machine = {k: facts[k] for k in ("gpu", "sms", "cc", "l2_bytes", "memory_bytes", "smem_per_block",
                                          "max_sm_clock_mhz", "peak_gbps", "peak_tflops", "torch", "cuda_runtime")}
        fp |= machine | {"problem": {k: v for k, v in facts.items() if k not in machine}}
        self.adopt(fp)
        return fp

    def adopt(self, fingerprint: dict) -> None:
        if "problem" in fingerprint:
            machine = {k: fingerprint[k] for k in ("l2_bytes", "smem_per_block", "peak_gbps", "peak_tflops", "gpu")
                       if k in fingerprint}
            self.facts = dict(fingerprint["problem"]) | machine
            self.sms = fingerprint.get("sms", self.sms)

    @staticmethod
    def doctor(campaign: Campaign) -> list[tuple[str, str | None, str, bool]]:
        def probe() -> str:
            fp = registry.make_harness(campaign).preflight()
            return f"{fp['gpu']}, PyTorch {fp['torch']}"

        settings = validated(campaign.harness, Settings)
        rows = toolkit_nvcc.doctor(settings.nvcc, "GPU (the problem probed on it)", probe, settings.sanitize)
        return [*rows[:-1], ("PyTorch", _torch(), "pip install torch (a build for this machine's CUDA): the "
                             "problem's module is the reference every candidate is checked against", True), rows[-1]]

    # ---- static checks and builds -----------------------------------------------------------
    @staticmethod
    def manifest(source: str) -> manifest.Manifest | manifest.TritonManifest:
        return manifest.parse(source)  # the module's: a method's body does not see the class's names

    def entries(self, plan: dict) -> list[Entry]:
        """Each launch's kernel and its arguments: a tensor is a pointer (8 bytes), a scalar its type's (none
        for a Triton candidate: there is no cubin before its first launch)."""
        if plan.get("language") == "triton":
            return []
        size = {"tensor": 8, "i32": 4, "i64": 8, "f32": 4, "f64": 8}
        known = {*self.facts.get("input_names", []), *(i["name"] for i in self.facts.get("inputs", [])),
                 *(p["name"] for p in self.facts.get("params", [])), *(t["name"] for t in plan["outputs"]),
                 *(t["name"] for t in plan["scratch"])}
        return [Entry(launch["kernel"], [size[kind] for kind, _ in launch["args"]], f"launches[{i}]",
                      [name for kind, name in launch["args"] if kind == "tensor" and name not in known])
                for i, launch in enumerate(plan["launches"])]

    def check(self, source: str) -> dict:
        """The candidate's plan for this problem; ManifestError says why not (RefusedSource: it could read
        the host). Before the GPU has probed the problem, its outputs and parameters come from a forward on
        PyTorch's meta device (`meta.py`), where PyTorch is installed."""
        language = "triton" if manifest.is_triton(source) else "cuda"
        if language not in self.settings.languages:
            raise manifest.ManifestError(f"a {'Triton' if language == 'triton' else 'CUDA'} candidate: this campaign takes "
                                         f"{' and '.join(self.settings.languages)} candidates only (harness.languages)"
                                         f"{self.seed_hint}")
        if language == "triton":
            triton_rule.check(source, "the Triton candidate")
        else:
            sandbox.check(source)
        return manifest.resolve(manifest.parse(source), self.facts | self._meta_facts(), self.sms)

    def _meta_facts(self) -> dict:
        if "outputs" in self.facts:
            return {}
        if self._meta is None:
            from harnesses.reference import meta

            found, why = meta.facts(str(self.static.path), self.static.sizes, self.problem.dtype)
            self._meta = (found or {}, why)
        return self._meta[0]

    def check_notes(self) -> list[tuple[str, bool]]:
        if "outputs" in self.facts or self._meta is None:
            return []
        found, why = self._meta
        if not found:
            return [(f"outputs not checked: {why}", False)]
        outs = ", ".join(f"{o['dtype']} {o['shape']}" for o in found["outputs"])
        return [(f"outputs and argument names checked against the module on PyTorch's meta device (it returns "
                 f"{outs})", True)]

    def build(self, source: str) -> BuildReport:
        if manifest.is_triton(source):
            return self._triton_file(source)
        from harnesses.hopper_gemm.build import gencode

        s = self.settings
        flags = ["-cubin", *gencode(s.arch), *s.nvcc_flags, "-Xptxas", "-v"]
        compiler = toolkit_nvcc.version(s.nvcc)
        key = build_key(source, compiler, " ".join(flags), s.arch)
        return toolkit_nvcc.build(self.cache, key, source, s.nvcc, flags, name="kernel.cu", artifact="kernel.cubin",
                                  compiler=compiler)

    def _triton_file(self, source: str) -> BuildReport:
        """A Triton candidate's build: the static rule again; Triton's compile of every launch for the target
        where Triton is installed here (in a child process, `triton_compile.py`), as nvcc builds a CUDA one;
        the file kept in the cache, where the evaluation child imports it and compiles it for the GPU."""
        from harnesses.reference import triton_compile

        try:
            kernels = triton_rule.check(source, "kernel.py")
            plan = self.check(source)
        except AutoDiscoveryError as exc:
            return BuildReport(ok=False, cache_key="", log=str(exc), compiler="triton")
        known = self.facts | self._meta_facts()  # the probe's, else the meta device's (`check` asked for them)
        dtypes = {t["name"]: t["dtype"] for t in [*known.get("inputs", []), *known.get("params", []),
                                                  *plan["outputs"], *plan["scratch"]]}
        compiles = triton_compile.available() and all(
            kind != "tensor" or value in dtypes for launch in plan["launches"] for kind, value in launch["args"])
        key = build_key(source, "triton" + (" compiled" if compiles else ""), json.dumps(plan, sort_keys=True),
                        self.settings.arch)
        files = BuildCache(self.cache_dir / "triton-files", "kernel.py")
        cached = files.get(key)
        if cached is not None:
            return cached
        work = files.workdir(key)
        (work / "kernel.py").write_text(source)
        facts: dict = {"language": "triton", "kernels": kernels}
        compiler = "Triton (not installed here: compiled on the GPU's machine)"
        if compiles:
            ok, said, compiled = triton_compile.compile_file(str(work / "kernel.py"), plan, dtypes, self.settings.arch)
            if not ok:
                return BuildReport(ok=False, cache_key=key, log=said, compiler="triton")
            compiler, facts["compiled"] = f"{said} for {self.settings.arch}", compiled
            if said.split()[-1] != triton_compile.MEASURED:
                facts["notes"] = [f"{said} here, where the project's Triton candidates were measured with Triton "
                                  f"{triton_compile.MEASURED} (`pip install -e '.[triton]'`): it builds as it is"]
        elif triton_compile.available():
            compiler = "Triton (not compiled here: the inputs' dtypes are known once PyTorch runs the module)"
        report = BuildReport(ok=True, cache_key=key, compiler=compiler, facts=facts)
        return files.put(key, report, work)

    # ---- measurements ---------------------------------------------------------------------
    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        return self._measure("benchmark", {"candidate": (source, build)})

    def head_to_head(self, challenger: tuple[str, BuildReport], incumbent: tuple[str, BuildReport]) -> Outcome:
        return self._measure("head_to_head", {"challenger": challenger, "incumbent": incumbent})

    def sanitize(self, source: str, build: BuildReport) -> Outcome | None:
        """compute-sanitizer's four tools on the candidate, each buffer an allocation of its own
        (`toolkit/sanitize.py`); None where harness.sanitize is off."""
        if not self.settings.sanitize:
            return None
        exe = sanitizer.locate(self.settings.nvcc)
        ready = self._ready(source, build)
        if isinstance(ready, Outcome):
            return ready
        if exe is None:
            return Outcome(EvalStatus.crashed, log="compute-sanitizer not found (on PATH or beside nvcc)")
        kernels = list(dict.fromkeys(launch["kernel"] for launch in ready["plan"]["launches"]))
        with child.posted(self._job({"mode": "sanitize", "kernels": {"candidate": ready}})) as folder:
            out = sanitizer.run(exe, child.command(WORKER, folder, "{tool}.json"), ROOT, self._env(), kernels,
                                self.settings.sanitize_timeout_s)
        out.device = self.facts.get("gpu", "")
        return out

    def replay(self, items: list[tuple[str, BuildReport]]) -> list[Outcome]:
        """Several kernels in one evaluation process, each gated and timed against the reference."""
        refused: dict[int, Outcome] = {}
        runnable: dict[str, dict] = {}
        for i, (source, build) in enumerate(items):
            ready = self._ready(source, build)
            if isinstance(ready, Outcome):
                refused[i] = ready
            else:
                runnable[f"step{i}"] = ready
        if not runnable:
            return [refused[i] for i in range(len(items))]
        out = self._child({"mode": "replay", "kernels": runnable}, self.settings.timeout_s * len(runnable))
        steps = out.metrics.get("steps", {}) if out.status == EvalStatus.ok else {}

        def measured(i: int) -> Outcome:
            r = steps.get(f"step{i}") or {"status": out.status, "log": out.log}
            return self._outcome(r, out.seconds, out.device)

        return [refused[i] if i in refused else measured(i) for i in range(len(items))]

    def _ready(self, source: str, build: BuildReport) -> dict | Outcome:
        if not build.ok or not build.artifact:
            return Outcome(EvalStatus.compile_error, log=build.log)
        try:
            return {"cubin": build.artifact, "plan": self.check(source)}
        except AutoDiscoveryError as exc:
            return Outcome(EvalStatus.rejected, log=str(exc))

    def _measure(self, mode: str, kernels: dict) -> Outcome:
        specs = {}
        for name, (source, build) in kernels.items():
            ready = self._ready(source, build)
            if isinstance(ready, Outcome):
                return ready
            specs[name] = ready
        out = self._child({"mode": mode, "kernels": specs}, self.settings.timeout_s)
        return self._outcome({"status": out.status, "metrics": out.metrics, "log": out.log}, out.seconds, out.device)

    def _outcome(self, r: dict, seconds: float, device: str) -> Outcome:
        metrics = r.get("metrics", {})
        status = EvalStatus.crashed if r["status"] == PROBLEM_FAILED else r["status"]
        score = self.objective.read(metrics) if status == EvalStatus.ok else None
        return Outcome(status, metrics, r.get("log", ""), seconds, metrics.get("device", device), score)

    def _job(self, job: dict) -> dict:
        """A job with what travels with every one: the problem, the settings, the facts and the harness's
        own kernel (kernels/helpers.cu, built once)."""
        p = self.problem
        return {"problem": {"path": str(self.static.path), "sizes": self.static.sizes, "dtype": p.dtype},
                "seed": random.SystemRandom().randrange(2**31), "settings": self.settings.model_dump(mode="json"),
                "facts": self.facts, "helpers": self.helpers() if job.get("mode") != "probe" else None, **job}

    def helpers(self) -> str:
        if self._helpers is None:
            built = self.build(HELPERS.read_text())
            if not built.ok or not built.artifact:
                raise HarnessError(f"the harness's own kernel does not build: {first_line(built.log)}")
            self._helpers = built.artifact
        return self._helpers

    def _env(self) -> dict[str, str]:
        """The child's environment: PyTorch's compiled kernels cached beside the harness's builds."""
        return child.environment(TORCHINDUCTOR_CACHE_DIR=str(self.cache_dir / "inductor"),
                                 TRITON_CACHE_DIR=str(self.cache_dir / "triton"))

    def _child(self, job: dict, timeout_s: float) -> Outcome:
        """One evaluation child (`toolkit/child.py`); what it printed is kept in the log of a failure alone
        (PyTorch's warnings are no news)."""
        out = child.run(WORKER, self._job(job), timeout_s, self._env(), lines=10, quiet_ok=True)
        out.device = self.facts.get("gpu", "")
        return out

    # ---- what the LLM agent is told ----------------------------------------------------------
    def brief(self, fingerprint: dict) -> str:
        return report.brief(self, fingerprint)

    def hardware(self, fingerprint: dict, history: History) -> str:
        return report.hardware(self, fingerprint, history)

    @staticmethod
    def build_notes(facts: dict) -> list[str]:
        """None beyond the compiler's report: a reference build's facts are its modules and kernels."""
        return []

    def prompt_profile(self, seq: int, profile: dict) -> str:
        """'': this harness runs no profiler."""
        return ""

    @classmethod
    def for_config(cls, config: dict) -> type[ReferenceHarness]:
        """`harness.baseline: compile` measures the speed-up over torch.compile: another objective."""
        return ReferenceHarnessCompile if (config.get("harness") or {}).get("baseline") == "compile" else cls


class ReferenceHarnessCompile(ReferenceHarness):
    """A reference run whose objective is the speed-up over `torch.compile` (harness.baseline compile)."""

    objective = _objective("compile")
    columns = report.columns("compile")


def _seed_hint(campaign: Campaign, languages: Sequence[str]) -> str:
    """'; its seed naive.cu is CUDA: a Triton seed beside it is --set seed=softmax/triton.py' where the
    campaign's seed is in a language it does not take and a seed in one it does lies beside it; else ''."""
    seed = campaign.seed_path()
    language = "triton" if seed.suffix == ".py" else "cuda"
    if language in languages:
        return ""
    other = seed.with_name("triton.py" if "triton" in languages else "naive.cu")
    if not other.is_file():
        return ""
    shown = other.relative_to(SEEDS) if other.is_relative_to(SEEDS) else other
    return (f"; its seed {seed.name} is {'Triton' if language == 'triton' else 'CUDA'}: a "
            f"{'Triton' if 'triton' in languages else 'CUDA'} seed beside it is --set seed={shown}")


def _torch() -> str | None:
    """PyTorch's version where it is installed (found, not imported: importing it takes seconds)."""
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return None
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "installed"
