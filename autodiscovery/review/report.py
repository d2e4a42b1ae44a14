"""Read-only views of the store: the rows behind `runs`, `show`, `lineage`, `diff` and `export`."""

from __future__ import annotations

import difflib
import re
import statistics
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from autodiscovery import AutoDiscoveryError, registry
from autodiscovery.campaign import DEFAULT_HARNESS
from autodiscovery.interfaces import Objective, Section, columns
from autodiscovery.review.sections import sections_table
from autodiscovery.roles import Choosing, Shown, Summarizing, declared
from autodiscovery.running.ledger import build_facts, score_of
from autodiscovery.running.refs import parse
from autodiscovery.store import (
    Candidate,
    CandidateStatus,
    Decision,
    EvalStatus,
    LlmCall,
    Run,
    RunStatus,
    Store,
)
from autodiscovery.store.models import database_of, utcnow

UNKNOWN = Objective("score", higher_is_better=True, path=("score",))


class NotFound(AutoDiscoveryError):
    pass


class Unknown:
    """Stands in for a harness that cannot be loaded here: its runs read, with a bare score."""

    name = "unknown"
    objective = UNKNOWN


def harness_of(run: Run) -> Shown:
    """The class of the harness that measured a run (`Unknown` if it cannot be loaded here)."""
    try:
        cls = registry.harness(run.config.get("harness", {}).get("name", DEFAULT_HARNESS))
    except AutoDiscoveryError:
        return Unknown
    return cls.for_config(run.config) if isinstance(cls, Choosing) else cls


def objective_of(run: Run) -> Objective:
    return harness_of(run).objective


def harness_class(store: Store, run_id: int) -> Shown:
    with store.session() as s:
        return harness_of(_run(s, run_id))


def figures(harness: Shown, metrics: dict | None, build: dict | None, view: str | None = None) -> dict[str, Any]:
    """The values of a harness's columns (those of `view`, or all) for one measurement and build."""
    cols = [c for c in declared(harness).columns if view is None or view in c.views]
    return {c.key: c.value(metrics, build) for c in cols}


def _metrics(c: Candidate, harness: Shown) -> dict[str, Any]:
    ev = c.measurement
    m = ev.metrics if ev is not None and ev.status == EvalStatus.ok else {}
    objective = harness.objective
    score = score_of(c, objective)
    low, high = objective.bounds(m) or (None, None)
    return {"score": score, "score_text": objective.format(score), "ci_low": low, "ci_high": high,
            "figures": figures(harness, m, build_facts(c.build))}


def _candidates(s: Session, run_id: int) -> list[Candidate]:
    """A run's candidates in order, with what `candidate_row` reads of each loaded in a few queries."""
    return list(s.scalars(select(Candidate).where(Candidate.run_id == run_id).order_by(Candidate.seq).options(
        selectinload(Candidate.evaluations), selectinload(Candidate.decision), selectinload(Candidate.build),
        selectinload(Candidate.parent))))


def _run(s: Session, run_id: int) -> Run:
    run = Run.find(s, run_id)
    if run is None:
        raise NotFound(f"no run {run_id} in {database_of(s)}")
    return run


def parse_since(text: str) -> datetime:
    """'2026-11-20', '2026-11-20T08:00', or an age: '90m', '12h', '3d' (before now, UTC)."""
    m = re.fullmatch(r"(\d+)\s*([smhd])", text.strip())
    if m:
        seconds = int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
        return utcnow() - timedelta(seconds=seconds)
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise NotFound(f"--since '{text}' is neither a date (2026-11-20, 2026-11-20T08:00) nor an age (90m, 12h, 3d)") from None
    return when.astimezone(UTC).replace(tzinfo=None) if when.tzinfo else when


def runs(store: Store, campaign: str | None = None, status: str | None = None,
         since: datetime | None = None) -> list[dict]:
    """One row a run, oldest first; optionally only one campaign's, one status's, or those started since."""
    with store.session() as s:
        query = select(Run).order_by(Run.id)
        if campaign is not None:
            query = query.where(Run.campaign == campaign)
        if status is not None:
            query = query.where(Run.status == status)
        if since is not None:
            query = query.where(Run.created_at >= since)
        return [_run_row(run) for run in s.scalars(query)]


def run_row(store: Store, run_id: int) -> dict:
    """The `runs` row of one run."""
    with store.session() as s:
        return _run_row(_run(s, run_id))


def _run_row(run: Run) -> dict:
    harness = harness_of(run)
    best = _metrics(run.best, harness) if run.best else {}
    shown = {c.key for c in columns(harness, "summary")}
    return {
        "id": run.id, "campaign": run.campaign, "agent": run.agent, "status": run.status,
        "stop_reason": run.stop_reason, **tally(c.status for c in run.candidates),
        "rejected": sum(c.status == CandidateStatus.rejected for c in run.candidates),
        "objective": harness.objective.name, "best_seq": run.best.seq if run.best else None,
        "best_score": best.get("score"), "best_text": best.get("score_text", "–"),
        "best_figures": {k: v for k, v in best.get("figures", {}).items() if k in shown},
        "best_summary": summary_text(harness, best),
        "device": run.fingerprint.get("gpu"), "created_at": run.created_at.isoformat(),
        "elapsed_s": run.elapsed_s,
    }


def summary_text(harness: Shown, row: dict) -> str:
    """A best's score with the harness's summary figures: '1.009× …, 776.2 TFLOP/s'."""
    if row.get("score") is None:
        return "–"
    extra = [c.named(v) for c in columns(harness, "summary")
             if (v := (row.get("figures") or {}).get(c.key)) is not None]
    return ", ".join([row["score_text"], *extra])


def tally(statuses: Iterable[str]) -> dict[str, int]:
    """How many candidates were evaluated (every one processed, refusals included: what the budget
    counts) and how many were left proposed (recorded, not yet evaluated when the run stopped)."""
    statuses = list(statuses)
    return {"evaluated": sum(s != CandidateStatus.proposed for s in statuses),
            "proposed": sum(s == CandidateStatus.proposed for s in statuses)}


def tally_text(t: dict, going: bool | None = None) -> str:
    """The tally as every view says it: '27 evaluated', '27 evaluated, 2 left proposed' (a run that
    stopped), '27 evaluated, 2 proposed, not yet evaluated' (one that is going on: `going`, or the
    tally's own `status` where it is a run's row)."""
    going = t.get("status") == RunStatus.running if going is None else going
    left = "proposed, not yet evaluated" if going else "left proposed"
    return f"{t['evaluated']} evaluated" + (f", {t['proposed']} {left}" if t["proposed"] else "")


def candidate_row(c: Candidate, harness: Shown) -> dict:
    b = c.build
    return {
        "run": c.run_id, "seq": c.seq, "id": c.id, "parent_seq": c.parent.seq if c.parent else None,
        "parent_run": c.parent.run_id if c.parent else None, "family": c.family,
        "knobs": c.knobs, "proposer": c.proposer, "hypothesis": c.hypothesis, "status": c.status,
        "source_hash": c.source_hash, **_metrics(c, harness),
        "registers": b.registers if b else None, "spill_stores": b.spill_stores if b else None,
        "spill_loads": b.spill_loads if b else None, "stack": b.stack if b else None,
        "smem_static": b.smem_static if b else None, "facts": dict(b.facts or {}) if b else {},
        "decision": c.decision.reason if c.decision else None,
        "verdict": c.decision.verdict if c.decision else None,
    }


def show_run(store: Store, run_id: int) -> dict:
    with store.session() as s:
        run = _run(s, run_id)
        cands, harness = _candidates(s, run_id), harness_of(run)
        calls = s.scalars(select(LlmCall).where(LlmCall.run_id == run_id).order_by(LlmCall.id))
        return {
            "id": run.id, "campaign": run.campaign, "agent": run.agent, "status": run.status,
            "stop_reason": run.stop_reason, "created_at": run.created_at.isoformat(), "elapsed_s": run.elapsed_s,
            "best_seq": run.best.seq if run.best else None, "objective": objective_of(run).name,
            **tally(c.status for c in cands),
            "config": run.config, "fingerprint": run.fingerprint,
            "candidates": [candidate_row(c, harness) | {"source": c.source} for c in cands],
            "llm_calls": [{"model": k.model, "input_tokens": k.input_tokens, "output_tokens": k.output_tokens,
                           "latency_ms": k.latency_ms, "cost": k.cost, "error": k.error} for k in calls],
        }


def llm_summary(store: Store, run_id: int) -> list[dict]:
    """The run's LLM requests by model: calls, failures by kind and how many a later request of the same
    proposal recovered, the proposals they made and how many were kept, tokens, cost, latency."""
    with store.session() as s:
        calls = list(s.scalars(select(LlmCall).where(LlmCall.run_id == run_id).order_by(LlmCall.id)))
        status = dict(s.execute(select(Candidate.id, Candidate.status).where(Candidate.run_id == run_id)).all())
    rows = []
    for model in dict.fromkeys(c.model for c in calls):
        mine = [c for c in calls if c.model == model]
        errors: dict[str, int] = {}
        recovered = 0
        for i, c in enumerate(mine):
            if c.error:
                kind = c.error.split(":")[0]
                errors[kind] = errors.get(kind, 0) + 1
                recovered += c.candidate_id is not None and any(
                    d.error is None and d.candidate_id == c.candidate_id for d in mine[i + 1:])
        proposals = {c.candidate_id for c in mine if c.candidate_id is not None}
        latencies = sorted(c.latency_ms for c in mine if c.latency_ms is not None and c.error is None)
        costs = [c.cost for c in mine if c.cost is not None]
        rows.append({
            "model": model, "calls": len(mine), "ok": sum(c.error is None for c in mine), "errors": errors,
            "recovered": recovered, "proposals": len(proposals),
            "kept": sum(status.get(p) == CandidateStatus.kept for p in proposals),
            "unlinked": sum(c.candidate_id is None for c in mine),
            "input_tokens": sum(c.input_tokens or 0 for c in mine), "output_tokens": sum(c.output_tokens or 0 for c in mine),
            "cost": sum(costs) if costs else None,
            "median_latency_s": statistics.median(latencies) / 1000 if latencies else None,
        })
    return rows


def sections(store: Store, run_id: int) -> tuple[list[Section], dict | None]:
    """What the run's harness adds to a report: (its tables, their data or None)."""
    with store.session() as s:
        cls = harness_of(_run(s, run_id))
    if not isinstance(cls, Summarizing):
        return [], None
    data = cls.summary_data(store, run_id)
    return (cls.summary(run_id, data) if data else []), data


def summary(store: Store, run_id: int) -> tuple[object, dict | None]:
    """What the run's harness adds to a report: (its tables for the terminal or None, their data or None)."""
    tables, data = sections(store, run_id)
    return (sections_table(tables) if tables else None), data


def show_candidate(store: Store, run_id: int, seq: int) -> dict:
    with store.session() as s:
        run = _run(s, run_id)
        c = Candidate.by_seq(s, run_id, seq)
        if c is None:
            raise NotFound(f"run {run_id} has no candidate #{seq}")
        b = c.build
        return candidate_row(c, harness_of(run)) | {
            "run": run_id, "source": c.source,
            "build": None if b is None else {"ok": b.ok, "compiler": b.compiler, "flags": b.flags,
                                             "seconds": b.seconds, "log": b.log},
            "evaluations": [{"kind": e.kind, "status": e.status, "against": e.against_id, "metrics": e.metrics,
                             "log": e.log, "device": e.device, "seconds": e.seconds} for e in c.evaluations],
        }


def lineage(store: Store, run_id: int) -> list[dict]:
    """The kept chain from the seed to the best, following each keep back to what it replaced; a run
    started `--from` another goes on into that run's chain (rows carry their `run`)."""
    with store.session() as s:
        run = _run(s, run_id)
        chain: list[Candidate] = []
        cand = run.best
        while cand is not None and cand not in chain:
            chain.append(cand)
            d = s.scalar(select(Decision).where(Decision.candidate_id == cand.id))
            if d and d.incumbent_id:
                cand = s.get(Candidate, d.incumbent_id)
            elif cand.parent is not None and cand.parent.run_id != cand.run_id:
                cand = cand.parent  # the seed of a run started --from another run's candidate
            else:
                cand = None
        harnesses = {r: harness_of(_run(s, r)) for r in {c.run_id for c in chain}}
        return [candidate_row(c, harnesses[c.run_id]) for c in reversed(chain)]


def tree(store: Store, run_id: int, start: int = 0, stop: int | None = None) -> list[dict]:
    """Every candidate under the one it was made from, depth first in order: how the run branched.
    Rows carry `depth`; a candidate without a parent (the seed) is a root. `start`, `stop`: only those
    rows of it (a page), read alone."""
    with store.session() as s:
        run = _run(s, run_id)
        harness = harness_of(run)
        nodes = s.execute(select(Candidate.id, Candidate.parent_id).where(Candidate.run_id == run_id)
                          .order_by(Candidate.seq)).all()
        children: dict[int | None, list[int]] = {}
        for node, parent in nodes:
            children.setdefault(parent, []).append(node)
        ids = {node for node, _ in nodes}
        roots = [node for node, parent in nodes if parent is None or parent not in ids]  # the seed, also of --from
        order: list[tuple[int, int]] = []
        stack = [(node, 0) for node in reversed(roots)]
        while stack:
            node, depth = stack.pop()
            order.append((node, depth))
            stack.extend((k, depth + 1) for k in reversed(children.get(node, [])))
        order = order[start:stop]
        cands = {c.id: c for c in s.scalars(select(Candidate).where(Candidate.id.in_([n for n, _ in order])).options(
            selectinload(Candidate.evaluations), selectinload(Candidate.decision), selectinload(Candidate.build),
            selectinload(Candidate.parent)))}
        best = run.best_candidate_id
        return [candidate_row(cands[node], harness) | {"depth": depth, "best": node == best} for node, depth in order]


def diff(store: Store, a: str, b: str) -> dict:
    """Two candidates (RUN/SEQ each, runs may differ): the unified diff of their sources, their knobs
    (what changed) and their measurements."""
    rows = []
    for ref in (a, b):
        at = parse(ref, seq="required")
        assert at.seq is not None  # required: parse says so in one line where it is missing
        rows.append(show_candidate(store, at.run, at.seq) | {"ref": ref})
    left, right = rows
    text = "".join(difflib.unified_diff(left["source"].splitlines(keepends=True),
                                        right["source"].splitlines(keepends=True),
                                        fromfile=f"{a} ({left['family']})", tofile=f"{b} ({right['family']})"))
    keys = list(dict.fromkeys([*left["knobs"], *right["knobs"]]))
    changed = {k: [left["knobs"].get(k), right["knobs"].get(k)] for k in keys
               if left["knobs"].get(k) != right["knobs"].get(k)}
    strip = ("source", "evaluations", "build")
    return {"a": {k: v for k, v in left.items() if k not in strip},
            "b": {k: v for k, v in right.items() if k not in strip},
            "knobs_changed": changed, "diff": text,
            "lines_added": sum(1 for ln in text.splitlines() if ln.startswith("+") and not ln.startswith("+++")),
            "lines_removed": sum(1 for ln in text.splitlines() if ln.startswith("-") and not ln.startswith("---"))}
