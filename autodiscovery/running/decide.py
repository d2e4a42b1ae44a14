"""Keep or revert, and when to stop: the loop's two judgements, in the harness's objective. Both are pure:
they read figures and return a ruling; the lifecycle (`lifecycle.py`) measures and writes."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from autodiscovery.campaign import Campaign, StopRules
from autodiscovery.interfaces import History, Objective, Outcome
from autodiscovery.running.ledger import counted
from autodiscovery.store import CandidateStatus, EvalStatus
from autodiscovery.toolkit.text import first_line

STOPPED = "stopped at a safe point on request"


class Ruling(enum.StrEnum):
    keep = "keep"
    revert = "revert"
    head_to_head = "head_to_head"
    """Better than the incumbent, by less than `stop.decisive`: measured against it before a keep."""


@dataclass(frozen=True)
class Judgement:
    ruling: Ruling
    reason: str


def judge(outcome: Outcome, incumbent: float | None, objective: Objective, stop: StopRules) -> Judgement:
    """The keep rule, stated once. A candidate that passed and beats the incumbent by more than
    `stop.min_gain` is kept where its own measurement already beats the incumbent's `stop.decisive` times
    over, else it needs a head-to-head (`settle`); anything else is reverted. `incumbent` is the
    incumbent's score (None: there is none yet)."""
    margin = stop.min_gain
    score = outcome.score if outcome.score is not None else objective.read(outcome.metrics)
    if outcome.status != EvalStatus.ok:
        return Judgement(Ruling.revert, f"{outcome.status}: {first_line(outcome.log)}")
    if score is None:  # an ok outcome without the objective's figure: the harness's fault, said as such
        return Judgement(Ruling.revert, f"the harness reported no {objective.name} for a candidate that passed "
                                        f"(metrics: {', '.join(outcome.metrics) or 'none'})")
    screened = outcome.metrics.get("screened")
    if incumbent is None:  # the first to pass is kept whatever it measures: a screened figure says so
        short = f", timed for {screened['pairs']} pairs: below {objective.reference_name or 'the baseline'}" \
            if screened else ""
        return Judgement(Ruling.keep, f"first candidate to pass the gate ({objective.format(score)}{short})")
    if screened:
        return Judgement(Ruling.revert, f"screened out after {screened['pairs']} pairs: {objective.format(score)} is "
                                        f"clearly below the incumbent's {objective.format(incumbent)}")
    if not objective.better(score, incumbent, margin):
        return Judgement(Ruling.revert, f"{objective.format(score)} does not beat the incumbent's "
                                        f"{objective.format(incumbent)} by more than {margin * 100:.3g}%")
    if gain := decisive_gain(objective, score, incumbent, stop.decisive):
        return Judgement(Ruling.keep, f"{objective.format(score)} against the incumbent's "
                                      f"{objective.format(incumbent)}: {gain:.3g}× better, measured apart "
                                      f"(no head-to-head needed at {stop.decisive:g}× or more)")
    return Judgement(Ruling.head_to_head, "")


def settle(h2h: Outcome, stop: StopRules) -> Judgement:
    """The ruling of a head-to-head: kept only where the challenger is better by more than `stop.min_gain`
    and its interval clears 1."""
    r = h2h.metrics.get("ratio", {})
    if h2h.status == EvalStatus.ok and r["median"] > 1 + stop.min_gain and r["ci_low"] > 1.0:
        return Judgement(Ruling.keep, f"head to head {r['median']:.3f}× better than the incumbent "
                                      f"(CI {r['ci_low']:.3f}–{r['ci_high']:.3f})")
    if h2h.status == EvalStatus.ok:
        return Judgement(Ruling.revert, f"head to head only {r['median']:.3f}× the incumbent "
                                        f"(CI {r['ci_low']:.3f}–{r['ci_high']:.3f}): within noise")
    return Judgement(Ruling.revert, f"head to head {h2h.status}: {first_line(h2h.log)}")


def sanitized(out: Outcome | None) -> str | None:
    """Why the sanitizer's outcome blocks a keep, or None (clean, or not checked)."""
    if out is None or out.status == EvalStatus.ok:
        return None
    return f"sanitize {out.status}: {first_line(out.log)}"


def decisive_gain(objective: Objective, score: float, incumbent: float, factor: float | None) -> float | None:
    """How many times better `score` is than the incumbent's where that is at least `factor` (so far
    beyond the noise between two measurements that no head-to-head could reverse it); else None."""
    if factor is None:
        return None
    gain = objective.times(score, incumbent)
    return gain if gain is not None and gain >= factor else None


def stop_reason(h: History, campaign: Campaign, elapsed_s: float, llm_usage: tuple[int, float],
                stop_requested: bool, dry_run: bool) -> str | None:
    """Why the run should stop now, or None: target, stop request, budgets, patience."""
    stop, budget, objective = campaign.stop, campaign.budget, h.objective
    best = h.incumbent.score if h.incumbent is not None else None
    if stop.target is not None and best is not None and objective.reached(best, stop.target):
        sign = "≥" if objective.higher_is_better else "≤"
        return f"target reached: {objective.format(best)} {sign} {objective.format(stop.target)}"
    if stop_requested:
        return STOPPED
    used = sum(counted(r.status) for r in h.records)
    if used >= budget.candidates:
        return f"budget spent: {used} candidates"
    if elapsed_s >= budget.minutes * 60:
        return f"budget spent: {budget.minutes:g} minutes"
    tokens, cost = llm_usage
    if budget.tokens is not None and tokens >= budget.tokens:
        return f"budget spent: {tokens} LLM tokens"
    if budget.cost is not None and cost >= budget.cost:
        return f"budget spent: LLM cost {cost:.4g}"
    if dry_run:
        return None
    streak = 0
    for r in reversed(h.records):
        if r.kept:
            break
        streak += counted(r.status) and r.status != CandidateStatus.measured  # not decided: it may be kept
    below = objective.reference is not None and best is not None and not objective.reached(best, objective.reference)
    patience = stop.patience_below if below else stop.patience
    if patience is not None and streak >= patience:
        return f"patience: {streak} candidates in a row without a keep" + (
            f" (below {objective.reference_name or 'the baseline'})" if below else "")
    return None
