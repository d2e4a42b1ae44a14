"""A harness that replays recorded evaluations, so the loop can be tested without a GPU.

Recordings map (family, knobs) to what the real harness reported; configurations the recording
lacks get a deterministic stand-in score. Builds are not run: the recording says whether one failed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from autodiscovery.agents.space import PARTIALS, Space
from autodiscovery.campaign import SEARCH_SPACES
from autodiscovery.interfaces import Outcome
from autodiscovery.roles import generic_brief
from autodiscovery.toolkit.build import BuildReport
from harnesses.accelsim import AccelsimHarness
from harnesses.hopper_gemm import HopperGemmHarness
from harnesses.hopper_gemm import report as gemm_report
from harnesses.hopper_gemm.manifest import parse, resolve

MARK = re.compile(r"// replay-score: ([0-9.]+)")
"""A kernel carrying this comment is scored at that × cuBLAS (sources no recording knows)."""
RUNG_SCALE = {"naive": 0.006, "tiled": 0.05, "mma_sync": 0.45, "wgmma_tma": 0.6, "wgmma_ws": 0.85,
              "wgmma_persistent": 0.9}


def key(family: str | None, knobs: dict) -> str:
    return f"{family}:{json.dumps(knobs, sort_keys=True)}"


def standin(family: str | None, knobs: dict) -> float:
    """A fixed pseudo-random score around the family's typical × cuBLAS."""
    h = int(hashlib.sha256(key(family, knobs).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return RUNG_SCALE.get(family or "naive", 0.01) * (0.6 + 0.8 * h)


class SourceIndex:
    """sha256 of a configuration's source -> (family, knobs), read from an SQLite file one lookup at a time
    (the cluster family's valid configurations are millions: loading them whole took seconds a process)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[str, dict]] = {}

    def __reduce__(self):  # sent to another process (Ray's workers) as its path, opened there
        return SourceIndex, (self.path,)

    def get(self, digest: str, default=None):
        if digest not in self._seen:
            with self._lock:
                row = self._db.execute("SELECT family, knobs FROM idx WHERE hash = ?", (digest,)).fetchone()
            if row is None:
                return default
            self._seen[digest] = (row[0], json.loads(row[1]))
        return self._seen[digest]


def source_index(space: Space) -> SourceIndex:
    """The index of every valid configuration's source. Rendering them all takes minutes, so the index is
    kept in the temporary folder, keyed by the space's files and the partials they include, for every later
    process."""
    digest = hashlib.sha256()
    for path in sorted([space.seeds, SEARCH_SPACES / space.name, PARTIALS], key=str):
        for f in sorted(p for p in Path(path).rglob("*") if p.is_file()):
            digest.update(f.name.encode() + f.read_bytes())
    cache = Path(tempfile.gettempdir()) / f"autodiscovery-replay-index-{digest.hexdigest()[:16]}.sqlite"
    if not cache.exists():
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)  # left by a process of the same id that was cut off
        db = sqlite3.connect(tmp)
        db.execute("CREATE TABLE idx (hash TEXT PRIMARY KEY, family TEXT, knobs TEXT) WITHOUT ROWID")
        rows = []
        for fam in space.families.values():
            for knobs in (fam.valid_configurations({"M": 4096, "N": 4096, "K": 4096}) if fam.template else [{}]):
                src = space.render(fam.name, knobs)
                rows.append((hashlib.sha256(src.encode()).hexdigest(), fam.name, json.dumps(knobs)))
                if len(rows) >= 50_000:
                    db.executemany("INSERT OR IGNORE INTO idx VALUES (?, ?, ?)", rows)
                    rows.clear()
        db.executemany("INSERT OR IGNORE INTO idx VALUES (?, ?, ?)", rows)
        db.commit()
        db.close()
        os.replace(tmp, cache)  # whole or not at all, whichever process writes it
    return SourceIndex(cache)


MODEL_DATA = Path(__file__).parent / "data" / "edge_512_model.json"
AT_512 = ["problem.M=512", "problem.N=512", "problem.K=512"]
"""The co-design campaign at 512³, the shape of the recorded simulations (its default is 1024³)."""
PHASES_512 = "agent.codesign.phases={B: 12, C: 3, D: 12, E_kernels: 2, E_archs: 2}"
"""The phase budgets of the recorded 512³ runs."""


def recorded_facts(kernel: dict) -> dict | None:
    """The PTX facts (main-loop counts, ptxas registers; CUDA 11.8) recorded for a kernel of the real
    512³ runs, keyed by its knobs without PERSISTENT (the device code does not depend on it)."""
    facts = json.loads(MODEL_DATA.read_text())["ptx"]
    return facts.get(json.dumps({k: v for k, v in kernel.items() if k != "PERSISTENT"}, sort_keys=True))


def offline_agent(campaign, cache_dir: Path):
    """The co-design agent with no nvcc and its PTX facts in `cache_dir`: the recorded kernels' facts,
    estimates for the rest. Its picks then depend on nothing installed and nothing cached before."""
    from harnesses.accelsim.agent import CodesignAgent

    agent = CodesignAgent(campaign)
    agent.nvcc, agent.ptx_dir = None, Path(cache_dir) / "ptx"
    recorded_ptx(agent)
    return agent


def recorded_ptx(agent) -> None:
    """The recorded kernels' PTX facts written where `agent` keeps them, as its own compiles would leave
    them: a run at 512³ then compiles only kernels the recording lacks."""
    for kernel in json.loads(MODEL_DATA.read_text())["kernels"]:
        path = agent.facts_path(kernel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(recorded_facts(kernel)))


@dataclass
class ReplayHarness:
    space: Space
    recordings: dict[str, dict] = field(default_factory=dict)
    interrupt_after: int | None = None
    """Raise KeyboardInterrupt at this many evaluate() calls (to test resume)."""
    evaluated: list[str] = field(default_factory=list)
    head_to_heads: list[tuple[str, str]] = field(default_factory=list)
    bars: list[float | None] = field(default_factory=list)
    built: list[str] = field(default_factory=list)
    delay_s: float = 0.0
    """Each evaluation takes this long (to be killed in the middle of one)."""
    parallel: int = 1
    """Evaluations at once (a test sets it to stand for several GPUs)."""
    hooks: dict = field(default_factory=dict)
    """step name (build, evaluate, head_to_head) -> called with the step's count before the step runs."""
    fingerprint: dict = field(default_factory=lambda: {"gpu": "Replayed NVIDIA H100", "sms": 132, "nvcc": "replay"})
    name: str = "replay"
    needs_gpu = True
    objective = HopperGemmHarness.objective
    Problem = HopperGemmHarness.Problem
    # It stands in for hopper_gemm: its numbers are shown as that harness shows them.
    columns = HopperGemmHarness.columns
    charts = staticmethod(gemm_report.charts)
    build_notes = staticmethod(gemm_report.build_notes)
    profile_section = staticmethod(gemm_report.profile_section)
    identity = HopperGemmHarness.identity
    toolchain = HopperGemmHarness.toolchain

    def prompt_profile(self, seq: int, profile: dict) -> str:
        return gemm_report.prompt_profile(seq, profile)

    def brief(self, fingerprint: dict) -> str:
        return generic_brief(self.objective)

    def hardware(self, fingerprint: dict, history) -> str:
        return ""

    def __post_init__(self) -> None:
        self.by_hash = source_index(self.space)

    def identify(self, source: str) -> tuple[str | None, dict]:
        return self.by_hash.get(hashlib.sha256(source.encode()).hexdigest(), (None, {}))

    def preflight(self, need_gpu: bool = True) -> dict:
        return dict(self.fingerprint)

    def check(self, source: str):
        return resolve(parse(source), 4096, 4096, 4096)

    def _step(self, name: str, count: int) -> None:
        if name in self.hooks:
            self.hooks[name](count)

    def recorded(self, source: str) -> dict:
        fam, knobs = self.identify(source)
        rec = self.recordings.get(key(fam, knobs))
        mark = MARK.search(source)
        if rec is None and mark:  # an edited kernel (the LLM agent's) says what it is to score
            s = float(mark.group(1))
            rec = {"status": "ok", "metrics": {"ratio": {"median": s, "ci_low": s * 0.995, "ci_high": s * 1.005},
                                               "tflops": {"candidate": 775 * s, "cublas": 775.0}}}
        elif rec is None:
            s = standin(fam, knobs)
            rec = {"status": "ok", "metrics": {"ratio": {"median": s, "ci_low": s * 0.995, "ci_high": s * 1.005},
                                               "tflops": {"candidate": 775 * s, "cublas": 775.0}}}
        return rec

    def build(self, source: str) -> BuildReport:
        self._step("build", len(self.built))
        self.built.append(hashlib.sha256(source.encode()).hexdigest())
        rec = self.recorded(source)
        ok = rec["status"] != "compile_error"
        return BuildReport(ok=ok, cache_key=hashlib.sha256(source.encode()).hexdigest(), artifact="replayed" if ok else None,
                           registers=rec.get("registers", 64), spill_stores=0, spill_loads=0, stack=0,
                           log=rec.get("log", "") if not ok else "")

    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        if self.interrupt_after is not None and len(self.evaluated) >= self.interrupt_after:
            raise KeyboardInterrupt
        self._step("evaluate", len(self.evaluated))
        if self.delay_s:
            import time

            time.sleep(self.delay_s)
        self.evaluated.append(hashlib.sha256(source.encode()).hexdigest())
        self.bars.append(bar)
        rec = self.recorded(source)
        metrics = dict(rec.get("metrics", {}))
        score = self.objective.read(metrics) if rec["status"] == "ok" else None
        return Outcome(rec["status"], metrics, rec.get("log", ""), 0.01, "Replayed NVIDIA H100", score)

    def head_to_head(self, challenger, incumbent) -> Outcome:
        self._step("head_to_head", len(self.head_to_heads))
        a = self.recorded(challenger[0]).get("metrics", {}).get("ratio", {}).get("median")
        b = self.recorded(incumbent[0]).get("metrics", {}).get("ratio", {}).get("median")
        self.head_to_heads.append((challenger[1].cache_key, incumbent[1].cache_key))
        r = a / b
        return Outcome("ok", {"ratio": {"median": r, "ci_low": r * 0.995, "ci_high": r * 1.005}}, "", 0.01)


class CampaignReplay(ReplayHarness):
    """The replayed harness as a campaign names it (`--set harness.name=replay:CampaignReplay`): built by
    the registry from the campaign, so a command goes its real way, with no harness handed in."""

    class Settings(HopperGemmHarness.Settings):
        name: str = "replay:CampaignReplay"

    Problem = HopperGemmHarness.Problem

    def __init__(self, campaign) -> None:
        super().__init__(Space(campaign.agent.search.space))


def load_recording(path) -> tuple[dict, dict[str, dict]]:
    """A run recorded on a real GPU (tests/data/*.json): its fingerprint and its evaluations by configuration."""
    data = json.loads(open(path).read())
    return data["device"], {key(r["family"], r["knobs"]): r for r in data["recordings"]}


@dataclass
class SimReplay:
    """Stands in for the accelsim harness: cycles from recorded results where there are some, else the
    analytical model with a fixed per-configuration perturbation (the simulator is deterministic)."""

    recorded: dict[str, int] = field(default_factory=dict)
    parallel: int = 2
    evaluated: list[str] = field(default_factory=list)
    sim_seconds: float = 0.0
    """Each simulation keeps a child process busy on a CPU this long, as a simulator would."""
    name: str = "sim-replay"
    objective = AccelsimHarness.objective
    Problem = AccelsimHarness.Problem

    def preflight(self, need_gpu: bool = True) -> dict:
        return {"gpu": "simulated", "simulator": "replay"}

    def check(self, source: str):
        from harnesses.accelsim.arch import split

        return split(source)[1]

    def build(self, source: str) -> BuildReport:
        return BuildReport(ok=True, cache_key=hashlib.sha256(source.encode()).hexdigest(), artifact="replayed",
                           registers=72, spill_stores=0, spill_loads=0, stack=0)

    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        import re

        from harnesses.accelsim import tensor_bound
        from harnesses.accelsim.arch import split
        from harnesses.accelsim.model import predict

        if self.sim_seconds:
            import subprocess
            import sys

            subprocess.run([sys.executable, "-c", f"import time\nt = time.time()\nwhile time.time() - t < "
                            f"{self.sim_seconds}: pass"], check=True)
        program, arch = split(source)
        knobs = {k: int(v) for k, v in re.findall(r"\b(BLOCK_[MNK]|FRAGS_[MN]|STAGES|PERSISTENT|MIN_BLOCKS) = (\d+)",
                                                   _knob_line(program))}
        key_ = hashlib.sha256(source.encode()).hexdigest()
        self.evaluated.append(key_)
        h = int(key_[:6], 16) / 0xFFFFFF
        pair = json.dumps({"kernel": knobs, "arch": arch.model_dump()}, sort_keys=True)
        cycles = self.recorded.get(pair) or int(predict(knobs, arch, 512, 512, 512)["cycles"] * (0.9 + 0.3 * h))
        bound = tensor_bound(512, 512, 512, arch, 4)
        return Outcome("ok", {"cycles": cycles, "bound_cycles": bound, "pct_of_bound": round(100 * bound / cycles, 2)},
                       "", 0.01, "replay", score=cycles)

    def head_to_head(self, challenger, incumbent) -> Outcome:
        a = self.evaluate(*challenger).metrics["cycles"]
        b = self.evaluate(*incumbent).metrics["cycles"]
        return Outcome("ok", {"ratio": {"median": b / a, "ci_low": b / a, "ci_high": b / a}}, "", 0.0)


def _knob_line(program: str) -> str:
    """The rendered template states its knobs in its header comment and constants."""
    import re

    m = re.search(r"constexpr int BM = (\d+), BN = (\d+), BK = (\d+);\s*constexpr int FM = (\d+), FN = (\d+), "
                  r"STAGES = (\d+);", program)
    p = re.search(r"\{\{ PERSISTENT \}\}|const int blocks = (\d+) > 0", program)
    mb = re.search(r"__launch_bounds__\(THREADS, (\d+)\)", program)
    bm, bn, bk, fm, fn, st = m.groups()
    return (f"BLOCK_M = {bm} BLOCK_N = {bn} BLOCK_K = {bk} FRAGS_M = {fm} FRAGS_N = {fn} STAGES = {st} "
            f"PERSISTENT = {p.group(1) if p else 0} MIN_BLOCKS = {mb.group(1) if mb else 0}")


@dataclass
class KilledOnce(SimReplay):
    """The first simulation to start, anywhere, has its process killed (a worker lost mid-task); every
    simulation that starts leaves a mark in `marks` (its source's hash and its process)."""

    marks: str = ""

    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        import signal

        h = hashlib.sha256(source.encode()).hexdigest()[:16]
        Path(self.marks, f"ran-{h}-{os.getpid()}-{len(os.listdir(self.marks))}").touch()
        try:
            fd = os.open(Path(self.marks, "killed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return super().evaluate(source, build, bar)
        os.write(fd, h.encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")


class RecordedRuns:
    """Stands in for the reference harness with the evaluations a real run recorded: each source the run
    measured gets its recorded outcome; any other (a configuration the run did not reach) a score a little
    under the recorded best. Builds are not run."""

    name = "recorded-runs"

    def __init__(self, db) -> None:
        from autodiscovery.store import Run, Store
        from harnesses.reference import ReferenceHarness

        self.objective, self.columns = ReferenceHarness.objective, ReferenceHarness.columns
        self.Problem = ReferenceHarness.Problem
        self.by_hash: dict[str, dict] = {}
        with Store(db).session() as s:
            run = s.get(Run, 1)
            self.fingerprint = dict(run.fingerprint)
            for c in run.candidates:
                if c.measurement is not None:
                    self.by_hash[c.source_hash] = {"status": c.measurement.status, "metrics": dict(c.measurement.metrics)}
        scores = [self.objective.read(r["metrics"]) for r in self.by_hash.values() if r["status"] == "ok"]
        self.below = 0.97 * max(scores)

    def preflight(self, need_gpu: bool = True) -> dict:
        return dict(self.fingerprint)

    def check(self, source: str):
        return None

    def build(self, source: str) -> BuildReport:
        return BuildReport(ok=True, cache_key=hashlib.sha256(source.encode()).hexdigest(), artifact="recorded",
                           registers=40, spill_stores=0, spill_loads=0, stack=0)

    def _recorded(self, source: str) -> dict:
        key = hashlib.sha256(source.encode()).hexdigest()
        s = self.below
        return self.by_hash.get(key) or {"status": "ok", "metrics": {"speedup": {"eager": {
            "median": s, "ci_low": s * 0.99, "ci_high": s * 1.01}}}}

    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        rec = self._recorded(source)
        score = self.objective.read(rec["metrics"]) if rec["status"] == "ok" else None
        return Outcome(rec["status"], rec["metrics"], "", 0.01, "recorded", score)

    def head_to_head(self, challenger, incumbent) -> Outcome:
        a = self.objective.read(self._recorded(challenger[0])["metrics"])
        b = self.objective.read(self._recorded(incumbent[0])["metrics"])
        return Outcome("ok", {"ratio": {"median": a / b, "ci_low": a / b * 0.995, "ci_high": a / b * 1.005}}, "", 0.0)


class ShapedReplay(CampaignReplay):
    """The replayed harness at the campaign's own shape: a manifest's `requires` refuse what they refuse
    there, and every score is scaled by the shape (smaller M, lower), so each problem of a suite has a
    best of its own."""

    class Settings(HopperGemmHarness.Settings):
        name: str = "replay:ShapedReplay"

    def __init__(self, campaign) -> None:
        super().__init__(campaign)
        self.shape = (campaign.problem.M, campaign.problem.N, campaign.problem.K)

    def check(self, source: str):
        return resolve(parse(source), *self.shape)

    def recorded(self, source: str) -> dict:
        rec = super().recorded(source)
        scale = min(1.0, self.shape[0] / 4096) ** 0.1
        return rec | {"metrics": rec["metrics"] | {"ratio": {k: v * scale for k, v in rec["metrics"]["ratio"].items()}}}
