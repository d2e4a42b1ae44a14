"""The loop: observe, hypothesize, implement, measure, keep or revert, until a stop rule fires.

Every step of a candidate is a committed state: proposed, evaluating (an evaluation row marked
`running`), measured (its evaluation recorded), decided (its decision recorded). A run cut off at any
point, kill -9 included, resumes as the same run: an evaluation left `running` is marked
`interrupted` and done again, a measurement without a decision gets its decision, a candidate is
counted once against the budget whatever happened to it, and the time already spent stays spent.
One process at a time drives a run: it holds the run's lease while it does.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from sqlalchemy import func, select, update

from autodiscovery import AutoDiscoveryError
from autodiscovery.agents import Agent, History, Proposal, Record
from autodiscovery.campaign import Campaign
from autodiscovery.outcome import Outcome
from autodiscovery.store import Build, Candidate, Decision, Evaluation, LlmCall, Run, Store
from autodiscovery.store.models import utcnow

FAILED = {"compile_error", "incorrect", "timeout", "crashed"}
STALE_LEASE = timedelta(minutes=15)  # a lease held from another host without a heartbeat for this long is free


def counted(status: str) -> bool:
    """Whether a candidate counts against the budget and patience: every proposal that was processed."""
    return status != "proposed"


class LoopError(AutoDiscoveryError):
    pass


class Stop:
    """A request to stop at the next safe point (between two candidates), e.g. from a first Ctrl-C."""

    def __init__(self) -> None:
        self.requested = False

    def request(self) -> None:
        self.requested = True


def lease_owner() -> str:
    """This process, named so that a later process can tell whether it still lives: host:pid:start."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def lease_alive(owner: str, heartbeat) -> bool:
    host, _, rest = owner.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname():
        return heartbeat is not None and utcnow() - heartbeat < STALE_LEASE
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
    return started in ("?", _start_time(int(pid)))


class Display(Protocol):
    def started(self, run: Run, campaign: Campaign) -> None: ...
    def building(self, seqs: list[int]) -> None: ...
    def finished(self, cand: Candidate, outcome: Any, verdict: str, reason: str, best: Record | None) -> None: ...
    def stopped(self, reason: str) -> None: ...


class Quiet:
    def started(self, run, campaign) -> None: ...
    def building(self, seqs) -> None: ...
    def finished(self, cand, outcome, verdict, reason, best) -> None: ...
    def stopped(self, reason) -> None: ...


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def score_of(cand: Candidate) -> float | None:
    ev = cand.measurement
    if ev is None or ev.status != "ok":
        return None
    return ev.metrics.get("ratio", {}).get("median")


def record_of(cand: Candidate) -> Record:
    ev = cand.measurement or (cand.evaluations[-1] if cand.evaluations else None)
    b = cand.build
    facts = {k: getattr(b, k) for k in ("registers", "spill_stores", "spill_loads", "stack")} if b else {}
    tflops = ev.metrics.get("tflops", {}).get("candidate") if ev is not None and ev.status == "ok" else None
    return Record(seq=cand.seq, family=cand.family, knobs=cand.knobs, status=cand.status, score=score_of(cand),
                  kept=cand.status == "kept", source_hash=cand.source_hash, hypothesis=cand.hypothesis,
                  log=ev.log if ev else "", source=cand.source, proposer=cand.proposer, build=facts, tflops=tflops)


@dataclass
class Loop:
    campaign: Campaign
    store: Store
    harness: Any
    agent: Agent
    display: Display = Quiet()
    workers: int = 2
    dry_run: bool = False
    """Propose and build only: no GPU, no measurement, no keep or revert."""
    stop: Stop = field(default_factory=Stop)
    started: Any = None
    """Called with the run id as soon as the run exists (so an interrupted start can name it)."""

    # ---- entry points ---------------------------------------------------------------------
    def start(self, fingerprint: dict) -> int:
        with self.store.session() as s:
            run = Run(campaign=self.campaign.name, agent=self.agent.name,
                      config=self.campaign.model_dump(mode="json"), fingerprint=fingerprint)
            s.add(run)
            s.flush()
            run_id = run.id
        return self.drive(run_id)

    def drive(self, run_id: int) -> int:
        if self.started:
            self.started(run_id)
        self.owner = lease_owner()
        with self.store.session() as s:
            run = Run.find(s, run_id)
            self._claim(s, run)
            run.status, run.stop_reason = "running", None
            _ = run.candidates
            self.display.started(run, self.campaign)
            base_elapsed = run.elapsed_s
            fingerprint = dict(run.fingerprint)
        if hasattr(self.agent, "bind"):
            self.agent.bind(self.store, run_id, self.harness, fingerprint)
        self._empty_rounds = 0
        t0 = time.monotonic()
        self._elapsed = lambda: base_elapsed + time.monotonic() - t0
        try:
            reason = self._iterate(run_id)
            status = ("failed" if reason.startswith("failed") else
                      "interrupted" if reason == STOPPED else "finished")
        except BaseException:
            self._close(run_id, "interrupted", "interrupted")
            raise
        self._close(run_id, status, reason)
        self.display.stopped(reason)
        return run_id

    def _claim(self, s, run: Run) -> None:
        """Take the run's lease, unless a live process holds it (two drivers would evaluate twice)."""
        held = run.owner
        if held and held != self.owner and lease_alive(held, run.heartbeat_at):
            host, _, rest = held.partition(":")
            raise LoopError(f"run {run.id} is being driven by process {rest.split(':')[0]} on {host} "
                            f"(last heartbeat {run.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC); wait for it or stop it first")
        won = s.execute(update(Run).where(Run.id == run.id, Run.owner.is_(None) if held is None else Run.owner == held)
                        .values(owner=self.owner, heartbeat_at=utcnow()))
        if won.rowcount != 1:
            raise LoopError(f"run {run.id} was taken by another process just now")
        s.refresh(run)

    # ---- the loop -------------------------------------------------------------------------
    def _iterate(self, run_id: int) -> str:
        if not self._candidates(run_id):
            self._record_seed(run_id)
        self._recover(run_id)
        if (fail := self._seed_failed(run_id)) is not None:
            return fail
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            while True:
                if reason := self._stop_reason(run_id):
                    return reason
                pending = [c for c in self._candidates(run_id) if c.status == "proposed"]
                if not pending:
                    pending, proposed = self._propose(run_id)
                    if not proposed:
                        return getattr(self.agent, "exhausted_reason",
                                       "search space exhausted: the agent has nothing left to propose")
                    if not pending:
                        self._empty_rounds += 1
                        if self._empty_rounds >= 3:
                            return "the agent produced no usable candidate in 3 rounds in a row"
                        continue
                    self._empty_rounds = 0
                pending = self._screen(run_id, pending)
                builds = {c.id: pool.submit(self.harness.build, c.source) for c in pending}
                self.display.building([c.seq for c in pending])
                parallel = getattr(self.harness, "parallel", 1)
                if parallel > 1 and not self.dry_run:  # simulations: measure side by side, decide in order
                    with ThreadPoolExecutor(max_workers=parallel) as sims:
                        measured = list(sims.map(lambda c: self._measure(c, builds[c.id], guard=True), pending))
                    for cand, result in zip(pending, measured):
                        if result is not None:
                            self._conclude(run_id, cand, *result)
                    if (fail := self._seed_failed(run_id)) is not None:
                        return fail
                    continue
                for cand in pending:
                    if reason := self._stop_reason(run_id):
                        return reason
                    self._conclude(run_id, cand, *self._measure(cand, builds[cand.id]))
                    if (fail := self._seed_failed(run_id)) is not None:
                        return fail

    def _screen(self, run_id: int, pending: list[Candidate]) -> list[Candidate]:
        """Refuse, before any build, the candidates whose launch cannot work for this shape."""
        out = []
        for cand in pending:
            try:
                self.harness.check(cand.source)
            except AutoDiscoveryError as exc:
                with self.store.session() as s:
                    s.add(Evaluation(candidate_id=cand.id, status="rejected", log=str(exc)))
                    s.get(Candidate, cand.id).status = "rejected"
                    self._touch(s, run_id)
                self.display.finished(cand, None, "rejected", str(exc), None)
                continue
            out.append(cand)
        return out

    def _recover(self, run_id: int) -> None:
        """Finish what an earlier process left half done: cut-off evaluations, undecided measurements."""
        with self.store.session() as s:
            ids = select(Candidate.id).where(Candidate.run_id == run_id)
            s.execute(update(Evaluation).where(Evaluation.candidate_id.in_(ids), Evaluation.status == "running")
                      .values(status="interrupted", log="cut off: the run stopped before this evaluation "
                              "finished; it is done again"))
        for cand in self._candidates(run_id):
            if cand.decision is None and (cand.status == "measured" or cand.status in FAILED):
                ev = cand.measurement
                outcome = Outcome(ev.status, dict(ev.metrics), ev.log, ev.seconds, ev.device)
                build = self.harness.build(cand.source) if ev.status == "ok" else None
                verdict, reason = self._decide(run_id, cand.id, outcome, build)
                self.display.finished(cand, outcome, verdict, reason, self.history(run_id).incumbent)

    def _candidates(self, run_id: int) -> list[Candidate]:
        with self.store.session() as s:
            cands = list(s.scalars(select(Candidate).where(Candidate.run_id == run_id).order_by(Candidate.seq)))
            for c in cands:
                _ = c.evaluations, c.decision, c.build  # load while the session is open
            return cands

    def history(self, run_id: int) -> History:
        cands = self._candidates(run_id)
        with self.store.session() as s:
            best_id = Run.find(s, run_id).best_candidate_id
        records = [record_of(c) for c in cands]
        incumbent = next((r for c, r in zip(cands, records) if c.id == best_id), None)
        return History(records, incumbent)

    def _stop_reason(self, run_id: int) -> str | None:
        h, stop, budget = self.history(run_id), self.campaign.stop, self.campaign.budget
        if h.incumbent and h.incumbent.score is not None and h.incumbent.score >= stop.target:
            return f"target reached: {h.incumbent.score:.3f}× cuBLAS ≥ {stop.target}"
        if self.stop.requested:
            return STOPPED
        used = sum(counted(r.status) for r in h.records)
        if used >= budget.candidates:
            return f"budget spent: {used} candidates"
        if self._elapsed() >= budget.minutes * 60:
            return f"budget spent: {budget.minutes:g} minutes"
        tokens, cost = self.llm_usage(run_id)
        if budget.tokens is not None and tokens >= budget.tokens:
            return f"budget spent: {tokens} LLM tokens"
        if budget.cost is not None and cost >= budget.cost:
            return f"budget spent: LLM cost {cost:.4g}"
        if self.dry_run:
            return None
        streak = 0
        for r in reversed(h.records):
            if r.kept:
                break
            streak += counted(r.status)
        if streak >= stop.patience:
            return f"patience: {streak} candidates in a row without a keep"
        return None

    def llm_usage(self, run_id: int) -> tuple[int, float]:
        with self.store.session() as s:
            tokens, cost = s.execute(
                select(func.coalesce(func.sum(LlmCall.input_tokens), 0) + func.coalesce(func.sum(LlmCall.output_tokens), 0),
                       func.coalesce(func.sum(LlmCall.cost), 0.0)).where(LlmCall.run_id == run_id)
            ).one()
        return int(tokens), float(cost)

    def _seed_failed(self, run_id: int) -> str | None:
        cands = self._candidates(run_id)
        seed = cands[0]
        if seed.status in FAILED or seed.status == "rejected":
            ev = seed.measurement or (seed.evaluations[-1] if seed.evaluations else None)
            return f"failed: the seed did not pass ({seed.status}): {_first_line(ev.log if ev else '')}"
        return None

    # ---- proposals ------------------------------------------------------------------------
    def _record_seed(self, run_id: int) -> None:
        if hasattr(self.agent, "seed_proposal"):  # agents that build their own starting point
            self._add(run_id, [self.agent.seed_proposal()])
            return
        source = self.campaign.seed_path().read_text()
        describe = getattr(self.agent, "space", None)
        family = describe.family_of_source(source) if describe else None
        self._add(run_id, [Proposal(hypothesis="The seed: the starting point every change is measured from.",
                                    source=source, proposer="seed", family=family)])

    def _propose(self, run_id: int) -> tuple[list[Candidate], int]:
        """The new candidates to evaluate, and how many proposals (rejected ones included) were made."""
        h = self.history(run_id)
        used = sum(counted(r.status) for r in h.records)
        n = min(getattr(self.agent, "batch", self.campaign.agent.search.batch), self.campaign.budget.candidates - used)
        proposals = self.agent.propose(h, n)[:n]  # refused ones count too: never more than the budget left
        seen = {r.source_hash: r.seq for r in h.records if r.status != "rejected"}
        for p in proposals:  # the same kernel twice is never evaluated twice
            digest = source_hash(p.source)
            if not p.rejected and digest in seen:
                twin = f"candidate #{seen[digest]}" if seen[digest] >= 0 else "another proposal of this batch"
                p.rejected = f"renders the same source as {twin}"
            elif not p.rejected:
                seen[digest] = -1
        return [c for c in self._add(run_id, proposals) if c.status == "proposed"], len(proposals)

    def _add(self, run_id: int, proposals: list[Proposal]) -> list[Candidate]:
        out = []
        with self.store.session() as s:
            run = Run.find(s, run_id)
            seq = len(self._candidates(run_id))
            for p in proposals:
                cand = Candidate(run_id=run_id, seq=seq, parent_id=run.best_candidate_id, hypothesis=p.hypothesis,
                                 proposer=p.proposer, family=p.family, knobs=p.knobs, source=p.source,
                                 source_hash=source_hash(p.source), status="rejected" if p.rejected else "proposed")
                s.add(cand)
                s.flush()
                for call_id in p.llm_calls:
                    s.get(LlmCall, call_id).candidate_id = cand.id
                if p.rejected:
                    s.add(Evaluation(candidate_id=cand.id, status="rejected", log=p.rejected))
                    self.display.finished(cand, None, "rejected", p.rejected, None)
                out.append(cand)
                seq += 1
            self._touch(s, run_id)
        return out

    # ---- one candidate --------------------------------------------------------------------
    def _measure(self, cand: Candidate, build_future: Future, guard: bool = False):
        """Build and evaluate one candidate: (build, build id, outcome, evaluation id); outcome None in a
        dry run. With `guard`, None instead when a stop rule fired before the evaluation began."""
        build = build_future.result()
        build_id = self._record_build(build) if build is not None and build.cache_key else None
        if not build.ok:
            return build, build_id, Outcome("compile_error", log=build.log), None
        if self.dry_run:
            return build, build_id, None, None
        if guard and (self.stop.requested or self._elapsed() >= self.campaign.budget.minutes * 60):
            return None
        eval_id = self._begin(cand.id, "benchmark")
        return build, build_id, self.harness.evaluate(cand.source, build), eval_id

    def _begin(self, cand_id: int, kind: str, against: int | None = None) -> int:
        """An evaluation row marked running: if the process dies now, resume finds it and redoes it."""
        with self.store.session() as s:
            ev = Evaluation(candidate_id=cand_id, kind=kind, against_id=against, status="running")
            s.add(ev)
            s.flush()
            return ev.id

    def _finish(self, s, eval_id: int | None, cand_id: int, kind: str, outcome: Outcome,
                against: int | None = None) -> None:
        ev = s.get(Evaluation, eval_id) if eval_id is not None else None
        if ev is None:
            ev = Evaluation(candidate_id=cand_id, kind=kind, against_id=against)
            s.add(ev)
        ev.status, ev.metrics, ev.log = outcome.status, outcome.metrics, outcome.log
        ev.device, ev.seconds, ev.created_at = outcome.device, outcome.seconds, utcnow()

    def _conclude(self, run_id: int, cand: Candidate, build: Any, build_id: int | None, outcome: Outcome | None,
                  eval_id: int | None = None) -> None:
        if outcome is None:
            return self._built(run_id, cand, build_id)
        with self.store.session() as s:
            self._finish(s, eval_id, cand.id, "benchmark", outcome)
            c = s.get(Candidate, cand.id)
            c.build_id = build_id
            c.status = "measured" if outcome.status == "ok" else outcome.status
        verdict, reason = self._decide(run_id, cand.id, outcome, build)
        with self.store.session() as s:
            c = s.get(Candidate, cand.id)
            _ = c.evaluations, c.build, c.decision
        self.display.finished(c, outcome, verdict, reason, self.history(run_id).incumbent)

    def _built(self, run_id: int, cand: Candidate, build_id: int) -> None:
        """Dry runs: the candidate compiled; it is recorded as built, never measured or decided."""
        with self.store.session() as s:
            c = s.get(Candidate, cand.id)
            c.build_id, c.status = build_id, "built"
            run = Run.find(s, run_id)
            if run.best_candidate_id is None:
                run.best_candidate_id = c.id  # the seed stays the base the agent edits
            self._touch(s, run_id)
            _ = c.evaluations, c.build, c.decision
        self.display.finished(c, None, "built", "compiled (dry run: not measured)", None)

    def _record_build(self, build) -> int:
        with self.store.session() as s:
            return Build.record(s, build.facts()).id

    def _decide(self, run_id: int, cand_id: int, outcome: Any, build: Any) -> tuple[str, str]:
        stop = self.campaign.stop
        with self.store.session() as s:
            run = Run.find(s, run_id)
            inc = s.get(Candidate, run.best_candidate_id) if run.best_candidate_id else None
            inc_source = inc.source if inc else None
            inc_id = inc.id if inc else None
            inc_score = score_of(inc) if inc else None
        if outcome.status != "ok":
            verdict, reason = "revert", f"{outcome.status}: {_first_line(outcome.log)}"
        elif inc is None:
            verdict, reason = "keep", f"first candidate to pass the gate ({outcome.score:.4g}× cuBLAS)"
        elif outcome.score <= inc_score * (1 + stop.min_gain):
            verdict, reason = "revert", (f"{outcome.score:.4g}× cuBLAS does not beat the incumbent's "
                                          f"{inc_score:.4g}× by more than {stop.min_gain:.0%}")
        else:
            eval_id = self._begin(cand_id, "head_to_head", inc_id)
            h2h = self.harness.head_to_head((self._source(cand_id), build),
                                            (inc_source, self.harness.build(inc_source)))
            with self.store.session() as s:
                self._finish(s, eval_id, cand_id, "head_to_head", h2h, inc_id)
            r = h2h.metrics.get("ratio", {})
            if h2h.status == "ok" and r["median"] > 1 + stop.min_gain and r["ci_low"] > 1.0:
                verdict, reason = "keep", (f"head to head {r['median']:.3f}× the incumbent "
                                           f"(CI {r['ci_low']:.3f}–{r['ci_high']:.3f})")
            elif h2h.status == "ok":
                verdict, reason = "revert", (f"head to head only {r['median']:.3f}× the incumbent "
                                             f"(CI {r['ci_low']:.3f}–{r['ci_high']:.3f}): within noise")
            else:
                verdict, reason = "revert", f"head to head {h2h.status}: {_first_line(h2h.log)}"
        with self.store.session() as s:
            s.add(Decision(run_id=run_id, candidate_id=cand_id, incumbent_id=inc_id, verdict=verdict, reason=reason))
            c = s.get(Candidate, cand_id)
            if outcome.status == "ok":
                c.status = "kept" if verdict == "keep" else "reverted"
            if verdict == "keep":
                Run.find(s, run_id).best_candidate_id = cand_id
            self._touch(s, run_id)
        return verdict, reason

    def _touch(self, s, run_id: int) -> None:
        """Keep the time spent and the lease's heartbeat current, in the same commit as the step."""
        run = Run.find(s, run_id)
        run.elapsed_s, run.updated_at, run.heartbeat_at = self._elapsed(), utcnow(), utcnow()

    def _source(self, cand_id: int) -> str:
        with self.store.session() as s:
            return s.get(Candidate, cand_id).source

    def _close(self, run_id: int, status: str, reason: str) -> None:
        try:
            with self.store.session() as s:
                ids = select(Candidate.id).where(Candidate.run_id == run_id)
                s.execute(update(Evaluation).where(Evaluation.candidate_id.in_(ids), Evaluation.status == "running")
                          .values(status="interrupted", log="cut off: the run stopped before this evaluation "
                                  "finished; it is done again on resume"))
                run = Run.find(s, run_id)
                run.status, run.stop_reason = status, reason
                run.elapsed_s = self._elapsed()
                run.updated_at = utcnow()
                if run.owner == getattr(self, "owner", None):
                    run.owner = None
        except AutoDiscoveryError:
            pass  # the database cannot be written (full, read-only, locked): resume finds a stale lease


STOPPED = "stopped at a safe point on request"


def _first_line(text: str) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")
