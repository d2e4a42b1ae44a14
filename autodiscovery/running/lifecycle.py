"""One candidate's way from proposed to decided, written once: record, screen, measure, decide. The
loop's scheduler, resume and the ladder all go through it, and each step is a committed state
(`ledger.py`):

    proposal ──record──▶ rejected (refused by its agent, or a kernel recorded before)
        │
    proposed ──screen──▶ rejected
        │
        └──build──measure──▶ measured (or compile_error, incorrect, timeout, crashed)
                                 │
                                 └──decide──▶ kept / reverted

`decide` asks the keep rule (`decide.judge`, a pure policy) and does what it rules: a head-to-head
with the incumbent where it asks for one (`decide.settle` reads it), then, for a keep, the harness's
sanitizer (its findings turn the keep into a revert); the decision is written last.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol

from autodiscovery.campaign import Campaign
from autodiscovery.interfaces import Outcome, Proposal, Record
from autodiscovery.roles import Evaluating, Sanitizing
from autodiscovery.running.decide import Judgement, Ruling, judge, sanitized, settle, stop_reason
from autodiscovery.running.evaluate import assess, screen
from autodiscovery.running.lease import Stop
from autodiscovery.running.ledger import FAILED, Ledger, score_of, source_hash
from autodiscovery.store import (
    Candidate,
    CandidateStatus,
    EvalKind,
    EvalStatus,
    Run,
    Verdict,
)
from autodiscovery.toolkit.build import BuildReport


class Display(Protocol):
    """What a run shows as it goes (the live view, or nothing): its start, the candidates being built,
    each candidate's end with the incumbent after it, and why it stopped."""

    def started(self, run: Run, campaign: Campaign, harness: Evaluating) -> None: ...
    def building(self, seqs: list[int]) -> None: ...
    def finished(self, cand: Candidate, outcome: Outcome | None, verdict: Verdict | CandidateStatus, reason: str,
                 best: Record | None) -> None: ...
    def stopped(self, reason: str) -> None: ...


class Quiet:
    def started(self, run: Run, campaign: Campaign, harness: Evaluating) -> None: ...
    def building(self, seqs: list[int]) -> None: ...
    def finished(self, cand: Candidate, outcome: Outcome | None, verdict: Verdict | CandidateStatus, reason: str,
                 best: Record | None) -> None: ...
    def stopped(self, reason: str) -> None: ...


@dataclass
class Measured:
    """A candidate measured and recorded, waiting for its decision."""

    candidate: Candidate
    build: BuildReport | None
    outcome: Outcome | None
    """None in a dry run (built, never measured)."""


@dataclass
class Decided:
    """A candidate's end and why: its verdict, or the status it ends with undecided (`rejected` before a
    build, `built` in a dry run)."""

    candidate: Candidate
    outcome: Outcome | None
    verdict: Verdict | CandidateStatus
    reason: str


@dataclass
class Lifecycle:
    ledger: Ledger
    harness: Evaluating
    campaign: Campaign
    dry_run: bool = False
    device: Callable[..., AbstractContextManager] = lambda first=False: nullcontext()
    """Held around every use of a device (a measurement, a head-to-head, the sanitizer); `first=True`
    for a decision's uses, which go before the measurements waiting for a device (`Devices`)."""
    display: Display = field(default_factory=Quiet)
    """Where each candidate's end is shown (`announce`)."""
    stop: Stop = field(default_factory=Stop)
    """A stop asked for from outside (a first Ctrl-C), read with the stop rules (`stop_reason`)."""
    runs: Evaluating | None = None
    """Where the evaluations run (`executors.wrap`: Ray tasks, say); None: the harness itself."""

    @property
    def evaluator(self) -> Evaluating:
        """What builds, measures and compares: `runs`, else the harness."""
        return self.runs or self.harness

    def stop_reason(self) -> str | None:
        """Why the run stops now (the campaign's stop rules, or a stop asked for), or None."""
        return stop_reason(self.ledger.history(), self.campaign, self.ledger.elapsed(), self.ledger.llm_usage(),
                           self.stop.requested, self.dry_run)

    def announce(self, d: Decided) -> None:
        """A candidate's end shown, with the incumbent after its verdict."""
        best = self.ledger.history().incumbent if isinstance(d.verdict, Verdict) else None
        self.display.finished(self.ledger.candidate(d.candidate.id), d.outcome, d.verdict, d.reason, best)

    def admit(self, proposals: list[Proposal]) -> list[tuple[Candidate, Decided | None]]:
        """Proposals as candidates, in one commit, each with its end where it has one already: `rejected`
        where its agent refused it, or where it renders a kernel recorded before (the same kernel is never
        evaluated twice); None where it goes on to be screened and measured."""
        h = self.ledger.history()
        seen = {r.source_hash: r.seq for r in h.records if r.status != CandidateStatus.rejected}
        for p in proposals:
            digest = source_hash(p.source)
            if not p.rejected and digest in seen:
                twin = f"candidate #{seen[digest]}" if seen[digest] >= 0 else "another proposal of this batch"
                p.rejected = f"renders the same source as {twin}"
            elif not p.rejected:
                seen[digest] = -1
        return [(c, Decided(c, None, CandidateStatus.rejected, p.rejected) if p.rejected else None)
                for c, p in zip(self.ledger.add(proposals), proposals)]

    def screen(self, cand: Candidate) -> Decided | None:
        """Refuse, before any build, a candidate whose launch cannot work for this problem (its end, as
        `rejected`); None: it goes on."""
        if (refused := screen(self.harness, cand.source)) is None:
            return None
        self.ledger.reject(cand.id, refused.log)
        return Decided(cand, None, CandidateStatus.rejected, refused.log)

    def measure(self, cand: Candidate, build: BuildReport, kind: EvalKind = EvalKind.benchmark) -> Measured:
        """The candidate measured (a failed build is its own outcome) against the incumbent's score as the
        bar, and recorded with the candidate's new status in one commit."""
        build_id = self.ledger.save_build(build)
        if not build.ok:
            outcome = assess(self.evaluator, cand.source, build)
            self.ledger.finish(None, cand.id, kind, outcome, status=CandidateStatus(outcome.status), build_id=build_id)
            return Measured(cand, build, outcome)
        if self.dry_run:
            self.ledger.built(cand.id, build_id)
            return Measured(cand, build, None)
        inc = self.ledger.history().incumbent  # read before the write below: usually kept from the last step
        bar = inc.score if inc is not None else self.harness.objective.reference  # the first: the baseline's
        eval_id = self.ledger.begin(cand.id, kind)
        with self.device():
            outcome = assess(self.evaluator, cand.source, build, bar)
        status = CandidateStatus.measured if outcome.status == EvalStatus.ok else CandidateStatus(outcome.status)
        self.ledger.finish(eval_id, cand.id, kind, outcome, status=status, build_id=build_id)
        return Measured(cand, build, outcome)

    def recovered(self, cand: Candidate) -> Measured | None:
        """What an earlier process measured and did not decide, as `measure` would have handed it on."""
        if cand.decision is not None or not (cand.status == CandidateStatus.measured or cand.status in FAILED):
            return None
        ev = cand.measurement
        assert ev is not None, f"candidate {cand.id} is {cand.status} with no measurement"  # written in one commit
        ok = ev.status == EvalStatus.ok
        outcome = Outcome(EvalStatus(ev.status), dict(ev.metrics), ev.log, ev.seconds, ev.device,
                          self.harness.objective.read(ev.metrics) if ok else None)
        return Measured(cand, self.evaluator.build(cand.source) if ok else None, outcome)

    def decide(self, m: Measured) -> Decided:
        """Keep or revert a measured candidate, against the incumbent of its turn; recorded before it
        returns."""
        cand, outcome = m.candidate, m.outcome
        if outcome is None:
            return Decided(cand, None, CandidateStatus.built, "compiled (dry run: not measured)")
        objective, stop = self.harness.objective, self.campaign.stop
        inc = self.ledger.incumbent()
        judged = judge(outcome, score_of(inc, objective) if inc is not None else None, objective, stop)
        if judged.ruling == Ruling.head_to_head:  # a score to compare: built, measured, and an incumbent to meet
            assert m.build is not None and inc is not None
            judged = self._head_to_head(cand, m.build, inc)
        verdict, reason = Verdict(judged.ruling), judged.reason
        if verdict == Verdict.keep:
            assert m.build is not None  # a keep was built and measured: never kept unsanitized for want of it
            if blocked := self._sanitize(cand, m.build):
                verdict, reason = Verdict.revert, blocked
        self.ledger.decide(cand.id, inc.id if inc is not None else None, verdict, reason,
                           measured=outcome.status == EvalStatus.ok)
        return Decided(cand, outcome, verdict, reason)

    def _head_to_head(self, cand: Candidate, build: BuildReport, inc: Candidate) -> Judgement:
        incumbent = (inc.source, self.evaluator.build(inc.source))  # cached: built when it was measured
        eval_id = self.ledger.begin(cand.id, EvalKind.head_to_head, inc.id)
        with self.device(first=True):
            h2h = self.evaluator.head_to_head((cand.source, build), incumbent)
        self.ledger.finish(eval_id, cand.id, EvalKind.head_to_head, h2h, inc.id)
        return settle(h2h, self.campaign.stop)

    def _sanitize(self, cand: Candidate, build: BuildReport) -> str | None:
        """A candidate about to be kept, under the harness's memory and race checker (compute-sanitizer),
        recorded as an evaluation of its own (kind `sanitize`): why it may not be kept, or None. A harness
        that checks nothing holds no device for it."""
        if not (isinstance(self.harness, Sanitizing) and self.harness.sanitizes):
            return None
        checker = self.evaluator if isinstance(self.evaluator, Sanitizing) else self.harness
        with self.device(first=True):
            out = checker.sanitize(cand.source, build)
        if out is not None:
            self.ledger.finish(None, cand.id, EvalKind.sanitize, out)
        return sanitized(out)


class Devices:
    """`parallel` devices as a count: a measurement, a head-to-head or a sanitizer run holds one. A
    decision's use (`first`) takes the next device that frees before any measurement waiting for one:
    the verdicts the agent's next proposals wait for come before the measurements of candidates
    already proposed."""

    def __init__(self, parallel: int) -> None:
        self.free = max(1, parallel)
        self.urgent = 0
        self.changed = threading.Condition()

    @contextmanager
    def __call__(self, first: bool = False) -> Iterator[None]:
        with self.changed:
            self.urgent += first
            try:
                self.changed.wait_for(lambda: self.free > 0 and (first or not self.urgent))
            finally:
                self.urgent -= first
            self.free -= 1
            if first:  # a measurement held back for it may go now, on a device left free
                self.changed.notify_all()
        try:
            yield
        finally:
            with self.changed:
                self.free += 1
                self.changed.notify_all()
