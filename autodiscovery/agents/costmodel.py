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
from pathlib import Path
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
    return [(family, knobs, f"The cost model's pick ({learned}): {family} at {settings_text(knobs)}, of the "
                            f"{len(rated)} configurations recorded there the fastest here by its estimate: {f.describe()}.")
            for _, family, _, knobs, f in rated[:n]]


def _ranks(a: np.ndarray) -> np.ndarray:
    order = np.argsort(a, kind="stable")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(len(a))
    for v in np.unique(a):  # ties share their mean rank
        ranks[a == v] = ranks[a == v].mean()
    return ranks


def rank_quality(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """How a ranking by `predicted` (lower first) agrees with the measured log times: Spearman's rank
    correlation, whether its first pick is the measured best (within 1%), and its regret (the measured
    time of its first pick over the best's)."""
    best = int(np.argmin(measured))
    pick = int(np.argmin(predicted))
    spearman = (float(np.corrcoef(_ranks(predicted), _ranks(measured))[0, 1])
                if np.std(measured) > 0 and np.std(predicted) > 0 else 0.0)
    return {"spearman": spearman if np.isfinite(spearman) else 0.0,
            "first_is_best": float(measured[pick] <= measured[best] + math.log(1.01)),
            "regret": float(np.exp(measured[pick] - measured[best]))}


def held_out(lessons: list[Lesson], space: Space, fit_of: Callable[[Lesson], Fit | None], least: int = 5,
             only: int | None = None, group: Callable[[tuple], str] | None = None) -> dict[str, dict[str, float]]:
    """Each shape (its sizes, on every GPU) with at least `least` configurations measured, left out in turn
    (`only` of them, spread evenly over the shapes in the order of their sizes): the model learnt from the
    others, its ranking and the fit's of that shape's configurations on each GPU. Means over the shapes,
    and the worst regret; with `group` (sizes -> a label), the same over each group's shapes too (keyed
    "cost model, LABEL")."""
    by_shape: dict[tuple, list[Lesson]] = {}
    for x in lessons:
        if fit_of(x) is not None:
            by_shape.setdefault(x.sizes, []).append(x)
    shapes = sorted(k for k, v in by_shape.items() if len(v) >= least)
    if only is not None and len(shapes) > only:
        shapes = [shapes[i * len(shapes) // only] for i in range(only)]
    out: dict[str, list[dict[str, float]]] = {}
    for sizes in shapes:
        model = CostModel.learn([x for x in lessons if x.sizes != sizes], space, fit_of)
        if model is None:
            continue
        for gpu in sorted({x.gpu for x in by_shape[sizes]}):
            test = [x for x in by_shape[sizes] if x.gpu == gpu]
            if len(test) < least:
                continue
            measured = np.array([x.log_time for x in test])
            fits = [fit_of(x) for x in test]
            est = np.array([math.log(f.estimate) for f in fits if f is not None])
            learned = est + np.log([model.factor(x.gpu, x.sizes, x.family, x.knobs, f)
                                    for x, f in zip(test, fits) if f is not None])
            for name, ranked in (("cost model", learned), ("fit", est)):
                quality = rank_quality(ranked, measured)
                out.setdefault(name, []).append(quality)
                if group is not None:
                    out.setdefault(f"{name}, {group(sizes)}", []).append(quality)
    return {name: {"shapes": len(rows), **{k: statistics.fmean(r[k] for r in rows) for k in rows[0]},
                   "worst_regret": max(r["regret"] for r in rows)} if rows else {"shapes": 0}
            for name, rows in (out or {"cost model": [], "fit": []}).items()}


def main(argv: list[str]) -> int:
    """Each shape shipped under docs/ left out in turn: the cost model's ranking beside the fit's (--out: JSON)."""
    import argparse

    from autodiscovery import campaign as campaigns
    from autodiscovery import provenance, registry
    from autodiscovery.agents import warm
    from autodiscovery.agents.search import SearchAgent

    ap = argparse.ArgumentParser(prog="python -m autodiscovery.agents.costmodel", description=main.__doc__)
    ap.add_argument("--campaign", default=campaigns.DEFAULT_CAMPAIGN, help="whose harness and space")
    ap.add_argument("--out", type=Path, help="also write the rows as JSON here")
    ap.add_argument("leave_out", nargs="*", metavar="!PATTERN", help="kernel databases to leave out")
    args = ap.parse_args(argv)
    c = campaigns.load(args.campaign)
    space, problem, names = SearchAgent(c).space, c.problem.model_dump(mode="json"), list(c.problem.names())
    found = lessons([(s, None) for s in warm.kernel_stores(["shipped", *args.leave_out])], registry.harness(c.harness.name), space,
                    {k: v for k, v in problem.items() if k not in names}, names)
    result = held_out(found, space, Fits(c, space),
                      group=lambda sizes: f"{names[0]} {'<' if dict(sizes)[names[0]] < 512 else '≥'} 512")
    rows = [{"ranking": label, **r} for label, r in
            sorted(result.items(), key=lambda kv: (kv[0].count(","), kv[0].partition(",")[2], kv[0])) if r.get("shapes")]
    print(f"{len(found)} benchmarks at {(pairs := len({x.shape for x in found}))} (GPU, shape) pairs; each left out in turn")
    print(f"{'ranking by':20} {'shapes':>6} {'spearman':>9} {'first is best':>14} {'regret':>7} {'worst':>7}")
    for r in rows:
        print(f"{r['ranking']:20} {r['shapes']:6d} {r['spearman']:9.3f} {r['first_is_best']:14.2f} {r['regret']:7.4f} "
              f"{r['worst_regret']:7.4f}")
    if args.out:
        args.out.write_text(json.dumps({"campaign": c.name, "code": provenance.code(), "benchmarks": len(found),
                                        "pairs": pairs, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except AutoDiscoveryError as exc:
        sys.exit(f"error: {exc}")
