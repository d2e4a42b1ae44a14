"""The hopper_gemm harness: BF16 GEMM candidates built for sm_90a and measured against cuBLAS.

The parent side lives here: static checks, parallel cached builds, and evaluations run in a child
process (`worker.py`) under a hard timeout, so a hang or a crash costs the child alone.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from autodiscovery import ROOT
from autodiscovery.campaign import Campaign, validated
from autodiscovery.interfaces import Entry, History, Objective, Outcome
from autodiscovery.status import EvalStatus
from autodiscovery.toolkit import child, sandbox
from autodiscovery.toolkit import nvcc as toolkit_nvcc
from autodiscovery.toolkit import preflight as host
from autodiscovery.toolkit.preflight import HarnessError
from autodiscovery.toolkit.text import first_line
from harnesses.hopper_gemm import report
from harnesses.hopper_gemm.build import Builder, BuildReport, ToolchainError
from harnesses.hopper_gemm.fit import Fit
from harnesses.hopper_gemm.fit import fit as shape_fit
from harnesses.hopper_gemm.manifest import Launch, ManifestError, parse, resolve
from harnesses.hopper_gemm.pool import DeviceLost, GpuPool, choose, where
from harnesses.hopper_gemm.settings import Problem, Settings, relative_tolerance

__all__ = ["HopperGemmHarness", "Outcome", "HarnessError", "DeviceLost", "ManifestError", "ToolchainError"]


HELPERS = Path(__file__).with_name("bench_kernels.cu")
WORKER = "harnesses.hopper_gemm.worker"


def _objective(baseline: str) -> Objective:
    """× the cuBLAS a campaign times against: cublasGemmEx (`× cuBLAS`) or the best cuBLASLt algorithm
    for the shape (`× best Lt`)."""
    name, reference = {"gemmex": ("× cuBLAS", "cuBLAS"), "best_lt": ("× best Lt", "the best cuBLASLt algorithm")}[baseline]
    return Objective(name, higher_is_better=True, path=("ratio", "median"), spec=".3f",
                     interval=(("ratio", "ci_low"), ("ratio", "ci_high")), reference=1.0, reference_name=reference,
                     noise=0.02, time=("ms", "candidate"))


class HopperGemmHarness:
    """Every role but the report's tables: see `autodiscovery.roles`."""

    name = "hopper_gemm"
    needs_gpu = True
    Settings = Settings
    Problem = Problem
    objective = _objective("gemmex")

    def __init__(self, campaign: Campaign) -> None:
        self.settings = validated(campaign.harness, Settings)
        self.problem = validated(campaign.problem, Problem)
        cache = Path(self.settings.cache_dir)
        self.builder = Builder(cache if cache.is_absolute() else ROOT / cache, self.settings.nvcc,
                               self.settings.nvcc_flags, self.settings.arch)
        self.build_workers = self.settings.build_workers
        self.sms = 132
        self.peak_tflops: float | None = None
        self.cluster_slots: dict[str, int] | None = None
        self.device = ""
        self.baseline: dict = {"kind": self.settings.baseline}
        self.best_lt: dict | None = None
        self._helpers: str | None = None
        self.pool = GpuPool()
        """The GPUs evaluations are pinned to (`pool.py`); none: the default device."""

    def __getstate__(self) -> dict:
        """Shipped to another process (a Ray task): the pool stays here; there, the GPU is the one the
        process was given."""
        return dict(self.__dict__) | {"pool": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, pool=GpuPool())

    @property
    def sanitizes(self) -> bool:
        return self.settings.sanitize

    @property
    def parallel(self) -> int:
        """Evaluations at once: one per GPU of the pool still answering."""
        return self.pool.parallel

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.problem.M, self.problem.N, self.problem.K

    # ---- before anything runs -------------------------------------------------------------
    def preflight(self, need_gpu: bool = True) -> dict:
        """The fingerprint of where the run happens; raises HarnessError naming what is missing."""
        s = self.settings
        fp = host.toolchain(s.nvcc, s.arch)
        if not need_gpu:
            return fp
        host.driver("an H100/H200", s.nvcc, s.sanitize)
        gpus = choose(s.gpus, self._child) if s.gpus is not None else None
        job = {"mode": "fingerprint", "baseline": s.baseline, "both": s.both_baselines, "shape": list(self.shape),
               "helpers": self.helpers()}
        out = self._child(job, timeout_s=180, gpu=gpus[0] if gpus else None)
        if out.status != EvalStatus.ok:
            raise HarnessError(f"no usable NVIDIA GPU: {first_line(out.log) or 'unknown error'}")
        fp |= {k: v for k, v in out.metrics.items() if k not in ("eval_wall_s", "device")}
        if not str(fp.get("cc", "")).startswith("9."):
            raise HarnessError(f"hopper_gemm needs a Hopper GPU (sm_90a); found {fp.get('gpu')} (cc {fp.get('cc')})")
        if gpus:
            self.pool = GpuPool.of(gpus, fp, self._child)
            fp["gpus"] = gpus
        self.adopt(fp)
        return fp

    def adopt(self, fingerprint: dict) -> None:
        """Take the device facts and the baseline choice of a recorded fingerprint."""
        # A dry run's fingerprint has no GPU in it: the defaults stay.
        self.sms, self.device = fingerprint.get("sms", self.sms), fingerprint.get("gpu", self.device)
        self.peak_tflops = fingerprint.get("peak_tflops", self.peak_tflops)
        self.cluster_slots = fingerprint.get("cluster_slots")  # blocks resident at once, by cluster size
        self.baseline = fingerprint.get("baseline", {"kind": "gemmex"})
        self.best_lt = fingerprint.get("best_lt") if self.baseline.get("kind") != "best_lt" else self.baseline
        """The cuBLASLt algorithm chosen for the shape (the baseline's or the one timed beside it), or None."""

    def helpers(self) -> str:
        """The cubin of the harness's own kernels (input draws, checks), built like a candidate, once."""
        if self._helpers is None:
            report = self.builder.build(HELPERS.read_text())
            if not report.ok or not report.artifact:
                why = first_line(report.log) or "unknown error"
                raise HarnessError(f"the harness's own kernels do not build: {why}")
            self._helpers = report.artifact
        return self._helpers

    def healthy(self, gpu: int | None = None) -> str | None:
        """None if the GPU still answers; else why not (after a crash or a timeout)."""
        out = self._child({"mode": "fingerprint"}, timeout_s=60, gpu=gpu)
        if out.status != EvalStatus.ok:
            return first_line(out.log) or "unknown error"
        if out.metrics.get("gpu") != self.device:
            return f"the GPU is now {out.metrics.get('gpu')}, not {self.device}"
        return None

    # ---- how its numbers are shown (report.py) --------------------------------------------------
    columns = report.columns("gemmex")
    resumable = ("timeout_s", "build_workers", "cache_dir", "ncu", "gpus", "sanitize", "sanitize_timeout_s")
    toolchain = ("nvcc", "driver", "cuda_driver", "cuda_runtime", "cublas")
    charts = staticmethod(report.charts)
    build_notes = staticmethod(report.build_notes)
    profile_section = staticmethod(report.profile_section)

    @classmethod
    def for_config(cls, config: dict) -> type[HopperGemmHarness]:
        """`harness.baseline: best_lt` measures × the best cuBLASLt algorithm: another objective."""
        return HopperGemmHarnessBestLt if (config.get("harness") or {}).get("baseline") == "best_lt" else cls

    @classmethod
    def identity(cls, fingerprint: dict) -> dict:
        out = {k: fingerprint[k] for k in ("gpu", "sms", "cc", "max_sm_clock_mhz", *cls.toolchain, "arch")
               if k in fingerprint}
        if isinstance(fingerprint.get("baseline"), dict):  # its kind and algorithm, not the timings that chose it
            b = fingerprint["baseline"]
            out["baseline"] = " ".join(str(b.get(k)) for k in ("kind", "algo_index") if k in b)
        return out

    def prompt_facts(self, fingerprint: dict) -> dict:
        """What the prompts say of the problem, its correctness bar, the compile line and the machine."""
        from harnesses.hopper_gemm.build import gencode

        p, s = self.problem, self.settings
        return {**report.machine(fingerprint), "M": p.M, "N": p.N, "K": p.K, "dtype_in": p.dtype_in,
                "dtype_out": p.dtype_out, "arch": s.arch,
                "tolerance": f"{relative_tolerance(s.tolerance, s.tolerance_per_sqrt_k, p.K):.2g}",
                "compile": " ".join(["nvcc -cubin", *gencode(s.arch), *s.nvcc_flags])}

    def brief(self, fingerprint: dict) -> str:
        return report.brief(self.prompt_facts(fingerprint)).rstrip("\n")

    def hardware(self, fingerprint: dict, history: History) -> str:
        inc = history.incumbent
        fitted = self.fit(inc.source) if inc is not None and inc.source else None
        return report.hardware(self.prompt_facts(fingerprint), history,
                               fitted.describe() if fitted else "").rstrip("\n")

    def prompt_profile(self, seq: int, profile: dict) -> str:
        return report.prompt_profile(seq, profile)

    @classmethod
    def doctor(cls, campaign: Campaign) -> list[tuple[str, str | None, str, bool]]:
        def probe() -> str:
            fp = cls(campaign).preflight()
            return f"{fp['gpu']} (cc {fp['cc']}, {fp['sms']} SMs)"

        settings = validated(campaign.harness, Settings)
        return toolkit_nvcc.doctor(settings.nvcc, "Hopper GPU (sm_90a)", probe, settings.sanitize)

    # ---- static checks and builds -----------------------------------------------------------
    space = "hopper_gemm"
    manifest = staticmethod(parse)

    def check_notes(self) -> list[tuple[str, bool]]:
        """Nothing beside the plan: its one kernel and arguments are what the cubin is compared with."""
        return []

    def entries(self, plan: Launch) -> list[Entry]:
        """The one kernel, its arguments: A, B, C, W pointers, M, N, K int32, a tensor map by value."""
        sizes = [8 if a in ("A", "B", "C", "W") else 4 if a in ("M", "N", "K") else 128 for a in plan.args]
        return [Entry(plan.kernel, sizes, "kernel")]

    def check(self, source: str) -> Launch:
        """The resolved launch for the campaign's shape; ManifestError says why not (RefusedSource: the
        candidate could read the host)."""
        sandbox.check(source)
        return resolve(parse(source), *self.shape, sms=self.sms)

    def fit(self, source: str, knobs: dict | None = None) -> Fit | None:
        """How a kernel's tiles fit the campaign's shape on this GPU (`fit.py`), by the tile its manifest
        states; None for one that states none or that this shape refuses. It reads the manifest only: a
        source the sandbox refuses is refused by `check` before it is built, not here (the search asks
        for hundreds of fits a proposal)."""
        try:
            launch = resolve(parse(source), *self.shape, sms=self.sms)
        except ManifestError:
            return None
        return shape_fit(launch, *self.shape, self.sms, self.peak_tflops, 2 if self.problem.dtype_out == "bf16" else 4,
                         self.cluster_slots)

    def build(self, source: str) -> BuildReport:
        try:
            entry = parse(source).kernel
        except ManifestError:
            entry = None
        return self.builder.build(source, entry)

    # ---- a library of tuned kernels ------------------------------------------------------------
    @classmethod
    def export_library(cls, items: list[dict], folder: Path) -> dict:
        """The best kernels of recorded runs as a library (`library.export`)."""
        from harnesses.hopper_gemm import library

        return library.export(cls, items, folder)

    # ---- measurements ---------------------------------------------------------------------
    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        """Gate the candidate, then time it against cuBLAS, interleaved, in a fresh child. With `bar`
        (the × cuBLAS to clear: the incumbent's, or cuBLAS's 1 for a run's first), a candidate below it
        is timed for fewer pairs (`screen.py`): a screened measurement, enough to revert, never to keep
        against an incumbent."""
        out = self._measure("benchmark", {"candidate": (source, build)}, bar=bar)
        if out.status == EvalStatus.ok and (fitted := self.fit(source)) is not None:
            out.metrics["fit"] = fitted.as_dict()  # the model's view of the shape, beside what was measured
        return out

    def head_to_head(self, challenger: tuple[str, BuildReport], incumbent: tuple[str, BuildReport]) -> Outcome:
        """Both kernels gated and timed against each other; ratio > 1 means the challenger is faster."""
        return self._measure("head_to_head", {"challenger": challenger, "incumbent": incumbent})

    def sanitize(self, source: str, build: BuildReport) -> Outcome | None:
        """compute-sanitizer's four tools on the candidate (`sanitized.py`); None where it is off."""
        from harnesses.hopper_gemm.sanitized import sanitized

        return sanitized(self, source, build)

    def calibrate(self, kernels: dict[str, tuple[str, BuildReport]], per_dist: int = 3) -> Outcome:
        """Each kernel's errors on every input distribution, failures included (`calibrate.py`)."""
        return self._measure("calibrate", kernels, per_dist=per_dist)

    def replay(self, items: list[tuple[str, BuildReport]]) -> list[Outcome]:
        """Several kernels measured again in one evaluation process: each gated, then all timed in one
        interleaved rotation with the baseline (a lineage replayed step by step)."""
        refused: dict[int, Outcome] = {}
        runnable: dict[str, tuple[str, BuildReport]] = {}
        for i, (source, build) in enumerate(items):
            if not build.ok or not build.artifact:
                refused[i] = Outcome(EvalStatus.compile_error, log=build.log)
                continue
            try:
                self.check(source)
            except (ManifestError, sandbox.RefusedSource) as exc:
                refused[i] = Outcome(EvalStatus.rejected, log=str(exc))
                continue
            runnable[f"step{i}"] = (source, build)
        if not runnable:
            return [refused[i] for i in range(len(items))]
        out = self._measure("replay", runnable)
        steps = out.metrics.get("steps", {}) if out.status == EvalStatus.ok else {}

        def measured(i: int) -> Outcome:
            r = steps.get(f"step{i}") or {"status": out.status, "log": out.log}
            metrics = r.get("metrics", {})
            score = self.objective.read(metrics) if r["status"] == EvalStatus.ok else None
            return Outcome(r["status"], metrics, r.get("log", ""), out.seconds, out.device, score)

        return [refused[i] if i in refused else measured(i) for i in range(len(items))]

    def profile(self, source: str, build: BuildReport) -> Outcome:
        """Nsight Compute on the candidate and on the baseline, same shape, same inputs: what each
        kernel spends its time on (metrics["profile"]: candidate, baseline)."""
        from harnesses.hopper_gemm import ncu

        with tempfile.TemporaryDirectory(prefix="autodiscovery-ncu-") as tmp:
            log = Path(tmp) / "ncu.csv"
            out = self._measure("profile", {"candidate": (source, build)},
                                prefix=ncu.command(self.settings.ncu, str(log)))
            if out.status != EvalStatus.ok:
                return out
            text = log.read_text() if log.exists() else ""
        try:
            out.metrics["profile"] = ncu.profile(text, out.metrics.get("kernel", ""))
        except ncu.ProfileError as exc:
            return Outcome(EvalStatus.crashed, out.metrics, f"profile: {exc}", out.seconds, out.device)
        return out

    def _measure(self, mode: str, kernels: dict[str, tuple[str, BuildReport]], prefix: Sequence[str] = (),
                 **extra: object) -> Outcome:
        specs = {}
        for name, (source, build) in kernels.items():
            if not build.ok or not build.artifact:
                return Outcome(EvalStatus.compile_error, log=build.log)
            try:
                specs[name] = {"cubin": build.artifact, "launch": self.check(source).model_dump()}
            except (ManifestError, sandbox.RefusedSource) as exc:
                return Outcome(EvalStatus.rejected, log=str(exc))
        job = {"mode": mode, "shape": list(self.shape), "kernels": specs, "helpers": self.helpers(),
               "settings": self.settings.model_dump(mode="json"), "lt_algo": (self.best_lt or {}).get("algo_index"), **extra}
        return self.pool.measure(lambda gpu: self._child(job, self.settings.timeout_s, prefix, gpu), self.healthy)

    def _child(self, job: dict, timeout_s: float, prefix: Sequence[str] = (), gpu: int | None = None) -> Outcome:
        """One evaluation child (`toolkit/child.py`), pinned to `gpu` (an index among the GPUs this process
        sees) if given; its metrics say how long it took and, in a pool, on which GPU, whatever it did."""
        out = child.run(WORKER, job, timeout_s, child.environment(gpu), prefix)
        out.device = where(out.metrics.get("device") or self.device, gpu)
        out.metrics["eval_wall_s"] = out.seconds
        if gpu is not None:
            out.metrics["gpu_index"] = gpu
        if out.status == EvalStatus.ok:
            out.score = self.objective.read(out.metrics)
        return out


class HopperGemmHarnessBestLt(HopperGemmHarness):
    """A hopper_gemm run whose objective is × the best cuBLASLt algorithm (harness.baseline best_lt)."""

    objective = _objective("best_lt")
    columns = report.columns("best_lt")
