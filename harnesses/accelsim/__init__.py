"""The accelsim harness: a candidate (kernel program + architecture) simulated cycle by cycle.

PTX mode: the program is built with a CUDA 11 nvcc (`-arch=sm_80 -cudart shared`) and run in its own
folder against GPGPU-Sim's libcudart, with the base gpgpusim.config plus the candidate's overrides.
Trace mode (where `harness.traces` names a kernelslist.g): `accel-sim.out -trace` replays recorded
traces with the same configuration. Simulations are deterministic, so one run is the measurement.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from autodiscovery import ROOT, AutoDiscoveryError
from autodiscovery.campaign import Campaign, validated
from autodiscovery.interfaces import Column, Objective, Outcome, Section
from autodiscovery.status import EvalStatus
from autodiscovery.toolkit import nvcc as toolkit_nvcc
from autodiscovery.toolkit import sandbox
from autodiscovery.toolkit.build import BuildCache, BuildReport, build_key
from autodiscovery.toolkit.nvcc import release as nvcc_release
from autodiscovery.toolkit.proc import run_child
from autodiscovery.toolkit.text import tail
from harnesses.accelsim import data, report, sample, simlog, tools
from harnesses.accelsim.arch import (
    ArchError,
    Architecture,
    option_values,
    render_config,
    split,
)
from harnesses.accelsim.platform import STOCK
from harnesses.accelsim.settings import Settings
from harnesses.hopper_gemm.settings import Problem

if TYPE_CHECKING:
    from autodiscovery.store import Store


class SimulatorMissing(AutoDiscoveryError):
    pass


WMMA_CHECK = "GPGPU-Sim runs a WMMA GEMM"
WMMA_CHECK_SHAPE = {"M": 32, "N": 32, "K": 16}
WMMA_CHECK_KERNEL = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "FRAGS_M": 1, "FRAGS_N": 2, "STAGES": 1,
                     "PERSISTENT": 0, "MIN_BLOCKS": 0}
"""What `doctor` simulates before a co-design run is worth starting: the campaign's own kernel template at
32x32x16 (one block of two warps, one k-step, seconds of simulation) on the stock architecture, its
output checked like any candidate's."""
OPERAND_FIX = ("a GPGPU-Sim without the WMMA operand fix: in src/cuda-sim/instructions.cc, mma_impl must read "
               "each half-precision operand through the address of hex_val "
               "(*(reinterpret_cast<half *>(&hex_val))); patch it and run make again (README: co-design set-up)")

CHECK_VERSION = "harness-check-1"
"""Part of every simulation's cache key: results from before the harness checked the output itself are
simulated again."""

RUNTIME_ENV = {"PTX_SIM_USE_PTX_FILE": "1.ptx", "PTX_SIM_KERNELFILE": "_1.ptx", "CUOBJDUMP_SIM_FILE": "jj"}
"""What GPGPU-Sim's libcudart reads at run time (its setup_environment exports them): without them a
PTX-mode program aborts ("No PTX sections found ...")."""


@functools.lru_cache(maxsize=16)
def build_id(path: str, size: int, mtime_ns: int) -> str:
    """The identity of a simulator build: the hash of its library's bytes (a rebuilt simulator is
    another simulator, whatever its path)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def simulator_id(path: str | None) -> str:
    if not path:
        return "none"
    try:
        st = os.stat(path)
    except OSError:
        return f"{path} (missing)"
    return build_id(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def tensor_bound(M: int, N: int, K: int, arch: Architecture, units_per_sm: int) -> int:
    """Cycles if every tensor unit issued a 16x16x16 MMA every initiation interval, with no stalls."""
    mmas = (M // 16) * (N // 16) * (K // 16)
    return -(-mmas * arch.tensor_initiation // (arch.sms * units_per_sm))


class AccelsimHarness:
    name = "accelsim"
    Settings = Settings
    Problem = Problem
    objective = Objective("cycles", higher_is_better=False, path=("cycles",), spec="d", joiner=" ")
    columns: ClassVar[tuple[Column, ...]] = (
        Column("bound_cycles", "bound", lambda m, b: m.get("bound_cycles"), ".0f", frozenset({"measure"}), after=True),
        Column("pct_of_bound", "% of bound", lambda m, b: m.get("pct_of_bound"), ".1f", frozenset({"measure"}),
               after=True))
    resumable = ("timeout_s", "build_workers", "cache_dir", "parallel", "work_dir")
    toolchain = ("nvcc", "nvcc_release", "simulator", "simulator_build")
    charts = staticmethod(report.charts)

    def __init__(self, campaign: Campaign) -> None:
        self.s = validated(campaign.harness, Settings)
        self.problem = validated(campaign.problem, Problem)
        self.cache = BuildCache(self._path(self.s.cache_dir), "program")
        self.work = self._path(self.s.work_dir)
        self._results: dict[str, Outcome] = {}
        self.nvcc: str | None = None
        """The CUDA 11 nvcc `preflight` found (None before it: `build` looks for one itself)."""
        self.base_config: str | None = None
        """The user's gpgpusim.config `preflight` found (None: rendered whole from the platform model)."""

    @staticmethod
    def _path(p: str) -> Path:
        return Path(p) if Path(p).is_absolute() else ROOT / p

    # ---- before anything runs ---------------------------------------------------------------
    @property
    def parallel(self) -> int:
        """Simulations at once: the campaign's `parallel`, or one per CPU core."""
        return self.s.parallel or os.cpu_count() or 1

    def preflight(self, need_gpu: bool = True) -> dict:
        found = {f.what: f for f in tools.survey(self.s)}
        sim = (["accel-sim.out (trace mode)", "base gpgpusim.config"] if self.s.traces
               else ["GPGPU-Sim", "GPGPU-Sim libcudart", "base gpgpusim.config"])
        # need_gpu: evaluations will run, so the simulator must be there; a dry run only builds.
        for what in ["CUDA 11 nvcc", *(sim if need_gpu else [])]:
            if not found[what].ok:
                raise SimulatorMissing(f"{what} not found: {found[what].hint} (see `autodiscovery doctor`)")
        self.nvcc = found["CUDA 11 nvcc"].path
        self.root = found["GPGPU-Sim"].path
        self.libcudart = found["GPGPU-Sim libcudart"].path
        base = found["base gpgpusim.config"].path
        self.base_config = None if base == tools.RENDERED else base
        self.accelsim = found["accel-sim.out (trace mode)"].path
        if self.s.traces and self.base_config is None:
            raise SimulatorMissing("trace mode needs harness.base_config: a gpgpusim.config with its trace.config "
                                   "beside it")
        return {"simulator": "accel-sim (trace)" if self.s.traces else "gpgpu-sim (ptx)", "gpu": "simulated",
                "gpgpusim_root": self.root, "base_config": self.base_config or tools.RENDERED,
                "simulator_build": simulator_id(self.accelsim if self.s.traces else self.libcudart),
                "nvcc": self.nvcc, "nvcc_release": nvcc_release(self.nvcc)}

    # ---- static checks and builds -----------------------------------------------------------
    def check(self, source: str) -> Architecture:
        program, arch = split(source)
        sandbox.check(program, sandbox.HOST_HEADERS)  # a whole program: host headers too, nothing of the host
        M, N, K = self.problem.M, self.problem.N, self.problem.K
        if M % 16 or N % 16 or K % 16:
            raise ArchError(f"shape {M}x{N}x{K} not supported: WMMA tiles need multiples of 16")
        return arch

    def build(self, source: str) -> BuildReport:
        program, _ = split(source) if "@arch" in source else (source, None)
        if (why := sandbox.refusal(program, sandbox.HOST_HEADERS)) is not None:  # before looking for a compiler
            return BuildReport(ok=False, cache_key="", log=f"refused before compiling: {why}")
        nvcc = self.nvcc or tools.find_nvcc11(self.s).path
        if nvcc is None:
            return BuildReport(ok=False, cache_key="", log="CUDA 11 nvcc not found")
        flags = [*self.s.nvcc_flags, "-Xptxas", "-v"]
        release = nvcc_release(nvcc) or ""
        return toolkit_nvcc.build(self.cache, build_key(program, nvcc, release, *flags), program, nvcc, flags,
                                  name="program.cu", artifact="program", compiler=f"nvcc {release}", timeout_s=600,
                                  headers=sandbox.HOST_HEADERS)

    # ---- simulations ------------------------------------------------------------------------------
    def command(self, program: str, run_dir: Path) -> list[str]:
        """The simulation's command line: the built program under GPGPU-Sim's libcudart, or Accel-Sim on
        the campaign's traces."""
        if self.s.traces:
            if self.base_config is None or self.accelsim is None:
                raise SimulatorMissing("trace mode needs accel-sim.out and harness.base_config (preflight says which)")
            trace_cfg = Path(self.base_config).with_name("trace.config")
            return [self.accelsim, "-trace", self.s.traces, "-config", "gpgpusim.config", "-config", str(trace_cfg)]
        return [program, str(self.problem.M), str(self.problem.N), str(self.problem.K)]

    def configure(self, arch: Architecture) -> tuple[str, dict[str, str]]:
        """The gpgpusim.config of a candidate's architecture and its option values: rendered whole from
        the platform model, or the user's base file with the knobs appended."""
        if self.base_config:
            text = render_config(Path(self.base_config).read_text(), arch)
            return text, option_values(text)
        platform = STOCK.with_options(arch.overrides())
        return platform.render(), platform.options()

    def sim_key(self, source: str, config: str) -> str:
        """Simulations are deterministic: the same artifact, config, shape and simulator give the same log."""
        who = self.accelsim if self.s.traces else self.libcudart
        parts = [source, config, f"{self.problem.M}x{self.problem.N}x{self.problem.K}", simulator_id(who),
                 str(self.s.traces), CHECK_VERSION]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        if not self.s.traces and not build.artifact:
            return Outcome(EvalStatus.compile_error, log=build.log)
        arch = self.check(source)
        digest = hashlib.sha256(source.encode()).hexdigest()
        config, values = self.configure(arch)
        program = split(source)[0]
        p = sample.plan(program, self.problem.M, self.problem.N, self.s.sample,
                        sample.resident_blocks(program, arch, build.registers)) if not self.s.traces \
            else "trace mode simulates its traces whole"
        if isinstance(p, sample.Plan):
            first = self._simulate(source, build, arch, config, values, p, p.sampled[0])
            if first.status == EvalStatus.ok and (why := sample.held(p, first, arch.sms)) is not None:
                p = why  # the waves were planned for another occupancy than the simulator's
        if isinstance(p, sample.Plan):
            second = self._simulate(source, build, arch, config, values, p, p.sampled[1]) \
                if first.status == EvalStatus.ok else first
            outcome = second if second.status != EvalStatus.ok else \
                sample.extrapolated(p, first, second, second.metrics["bound_cycles"])
        else:
            outcome = self._simulate(source, build, arch, config, values)
            if self.s.sample is not None:
                outcome.metrics["sample"] = {"whole": p}  # why this one was simulated whole
        self._results[digest] = outcome
        return outcome

    def _simulate(self, source: str, build: BuildReport, arch: Architecture, config: str, values: dict,
                  p: sample.Plan | None = None, rounds: int | None = None) -> Outcome:
        """One simulation: of the whole grid, or (`p`, `rounds`) of its first `rounds` rounds (or waves) of
        tiles, the program asked for that many tiles, whose outputs alone are checked. Deterministic, so kept
        and read back by its key."""
        asked = p.computed(rounds) if p is not None and rounds is not None else None  # the tiles it computes
        key = self.sim_key(source, config) if asked is None else \
            hashlib.sha256(f"{self.sim_key(source, config)}\0tiles={asked}".encode()).hexdigest()
        cached = self.cache.root / "sims" / key[:2] / key
        if (cached / "sim.log").exists() and (cached / "check.txt").exists():  # this exact simulation ran before
            check: str | None = cached.joinpath("check.txt").read_text().strip()
            outcome = self._outcome(0, (cached / "sim.log").read_text(errors="replace"), arch, values, 0.0,
                                    check or None)
            outcome.metrics |= {"cached": True, "run_dir": str(cached)}
            outcome.device = f"{outcome.device} (from the simulation cache)"
            return outcome
        run_dir = self.work / key[:16]
        if run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
        (run_dir / "gpgpusim.config").write_text(config)
        if self.base_config:
            for extra in Path(self.base_config).parent.glob("*.icnt"):
                shutil.copy(extra, run_dir / extra.name)
        if not self.s.traces:
            a, b = data.inputs(self.problem.M, self.problem.N, self.problem.K, int(key[:8], 16))
            data.write_inputs(run_dir, a, b)
        env = os.environ | RUNTIME_ENV
        if self.libcudart:
            env["LD_LIBRARY_PATH"] = f"{Path(self.libcudart).parent}{os.pathsep}{env.get('LD_LIBRARY_PATH', '')}"
        start = time.perf_counter()
        cmd = self.command(build.artifact or "", run_dir) + ([str(asked)] if asked is not None else [])
        rc, log = self._run(cmd, run_dir, env)
        seconds = round(time.perf_counter() - start, 3)
        (run_dir / "sim.log").write_text(log)
        check = None
        if not self.s.traces and rc == 0:
            only = p.mask(self.problem.M, self.problem.N, rounds) if p is not None and rounds is not None else None
            _, check = data.check_output(run_dir, a, b, only)
        (run_dir / "check.txt").write_text(check or "")
        for big in ("A.bin", "B.bin", "C.bin"):
            run_dir.joinpath(big).unlink(missing_ok=True)
        outcome = self._outcome(rc, log, arch, values, seconds, check)
        outcome.metrics["run_dir"] = str(run_dir)
        if outcome.status in (EvalStatus.ok, EvalStatus.incorrect):
            cached.mkdir(parents=True, exist_ok=True)
            for name in ("sim.log", "gpgpusim.config", "check.txt"):
                shutil.copy(run_dir / name, cached / name)
        return outcome

    def _run(self, cmd: list[str], cwd: Path, env: dict) -> tuple[int | None, str]:
        # Unbuffered: a program that aborts keeps its last words (the reason) in the log.
        unbuffered = ["stdbuf", "-o0", "-e0"] if shutil.which("stdbuf") else []
        done = run_child([*unbuffered, *cmd], cwd, env, self.s.timeout_s)
        if done.timed_out:
            return None, done.output + f"\nkilled after {self.s.timeout_s:g} s"
        return done.returncode, done.output

    def _outcome(self, rc: int | None, log: str, arch: Architecture, values: dict, seconds: float,
                 check: str | None) -> Outcome:
        end = tail(log, 30)
        if rc is None:
            return Outcome(EvalStatus.timeout, {}, end, seconds, "gpgpu-sim")
        if why := simlog.crashed(rc, log):
            last = next((x.strip() for x in reversed(log.splitlines()) if x.strip()), "")
            said = f": {last[:200]}" if last and last not in why else ""
            return Outcome(EvalStatus.crashed, simlog.parse(log), f"{why}{said}\n{end}", seconds, "gpgpu-sim")
        stats = simlog.parse(log)
        if bad := simlog.echo_mismatches(log, arch.overrides()):
            return Outcome(EvalStatus.crashed, stats, "configuration not applied: " + "; ".join(bad), seconds,
                           "gpgpu-sim")
        if not self.s.traces:
            stats["check"] = "PASS" if check and "PASS" in check else "FAIL"
            if stats["check"] != "PASS":
                return Outcome(EvalStatus.incorrect, stats, check or "output check FAIL: not checked", seconds,
                               "gpgpu-sim")
        if "cycles" not in stats:
            return Outcome(EvalStatus.crashed, stats, f"no gpu_tot_sim_cycle in the log\n{end}", seconds, "gpgpu-sim")
        units = int(re.sub(r"\D", "", values.get("-gpgpu_num_tensor_core_units", "4")) or 4)
        launch = int(values.get("-gpgpu_kernel_launch_latency", "0") or 0)
        M, N, K = self.problem.M, self.problem.N, self.problem.K
        bound = tensor_bound(M, N, K, arch, units)
        # gpu_sim_cycle counts each kernel's launch latency; kernel cycles leave it out, and % of bound
        # (against the candidate's own architecture) is taken on them.
        kernel = max(1, stats["cycles"] - launch * max(1, stats.get("kernels", 1)))
        cost = self.s.arch.cost(arch)
        stats |= {"kernel_cycles": kernel, "launch_latency": launch, "bound_cycles": bound,
                  "pct_of_bound": round(100 * bound / kernel, 2), "wall_s": seconds,
                  "area_pct": cost["area_pct"], "power_pct": cost["power_pct"]}
        return Outcome(EvalStatus.ok, stats, "", seconds, f"gpgpu-sim {arch.sms}-SM", score=stats["cycles"])

    def replay(self, items: list[tuple[str, BuildReport]]) -> list[Outcome]:
        """A lineage simulated again (`autodiscovery replay`): its points side by side, one per core."""
        from autodiscovery.running.evaluate import assess

        with ThreadPoolExecutor(self.parallel) as pool:
            return list(pool.map(lambda it: assess(self, *it), items))

    def head_to_head(self, challenger: tuple[str, BuildReport], incumbent: tuple[str, BuildReport]) -> Outcome:
        """Simulations are deterministic: compare the recorded cycles (simulating again if needed)."""
        a, b = (self._results.get(hashlib.sha256(src.encode()).hexdigest()) or self.evaluate(src, bld)
                for src, bld in (challenger, incumbent))
        if a.status != EvalStatus.ok or b.status != EvalStatus.ok:
            return Outcome(EvalStatus.crashed, {}, "a simulation of the pair failed", 0.0)
        r = b.metrics["cycles"] / a.metrics["cycles"]
        return Outcome(EvalStatus.ok, {"ratio": {"median": r, "ci_low": r, "ci_high": r, "n": 1}}, "", 0.0, a.device)

    # ---- what the CLI shows of a co-design run ----------------------------------------------------
    @staticmethod
    def summary_data(store: Store, run_id: int) -> dict | None:
        return report.phases(store, run_id)

    @staticmethod
    def summary(run_id: int, data: dict) -> list[Section]:
        return report.phases_table(run_id, data)

    @staticmethod
    def doctor(campaign: Campaign) -> list[tuple[str, str | None, str, bool]]:
        """Each tool, where it was found, what to do if not, and whether this campaign needs it (trace
        mode needs Accel-Sim, PTX mode GPGPU-Sim and its libcudart); in PTX mode, once those are found,
        whether the simulator runs a small WMMA GEMM right (`wmma_check`)."""
        settings = validated(campaign.harness, Settings)
        mode = {"accel-sim.out (trace mode)"} if settings.traces else {"GPGPU-Sim", "GPGPU-Sim libcudart"}
        needed = mode | {"CUDA 11 nvcc", "base gpgpusim.config"}
        survey = tools.survey(settings)
        rows = [(f.what, f.path, f.hint, f.what in needed) for f in survey]
        if not settings.traces:
            if all(f.ok for f in survey if f.what in needed):
                found, hint = wmma_check(campaign)
            else:
                found, hint = None, "runs once the tools above are found"
            rows.append((WMMA_CHECK, found, hint, True))
        return rows


def wmma_verdict(outcome: Outcome) -> tuple[str | None, str]:
    """A doctor row's (found, if missing) from the simulation of the WMMA check kernel."""
    if outcome.status == EvalStatus.ok:
        cached = ", from the simulation cache of this build" if outcome.metrics.get("cached") else ""
        return f"{WMMA_CHECK_SHAPE['M']}x{WMMA_CHECK_SHAPE['N']}x{WMMA_CHECK_SHAPE['K']} simulated, output checked " \
               f"({outcome.metrics['cycles']} cycles{cached})", ""
    lines = outcome.log.strip().splitlines()
    why = lines[0].replace(simlog.DOCTOR_HINT, "")[:160] if lines else outcome.status
    if outcome.status == EvalStatus.incorrect:
        return None, f"the simulator got the product wrong ({why}): {OPERAND_FIX}"
    if outcome.status == EvalStatus.crashed and "segmentation fault" in outcome.log:
        return None, f"the simulator crashed ({why}): {OPERAND_FIX}"
    return None, f"the simulator did not run the check kernel ({why})"


def wmma_check(campaign: Campaign) -> tuple[str | None, str]:
    """Build and simulate the campaign's kernel template at WMMA_CHECK_SHAPE on the stock architecture,
    with the harness's own inputs and output check; the verdict as a doctor row's (found, if missing)."""
    from harnesses.accelsim.agent import CodesignAgent

    at = campaign.model_copy(update={"problem": campaign.problem.model_copy(update=WMMA_CHECK_SHAPE)})
    harness = AccelsimHarness(at)
    try:
        harness.preflight()
    except SimulatorMissing as exc:
        return None, f"not run: {exc}"
    agent = CodesignAgent(at)
    source = agent.render(WMMA_CHECK_KERNEL, dict(agent.arch.default))
    build = harness.build(source)
    if not build.ok:
        # the first of the compiler's own lines (a parenthesised line is the sandbox's note on what it left out)
        first = next((x for x in build.log.splitlines() if x.strip() and not x.startswith("(")), "no log")
        return None, f"the check kernel did not compile with the CUDA 11 nvcc: {first[:160]}"
    return wmma_verdict(harness.evaluate(source, build))
