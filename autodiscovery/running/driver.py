"""A run driven from its opening to its close: the layer between the commands (`runner.py`) and the
loop (`Scheduler.loop` in `schedule.py`: observe, hypothesize, implement, measure, keep or revert, until a
stop rule fires).

A run is opened (its lease taken), what an earlier process measured and did not decide is decided, and
the scheduler's loop moves every candidate through its lifecycle (`lifecycle.py`) on one device
or many, asking the agent for more as it goes. Every step of a candidate is a committed state
(`ledger.py`): proposed, evaluating (an evaluation row marked `running`), measured, decided. A run cut
off at any point, kill -9 included, resumes as the same run: an evaluation left `running` is marked
`interrupted` and done again, a measurement without a decision gets its decision, a candidate is counted
once whatever happened to it, and the time already spent stays spent. One process at a time drives a
run: it holds the run's lease while it does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from autodiscovery import RunFailed
from autodiscovery.campaign import Campaign
from autodiscovery.interfaces import Agent, Proposal
from autodiscovery.roles import Evaluating, declared
from autodiscovery.running import lease
from autodiscovery.running.decide import STOPPED
from autodiscovery.running.lease import Stop
from autodiscovery.running.ledger import Ledger, counted, source_hash
from autodiscovery.running.lifecycle import Devices, Display, Lifecycle, Quiet
from autodiscovery.running.schedule import Scheduler
from autodiscovery.store import (
    CandidateStatus,
    RunStatus,
    Store,
)
from autodiscovery.toolkit.text import first_line

__all__ = ["Display", "Driver", "Quiet", "STOPPED", "Stop", "counted", "source_hash"]


@dataclass
class Driver:
    campaign: Campaign
    store: Store
    harness: Evaluating
    agent: Agent
    display: Display = field(default_factory=Quiet)
    workers: int = 2
    dry_run: bool = False
    """Propose and build only: no GPU, no measurement, no keep or revert."""
    stop: Stop = field(default_factory=Stop)
    started: Callable[[int], None] | None = None
    """Called with the run id as soon as the run exists (so an interrupted start can name it)."""
    seed: Proposal | None = None
    """A new run's first candidate (a recorded one it continues, `--from`); none: the agent's opening."""
    parent_id: int | None = None
    """The suite a new run tunes one problem of."""
    runs: Evaluating | None = None
    """Where the evaluations run (`executors.wrap`: Ray tasks, say); None: the harness itself."""

    @property
    def parallel(self) -> int:
        """Evaluations at once: where they run says (a Ray cluster's devices), else the harness."""
        return declared(self.runs or self.harness).parallel

    def new_run(self, fingerprint: dict) -> int:
        ledger = Ledger.create(self.store, self.campaign.name, self.agent.name, self.campaign.model_dump(mode="json"),
                               fingerprint, self.harness.objective, self.parent_id)
        return self.drive(ledger.run_id)

    def drive(self, run_id: int) -> int:
        if self.started:
            self.started(run_id)
        self.owner, t0 = lease.owner(), time.monotonic()
        self.ledger = Ledger(self.store, run_id, self.harness.objective, lambda: 0.0)
        run = self.ledger.open(self.owner, lease.claim)
        self.ledger.elapsed = lambda: run.elapsed_s + time.monotonic() - t0
        self.life = Lifecycle(self.ledger, self.harness, self.campaign, self.dry_run, Devices(self.parallel),
                              self.display, self.stop, self.runs)
        self.display.started(run, self.campaign, self.harness)
        self.agent.bind(self.store, run_id, self.harness, dict(run.fingerprint), self.parallel)
        try:
            reason = self._seed_then_loop()
        except RunFailed as exc:
            self._close(RunStatus.failed, f"failed: {first_line(str(exc))}")
            raise
        except BaseException:
            self._close(RunStatus.interrupted, "interrupted")
            raise
        if reason != STOPPED and not self.dry_run and (none := self._none_passed()):
            reason = f"failed: {none} ({reason})"
        self._close(RunStatus.failed if reason.startswith("failed") else RunStatus.interrupted if reason == STOPPED
                    else RunStatus.finished, reason)
        self.display.stopped(reason)
        return run_id

    def _seed_then_loop(self) -> str:
        if not self.ledger.candidates():
            for _, end in self.life.admit([self.seed] if self.seed else
                                           self.agent.opening(self.campaign, self.ledger.history())):
                if end is not None:
                    self.life.announce(end)
        for cand in self.ledger.candidates():  # measured by an earlier process, not decided
            if (measured := self.life.recovered(cand)) is not None:
                self.life.announce(self.life.decide(measured))
        pending = [c for c in self.ledger.candidates() if c.status == CandidateStatus.proposed]
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="build") as builds:
            return Scheduler(self.life, self.agent, self.parallel, self.campaign.budget.candidates,
                             builds).loop(pending)

    def _none_passed(self) -> str | None:
        """Why the run ends with no kernel, where no candidate passed: what became of its first (a seed
        that fails or times out does not end a run while the agent has candidates left: it goes on)."""
        if self.ledger.history().incumbent is not None or not self.ledger.candidates():
            return None
        first = self.ledger.candidates()[0]
        ev = first.measurement or (first.evaluations[-1] if first.evaluations else None)
        return (f"no candidate passed; the first ({first.proposer}, #{first.seq}) ended {first.status}: "
                f"{first_line(ev.log if ev else '') or 'no evaluation'}")

    def _close(self, status: RunStatus, reason: str) -> None:
        from autodiscovery import AutoDiscoveryError

        try:
            self.ledger.close(status, reason, self.owner)
        except AutoDiscoveryError:
            pass  # the database cannot be written (full, read-only, locked): resume finds a stale lease
