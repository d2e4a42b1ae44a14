"""One run's records, as the loop reads and writes them: every write is one committed step."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, selectinload

from autodiscovery import provenance
from autodiscovery.interfaces import History, Objective, Outcome, Proposal, Record
from autodiscovery.store import (
    Build,
    Candidate,
    CandidateStatus,
    Decision,
    EvalKind,
    EvalStatus,
    Evaluation,
    LlmCall,
    Run,
    RunStatus,
    Store,
    Verdict,
)
from autodiscovery.store.models import row, utcnow
from autodiscovery.toolkit.build import BuildReport

FAILED = {CandidateStatus.compile_error, CandidateStatus.incorrect, CandidateStatus.timeout, CandidateStatus.crashed}
CUT_OFF = "cut off: the run stopped before this evaluation finished; it is done again on resume"


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def counted(status: str) -> bool:
    """Whether a candidate counts against the budget and patience: every proposal that was processed."""
    return status != CandidateStatus.proposed


def score_of(cand: Candidate, objective: Objective) -> float | None:
    ev = cand.measurement
    return objective.read(ev.metrics) if ev is not None and ev.status == EvalStatus.ok else None


BUILD_FACTS = ("registers", "smem_static", "spill_stores", "spill_loads", "stack")
"""The compiler's report a build row keeps in columns; a harness's own facts come beside them."""


def build_facts(b: Build | BuildReport | None) -> dict:
    """What an agent, a table or a harness's column sees of a build (a stored row, or a report not yet
    stored): the compiler's report and the harness's own facts, in one mapping."""
    return {**{k: getattr(b, k) for k in BUILD_FACTS}, **(b.facts or {})} if b is not None else {}


def record_of(cand: Candidate, objective: Objective, seq_of: dict[int, int] | None = None) -> Record:
    """What an agent sees of a candidate; `seq_of` maps this run's candidate ids to their seq."""
    evs = [e for e in cand.evaluations if e.kind != EvalKind.profile]
    ev = cand.measurement or (evs[-1] if evs else None)
    measurement = cand.measurement
    measured = dict(measurement.metrics) if measurement is not None and measurement.status == EvalStatus.ok else {}

    def profiles_of(c: Candidate) -> list:
        return [e for e in c.evaluations if e.kind == EvalKind.profile and e.status == EvalStatus.ok
                and "profile" in e.metrics]

    profiles = profiles_of(cand)
    origin = cand.parent if cand.parent is not None and cand.parent.run_id != cand.run_id else None
    if not profiles and origin is not None and origin.source_hash == cand.source_hash:
        profiles = profiles_of(origin)  # the same kernel, profiled in the run this one continues
    d = cand.decision
    reason = d.reason if d else (ev.log if ev is not None and cand.status == CandidateStatus.rejected else "")
    return Record(seq=cand.seq, family=cand.family, knobs=cand.knobs, status=cand.status,
                  score=score_of(cand, objective), kept=cand.status == CandidateStatus.kept,
                  source_hash=cand.source_hash,
                  hypothesis=cand.hypothesis, log=ev.log if ev else "", source=cand.source, proposer=cand.proposer,
                  build=build_facts(cand.build), metrics=measured,
                  parent_seq=(seq_of or {}).get(cand.parent_id) if cand.parent_id is not None else None,
                  verdict=Verdict(d.verdict) if d else None, reason=reason,
                  profile=dict(profiles[-1].metrics["profile"]) if profiles else {})


T = TypeVar("T")


def writes(method: Callable[..., T]) -> Callable[..., T]:
    """A ledger method that writes: the history it keeps is read again afterwards (and is not kept from
    a read made while the write was under way)."""
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> T:
        self._writes += 1
        self._history = None
        try:
            return method(self, *args, **kwargs)
        finally:
            self._writes += 1
            self._history = None
    return wrapper


class Ledger:
    """Reads and writes one run. Its `history()` is read from the database once and kept until this
    ledger writes again: one view of the run per step, whoever asks (the loop, the agent, the display)."""

    def __init__(self, store: Store, run_id: int, objective: Objective, elapsed: Callable[[], float]) -> None:
        self.store, self.run_id, self.objective, self.elapsed = store, run_id, objective, elapsed
        self._history: History | None = None
        self._writes = 0

    @classmethod
    def create(cls, store: Store, campaign: str, agent: str, config: dict, fingerprint: dict,
               objective: Objective, parent_id: int | None = None) -> Ledger:
        """A new run (one problem of the suite `parent_id`), and its ledger."""
        with store.session() as s:
            run = Run(campaign=campaign, agent=agent, config=config, fingerprint=provenance.stamped(fingerprint),
                      parent_id=parent_id)
            s.add(run)
            s.flush()
            run_id = run.id
        return cls(store, run_id, objective, lambda: 0.0)


    # ---- reading ------------------------------------------------------------------------------
    def candidates(self) -> list[Candidate]:
        with self.store.session() as s:
            # Each relation in one query for the whole run (not a query a candidate): the history is read
            # again after every write.
            cands = list(s.scalars(select(Candidate).where(Candidate.run_id == self.run_id).order_by(Candidate.seq)
                                   .options(selectinload(Candidate.evaluations), selectinload(Candidate.decision),
                                            selectinload(Candidate.build), selectinload(Candidate.parent))))
            for c in cands:
                if c.parent is not None and c.parent.run_id != c.run_id:
                    _ = c.parent.evaluations  # a --from seed's profile is its origin's
            return cands

    def candidate(self, cand_id: int) -> Candidate:
        with self.store.session() as s:
            c = row(s, Candidate, cand_id)
            _ = c.evaluations, c.build, c.decision
            return c

    def history(self) -> History:
        kept = self._history
        if kept is not None:
            return kept
        before = self._writes
        read = self._read_history()
        if self._writes == before:  # no write began or ended meanwhile: this view is current
            self._history = read
        return read

    def _read_history(self) -> History:
        cands = self.candidates()
        with self.store.session() as s:
            best_id = row(s, Run, self.run_id).best_candidate_id
        seq_of = {c.id: c.seq for c in cands}
        records = [record_of(c, self.objective, seq_of) for c in cands]
        incumbent = next((r for c, r in zip(cands, records) if c.id == best_id), None)
        return History(records, incumbent, self.objective)

    def incumbent(self) -> Candidate | None:
        with self.store.session() as s:
            run = row(s, Run, self.run_id)
            inc = row(s, Candidate, run.best_candidate_id) if run.best_candidate_id else None
            if inc is not None:
                _ = inc.evaluations
            return inc

    def llm_usage(self) -> tuple[int, float]:
        with self.store.session() as s:
            tokens, cost = s.execute(
                select(func.coalesce(func.sum(LlmCall.input_tokens), 0) + func.coalesce(func.sum(LlmCall.output_tokens), 0),
                       func.coalesce(func.sum(LlmCall.cost), 0.0)).where(LlmCall.run_id == self.run_id)
            ).one()
        return int(tokens or 0), float(cost or 0.0)

    # ---- writing ------------------------------------------------------------------------------
    def touch(self, s: Session) -> None:
        """Keep the time spent and the lease's heartbeat current, in the same commit as the step."""
        run = row(s, Run, self.run_id)
        run.elapsed_s, run.updated_at, run.heartbeat_at = self.elapsed(), utcnow(), utcnow()

    @writes
    def add(self, proposals: list[Proposal]) -> list[Candidate]:
        """Record proposals as candidates (refused ones with their reason), in one commit."""
        out = []
        with self.store.session() as s:
            run = row(s, Run, self.run_id)
            seq = s.scalar(select(func.count()).where(Candidate.run_id == self.run_id)) or 0
            by_seq = dict(s.execute(select(Candidate.seq, Candidate.id).where(Candidate.run_id == self.run_id)).all())
            for p in proposals:
                parent = p.origin_id if p.origin_id is not None else \
                    by_seq.get(p.parent_seq, run.best_candidate_id) if p.parent_seq is not None else run.best_candidate_id
                cand = Candidate(run_id=self.run_id, seq=seq, parent_id=parent, incumbent_id=run.best_candidate_id,
                                 hypothesis=p.hypothesis, proposer=p.proposer, family=p.family, knobs=p.knobs,
                                 source=p.source, source_hash=source_hash(p.source),
                                 status=CandidateStatus.rejected if p.rejected
                                 else CandidateStatus.proposed)
                s.add(cand)
                s.flush()
                for call_id in p.llm_calls:
                    row(s, LlmCall, call_id).candidate_id = cand.id
                if p.rejected:
                    s.add(Evaluation(candidate_id=cand.id, kind=EvalKind.check, status=EvalStatus.rejected,
                                     log=p.rejected))
                out.append(cand)
                seq += 1
            self.touch(s)
        return out

    @writes
    def reject(self, cand_id: int, reason: str) -> None:
        with self.store.session() as s:
            s.add(Evaluation(candidate_id=cand_id, kind=EvalKind.check, status=EvalStatus.rejected, log=reason))
            row(s, Candidate, cand_id).status = CandidateStatus.rejected
            self.touch(s)

    def save_build(self, build: BuildReport) -> int | None:
        if build is None or not build.cache_key:
            return None
        return self.store.build_id(build.stored())

    @writes
    def begin(self, cand_id: int, kind: EvalKind, against: int | None = None) -> int:
        """An evaluation row marked running: if the process dies now, resume finds it and redoes it."""
        with self.store.session() as s:
            ev = Evaluation(candidate_id=cand_id, kind=kind, against_id=against, status=EvalStatus.running)
            s.add(ev)
            s.flush()
            return ev.id

    @writes
    def finish(self, eval_id: int | None, cand_id: int, kind: EvalKind, outcome: Outcome,
               against: int | None = None, status: CandidateStatus | None = None, build_id: int | None = None) -> None:
        """The evaluation's result; with `status`, the candidate's new status in the same commit."""
        with self.store.session() as s:
            ev = s.get(Evaluation, eval_id) if eval_id is not None else None
            if ev is None:
                ev = Evaluation(candidate_id=cand_id, kind=kind, against_id=against)
                s.add(ev)
            ev.status, ev.metrics, ev.log = outcome.status, outcome.metrics, outcome.log
            ev.device, ev.seconds, ev.created_at = outcome.device, outcome.seconds, utcnow()
            if status is not None:
                c = row(s, Candidate, cand_id)
                c.status, c.build_id = status, build_id if build_id is not None else c.build_id

    @writes
    def decide(self, cand_id: int, incumbent_id: int | None, verdict: Verdict, reason: str, measured: bool) -> None:
        with self.store.session() as s:
            s.add(Decision(run_id=self.run_id, candidate_id=cand_id, incumbent_id=incumbent_id, verdict=verdict,
                           reason=reason))
            if measured:
                row(s, Candidate, cand_id).status = CandidateStatus.kept if verdict == Verdict.keep \
                    else CandidateStatus.reverted
            if verdict == Verdict.keep:
                row(s, Run, self.run_id).best_candidate_id = cand_id
            self.touch(s)

    @writes
    def built(self, cand_id: int, build_id: int | None) -> None:
        """Dry runs: the candidate compiled; it is recorded as built, never measured or decided."""
        with self.store.session() as s:
            c = row(s, Candidate, cand_id)
            c.build_id, c.status = build_id, CandidateStatus.built
            run = row(s, Run, self.run_id)
            if run.best_candidate_id is None:
                run.best_candidate_id = c.id  # the seed stays the base the agent edits
            self.touch(s)

    def mark_cut_off(self, s: Session) -> None:
        ids = select(Candidate.id).where(Candidate.run_id == self.run_id)
        s.execute(update(Evaluation).where(Evaluation.candidate_id.in_(ids), Evaluation.status == EvalStatus.running)
                  .values(status=EvalStatus.interrupted, log=CUT_OFF))

    @writes
    def open(self, owner: str, claim: Callable[[Session, Run, str], None]) -> Run:
        with self.store.session() as s:
            # The row is locked while the lease is checked and taken (on PostgreSQL; SQLite's single
            # writer serializes this anyway): two processes resuming one run cannot both get it.
            run = s.get(Run, self.run_id, with_for_update=True)
            if run is None:
                raise LookupError(f"Run {self.run_id} is not in the database")  # opened by id from the database
            claim(s, run, owner)
            run.status, run.stop_reason = RunStatus.running, None
            self.mark_cut_off(s)
            _ = run.candidates
            return run

    @writes
    def crown(self, cand_id: int | None) -> None:
        """Make a candidate the run's best without a decision (the ladder's best of its families)."""
        with self.store.session() as s:
            row(s, Run, self.run_id).best_candidate_id = cand_id

    @writes
    def close(self, status: RunStatus, reason: str, owner: str | None) -> None:
        with self.store.session() as s:
            self.mark_cut_off(s)
            run = row(s, Run, self.run_id)
            run.status, run.stop_reason = status, reason
            run.elapsed_s, run.updated_at = self.elapsed(), utcnow()
            if run.owner == owner:
                run.owner = None
