"""Optuna's TPE over one family's knobs, fitted to what was measured: one wiring for every agent.

A point measured before is told its score again when TPE lands on it (so a good region stays good),
a point that failed or was refused is told FAIL, and only untried points are handed out.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import Trial, TrialState, create_trial

from autodiscovery.toolkit.text import canon

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

Knobs = dict[str, Any]


def study(knobs: dict[str, list], points: list[tuple[Knobs, float | None]], seed: int,
          higher_is_better: bool) -> tuple[optuna.Study, dict[str, BaseDistribution]]:
    """A study over `knobs` (name -> choices) that already holds `points` (knobs, score or None)."""
    dists: dict[str, BaseDistribution] = {k: CategoricalDistribution(v) for k, v in knobs.items()}
    choices = {k: set(v) for k, v in knobs.items()}
    s = optuna.create_study(direction="maximize" if higher_is_better else "minimize", sampler=optuna.samplers.TPESampler(
        seed=seed, n_startup_trials=4, constant_liar=True))
    for params, score in points:
        if set(params) == set(dists) and all(params[k] in choices[k] for k in params):
            s.add_trial(create_trial(params=params, distributions=dists,
                                     **({"value": score} if score is not None else {"state": TrialState.FAIL})))
    return s, dists


def tell(s: optuna.Study, trial: Trial, score: float | None) -> None:
    s.tell(trial, score, state=TrialState.COMPLETE if score is not None else TrialState.FAIL)


def untried(s: optuna.Study, dists: dict[str, BaseDistribution], seen: dict[str, float | None],
            asks: int, key: Callable[[Knobs], str] = canon) -> Iterator[tuple[Trial, Knobs]]:
    """Up to `asks` draws; each one `seen` (by `key`) is told its score (FAIL when None) and skipped,
    the others are yielded for the caller to accept, or to `tell` FAIL."""
    for _ in range(asks):
        trial = s.ask(dists)
        knobs = {k: trial.params[k] for k in dists}
        if key(knobs) in seen:
            tell(s, trial, seen[key(knobs)])
            continue
        yield trial, knobs
