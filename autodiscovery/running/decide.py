"""Keep or revert, and when to stop: the loop's two judgements, in the harness's objective."""

from __future__ import annotations

from autodiscovery.campaign import Campaign
from autodiscovery.interfaces import Harness, History, Outcome
from autodiscovery.running.ledger import Ledger, counted, score_of
from autodiscovery.toolkit.text import first_line

STOPPED = "stopped at a safe point on request"


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
        streak += counted(r.status) and r.status != "measured"  # measured, not decided: it may be kept
    below = objective.reference is not None and best is not None and not objective.reached(best, objective.reference)
    patience = stop.patience_below if below else stop.patience
    if patience is not None and streak >= patience:
        return f"patience: {streak} candidates in a row without a keep" + (
            f" (below {objective.reference_name or 'the baseline'})" if below else "")
    return None


def decisive_gain(objective, score: float, incumbent: float, factor: float | None) -> float | None:
    """How many times better `score` is than the incumbent's where that is at least `factor` (so far
    beyond the noise between two measurements that no head-to-head could reverse it); else None."""
    gain = objective.times(score, incumbent) if factor is not None else None
    return gain if gain is not None and gain >= factor else None


def decide(ledger: Ledger, harness: Harness, campaign: Campaign, cand_id: int, outcome: Outcome,
           build) -> tuple[str, str]:
    """Keep a candidate that passed and beats the incumbent by more than `stop.min_gain`, confirmed
    head to head unless its own measurement already beats the incumbent's `stop.decisive` times over;
    revert anything else. The decision is recorded before this returns."""
    margin, objective = campaign.stop.min_gain, harness.objective
    inc = ledger.incumbent()
    inc_score = score_of(inc, objective) if inc is not None else None
    score = outcome.score if outcome.score is not None else objective.read(outcome.metrics)
    if outcome.status != "ok":
        verdict, reason = "revert", f"{outcome.status}: {first_line(outcome.log)}"
    elif screened := outcome.metrics.get("screened"):
        verdict, reason = "revert", (f"screened out after {screened['pairs']} pairs: {objective.format(score)} is "
                                     f"clearly below the incumbent's {objective.format(inc_score)}"
                                     if inc_score is not None else f"screened out after {screened['pairs']} pairs")
    elif inc is None or inc_score is None:
        verdict, reason = "keep", f"first candidate to pass the gate ({objective.format(score)})"
    elif not objective.better(score, inc_score, margin):
        verdict, reason = "revert", (f"{objective.format(score)} does not beat the incumbent's "
                                     f"{objective.format(inc_score)} by more than {margin * 100:.3g}%")
    elif gain := decisive_gain(objective, score, inc_score, campaign.stop.decisive):
        verdict, reason = "keep", (f"{objective.format(score)} against the incumbent's {objective.format(inc_score)}: "
                                   f"{gain:.3g}× better, measured apart (no head-to-head needed at "
                                   f"{campaign.stop.decisive:g}× or more)")
    else:
        eval_id = ledger.begin(cand_id, "head_to_head", inc.id)
        h2h = harness.head_to_head((ledger.candidate(cand_id).source, build), (inc.source, harness.build(inc.source)))
        ledger.finish(eval_id, cand_id, "head_to_head", h2h, inc.id)
        r = h2h.metrics.get("ratio", {})
        if h2h.status == "ok" and r["median"] > 1 + margin and r["ci_low"] > 1.0:
            verdict, reason = "keep", (f"head to head {r['median']:.3f}× better than the incumbent "
                                       f"(CI {r['ci_low']:.3f}–{r['ci_high']:.3f})")
        elif h2h.status == "ok":
            verdict, reason = "revert", (f"head to head only {r['median']:.3f}× the incumbent "
                                         f"(CI {r['ci_low']:.3f}–{r['ci_high']:.3f}): within noise")
        else:
            verdict, reason = "revert", f"head to head {h2h.status}: {first_line(h2h.log)}"
    if verdict == "keep" and (blocked := sanitized(ledger, harness, cand_id, build)):
        verdict, reason = "revert", blocked
    ledger.decide(cand_id, inc.id if inc is not None else None, verdict, reason, measured=outcome.status == "ok")
    return verdict, reason


def sanitized(ledger: Ledger, harness: Harness, cand_id: int, build) -> str | None:
    """A candidate about to be kept, under the harness's memory and race checker (compute-sanitizer),
    recorded as an evaluation of its own (kind `sanitize`): why it may not be kept, or None."""
    out = harness.sanitize(ledger.candidate(cand_id).source, build)
    if out is None:
        return None
    ledger.finish(None, cand_id, "sanitize", out)
    if out.status == "ok":
        return None
    return f"sanitize {out.status}: {first_line(out.log)}"
