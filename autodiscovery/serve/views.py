"""What the pages of `serve` show beyond the report, as data: runs a page at a time, a run's live state
(its incumbent, the stop rule nearest, the devices' busy share, LLM usage), a candidate with its
evaluations, diffs and LLM calls, and the tree of a run. Read-only, like `review.report`."""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session, selectinload

from autodiscovery.campaign import Budget, StopRules
from autodiscovery.review import pool as pooling
from autodiscovery.review import report
from autodiscovery.review.report import NotFound
from autodiscovery.running.ledger import score_of
from autodiscovery.store import (
    Candidate,
    CandidateStatus,
    Decision,
    Evaluation,
    LlmCall,
    Run,
    RunStatus,
    Store,
)

RUNS_PER_PAGE = 50
CANDIDATES_PER_PAGE = 100
TREE_PER_PAGE = 500


@dataclass(frozen=True)
class Pager:
    """Which slice of a long list a page shows (pages count from 1)."""

    number: int
    size: int
    total: int

    @classmethod
    def of(cls, number: int, size: int, total: int) -> Pager:
        last = max(1, math.ceil(total / size))
        return cls(min(max(1, number), last), size, total)

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.size))

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size


def _run(s: Session, run_id: int) -> Run:
    run = Run.find(s, run_id)
    if run is None:
        raise NotFound(f"no run {run_id} in this database")
    return run


def runs_page(store: Store, campaign: str | None, status: str | None, page: int) -> dict:
    """One page of runs, newest first: a suite's runs are found by its campaign too ('llama3-8b-gemm'
    finds the suite and its 'llama3-8b-gemm/qkv 16')."""
    with store.session() as s:
        query = select(Run)
        if campaign:
            query = query.where(or_(Run.campaign == campaign, Run.campaign.startswith(f"{campaign}/", autoescape=True)))
        if status:
            query = query.where(Run.status == status)
        total = s.scalar(select(func.count()).select_from(query.subquery())) or 0
        pager = Pager.of(page, RUNS_PER_PAGE, total)
        runs = list(s.scalars(query.order_by(Run.id.desc()).offset(pager.offset).limit(pager.size)
                              .options(selectinload(Run.best).selectinload(Candidate.evaluations),
                                       selectinload(Run.best).selectinload(Candidate.build))))
        counts: dict[int, dict[str, int]] = {}
        for run_id, cstatus, many in s.execute(select(Candidate.run_id, Candidate.status, func.count())
                                               .where(Candidate.run_id.in_([r.id for r in runs]))
                                               .group_by(Candidate.run_id, Candidate.status)):
            counts.setdefault(run_id, {})[cstatus] = many
        campaigns = list(s.scalars(select(Run.campaign).where(Run.parent_id.is_(None)).distinct()
                                   .order_by(Run.campaign)))
        rows = []
        for run in runs:
            harness = report.harness_of(run)
            n = counts.get(run.id, {})
            best = report.candidate_row(run.best, harness) if run.best is not None else {}
            rows.append({"id": run.id, "campaign": run.campaign, "agent": run.agent, "status": run.status,
                         "stop_reason": run.stop_reason, "suite": run.parent_id,
                         "is_suite": bool((run.config or {}).get("suite")),
                         "evaluated": sum(v for k, v in n.items() if k != CandidateStatus.proposed),
                         "proposed": n.get(CandidateStatus.proposed, 0),
                         "best_seq": best.get("seq"), "best": report.summary_text(harness, best),
                         "created_at": run.created_at, "elapsed_s": run.elapsed_s})
    return {"rows": rows, "pager": pager, "campaigns": campaigns}


def header(store: Store, run_id: int) -> dict:
    """What a run's page says of it first."""
    with store.session() as s:
        run = _run(s, run_id)
        return {"id": run.id, "campaign": run.campaign, "agent": run.agent, "status": run.status,
                "stop_reason": run.stop_reason, "created_at": run.created_at, "elapsed_s": run.elapsed_s,
                "device": (run.fingerprint or {}).get("gpu"), "suite": run.parent_id,
                "origin": (run.config or {}).get("origin"), "is_suite": bool((run.config or {}).get("suite"))}


def token(store: Store, run_id: int) -> str:
    """Changes whenever something a run's page shows does (a suite's: any of its runs): a cheap question
    asked at every poll. It starts with the run's status."""
    with store.session() as s:
        run = _run(s, run_id)
        runs = [run_id, *s.scalars(select(Run.id).where(Run.parent_id == run_id))]
        state = [*s.execute(select(Run.id, Run.status, Run.best_candidate_id).where(Run.id.in_(runs))
                            .order_by(Run.id)).all(),
                 s.execute(select(func.count(), func.max(Candidate.id), func.count(Candidate.build_id))
                           .where(Candidate.run_id.in_(runs))).one(),
                 s.execute(select(func.count(), func.max(Evaluation.id))
                           .join(Candidate, Evaluation.candidate_id == Candidate.id)
                           .where(Candidate.run_id.in_(runs))).one(),
                 s.scalar(select(func.count()).select_from(Decision).where(Decision.run_id.in_(runs))),
                 s.scalar(select(func.count()).select_from(LlmCall).where(LlmCall.run_id.in_(runs)))]
        digest = hashlib.sha256(repr(state).encode()).hexdigest()[:16]
        return f"{run.status}-{digest}"


def stop_rules(store: Store, run_id: int) -> dict:
    """Each of the run's stop rules with how far the run has gone towards it (a share, 1 = reached), from
    what was recorded, and the nearest; the rules are those of `running.decide.stop_reason`."""
    with store.session() as s:
        run = _run(s, run_id)
        config = run.config or {}
        try:
            budget = Budget.model_validate(config.get("budget") or {})
            stop = StopRules.model_validate(config.get("stop") or {})
        except ValidationError:
            return {"rules": [], "nearest": None}
        objective = report.objective_of(run)
        statuses = list(s.scalars(select(Candidate.status).where(Candidate.run_id == run_id).order_by(Candidate.seq)))
        tokens, cost = s.execute(select(
            func.sum(func.coalesce(LlmCall.input_tokens, 0) + func.coalesce(LlmCall.output_tokens, 0)),
            func.sum(LlmCall.cost)).where(LlmCall.run_id == run_id)).one()
        best = score_of(run.best, objective) if run.best is not None else None
        elapsed = run.elapsed_s
    tokens, cost = tokens or 0, cost or 0.0
    used = sum(st != CandidateStatus.proposed for st in statuses)
    rules: list[dict[str, Any]] = [{"rule": "candidates", "text": f"{used} of {budget.candidates} candidates",
              "share": used / budget.candidates},
             {"rule": "minutes", "text": f"{elapsed / 60:.1f} of {budget.minutes:g} minutes",
              "share": elapsed / (budget.minutes * 60)}]
    if budget.tokens is not None:
        rules.append({"rule": "tokens", "text": f"{tokens} of {budget.tokens} LLM tokens",
                      "share": tokens / budget.tokens})
    if budget.cost is not None:
        rules.append({"rule": "cost", "text": f"LLM cost {cost:.4g} of {budget.cost:g}", "share": cost / budget.cost})
    if stop.target is not None:
        gain = objective.times(best, stop.target) if best is not None else None
        rules.append({"rule": "target", "share": min(gain, 1.0) if gain is not None else 0.0,
                      "text": f"best {objective.format(best)}, target {objective.format(stop.target)}"})
    if not config.get("dry_run"):
        streak = 0
        for st in reversed(statuses):
            if st == CandidateStatus.kept:
                break
            # measured, not decided: it may be kept
            streak += st not in (CandidateStatus.proposed, CandidateStatus.measured)
        below = objective.reference is not None and best is not None and not objective.reached(
            best, objective.reference)
        patience = stop.patience_below if below else stop.patience
        if patience is not None:
            rules.append({"rule": "patience", "share": streak / patience,
                          "text": f"{streak} of {patience} candidates in a row without a keep"
                          + (f" (below {objective.reference_name or 'the baseline'})" if below else "")})
    for r in rules:
        r["share"] = max(0.0, r["share"])
    return {"rules": rules, "nearest": max(rules, key=lambda r: r["share"])}


def live(store: Store, run_id: int) -> dict:
    """A run's state as it goes: its incumbent, its stop rules, the devices' busy share, LLM usage. A
    suite's: the candidates of its problems' runs (each of which has its own stop rules)."""
    head = header(store, run_id)
    harness = report.harness_class(store, run_id)
    with store.session() as s:
        run = _run(s, run_id)
        best = report.candidate_row(run.best, harness) if run.best is not None else None
        runs = [run_id, *s.scalars(select(Run.id).where(Run.parent_id == run_id))]
        counts = dict(s.execute(select(Candidate.status, func.count()).where(Candidate.run_id.in_(runs))
                                .group_by(Candidate.status)).all())
    calls = report.llm_summary(store, run_id)
    pool = pooling.pool(store, run_id)
    llm = None
    if calls:
        costs = [c["cost"] for c in calls if c["cost"] is not None]
        llm = {"calls": sum(c["calls"] for c in calls), "failed": sum(c["calls"] - c["ok"] for c in calls),
               "input_tokens": sum(c["input_tokens"] for c in calls),
               "output_tokens": sum(c["output_tokens"] for c in calls),
               "cost": sum(costs) if costs else None, "models": [c["model"] for c in calls]}
    tally = {"evaluated": sum(n for st, n in counts.items() if st != CandidateStatus.proposed),
             "proposed": counts.get(CandidateStatus.proposed, 0)}
    going = head.get("status") == RunStatus.running
    return head | {"tally": report.tally_text(tally, going), "counts": counts, "best": best,
                   "best_summary": report.summary_text(harness, best or {}),
                   "stops": {"rules": [], "nearest": None} if head["is_suite"] else stop_rules(store, run_id),
                   "pool": pooling.pool_text(pool) if pool else None, "llm": llm}


def candidates_page(store: Store, run_id: int, page: int) -> dict:
    """One page of a run's candidates, in order, with their objective and decision."""
    harness = report.harness_class(store, run_id)
    with store.session() as s:
        total = s.scalar(select(func.count()).select_from(Candidate).where(Candidate.run_id == run_id)) or 0
        pager = Pager.of(page, CANDIDATES_PER_PAGE, total)
        cands = s.scalars(select(Candidate).where(Candidate.run_id == run_id).order_by(Candidate.seq)
                          .offset(pager.offset).limit(pager.size)
                          .options(selectinload(Candidate.evaluations), selectinload(Candidate.decision),
                                   selectinload(Candidate.build), selectinload(Candidate.parent)))
        rows = [report.candidate_row(c, harness) for c in cands]
    return {"rows": rows, "pager": pager}


def _diff(a: str, b: str, left: str, right: str) -> str:
    return "".join(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                        fromfile=left, tofile=right, n=3))


def _messages(prompt: str) -> list[dict]:
    """A logged prompt's messages (role and content), or the prompt as one message."""
    try:
        messages = json.loads(prompt)
    except ValueError:
        return [{"role": "prompt", "content": prompt, "size": len(prompt)}]
    if isinstance(messages, list) and all(isinstance(m, dict) for m in messages):
        shown = [{"role": str(m.get("role", "?")), "content": m.get("content") if isinstance(m.get("content"), str)
                  else json.dumps(m.get("content"), indent=2)} for m in messages]
        return [m | {"size": len(m["content"])} for m in shown]
    return [{"role": "prompt", "content": prompt, "size": len(prompt)}]


def candidate(store: Store, run_id: int, seq: int) -> dict:
    """Everything recorded of one candidate, with its diff against its parent and against the incumbent
    it was proposed to beat, and the LLM calls that made it."""
    data = report.show_candidate(store, run_id, seq)
    with store.session() as s:
        c = Candidate.by_seq(s, run_id, seq)
        assert c is not None  # show_candidate found it, or said it is not there
        related: dict[str, Any] = {}
        for role, other_id in (("parent", c.parent_id), ("incumbent", c.incumbent_id)):
            other = s.get(Candidate, other_id) if other_id is not None else None
            if role == "incumbent" and other_id == c.parent_id and other is not None:
                related["parent_is_incumbent"] = True  # one diff says it
            elif other is not None and other.id != c.id:
                name = f"#{other.seq}" if other.run_id == run_id else f"{other.run_id}/{other.seq}"
                related[role] = {"run": other.run_id, "seq": other.seq, "name": name, "family": other.family,
                                 "diff": _diff(other.source, c.source, name, f"#{seq}")}
        against: dict[int, dict[str, int] | None] = {e.id: None for e in c.evaluations}
        for e in c.evaluations:
            if e.against_id is not None and (other := s.get(Candidate, e.against_id)) is not None:
                against[e.id] = {"run": other.run_id, "seq": other.seq}
        calls = [{"id": k.id, "model": k.model, "messages": _messages(k.prompt), "reply": k.reply,
                  "input_tokens": k.input_tokens, "output_tokens": k.output_tokens, "cost": k.cost,
                  "latency_ms": k.latency_ms, "error": k.error, "created_at": k.created_at}
                 for k in s.scalars(select(LlmCall).where(LlmCall.candidate_id == c.id).order_by(LlmCall.id))]
        evaluations = [e | {"against": against[ev.id], "created_at": ev.created_at}
                       for e, ev in zip(data["evaluations"], c.evaluations)]
    return data | {"related": related, "llm_calls": calls, "evaluations": evaluations,
                   "knob_list": knobs(data["knobs"])}


def knobs(values: dict, prefix: str = "") -> list[tuple[str, Any]]:
    """Knobs as (name, value), nested ones by dotted name (a co-design pair's `kernel.BLOCK_M`)."""
    out = []
    for key, value in values.items():
        if isinstance(value, dict):
            out.extend(knobs(value, f"{prefix}{key}."))
        else:
            out.append((f"{prefix}{key}", value))
    return out


def tree_page(store: Store, run_id: int, page: int) -> dict:
    """The kept chain, and one page of the tree (every candidate under the one it was made from)."""
    with store.session() as s:
        total = s.scalar(select(func.count()).select_from(Candidate).where(Candidate.run_id == run_id)) or 0
    pager = Pager.of(page, TREE_PER_PAGE, total)
    return {"lineage": report.lineage(store, run_id), "pager": pager,
            "rows": report.tree(store, run_id, pager.offset, pager.offset + pager.size)}

