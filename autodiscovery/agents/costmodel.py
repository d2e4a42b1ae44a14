"""The search's cost model: how a configuration's time departs from the harness's fit of the shape,
learned from every benchmark recorded in the run databases the search reads (as a cost model is in
TVM's Ansor), so that at a shape it has not seen the search knows which configurations to try first.

A lesson is one recorded benchmark: the GPU, the problem's sizes, the family and its knobs, and the
kernel's own time (the harness's `Objective.time`). Its features are the sizes (log2), the GPU, the
family, every knob (a number as itself and its log2, a choice one-hot, NaN where the family has none),
and the harness's fit of the configuration at that shape on that GPU (its estimate, and the numbers of
its `as_dict`: tiles, waves, how far they fill the last...). The target is the log of the measured
time over the fit's estimate: the model learns where the fit is wrong, and its prediction corrects the
fit's estimate (`Learned`), which the search orders its moves by (`shape_order.py`).

`python -m autodiscovery.agents.costmodel [--campaign NAME]` measures how it ranks at shapes it has not
seen: each shape recorded in the shipped databases left out in turn, the model trained on the rest, the
configurations measured there ranked by it and by the fit alone.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from autodiscovery import AutoDiscoveryError
from autodiscovery.agents.space import Space
from autodiscovery.agents.warm import Best, settings_text
from autodiscovery.toolkit.gbt import Trees
from autodiscovery.toolkit.text import canon

if TYPE_CHECKING:
    from autodiscovery.agents.shape_order import ShapeOrder
    from autodiscovery.campaign import Campaign
    from autodiscovery.roles import Fit, Shown
    from autodiscovery.store import Store

LEAST = 200
"""Fewer lessons than this teach nothing a fit does not know: no model."""


@dataclass(frozen=True)
class Lesson:
    """One recorded benchmark of a configuration: where it ran, what it was, how long a launch took."""

    gpu: str
    sizes: tuple[tuple[str, int], ...]
    family: str
    knobs: dict[str, Any]
    log_time: float
    fingerprint: dict = field(compare=False, hash=False)
    """The run's: the device facts its harness adopted (SMs, peak, cluster slots), for the fit there."""

    @property
    def shape(self) -> tuple:
        return (self.gpu, self.sizes)


def lessons(sources: Iterable[tuple[Store, int | None]], harness: Shown, space: Space,
            fixed: dict[str, Any], sizes: Iterable[str], not_of: str | None = None) -> list[Lesson]:
    """Every benchmark that passed, of runs of `harness` on problems like this one but for their sizes
    (`fixed`: the other fields), of configurations of `space`'s templated families, in the databases of
    `sources` ((store, a run to leave out)). `not_of`: a campaign whose runs in the databases that are not
    the run's own (run None) are passed over, a suite's problems too (`own_records: false`). The same
    configuration measured more than once at a shape counts once, at the median of its times."""
    from autodiscovery.store import Candidate, EvalKind, EvalStatus, Evaluation, Run

    time = harness.objective.time
    if time is None:
        return []
    names = list(sizes)
    found: dict[tuple, list[float]] = {}
    prints: dict[tuple, dict] = {}
    for store, run_id in sources:
        with store.session() as s:
            runs = {}
            for run in s.query(Run).filter(Run.id != (run_id or -1)):
                config, fp = run.config or {}, run.fingerprint or {}
                problem = config.get("problem") or {}
                if ((config.get("harness") or {}).get("name") != harness.name or fp.get("dry_run") or not fp.get("gpu")
                        or {k: v for k, v in problem.items() if k not in names} != fixed
                        or not all(isinstance(problem.get(k), int) and problem[k] > 0 for k in names)
                        or (run_id is None and not_of is not None
                            and (run.campaign == not_of or run.campaign.startswith(f"{not_of}/")))):
                    continue
                runs[run.id] = (fp, tuple((k, problem[k]) for k in names))
            if not runs:
                continue
            rows = s.query(Candidate.run_id, Candidate.family, Candidate.knobs, Evaluation.metrics).join(
                Evaluation, Evaluation.candidate_id == Candidate.id).filter(
                Candidate.run_id.in_(list(runs)), Evaluation.kind == EvalKind.benchmark,
                Evaluation.status == EvalStatus.ok)
            for run, family, knobs, metrics in rows:
                fam = space.families.get(family or "")
                value = harness.objective.read(metrics, time)
                if fam is None or not fam.template or not isinstance(value, int | float) or value <= 0:
                    continue
                knobs = fam.complete(dict(knobs or {}))
                if set(knobs) != set(fam.knobs):
                    continue
                fp, at = runs[run]
                key = (fp["gpu"], at, fam.name, canon(knobs))
                found.setdefault(key, []).append(math.log(value))
                prints.setdefault(key, fp)
    out = []
    for key, times in found.items():
        gpu, at, family, knobs = key
        out.append(Lesson(gpu, at, family, json.loads(knobs), statistics.median(times), prints[key]))
    return out


class Fits:
    """The harness's fit of a configuration at a lesson's shape, on the GPU it ran on: a harness made for
    each (GPU, sizes), adopting the facts that run recorded; fits kept (a head's rendering is the cost)."""

    def __init__(self, campaign: Campaign, space: Space) -> None:
        self.campaign, self.space = campaign, space
        self._harness: dict[tuple, Any] = {}
        self._fits: dict[tuple, Fit | None] = {}

    def __call__(self, lesson: Lesson) -> Fit | None:
        key = (lesson.shape, lesson.family, canon(lesson.knobs))
        if key not in self._fits:
            self._fits[key] = self._fit(lesson)
        return self._fits[key]

    def _fit(self, lesson: Lesson) -> Fit | None:
        from autodiscovery import registry
        from autodiscovery.campaign import SuiteEntry
        from autodiscovery.roles import Fitting, Resuming

        if lesson.shape not in self._harness:
            at = self.campaign.entry(SuiteEntry(label="lesson", problem=dict(lesson.sizes)), "a lesson's shape")
            h = registry.make_harness(at)
            if isinstance(h, Resuming):
                h.adopt(lesson.fingerprint)
            self._harness[lesson.shape] = h
        h = self._harness[lesson.shape]
        if not isinstance(h, Fitting):
            return None
        try:
            return h.fit(self.space.head(lesson.family, lesson.knobs), lesson.knobs)
        except Exception:  # noqa: BLE001 - a recorded knob value a template no longer renders: no lesson
            return None


def _numbers(d: dict, prefix: str = "") -> dict[str, float]:
    """The numbers of a fit's `as_dict` (lists by index, booleans as 0 and 1), by name."""
    out: dict[str, float] = {}
    for k, v in d.items():
        if isinstance(v, bool):
            out[prefix + k] = float(v)
        elif isinstance(v, int | float):
            out[prefix + k] = float(v)
        elif isinstance(v, list | tuple):
            out |= _numbers({str(i): x for i, x in enumerate(v)}, f"{prefix}{k}.")
    return out


class Features:
    """How a (GPU, sizes, family, knobs, fit) becomes a row of numbers: the columns are fixed by the
    space and the lessons the model learnt from."""

    def __init__(self, space: Space, lessons: list[Lesson], fits: list[dict[str, float]]) -> None:
        self.sizes = [k for k, _ in lessons[0].sizes]
        self.gpus = sorted({x.gpu for x in lessons})
        self.families = sorted(name for name, f in space.families.items() if f.template)
        self.knobs: list[tuple[str, list[Any] | None]] = []  # (knob, its choices; None: a number)
        values: dict[str, list[Any]] = {}
        for f in space.families.values():
            for k, vs in f.knobs.items():
                values.setdefault(k, []).extend(v for v in vs if v not in values.get(k, []))
        for k in sorted(values):
            numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values[k])
            self.knobs.append((k, None if numeric else sorted(map(str, values[k]))))
        self.fit_names = sorted({k for d in fits for k in d})

    @property
    def width(self) -> int:
        return len(self.row("", (), "", {}, None))

    def row(self, gpu: str, sizes: tuple[tuple[str, int], ...], family: str, knobs: dict[str, Any],
            fit: dict[str, float] | None) -> list[float]:
        size = dict(sizes)
        out = [math.log2(size[k]) if size.get(k) else math.nan for k in self.sizes]
        out += [float(gpu == g) for g in self.gpus]
        out += [float(family == f) for f in self.families]
        for k, choices in self.knobs:
            v = knobs.get(k)
            if choices is None:
                out += [math.nan, math.nan] if v is None else [float(v), math.log2(v) if v > 0 else -1.0]
            else:
                out += [math.nan if v is None else float(str(v) == c) for c in choices]
        out += [(fit or {}).get(k, math.nan) for k in self.fit_names]
        return out


def fit_numbers(fit: Fit, work: float | None) -> dict[str, float]:
    """What the model reads of a fit: the log of its estimate (and of it over the problem's work), and
    the numbers it states of itself."""
    out = {"log_estimate": math.log(fit.estimate)} if fit.estimate > 0 else {}
    if work and fit.estimate > 0:
        out["log_estimate_per_work"] = math.log(fit.estimate / work)
    return out | _numbers(fit.as_dict(), "fit.")


def _work(sizes: tuple[tuple[str, int], ...]) -> float:
    return float(math.prod(v for _, v in sizes))


@dataclass
class CostModel:
    """A model of log(measured time / the fit's estimate), learned from lessons (`learn`). Its factors are
    stated against the median of the lessons' (`usual`): a fit's estimate and a measured time need not be
    in the same unit, and 1.00× reads as "as the fit usually errs"."""

    features: Features
    trees: Trees
    lessons: int
    shapes: int
    usual: float = 0.0
    """The median of the lessons' log(measured time / the fit's estimate)."""

    @classmethod
    def learn(cls, lessons: list[Lesson], space: Space, fit_of: Callable[[Lesson], Fit | None],
              seed: int = 0) -> CostModel | None:
        """Trained on the lessons the fit can place; None where too few are (LEAST)."""
        rows, targets, kept = [], [], []
        for x in lessons:
            fit = fit_of(x)
            if fit is not None and fit.estimate > 0:
                kept.append((x, fit_numbers(fit, _work(x.sizes))))
                targets.append(x.log_time - math.log(fit.estimate))
        if len(kept) < LEAST:
            return None
        features = Features(space, [x for x, _ in kept], [f for _, f in kept])
        for x, f in kept:
            rows.append(features.row(x.gpu, x.sizes, x.family, x.knobs, f))
        trees = Trees(seed=seed).fit(np.array(rows, dtype=float), np.array(targets))
        return cls(features, trees, len(kept), len({x.shape for x, _ in kept}), statistics.median(targets))

    def factor(self, gpu: str, sizes: tuple[tuple[str, int], ...], family: str, knobs: dict[str, Any],
               fit: Fit) -> float:
        """How many times the fit's estimate the model puts this configuration's time, against the fit's
        usual error (the same for every configuration: orders are unchanged by it)."""
        row = self.features.row(gpu, sizes, family, knobs, fit_numbers(fit, _work(sizes)))
        return math.exp(self.trees.predict_one(row) - self.usual)

    def describe(self) -> str:
        return f"learned from {self.lessons} benchmarks at {self.shapes} shapes"


@dataclass(frozen=True)
class Learned:
    """A fit whose estimate the cost model corrected: what the search orders its moves by."""

    fit: Any
    factor: float

    @property
    def estimate(self) -> float:
        return self.fit.estimate * self.factor

    @property
    def tie_break(self) -> Any:
        return self.fit.tie_break

    @property
    def l2_gb(self) -> float:
        return getattr(self.fit, "l2_gb", 0.0)

    def describe(self) -> str:
        return (f"{self.fit.describe()}; the cost model puts it at {self.factor:.2f}× the fit's estimate "
                f"(1.00×: as the fit usually errs)")

    def as_dict(self) -> dict:
        return self.fit.as_dict() | {"learned_factor": round(self.factor, 4)}


# ---- how it ranks at shapes it has not seen -------------------------------------------------------------

def fastest(found: list[Lesson], space: Space, fits: ShapeOrder, learned: str | None, n: int) -> list[Best]:
    """The `n` fastest here by `fits` (the fit the search orders by, the model's correction set on it) of
    the configurations the lessons recorded that are valid at this shape, each as a move (family, knobs,
    hypothesis)."""
    pool = {(x.family, canon(x.knobs)): (x.family, x.knobs) for x in found}
    rated = []
    for family, knobs in pool.values():
        fam = space.families[family]
        if not fam.violations(knobs, fits.shape) and (f := fits.fit(fam, knobs)) is not None:
            rated.append((f.estimate, family, canon(knobs), knobs, f))
    rated.sort(key=lambda r: r[:3])
    chosen = [rated[i] for i in picks([kind(family, knobs, f) for _, family, _, knobs, f in rated], n)]
    return [(family, knobs, f"The cost model's pick ({learned}): {family} at {settings_text(knobs)}, of the "
                            f"{len(rated)} configurations recorded there the fastest here by its estimate"
                            f"{'' if i == 0 else ' of another tile'}: {f.describe()}.")
            for i, (_, family, _, knobs, f) in enumerate(chosen)]


def kind(family: str, knobs: dict[str, Any], fit: Any) -> tuple:
    """What two picks should not share: the family, and the tile and K split its fit states (a ring's depth or
    an epilogue apart, two configurations teach a run little more than one); where the fit states no tile,
    the configuration itself."""
    stated = fit.as_dict() if hasattr(fit, "as_dict") else {}
    if "tile" not in stated:
        return family, canon(knobs)
    return family, str(stated["tile"]), stated.get("split")


def picks(kinds: list[tuple], n: int) -> list[int]:
    """The first `n` of a ranking (indices, best first) as the search tries them: each of another `kind` than
    those before it while the ranking has one, then the rest in order."""
    out: list[int] = []
    seen: set[tuple] = set()
    for i, k in enumerate(kinds):
        if len(out) < n and k not in seen:
            out.append(i)
            seen.add(k)
    out += [i for i in range(len(kinds)) if i not in out][:n - len(out)]
    return sorted(out)


def main(argv: list[str]) -> int:
    """`python -m autodiscovery.agents.costmodel`: the held-out ranking (`held_out.py`)."""
    from autodiscovery.agents.held_out import main as held_out_main

    return held_out_main(argv)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except AutoDiscoveryError as exc:
        sys.exit(f"error: {exc}")
