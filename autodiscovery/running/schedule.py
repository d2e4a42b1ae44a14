"""One scheduler for one device or many: proposing and building run while the devices measure.

Candidates move through the lifecycle (`lifecycle.py`) in proposal order:

- **builds** start as soon as a candidate is recorded, on the build workers;
- **measurements** start in order, one a device, while fewer than `parallel` devices are in use; a
  head-to-head or a sanitizer run holds a device too. On one device the next measurement starts once
  the previous candidate is decided, against the incumbent of its turn, as a sequential climb measures;
- **decisions** are made in order, by one thread of their own, each once it and all before it are
  measured;
- **proposals** are asked for in the background, so that the next candidates are proposed and built
  while the devices measure.

When proposals are asked for (the rule that keeps a climb as sharp as a sequential one): with `n`
candidates recorded, the agent is shown its history with the verdicts of the last `depth` candidates
that go to be measured hidden (`ahead_view`: as if proposed, not yet measured; `depth` is 1 on one
device). If the agent says its next proposals do not depend on those verdicts (`agent.ahead(view)`),
it is asked as soon as no more than `depth` candidates are undecided, and what it proposes is built at
once but recorded only when a device would otherwise have nothing to measure next (on one device: once
every verdict is in, so a candidate's parent is the incumbent it would have had). Otherwise it is asked
once every candidate is decided, with the whole history. The view depends on `n` alone, never on how
far the measurements got, so on one device the walk is the same whatever the timing, after a resume
too. The search agent says yes for warm-start moves (a fixed list), for structural moves where the same
families are due whatever the verdicts (and then proposes those alone), and for knob moves once no
structural move is due or pending (`SearchAgent.ahead`): a structural move, and the knob moves that
follow one, wait for every verdict they depend on. Knob moves asked ahead miss the hidden verdicts
(TPE counts those candidates as running trials; nothing is proposed twice). An agent whose proposals
cost nothing but time (`agent.speculate`) is also asked where they depend on the verdicts, only to
build what it proposes: asked again once the verdicts are in, it finds the builds of what it proposes
the same done.
"""

from __future__ import annotations

import dataclasses
import enum
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from autodiscovery import AutoDiscoveryError
from autodiscovery.interfaces import Agent, History, Proposal
from autodiscovery.running.evaluate import screen
from autodiscovery.running.ledger import source_hash
from autodiscovery.running.lifecycle import Decided, Lifecycle, Measured
from autodiscovery.store import Candidate, CandidateStatus

NO_USABLE = "the agent produced no usable candidate in 3 rounds in a row"


class Ask(enum.Enum):
    """How the agent's proposals are taken: `now` recorded at once (asked with every verdict in),
    `ahead` built at once and recorded once a device needs them, `speculative` built only (asked where
    the agent's proposals depend on the verdicts still out: the same proposals asked again once they
    are in find their builds done)."""

    now = "now"
    ahead = "ahead"
    speculative = "speculative"


def ahead_view(h: History, depth: int) -> History:
    """The history with the last `depth` candidates that go to be measured (not refused before a build)
    shown as proposed: no score, no verdict; the incumbent the last keep before them."""
    hidden = [r.seq for r in h.records if r.status != CandidateStatus.rejected][-depth:] if depth else []
    if not hidden:
        return h
    first = hidden[0]
    records = [r if r.seq < first or r.status == CandidateStatus.rejected else dataclasses.replace(
        r, status=CandidateStatus.proposed, score=None, kept=False, log="", build={}, metrics={}, verdict=None,
        reason="") for r in h.records]
    incumbent = h.incumbent
    if incumbent is not None and incumbent.seq >= first:
        incumbent = next((r for r in reversed(records[:first]) if r.kept), None)
    return History(records, incumbent, h.objective)


@dataclass
class InFlight:
    """Everything a run's scheduling holds while it runs, in one place: the candidates between recorded
    and decided, the work started for them, and what the agent was asked."""

    order: list[Candidate] = field(default_factory=list)
    """Recorded, going to be measured, not yet decided: in proposal order."""
    built: dict[int, Future] = field(default_factory=dict)
    """Each candidate's build (a BuildReport), by candidate id."""
    measuring: dict[int, Future] = field(default_factory=dict)
    """Measurements under way (each a Measured), by candidate id."""
    measured: dict[int, Measured] = field(default_factory=dict)
    """Measured, waiting for their turn to be decided."""
    deciding: Future | None = None
    """The decision being made (a Decided): one at a time, in order."""
    ended: list[Decided] = field(default_factory=list)
    """Ends not yet shown: shown once the devices have their next work."""
    asking: Future | None = None
    """The agent's proposals being made: (proposals, how they are taken)."""
    held: list[Proposal] | None = None
    """Asked ahead, built, recorded once a device would need them."""
    prebuilt: dict[str, Future] = field(default_factory=dict)
    """Builds of proposals not yet recorded, by source hash."""
    dry_at: int | None = None
    """The agent had nothing ahead at this many candidates: asked again once every verdict is in."""
    speculated: int | None = None
    """Asked speculatively at this many candidates."""
    empty_rounds: int = 0
    """Rounds in a row whose proposals gave nothing to measure."""


@dataclass
class Scheduler:
    life: Lifecycle
    agent: Agent
    parallel: int
    budget: int
    """Candidates in all (the campaign's `budget.candidates`)."""
    builds: ThreadPoolExecutor
    now: InFlight = field(default_factory=InFlight)

    @property
    def depth(self) -> int:
        """Verdicts a proposal asked ahead may miss: one on one device; on several, a device's worth and a
        batch more, so that no device waits for the decisions before it (made in order, each perhaps
        with a head-to-head)."""
        return 1 if self.parallel == 1 else self.parallel + self.agent.batch

    def loop(self, pending: list[Candidate]) -> str:
        """Until a stop rule fires or the agent has nothing more: why the run ended. What is being measured
        then is measured and decided; what was not started stays proposed (a resume takes it up)."""
        devices = ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="device")
        decider = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decide")
        asker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="propose")
        self.now = InFlight()
        reason: str | None = None
        self._take(pending)
        stalls = 0
        try:
            while True:
                reason = self._harvest() or reason
                if self.now.deciding is None and self.now.order and self.now.order[0].id in self.now.measured:
                    self.now.deciding = decider.submit(self.life.decide, self.now.measured.pop(self.now.order.pop(0).id))
                if self.now.deciding is None or self._free() > 0:  # else nothing can start: the run is not read
                    reason = reason or self.life.stop_reason()
                    if not reason and self.now.held is not None and self._idle():
                        held, self.now.held = self.now.held, None
                        reason = self._recorded(held)
                    if not reason:
                        self._ask(asker)
                        self._start_measurements(devices)
                for decided in self.now.ended:  # shown once the devices have their next work
                    self.life.announce(decided)
                self.now.ended.clear()
                if reason and not self.now.measuring and self.now.deciding is None and not (
                        self.now.order and self.now.order[0].id in self.now.measured):
                    self._settle()
                    return reason
                running = [f for f in [*self.now.measuring.values(), self.now.deciding, self.now.asking] if f is not None]
                if running:
                    wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
                stalls = 0 if running or reason else stalls + 1  # none: what was recorded was refused
                if stalls > 3:
                    raise AssertionError("the scheduler has nothing to wait for")  # a bug, never a state
        finally:
            asker.shutdown(wait=False, cancel_futures=True)
            devices.shutdown(wait=True, cancel_futures=True)
            decider.shutdown(wait=True, cancel_futures=True)

    # ---- the steps ------------------------------------------------------------------------
    def _take(self, cands: list[Candidate]) -> None:
        """Recorded candidates: screened, then built in the background."""
        refused = {c.id: end for c in cands if (end := self.life.screen(c)) is not None}
        for end in refused.values():
            self.life.announce(end)
        cands = [c for c in cands if c.id not in refused]
        for c in cands:
            self.now.built[c.id] = self.now.prebuilt.pop(c.source_hash) if c.source_hash in self.now.prebuilt else \
                self.builds.submit(self.life.evaluator.build, c.source)
        self.now.order += cands
        if cands:
            self.life.display.building([c.seq for c in cands])

    def _harvest(self) -> str | None:
        """What finished since the last look: measurements, the decision, the agent's proposals. A reason
        to stop where the agent has nothing usable."""
        for cid, future in [(c, f) for c, f in self.now.measuring.items() if f.done()]:
            self.now.measured[cid] = future.result()  # an error of the harness ends the run here
            del self.now.measuring[cid]
        if self.now.deciding is not None and self.now.deciding.done():
            decided, self.now.deciding = self.now.deciding.result(), None
            self.now.ended.append(decided)
        if self.now.asking is None or not self.now.asking.done():
            return None
        (proposals, ask), self.now.asking = self.now.asking.result(), None
        if ask == Ask.speculative:
            self._prebuild(proposals)
            return None
        if not proposals:
            if ask == Ask.now:
                return self.agent.exhausted_reason
            self.now.dry_at = self._count()  # asked again once every verdict is in
            return None
        if ask == Ask.now:
            return self._recorded(proposals)
        self._prebuild(proposals)
        self.now.held = proposals  # recorded once a device needs them
        return None

    def _prebuild(self, proposals: list[Proposal]) -> None:
        """Start the builds of proposals not yet recorded (unless the problem refuses them): a candidate
        recorded later with the same source takes its build from here."""
        for p in proposals:
            if not p.rejected and p.source and screen(self.life.harness, p.source) is None:
                self.now.prebuilt.setdefault(source_hash(p.source), self.builds.submit(self.life.evaluator.build, p.source))

    def _recorded(self, proposals: list[Proposal]) -> str | None:
        before = len(self.now.order)
        self._take(self._record(proposals))
        self.now.empty_rounds = 0 if len(self.now.order) > before else self.now.empty_rounds + 1
        return NO_USABLE if self.now.empty_rounds >= 3 else None

    def _idle(self) -> bool:
        """Whether a device would have nothing to measure next: every candidate in hand started, and a
        device free. On one device: every candidate decided, so what was asked ahead is recorded with the
        incumbent of the verdicts it did not see (its parent), as a sequential run records it."""
        started = all(c.id in self.now.measuring or c.id in self.now.measured for c in self.now.order)
        return started and self._free() > 0

    def _count(self) -> int:
        return len(self.life.ledger.history().records)

    def _waiting(self) -> int:
        """Candidates the devices have still to measure or decide. On one device, those undecided (the
        view is the same however far they got); on several, those not yet measured: decisions, made in
        order and each perhaps with a head-to-head, may lag the devices, which must not wait for them."""
        if self.parallel == 1:
            return len(self.now.order) + (self.now.deciding is not None)
        return sum(c.id not in self.now.measured for c in self.now.order)

    def _ask(self, asker: ThreadPoolExecutor) -> None:
        """Ask the agent for its next proposals where the rule above allows it now."""
        if self.now.asking is not None or self.now.held is not None:
            return
        h = self.life.ledger.history()
        n = len(h.records)
        room = min(self.agent.batch, self.budget - n)
        if room <= 0 or self._waiting() > self.depth:
            return
        view = ahead_view(h, self.depth)
        if self.now.dry_at != n and self.agent.ahead(view):
            ask, h = Ask.ahead, view
        elif not self.now.order and self.now.deciding is None:
            ask = Ask.now
        elif self.agent.speculate and self.now.speculated != n:
            ask, h, self.now.speculated = Ask.speculative, view, n
        else:
            return
        self.now.asking = asker.submit(lambda: (self.agent.propose(h, room)[:room], ask))

    def _free(self) -> int:
        """Devices free for a measurement. On one device the decision being made holds it: the next
        candidate is measured against the incumbent of its turn, after any head-to-head, as a sequential
        climb measures it. On several, a head-to-head or a sanitizer run takes the next device that frees,
        before the measurements waiting for one (`lifecycle.Devices`)."""
        reserved = self.parallel == 1 and self.now.deciding is not None
        return self.parallel - len(self.now.measuring) - reserved

    def _start_measurements(self, devices: ThreadPoolExecutor) -> None:
        waiting = [c for c in self.now.order if c.id not in self.now.measuring and c.id not in self.now.measured]
        for cand in waiting[:max(0, self._free())]:
            build = self.now.built[cand.id]
            self.now.measuring[cand.id] = devices.submit(self._measure, cand, build)

    def _measure(self, cand: Candidate, build: Future) -> Any:
        return self.life.measure(cand, build.result())

    def _settle(self) -> None:
        """A stop rule fired: what the agent was already asked for is recorded (as proposed, evaluated on
        resume), so the requests it cost are linked to what they produced."""
        asking, self.now.asking = self.now.asking, None
        held, self.now.held = self.now.held or [], None
        if asking is not None and not asking.cancel():
            try:
                held += asking.result()[0]
            except AutoDiscoveryError:  # the stop stands: a request refused is in llm_calls already (a bug goes up)
                pass
        if held:
            self._record(held)

    def _record(self, proposals: list[Proposal]) -> list[Candidate]:
        """Proposals recorded through the lifecycle: those refused there (by their agent, or as a kernel
        recorded before) shown ended; the others, to be screened and measured."""
        added = self.life.admit(proposals)
        for _, end in added:
            if end is not None:
                self.life.announce(end)
        return [c for c, end in added if end is None]
