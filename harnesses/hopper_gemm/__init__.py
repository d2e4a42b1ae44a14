"""The hopper_gemm harness: BF16 GEMM candidates built for sm_90a and measured against cuBLAS.

The parent side lives here: static checks, parallel cached builds, and evaluations run in a child
process (`worker.py`) under a hard timeout, so a hang or a crash costs the child alone.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import sys
import tempfile
from pathlib import Path

from autodiscovery import ROOT, AutoDiscoveryError
from autodiscovery.campaign import Campaign
from autodiscovery.interfaces import Entry, HarnessBase, Objective, Outcome
from autodiscovery.toolkit import nvcc as toolkit_nvcc
from autodiscovery.toolkit import sandbox
from autodiscovery.toolkit import sanitize as sanitizer
from autodiscovery.toolkit.proc import run_child
from autodiscovery.toolkit.text import first_line
from harnesses.hopper_gemm import report
from harnesses.hopper_gemm.build import (
    Builder,
    BuildReport,
    ToolchainError,
    nvcc_version,
)
from harnesses.hopper_gemm.fit import Fit
from harnesses.hopper_gemm.fit import fit as shape_fit
from harnesses.hopper_gemm.manifest import Launch, ManifestError, parse, resolve
from harnesses.hopper_gemm.settings import Problem, Settings, relative_tolerance

__all__ = ["HopperGemmHarness", "Outcome", "HarnessError", "ManifestError", "ToolchainError"]


HELPERS = Path(__file__).with_name("bench_kernels.cu")


class HarnessError(AutoDiscoveryError):
    pass


class DeviceLost(HarnessError):
    """The GPU stopped answering: no evaluation can be trusted until it is back."""


class HopperGemmHarness(HarnessBase):
    name = "hopper_gemm"
    needs_gpu = True
    Settings = Settings
    Problem = Problem
    objective = Objective("× cuBLAS", higher_is_better=True, path=("ratio", "median"), spec=".3f",
                          interval=(("ratio", "ci_low"), ("ratio", "ci_high")), reference=1.0, reference_name="cuBLAS",
                          noise=0.02)

    def __init__(self, campaign: Campaign) -> None:
        self.settings = campaign.harness
        self.problem = campaign.problem
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
        self.gpus: list[int] | None = None
        """The GPU indices evaluations are pinned to, one at a time each (None: the default device)."""
        self.lost: dict[int, str] = {}
        """GPUs taken out of the pool, and why."""
        self._free: queue.Queue[int] = queue.Queue()

    def __getstate__(self) -> dict:
        """Shipped to another process (a Ray task): the pool stays here; there, the GPU is the one the
        process was given."""
        state = dict(self.__dict__)
        state["_free"], state["gpus"], state["lost"] = None, None, {}
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._free = queue.Queue()

    @property
    def parallel(self) -> int:
        """Evaluations at once: one per GPU of the pool still answering."""
        return max(1, len(self.gpus or []) - len(self.lost))

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.problem.M, self.problem.N, self.problem.K

    # ---- before anything runs -------------------------------------------------------------
    def preflight(self, need_gpu: bool = True) -> dict:
        """The fingerprint of where the run happens; raises HarnessError naming what is missing."""
        try:
            fp = {"nvcc": nvcc_version(self.settings.nvcc), "arch": self.settings.arch}
        except ToolchainError as exc:
            raise HarnessError(str(exc)) from None
        if not need_gpu:
            return fp
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError:
            raise HarnessError("no NVIDIA driver found (libcuda.so.1 is not loadable): this harness needs an "
                               "H100/H200 with its driver") from None
        if self.settings.sanitize and sanitizer.locate(self.settings.nvcc) is None:
            raise HarnessError("compute-sanitizer not found (on PATH or beside nvcc): kept kernels are run under it "
                               "first; install the CUDA toolkit's, or set harness.sanitize=false")
        gpus = self._choose() if self.settings.gpus is not None else None
        job = {"mode": "fingerprint", "baseline": self.settings.baseline, "both": self.settings.both_baselines,
               "shape": list(self.shape), "helpers": self.helpers()}
        out = self._child(job, timeout_s=180, gpu=gpus[0] if gpus else None)
        if out.status != "ok":
            raise HarnessError(f"no usable NVIDIA GPU: {_first_line(out.log)}")
        fp |= {k: v for k, v in out.metrics.items() if k not in ("eval_wall_s", "device")}
        if not str(fp.get("cc", "")).startswith("9."):
            raise HarnessError(f"hopper_gemm needs a Hopper GPU (sm_90a); found {fp.get('gpu')} (cc {fp.get('cc')})")
        if gpus:
            self._pool(gpus, fp)
            fp["gpus"] = gpus
        self.adopt(fp)
        return fp

    def _choose(self) -> list[int]:
        """The indices `harness.gpus` names, checked against the GPUs this machine has."""
        out = self._child({"mode": "count"}, timeout_s=120)
        if out.status != "ok":
            raise HarnessError(f"no usable NVIDIA GPU: {_first_line(out.log)}")
        have, want = out.metrics["device_count"], self.settings.gpus
        if want == "all":
            return list(range(have))
        chosen = list(range(want)) if isinstance(want, int) else list(want)
        if max(chosen) >= have:
            raise HarnessError(f"harness.gpus asks for GPU {max(chosen)}, this machine has {have} "
                               f"(indices 0 to {have - 1})")
        return chosen

    def _pool(self, gpus: list[int], fp: dict) -> None:
        """Every GPU of the pool must be the model the run is measured on: a run mixes no devices."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(gpus)) as ex:
            outs = list(ex.map(lambda g: self._child({"mode": "fingerprint"}, timeout_s=180, gpu=g), gpus))
        for g, o in zip(gpus, outs):
            if o.status != "ok":
                raise HarnessError(f"GPU {g} does not answer: {_first_line(o.log)}")
            if (o.metrics.get("gpu"), o.metrics.get("sms")) != (fp.get("gpu"), fp.get("sms")):
                raise HarnessError(f"harness.gpus mixes GPU models: GPU {gpus[0]} is {fp.get('gpu')}, GPU {g} is "
                                   f"{o.metrics.get('gpu')}; a run is measured on one model (name the same ones)")
        self.gpus, self.lost = list(gpus), {}
        self._free = queue.Queue()
        for g in gpus:
            self._free.put(g)

    def _some_left(self) -> None:
        if len(self.lost) == len(self.gpus):
            raise DeviceLost("every GPU of harness.gpus stopped answering: "
                             + "; ".join(f"GPU {g}: {why}" for g, why in self.lost.items()))

    def _take(self) -> int | None:
        """A free GPU of the pool (waiting for one), or None when there is no pool."""
        if not self.gpus:
            return None
        while True:
            self._some_left()
            try:
                return self._free.get(timeout=1.0)
            except queue.Empty:
                continue

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
            if not report.ok:
                raise HarnessError(f"the harness's own kernels do not build: {_first_line(report.log)}")
            self._helpers = report.artifact
        return self._helpers

    def healthy(self, gpu: int | None = None) -> str | None:
        """None if the GPU still answers; else why not (after a crash or a timeout)."""
        out = self._child({"mode": "fingerprint"}, timeout_s=60, gpu=gpu)
        if out.status != "ok":
            return _first_line(out.log)
        if out.metrics.get("gpu") != self.device:
            return f"the GPU is now {out.metrics.get('gpu')}, not {self.device}"
        return None

    # ---- how its numbers are shown (report.py) --------------------------------------------------
    columns = report.COLUMNS
    resumable = ("timeout_s", "build_workers", "cache_dir", "ncu", "gpus", "sanitize", "sanitize_timeout_s")
    toolchain = ("nvcc", "driver", "cuda_driver", "cuda_runtime", "cublas")
    charts = staticmethod(report.charts)
    build_notes = staticmethod(report.build_notes)
    profile_section = staticmethod(report.profile_section)

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

    def hardware(self, fingerprint: dict, history) -> str:
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

        return toolkit_nvcc.doctor(campaign.harness.nvcc, "Hopper GPU (sm_90a)", probe, campaign.harness.sanitize)

    # ---- static checks and builds -----------------------------------------------------------
    space = "hopper_gemm"
    manifest = staticmethod(parse)

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
    library = True

    @classmethod
    def export_library(cls, items: list[dict], folder: Path) -> dict:
        """The best kernels of recorded runs as a library (`library.export`)."""
        from harnesses.hopper_gemm import library

        return library.export(cls, items, folder)

    # ---- measurements ---------------------------------------------------------------------
    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        """Gate the candidate, then time it against cuBLAS, interleaved, in a fresh child. With `bar`
        (the × cuBLAS to beat), timing stops after `screen_pairs` pairs if the candidate is more than
        `screen_slack` below it: a screened measurement, enough to revert, never to keep."""
        s = self.settings
        below = bar * (1 - s.screen_slack) if bar and s.screen_pairs else None
        out = self._measure("benchmark", {"candidate": (source, build)}, screen_below=below)
        if out.status == "ok" and (fitted := self.fit(source)) is not None:
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
        outcomes: list[Outcome | None] = []
        runnable = {}
        for i, (source, build) in enumerate(items):
            if not build.ok or not build.artifact:
                outcomes.append(Outcome("compile_error", log=build.log))
                continue
            try:
                self.check(source)
            except (ManifestError, sandbox.RefusedSource) as exc:
                outcomes.append(Outcome("rejected", log=str(exc)))
                continue
            outcomes.append(None)
            runnable[f"step{i}"] = (source, build)
        if not runnable:
            return outcomes
        out = self._measure("replay", runnable)
        steps = out.metrics.get("steps", {}) if out.status == "ok" else {}
        for i in range(len(items)):
            if outcomes[i] is not None:
                continue
            r = steps.get(f"step{i}") or {"status": out.status, "log": out.log}
            metrics = r.get("metrics", {})
            score = self.objective.read(metrics) if r["status"] == "ok" else None
            outcomes[i] = Outcome(r["status"], metrics, r.get("log", ""), out.seconds, out.device, score)
        return outcomes

    def profile(self, source: str, build: BuildReport) -> Outcome:
        """Nsight Compute on the candidate and on the baseline, same shape, same inputs: what each
        kernel spends its time on (metrics["profile"]: candidate, baseline)."""
        from harnesses.hopper_gemm import ncu

        with tempfile.TemporaryDirectory(prefix="autodiscovery-ncu-") as tmp:
            log = Path(tmp) / "ncu.csv"
            out = self._measure("profile", {"candidate": (source, build)},
                                prefix=ncu.command(self.settings.ncu, str(log)))
            if out.status != "ok":
                return out
            text = log.read_text() if log.exists() else ""
        try:
            out.metrics["profile"] = ncu.profile(text, out.metrics.get("kernel", ""))
        except ncu.ProfileError as exc:
            return Outcome("crashed", out.metrics, f"profile: {exc}", out.seconds, out.device)
        return out

    def _measure(self, mode: str, kernels: dict[str, tuple[str, BuildReport]], prefix: list[str] = (),
                 **extra) -> Outcome:
        specs = {}
        for name, (source, build) in kernels.items():
            if not build.ok or not build.artifact:
                return Outcome("compile_error", log=build.log)
            try:
                specs[name] = {"cubin": build.artifact, "launch": self.check(source).model_dump()}
            except (ManifestError, sandbox.RefusedSource) as exc:
                return Outcome("rejected", log=str(exc))
        job = {"mode": mode, "shape": list(self.shape), "kernels": specs, "helpers": self.helpers(),
               "settings": self.settings.model_dump(mode="json"), "lt_algo": (self.best_lt or {}).get("algo_index"), **extra}
        notes = []
        for attempt in range(2):
            gpu = self._take()
            try:
                out = self._child(job, timeout_s=self.settings.timeout_s, prefix=prefix, gpu=gpu)
                if out.status in ("crashed", "timeout") and (why := self.healthy(gpu)) is not None:
                    if gpu is None:
                        raise DeviceLost(f"the GPU stopped answering after a {out.status} evaluation: {why}")
                    # Taken out of the pool; the evaluation is done once more on another GPU: a second
                    # GPU lost to the same kernel makes it the kernel's, recorded as what it did.
                    self.lost[gpu], lost, gpu = why, gpu, None
                    notes.append(f"GPU {lost} stopped answering after this {out.status} evaluation ({why}); "
                                 "it is out of the pool")
                    self._some_left()
                    if attempt == 0:
                        continue
            finally:
                if gpu is not None:
                    self._free.put(gpu)
            break
        if notes:
            out.log = "\n".join([*notes, out.log])
        return out

    def _where(self, gpu: int | None, name: str | None = None) -> str:
        """The device an evaluation ran on, as recorded: its name, and its index in a pool."""
        name = name or self.device
        return f"{name} (GPU {gpu})" if gpu is not None else name

    def _child(self, job: dict, timeout_s: float, prefix: list[str] = (), gpu: int | None = None) -> Outcome:
        """One evaluation child, pinned to `gpu` (an index among the GPUs this process sees) if given."""
        with tempfile.TemporaryDirectory(prefix="autodiscovery-") as tmp:
            job_file, result_file = Path(tmp) / "job.json", Path(tmp) / "result.json"
            job_file.write_text(json.dumps(job))
            env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
            if gpu is not None:
                visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
                env["CUDA_VISIBLE_DEVICES"] = visible[gpu] if gpu < len(visible) else str(gpu)
            done = run_child([*prefix, sys.executable, "-m", "harnesses.hopper_gemm.worker", str(job_file),
                              str(result_file)], ROOT, env, timeout_s, grace_s=30)
            seconds = done.seconds
            if done.timed_out:
                return Outcome("timeout", log=f"killed after {timeout_s:g} s\n{_tail(done.output)}",
                               seconds=seconds, device=self._where(gpu))
            output = done.output
            if not result_file.exists():
                code = done.returncode
                why = f"signal {-code}" if code < 0 else f"exit code {code}"
                return Outcome("crashed", log=f"evaluation child died ({why})\n{_tail(output)}",
                               seconds=seconds, device=self._where(gpu))
            result = json.loads(result_file.read_text())
        metrics = result.get("metrics", {})
        metrics["eval_wall_s"] = seconds
        device = self._where(gpu, metrics.get("device"))
        if gpu is not None:
            metrics["gpu_index"] = gpu
        log = "\n".join(filter(None, [result.get("log", ""), _tail(output)]))
        score = self.objective.read(metrics) if result["status"] == "ok" else None
        return Outcome(result["status"], metrics, log, seconds, device, score)


def _tail(text: str | None, lines: int = 40) -> str:
    return "\n".join((text or "").strip().splitlines()[-lines:])


def _first_line(text: str) -> str:
    return first_line(text) or "unknown error"
