"""The ladder: the best configuration of each kernel family of a search space at one problem.

For every family (rung order) the default and then TPE-proposed knob settings are built and
evaluated (`per_family` in all); the best that passed the gate is measured once more in a fresh
process. Everything is recorded as a run (agent "ladder"), through the same ledger as the loop's.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from autodiscovery import AutoDiscoveryError
from autodiscovery.agents.search import SearchAgent
from autodiscovery.agents.space import Family
from autodiscovery.campaign import Campaign
from autodiscovery.interfaces import History, Proposal, Record
from autodiscovery.roles import Evaluating
from autodiscovery.running.ledger import Ledger, build_facts, source_hash
from autodiscovery.running.lifecycle import Lifecycle
from autodiscovery.store import Candidate, EvalKind, EvalStatus, RunStatus, Store
from autodiscovery.toolkit.build import BuildReport
from autodiscovery.toolkit.text import canon, plural


@dataclass
class Rung:
    family: str
    rung: int
    knobs: dict[str, Any]
    outcome: Any | None  # the final measurement of the family's best, or None
    build: dict | None = None
    """The best's build facts (the compiler's report and the harness's own)."""
    tried: int = 0
    passed: int = 0
    note: str = ""
    candidate_id: int | None = None

    def row(self, harness: Evaluating) -> dict:
        """The rung as a table and --json show it: the objective, its interval, the harness's columns."""
        from autodiscovery.interfaces import columns

        m = self.outcome.metrics if self.outcome is not None and self.outcome.status == EvalStatus.ok else {}
        b = self.build or {}
        low, high = harness.objective.bounds(m) or (None, None)
        spills = (b.get("spill_stores") or 0) + (b.get("spill_loads") or 0) if b.get("spill_stores") is not None \
            else None
        return {"family": self.family, "rung": self.rung, "knobs": self.knobs,
                "score": self.outcome.score if self.outcome is not None else None, "ci_low": low, "ci_high": high,
                "figures": {c.key: c.value(m, b) for c in columns(harness, "ladder")},
                "registers": b.get("registers"), "spills": spills, "tried": self.tried, "passed": self.passed,
                "note": self.note}


class Ladder:
    def __init__(self, campaign: Campaign, store: Store, harness: Evaluating, workers: int = 2,
                 progress: Callable[[str], None] = lambda _: None) -> None:
        self.campaign, self.store, self.harness = campaign, store, harness
        self.agent = SearchAgent(campaign)
        self.workers = workers
        self.progress = progress

    def climb(self, fingerprint: dict, per_family: int, families: list[str] | None = None) -> tuple[int, list[Rung]]:
        ladder = [f for f in self.agent.space.ladder() if not families or f.name in families]
        if families and len(ladder) != len(families):
            known = ", ".join(self.agent.space.families)
            raise AutoDiscoveryError(f"unknown family in {families} (known: {known})")
        config = self.campaign.model_dump(mode="json") | {"ladder": {"per_family": per_family}}
        self.ledger = Ledger.create(self.store, self.campaign.name, "ladder", config, fingerprint,
                                    self.harness.objective)
        self.life = Lifecycle(self.ledger, self.harness, self.campaign)
        rungs = [self._family(fam, per_family) for fam in ladder]
        scored = [(r.outcome.score, r) for r in rungs if r.outcome is not None and r.outcome.score is not None]
        top = self.harness.objective.best([score for score, _ in scored]) if scored else None
        best = next((r for score, r in scored if score == top), None)
        self.ledger.crown(best.candidate_id if best is not None else None)
        self.ledger.close(RunStatus.finished, f"ladder over {plural(len(rungs), 'family', 'families')}", None)
        return self.ledger.run_id, rungs

    def _family(self, fam: Family, per_family: int) -> Rung:
        records: list[Record] = []
        sources: dict[str, tuple[Candidate, Proposal, BuildReport | None]] = {}
        tried: set = set()
        budget = per_family if fam.knobs else 1
        while len(records) < budget:
            batch: list[Proposal] = []
            while len(batch) < min(self.workers, budget - len(records)):
                if not records and not batch:
                    knobs = dict(fam.default)
                    p = Proposal(f"{fam.name} at its default configuration", self.agent.space.render(fam.name, knobs),
                                 "ladder", fam.name, knobs)
                else:
                    move = self.agent.knob_move(fam, History(records, None, self.harness.objective), batch, tried)
                    if move is None:
                        break
                    p, p.proposer = move, "ladder"
                tried.add((fam.name, canon(p.knobs)))
                batch.append(p)
            if not batch:
                break
            added = self.life.admit(batch)
            cands = [c for c, _ in added]
            ends = [end or self.life.screen(c) for c, end in added]  # refused before any build, as in a run
            with ThreadPoolExecutor(self.workers) as pool:
                builds = list(pool.map(lambda ce: None if ce[1] else self.harness.build(ce[0].source),
                                       zip(cands, ends)))
            for p, cand, build, end in zip(batch, cands, builds, ends):
                self.progress(f"{fam.name} {canon(p.knobs)}")
                if end is not None:
                    status, score, log = EvalStatus.rejected, None, end.reason
                else:
                    assert build is not None  # built: it was not refused
                    outcome = self.life.measure(cand, build).outcome
                    assert outcome is not None  # the ladder measures: it has no dry run
                    status, score, log = outcome.status, outcome.score, outcome.log
                sources[canon(p.knobs)] = (cand, p, build)
                records.append(Record(seq=len(records), family=fam.name, knobs=p.knobs, status=status,
                                      score=score, kept=False, source_hash=source_hash(p.source), log=log))
        passed = [r for r in records if r.score is not None]
        rung = Rung(fam.name, fam.rung, dict(fam.default), None, tried=len(records), passed=len(passed))
        if not passed:
            rung.note = next((r.log.splitlines()[0] for r in records if r.log), "no configuration passed the gate")
            return rung
        top = self.harness.objective.best([r.score for r in passed if r.score is not None])
        best = next(r for r in passed if r.score == top)
        cand, _, build = sources[canon(best.knobs)]
        assert build is not None  # it passed the gate: it was built
        self.progress(f"{fam.name}: final measurement of the best")
        final = self.life.measure(cand, build, EvalKind.ladder).outcome
        rung.knobs, rung.outcome, rung.candidate_id = best.knobs, final, cand.id
        rung.build = build_facts(build)
        return rung
