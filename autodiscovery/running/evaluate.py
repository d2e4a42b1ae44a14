"""One path from a candidate's source to its outcome: check, build, evaluate. The loop, the ladder and
`measure` all go through it, so a candidate is judged the same way wherever it comes from."""

from __future__ import annotations

from autodiscovery import AutoDiscoveryError
from autodiscovery.interfaces import Outcome
from autodiscovery.roles import Checking, Evaluating
from autodiscovery.store import EvalStatus
from autodiscovery.toolkit.build import BuildReport


def screen(harness: Evaluating, source: str) -> Outcome | None:
    """A `rejected` outcome, with the reason, for a candidate the problem cannot take; else None (also
    where the harness checks nothing before a build: `Checking`)."""
    if not isinstance(harness, Checking):
        return None
    try:
        harness.check(source)
    except AutoDiscoveryError as exc:
        return Outcome(EvalStatus.rejected, log=str(exc))
    return None


def assess(harness: Evaluating, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
    """The outcome of a candidate already built (a failed build is its own outcome). With `bar` (the
    score to beat), the harness may screen: a short measurement that ends early when clearly below."""
    if not build.ok:
        return Outcome(EvalStatus.compile_error, log=build.log)
    return harness.evaluate(source, build, bar)


def evaluate(harness: Evaluating, source: str) -> tuple[BuildReport | None, Outcome]:
    """Check, build and evaluate one candidate."""
    if (refused := screen(harness, source)) is not None:
        return None, refused
    build = harness.build(source)
    return build, assess(harness, source, build)
