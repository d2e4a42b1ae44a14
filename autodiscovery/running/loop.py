"""The loop: observe, hypothesize, implement, measure, keep or revert, until a stop rule fires.

Every step of a candidate is a committed state (`ledger.py`): proposed, evaluating (an evaluation row
marked `running`), measured, decided. A run cut off at any point, kill -9 included, resumes as the same
run: an evaluation left `running` is marked `interrupted` and done again, a measurement without a
decision gets its decision, a candidate is counted once whatever happened to it, and the time already
spent stays spent. One process at a time drives a run: it holds the run's lease while it does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from autodiscovery import RunFailed
from autodiscovery.campaign import Campaign
from autodiscovery.interfaces import (
    Agent,
    Harness,
    Outcome,
    Proposal,
    Record,
)
from autodiscovery.running import lease
from autodiscovery.running.decide import STOPPED, decide, decisive_gain, stop_reason
from autodiscovery.running.evaluate import assess, screen
from autodiscovery.running.lease import Stop
from autodiscovery.running.ledger import FAILED, Ledger, counted, score_of, source_hash
from autodiscovery.store import Candidate, Run, Store
from autodiscovery.toolkit.text import first_line

__all__ = ["Display", "Loop", "Quiet", "STOPPED", "Stop", "counted", "source_hash"]


class Display(Protocol):
    def started(self, run: Run, campaign: Campaign, harness: Harness) -> None: ...
    def building(self, seqs: list[int]) -> None: ...
    def finished(self, cand: Candidate, outcome: Outcome | None, verdict: str, reason: str,
                 best: Record | None) -> None: ...
    def stopped(self, reason: str) -> None: ...


class Quiet:
    def started(self, run, campaign, harness) -> None: ...
    def building(self, seqs) -> None: ...
    def finished(self, cand, outcome, verdict, reason, best) -> None: ...
    def stopped(self, reason) -> None: ...


@dataclass
class Loop:
    campaign: Campaign
    store: Store
    harness: Harness
    agent: Agent
    display: Display = field(default_factory=Quiet)
    workers: int = 2
    dry_run: bool = False
    """Propose and build only: no GPU, no measurement, no keep or revert."""
    stop: Stop = field(default_factory=Stop)
    started: Callable[[int], None] | None = None
    """Called with the run id as soon as the run exists (so an interrupted start can name it)."""
    seed: Proposal | None = None
    """A new run's first candidate; none: the agent's seed proposal."""
    parent_id: int | None = None
    """The suite a new run tunes one problem of."""

    def start(self, fingerprint: dict) -> int:
        ledger = Ledger.create(self.store, self.campaign.name, self.agent.name, self.campaign.model_dump(mode="json"),
                               fingerprint, self.harness.objective, self.parent_id)
        return self.drive(ledger.run_id)

    def drive(self, run_id: int) -> int:
        if self.started:
            self.started(run_id)
        self.owner, t0 = lease.owner(), time.monotonic()
        self.foreseen: dict = {}
        self.ledger = Ledger(self.store, run_id, self.harness.objective, lambda: 0.0)
        run = self.ledger.open(self.owner, lease.claim)
        self.ledger.elapsed = self.elapsed = lambda: run.elapsed_s + time.monotonic() - t0
        self.display.started(run, self.campaign, self.harness)
        self.agent.bind(self.store, run_id, self.harness, dict(run.fingerprint))
        try:
            reason = self._iterate()
        except RunFailed as exc:
            self._close("failed", f"failed: {first_line(str(exc))}")
            raise
        except BaseException:
            self._close("interrupted", "interrupted")
            raise
        self._close("failed" if reason.startswith("failed") else "interrupted" if reason == STOPPED else "finished",
                    reason)
        self.display.stopped(reason)
        return run_id

    # ---- the loop -------------------------------------------------------------------------
    def _iterate(self) -> str:
        if not self.ledger.candidates():
            self.ledger.add([self.seed or self.agent.seed_proposal(self.campaign)])
        self._recover()
        empty_rounds = 0
        asker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="propose")
        self.ahead: Future | None = None
        try:
            with ThreadPoolExecutor(max_workers=self.workers) as pool:
                while True:
                    if reason := self._seed_failed() or self._stop_reason():
                        return self._settle(reason)
                    pending = [c for c in self.ledger.candidates() if c.status == "proposed"]
                    if not pending:
                        pending, proposed = self._propose()
                        if not proposed:
                            return self.agent.exhausted_reason
                        empty_rounds = 0 if pending else empty_rounds + 1
                        if empty_rounds >= 3:
                            return "the agent produced no usable candidate in 3 rounds in a row"
                    if self.harness.parallel > 1 and not self.dry_run and getattr(self.agent, "overlap", False):
                        return self._pipeline(pool, asker)
                    pending = self._screen(pending)
                    builds = {c.id: pool.submit(self.harness.build, c.source) for c in pending}
                    self.display.building([c.seq for c in pending])
                    if getattr(self.agent, "overlap", False) and pending:  # the next batch is asked for meanwhile
                        self.ahead = asker.submit(self._ask, self.ledger.history(), len(pending), pool)
                    if self.harness.parallel > 1 and not self.dry_run:  # side by side, decided in order
                        with ThreadPoolExecutor(max_workers=self.harness.parallel) as sims:
                            measured = list(sims.map(lambda c: self._measure(c, builds[c.id], guard=True), pending))
                            self._ahead_of_decisions(pending, measured, sims)
                        for cand, result in zip(pending, measured):
                            if result is not None:
                                self._conclude(cand, *result)
                        continue
                    for cand in pending:
                        if reason := self._seed_failed() or self._stop_reason():
                            return self._settle(reason)
                        self._conclude(cand, *self._measure(cand, builds[cand.id]))
        finally:
            asker.shutdown(wait=False, cancel_futures=True)

    def _pipeline(self, builds_pool: ThreadPoolExecutor, asker: ThreadPoolExecutor) -> str:
        """Several devices, proposals asked for ahead: no batch waits for its slowest member. Each device
        takes the next candidate as soon as it is free; the agent is asked for more (in the background,
        each built at once) while fewer than `parallel` + a batch wait or are measured; a measurement is
        recorded as soon as it ends (the agent sees it), and decisions are made in the order the
        candidates were proposed, by one thread of their own, each once it and every one before it are
        measured, so a head-to-head holds up no device but the one it runs on."""
        parallel = self.harness.parallel
        devices = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="device")
        decider = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decide")
        order: list[Candidate] = []  # proposed and not yet measured, in proposal order
        builds: dict[int, Future] = {}
        measuring: dict[int, Future] = {}
        deciding: list[Future] = []
        asking: Future | None = None
        empty_rounds, dry = 0, False  # dry: the agent had nothing more; asked again once a decision is made
        fresh = [c for c in self.ledger.candidates() if c.status == "proposed"]  # not yet taken up

        def measured_in_order(everything: bool = False) -> None:
            """Hand the measured candidates to the decider, in order (all of them at the end of a run)."""
            while order and (everything or order[0].id in measuring and measuring[order[0].id].done()):
                cand = order.pop(0)
                future = measuring.pop(cand.id, None)
                if future is not None and (result := future.result()) is not None:
                    deciding.append(decider.submit(self._judge, cand, *result))

        try:
            while True:
                reason = self._seed_failed() or self._stop_reason()
                if not reason:
                    for cand in self._screen(fresh):
                        builds[cand.id] = builds_pool.submit(self.harness.build, cand.source)
                        order.append(cand)
                    fresh = []
                    busy = sum(not f.done() for f in measuring.values())
                    for cand in [c for c in order if c.id not in measuring][:max(0, parallel - busy)]:
                        measuring[cand.id] = devices.submit(self._measure_and_record, cand, builds[cand.id])
                measured_in_order()
                for future in [f for f in deciding if f.done()]:
                    future.result()  # a decision's error ends the run here
                    deciding.remove(future)
                    dry = False
                if asking is not None and asking.done():
                    added, proposed = self._record(asking.result())
                    fresh += added
                    asking = None
                    empty_rounds = 0 if added or not proposed else empty_rounds + 1
                    dry = not proposed
                    if empty_rounds >= 3:
                        reason = reason or "the agent produced no usable candidate in 3 rounds in a row"
                    elif dry and not order and not deciding:
                        reason = reason or self.agent.exhausted_reason
                    if not reason:
                        continue  # the new candidates are taken up at the top
                if reason:  # nothing new starts; what runs is measured and decided, in order
                    if all(f.done() for f in measuring.values()):
                        measured_in_order(everything=True)
                        for future in deciding:
                            future.result()
                        return self._settle(reason, asking)
                elif asking is None and not dry:
                    ahead = sum(c.id not in measuring or not measuring[c.id].done() for c in order)
                    if ahead < parallel + self.agent.batch and self._room(h := self.ledger.history(), ahead) > 0:
                        asking = asker.submit(self._ask, h, ahead, builds_pool)
                waiting = [f for f in [*measuring.values(), *deciding, asking] if f is not None and not f.done()]
                if waiting:
                    wait(waiting, timeout=1.0, return_when=FIRST_COMPLETED)
        finally:
            devices.shutdown(wait=True, cancel_futures=True)
            decider.shutdown(wait=True, cancel_futures=True)

    def _measure_and_record(self, cand: Candidate, build_future: Future) -> tuple[Any, Outcome] | None:
        """On a device of the pool: the measurement, recorded at once (decided later, in order); None
        where a stop rule fired before it began."""
        if (result := self._measure(cand, build_future, guard=True)) is None:
            return None
        build, build_id, outcome, eval_id = result
        self._record_measurement(cand, build_id, outcome, eval_id)
        return outcome, build

    def _stop_reason(self) -> str | None:
        return stop_reason(self.ledger.history(), self.campaign, self.elapsed(), self.ledger.llm_usage(),
                           self.stop.requested, self.dry_run)

    def _seed_failed(self) -> str | None:
        first = self.ledger.history().records[0]  # kept between writes: no read while nothing changed
        if first.status not in FAILED and first.status != "rejected":
            return None
        seed = self.ledger.candidates()[0]
        if seed.status in FAILED or seed.status == "rejected":
            ev = seed.measurement or (seed.evaluations[-1] if seed.evaluations else None)
            return f"failed: the seed did not pass ({seed.status}): {first_line(ev.log if ev else '')}"
        return None

    def _recover(self) -> None:
        """Decide what an earlier process measured but did not decide (its cut-off evaluations were
        marked when the run was opened, and are evaluated again like any proposed candidate)."""
        for cand in self.ledger.candidates():
            if cand.decision is None and (cand.status == "measured" or cand.status in FAILED):
                ev = cand.measurement
                outcome = Outcome(ev.status, dict(ev.metrics), ev.log, ev.seconds, ev.device,
                                  self.harness.objective.read(ev.metrics) if ev.status == "ok" else None)
                build = self.harness.build(cand.source) if ev.status == "ok" else None
                self._judge(cand, outcome, build)

    # ---- proposals ------------------------------------------------------------------------
    def _room(self, h, in_flight: int = 0) -> int:
        """How many proposals to ask for: a batch, or what the budget has left."""
        return min(self.agent.batch,
                   self.campaign.budget.candidates - sum(counted(r.status) for r in h.records) - in_flight)

    def _ask(self, h, in_flight: int, builds: ThreadPoolExecutor | None = None) -> list:
        """The next batch, asked for while `in_flight` candidates are still being built and measured;
        its builds are started at once (they are cached: the batch's turn finds them done)."""
        n = self._room(h, in_flight)
        proposals = self.agent.propose(h, n)[:n] if n > 0 else []
        for p in proposals if builds is not None else []:
            if not p.rejected and p.source:
                try:
                    builds.submit(self.harness.build, p.source)
                except RuntimeError:  # the run is ending: the builds are not needed
                    break
        return proposals

    def _settle(self, reason: str, ahead: Future | None = None) -> str:
        """A stop rule fired: what the agent was already asked for is recorded (as proposed, evaluated
        on resume), so the requests it cost are linked to what they produced."""
        ahead, self.ahead = ahead or self.ahead, None
        if ahead is not None and not ahead.cancel():
            try:
                self._record(ahead.result())
            except Exception:  # the stop stands; a failed request is in llm_calls already
                pass
        return reason

    def _propose(self) -> tuple[list[Candidate], int]:
        """The new candidates to evaluate, and how many proposals (refused ones included) were made."""
        ahead, self.ahead = self.ahead, None
        proposals = ahead.result() if ahead is not None else []
        if not proposals:
            h = self.ledger.history()
            n = self._room(h)
            proposals = self.agent.propose(h, n)[:n]  # refused ones count too: never more than the budget left
        return self._record(proposals)

    def _record(self, proposals: list) -> tuple[list[Candidate], int]:
        h = self.ledger.history()
        seen = {r.source_hash: r.seq for r in h.records if r.status != "rejected"}
        for p in proposals:  # the same kernel twice is never evaluated twice
            digest = source_hash(p.source)
            if not p.rejected and digest in seen:
                twin = f"candidate #{seen[digest]}" if seen[digest] >= 0 else "another proposal of this batch"
                p.rejected = f"renders the same source as {twin}"
            elif not p.rejected:
                seen[digest] = -1
        added = self.ledger.add(proposals)
        for cand, p in zip(added, proposals):
            if p.rejected:
                self.display.finished(cand, None, "rejected", p.rejected, None)
        return [c for c in added if c.status == "proposed"], len(proposals)

    def _screen(self, pending: list[Candidate]) -> list[Candidate]:
        """Refuse, before any build, the candidates whose launch cannot work for this problem."""
        out = []
        for cand in pending:
            if (refused := screen(self.harness, cand.source)) is not None:
                self.ledger.reject(cand.id, refused.log)
                self.display.finished(self.ledger.candidate(cand.id), None, "rejected", refused.log, None)
            else:
                out.append(cand)
        return out

    # ---- one candidate --------------------------------------------------------------------
    def _measure(self, cand: Candidate, build_future: Future, guard: bool = False):
        """(build, build id, outcome, evaluation id); outcome None in a dry run. With `guard`, None
        instead when a stop rule fired before the evaluation began."""
        build = build_future.result()
        build_id = self.ledger.record_build(build)
        if not build.ok:
            return build, build_id, assess(self.harness, cand.source, build), None
        if self.dry_run:
            return build, build_id, None, None
        if guard and (self.stop.requested or self.elapsed() >= self.campaign.budget.minutes * 60):
            return None
        eval_id = self.ledger.begin(cand.id, "benchmark")
        inc = self.ledger.incumbent()
        bar = score_of(inc, self.harness.objective) if inc is not None else None
        return build, build_id, assess(self.harness, cand.source, build, bar), eval_id

    def _conclude(self, cand: Candidate, build: Any, build_id: int | None, outcome: Outcome | None,
                  eval_id: int | None) -> None:
        if outcome is None:
            self.ledger.built(cand.id, build_id)
            return self.display.finished(self.ledger.candidate(cand.id), None, "built",
                                         "compiled (dry run: not measured)", None)
        self._record_measurement(cand, build_id, outcome, eval_id)
        self._judge(cand, outcome, build)

    def _record_measurement(self, cand: Candidate, build_id: int | None, outcome: Outcome,
                            eval_id: int | None) -> None:
        self.ledger.finish(eval_id, cand.id, "benchmark", outcome,
                           status="measured" if outcome.status == "ok" else outcome.status, build_id=build_id)

    def _ahead_of_decisions(self, pending: list[Candidate], measured: list, pool: ThreadPoolExecutor) -> None:
        """Decisions are made in order, each challenger head to head with the incumbent of its turn. When
        several candidates of a batch would each be kept in turn (a climb up the ladder), the head-to-heads
        the decisions will ask for are run now, side by side on the harness's devices; a decision that
        goes otherwise than foreseen finds no match and measures its own pair."""
        self.foreseen = {}
        objective, margin = self.harness.objective, self.campaign.stop.min_gain
        inc = self.ledger.incumbent()
        score = score_of(inc, objective) if inc is not None else None
        pair = (inc.source, self.harness.build(inc.source)) if inc is not None else None
        wanted = []
        for cand, result in zip(pending, measured):
            if result is None or result[2] is None or result[2].status != "ok" or result[2].metrics.get("screened"):
                continue
            s = result[2].score if result[2].score is not None else objective.read(result[2].metrics)
            if score is not None and not objective.better(s, score, margin):
                continue
            if pair is not None and decisive_gain(objective, s, score, self.campaign.stop.decisive) is None:
                wanted.append(((cand.source, result[0]), pair))
            pair, score = (cand.source, result[0]), s
        if len(wanted) < 2 or self.stop.requested:
            return
        outcomes = pool.map(lambda w: self.harness.head_to_head(*w), wanted)
        self.foreseen = {(c[1].cache_key, i[1].cache_key): o for (c, i), o in zip(wanted, outcomes)}

    def _judge(self, cand: Candidate, outcome: Outcome, build: Any) -> None:
        harness = Foreseen(self.harness, self.foreseen)
        verdict, reason = decide(self.ledger, harness, self.campaign, cand.id, outcome, build)
        self.display.finished(self.ledger.candidate(cand.id), outcome, verdict, reason,
                              self.ledger.history().incumbent)

    def _close(self, status: str, reason: str) -> None:
        from autodiscovery import AutoDiscoveryError

        try:
            self.ledger.close(status, reason, self.owner)
        except AutoDiscoveryError:
            pass  # the database cannot be written (full, read-only, locked): resume finds a stale lease


class Foreseen:
    """The harness, with head-to-heads already measured for the pairs a decision may ask for."""

    def __init__(self, harness: Harness, ready: dict) -> None:
        self.harness, self.ready = harness, ready

    def head_to_head(self, challenger, incumbent) -> Outcome:
        done = self.ready.pop((challenger[1].cache_key, incumbent[1].cache_key), None)
        return done if done is not None else self.harness.head_to_head(challenger, incumbent)

    def __getattr__(self, name: str):
        return getattr(self.harness, name)
