"""A third harness, kept outside the project's packages: the run time of a Python function.

It is named in a campaign as `harness: {name: "toy_harness:ToyHarness"}` (and its agent as
`agent: {kind: "toy_harness:ToyAgent"}`), with nothing of it in the core: the candidates are Python
functions `total(xs)` that must return `sum(xs)`; the objective is microseconds, fewer is better.
"""

from __future__ import annotations

import hashlib
import platform
import random
import statistics
import time

from autodiscovery.campaign import Strict
from autodiscovery.interfaces import (
    AgentBase,
    HarnessBase,
    Objective,
    Outcome,
    Proposal,
)
from autodiscovery.toolkit.build import BuildReport


class ToySettings(Strict):
    name: str = "toy_harness:ToyHarness"
    length: int = 2000
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


class ToyAgent(AgentBase):
    name = "toy"
    batch = 2

    def __init__(self, campaign) -> None:
        self.campaign = campaign

    def seed_proposal(self, campaign) -> Proposal:
        return Proposal("The seed: a plain loop.", VARIANTS["while"], "seed", "while")

    def propose(self, history, n):
        tried = {r.family for r in history.records}
        return [Proposal(f"Sum with {name}.", src, "toy", name) for name, src in VARIANTS.items()
                if name not in tried][:n]


class ToyHarness(HarnessBase):
    name = "toy"
    Settings = ToySettings
    objective = Objective("µs", higher_is_better=False, path=("us",), spec=".1f", joiner=" ")

    def __init__(self, campaign) -> None:
        self.s = campaign.harness

    def preflight(self, need_gpu: bool = True) -> dict:
        return {"gpu": "none (CPU)", "python": platform.python_version()}

    def check(self, source: str) -> None:
        pass

    def build(self, source: str) -> BuildReport:
        key = hashlib.sha256(source.encode()).hexdigest()
        try:
            compile(source, "candidate.py", "exec")
        except SyntaxError as exc:
            return BuildReport(ok=False, cache_key=key, compiler="python", log=f"SyntaxError: {exc}")
        return BuildReport(ok=True, cache_key=key, compiler="python", artifact=source)

    def _function(self, build: BuildReport):
        scope: dict = {}
        exec(build.artifact, scope)
        return scope["total"]

    def _time(self, fn, xs) -> float:
        times = []
        for _ in range(self.s.repeats):
            t = time.perf_counter()
            fn(xs)
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1e6

    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        fn = self._function(build)
        xs = [random.random() for _ in range(self.s.length)]
        if abs(fn(xs) - sum(xs)) > 1e-9 * self.s.length:
            return Outcome("incorrect", log="total(xs) differs from sum(xs)")
        us = self._time(fn, xs)
        return Outcome("ok", {"us": us}, "", 0.0, "cpu", score=us)

    def head_to_head(self, challenger, incumbent) -> Outcome:
        a, b = self._function(challenger[1]), self._function(incumbent[1])
        xs = [random.random() for _ in range(self.s.length)]
        ratios = sorted(self._time(b, xs) / self._time(a, xs) for _ in range(5))
        r = ratios[2]
        return Outcome("ok", {"ratio": {"median": r, "ci_low": ratios[0], "ci_high": ratios[-1]}}, "", 0.0, "cpu")
