"""A third harness and agent, kept outside the project's packages: the run time of a Python function.

It is named in a campaign as `harness: {name: "toy_harness:ToyHarness"}` (and its agent as
`agent: {kind: "toy_harness:ToyAgent"}`, with its settings in `agent.toy`), with nothing of it in the
core: the candidates are Python functions `total(xs)` that must return `sum(xs)`; the objective is
milliseconds per call, fewer is better, with an interval; the harness adds a column (calls a second),
a report section (each measurement's timed calls) with its chart, and its own build fact.
"""

from __future__ import annotations

import hashlib
import platform
import random
import statistics
import time

from pydantic import Field

from autodiscovery.campaign import HarnessSettings, Strict
from autodiscovery.interfaces import (
    AgentBase,
    Chart,
    Column,
    Objective,
    Outcome,
    Proposal,
    Section,
)
from autodiscovery.store import EvalStatus, Store
from autodiscovery.toolkit.build import BuildReport


class ToySettings(HarnessSettings):
    name: str = "toy_harness:ToyHarness"
    length: int = 20000
    """Items in the list each call sums."""
    repeats: int = 30
    """Timed calls per measurement; the median is the score."""


VARIANTS = {
    "loop": "def total(xs):\n    s = 0\n    for x in xs:\n        s += x\n    return s\n",
    "while": "def total(xs):\n    s, i = 0, 0\n    while i < len(xs):\n        s += xs[i]\n        i += 1\n    return s\n",
    "builtin": "def total(xs):\n    return sum(xs)\n",
    "wrong": "def total(xs):\n    return sum(xs[1:])\n",
    "broken": "def total(xs):\n    return sum(xs\n",
}


class ToyAgentSettings(Strict):
    """`agent.toy`: which variants the toy agent proposes, in order."""

    variants: list[str] = Field(default_factory=lambda: list(VARIANTS))


class ToyAgent(AgentBase):
    name = "toy"
    batch = 2
    Settings = ToyAgentSettings

    @classmethod
    def check(cls, settings: ToyAgentSettings) -> None:
        unknown = [v for v in settings.variants if v not in VARIANTS]
        if unknown:
            raise ValueError(f"variants: no variant named {', '.join(unknown)} (there are {', '.join(VARIANTS)})")

    def __init__(self, campaign) -> None:
        self.variants = campaign.agent.of(ToyAgent).variants

    def seed_proposal(self, campaign) -> Proposal:
        return Proposal("The seed: a plain loop.", VARIANTS["while"], "seed", "while")

    def propose(self, history, n):
        tried = {r.family for r in history.records}
        return [Proposal(f"Sum with {name}.", VARIANTS[name], "toy", name) for name in self.variants
                if name not in tried][:n]


def _calls_per_s(metrics: dict, _build: dict) -> float | None:
    return 1e3 / metrics["ms"] if metrics.get("ms") else None


class BareToy:
    """A harness with only what evaluating needs (`roles.Evaluating`) and a constructor: no base class, no
    settings of its own (`harness: {name: 'toy_harness:BareToy'}`), no check, no columns, no reports."""

    name = "bare-toy"
    objective = Objective("ms", higher_is_better=False, path=("ms",), spec=".4f", joiner=" ",
                          interval=(("ms_low",), ("ms_high",)), noise=0.5)

    def __init__(self, campaign) -> None:
        self.s = ToySettings()

    def preflight(self, need_gpu: bool = True) -> dict:
        return {"gpu": "none (CPU)", "python": platform.python_version()}

    def build(self, source: str) -> BuildReport:
        key = hashlib.sha256(source.encode()).hexdigest()
        try:
            code = compile(source, "candidate.py", "exec")
        except SyntaxError as exc:
            return BuildReport(ok=False, cache_key=key, compiler="python", log=f"SyntaxError: {exc}")
        return BuildReport(ok=True, cache_key=key, compiler="python", artifact=source,
                           facts={"bytecode_bytes": len(next(c for c in code.co_consts if hasattr(c, "co_code")).co_code)})

    def _function(self, build: BuildReport):
        scope: dict = {}
        exec(build.artifact, scope)
        return scope["total"]

    def _times(self, fn, xs) -> list[float]:
        times = []
        for _ in range(self.s.repeats):
            t = time.perf_counter()
            fn(xs)
            times.append((time.perf_counter() - t) * 1e3)
        return sorted(times)

    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        fn = self._function(build)
        xs = [random.random() for _ in range(self.s.length)]
        if abs(fn(xs) - sum(xs)) > 1e-9 * self.s.length:
            return Outcome(EvalStatus.incorrect, log="total(xs) differs from sum(xs)")
        times = self._times(fn, xs)
        ms = statistics.median(times)
        q = len(times) // 4
        metrics = {"ms": ms, "ms_low": times[q], "ms_high": times[-1 - q], "calls": times}
        return Outcome(EvalStatus.ok, metrics, "", 0.0, "cpu", score=ms)

    def head_to_head(self, challenger, incumbent) -> Outcome:
        a, b = self._function(challenger[1]), self._function(incumbent[1])
        xs = [random.random() for _ in range(self.s.length)]
        ratios = sorted(statistics.median(self._times(b, xs)) / statistics.median(self._times(a, xs)) for _ in range(5))
        r = ratios[2]
        return Outcome(EvalStatus.ok, {"ratio": {"median": r, "ci_low": ratios[0], "ci_high": ratios[-1]}}, "", 0.0, "cpu")


class ToyHarness(BareToy):
    """The bare toy with settings, a check, columns, report tables and a chart (`Checking`,
    `Summarizing`, `Charting`)."""

    name = "toy"
    Settings = ToySettings
    columns = (Column("calls_per_s", "calls/s", _calls_per_s, ".0f",
                      frozenset({"live", "candidates", "lineage", "diff", "measure", "replay", "report", "summary"})),
               Column("bytecode", "bytecode B", lambda m, b: b.get("bytecode_bytes"), "d",
                      frozenset({"candidates", "lineage"}), after=True))

    def __init__(self, campaign) -> None:
        self.s = campaign.harness

    def check(self, source: str) -> None:
        pass

    # ---- what it adds to the reports ------------------------------------------------------------
    @staticmethod
    def summary_data(store: Store, run_id: int) -> dict | None:
        from autodiscovery.review import report

        rows = [c for c in report.show_run(store, run_id)["candidates"] if c["score"] is not None]
        return {"timed": [{"seq": c["seq"], "family": c["family"], "ms": c["score"]} for c in rows]}

    @staticmethod
    def summary(run_id: int, data: dict) -> list[Section]:
        rows = [[f"#{t['seq']}", t["family"], f"{t['ms']:.4f}"] for t in data["timed"]]
        return [Section("toy-timed", f"every variant timed in run {run_id}", ["#", "variant", "ms a call"], rows,
                        caption="the median of the timed calls", chart="toy-timed")]

    @staticmethod
    def charts(data: dict) -> list[Chart]:
        from autodiscovery.review.charts import KEPT, pyplot

        timed = (data.get("harness") or {}).get("timed") or []
        if not timed:
            return []
        fig, ax = pyplot().subplots(figsize=(6, 2.6))
        ax.barh([t["family"] for t in timed], [t["ms"] for t in timed], color=KEPT, gid="toy-bars")
        ax.set_xlabel("ms a call")
        ax.set_title("each variant, timed")
        return [Chart("toy-timed", fig)]


class SanitizedToy(ToyHarness):
    """The toy harness with a memory checker before each keep, as a GPU harness has (`Sanitizing`): it
    finds an error in any variant that calls the builtin `sum` (standing in for a kernel that reads out of
    bounds)."""

    sanitizes = True

    def sanitize(self, source: str, build: BuildReport) -> Outcome | None:
        tools = {t: {"status": "clean", "errors": 0, "seconds": 0.0}
                 for t in ("memcheck", "racecheck", "synccheck", "initcheck")}
        if "sum(" not in source:
            return Outcome(EvalStatus.ok, {"tools": tools, "findings": []}, "", 0.0, "cpu")
        finding = "memcheck: Invalid __global__ read of size 4 bytes (at total+0x90; by thread (0,0,0) in block (3,0,0))"
        tools["memcheck"] = {"status": "findings", "errors": 1, "seconds": 0.0}
        return Outcome(EvalStatus.incorrect, {"tools": tools, "findings": [finding]},
                       f"compute-sanitizer found 1 error(s): {finding}", 0.0, "cpu")
