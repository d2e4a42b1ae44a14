"""The ladder: the best configuration of each kernel family at one shape, measured against cuBLAS.

For every family (rung order) the default and then TPE-proposed knob settings are built and
evaluated (`per_family` in all); the best that passed the gate is measured once more in a fresh
process, interleaved with cuBLAS. Everything is recorded as a run (agent "ladder") in the store.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from autodiscovery import AutoDiscoveryError
from autodiscovery.agents.search import SearchAgent
from autodiscovery.campaign import Campaign
from autodiscovery.interfaces import History, Proposal, Record
from autodiscovery.running.evaluate import assess, screen
from autodiscovery.running.ledger import source_hash
from autodiscovery.store import Candidate, Evaluation, Run, Store
from autodiscovery.toolkit.text import canon


@dataclass
class Rung:
    family: str
    rung: int
    knobs: dict[str, Any]
    outcome: Any | None  # the final measurement of the family's best, or None
    registers: int | None = None
    spills: int | None = None
    has_hgmma: bool | None = None
    tried: int = 0
    passed: int = 0
    note: str = ""
    candidate_id: int | None = None

    def row(self) -> dict:
        m = self.outcome.metrics if self.outcome is not None and self.outcome.status == "ok" else {}
        r = m.get("ratio", {})
        return {"family": self.family, "rung": self.rung, "knobs": self.knobs,
                "tflops": m.get("tflops", {}).get("candidate"), "cublas_tflops": m.get("tflops", {}).get("cublas"),
                "score": self.outcome.score if self.outcome is not None else None,
                "ci_low": r.get("ci_low"), "ci_high": r.get("ci_high"),
                "registers": self.registers, "spills": self.spills, "has_hgmma": self.has_hgmma,
                "tried": self.tried, "passed": self.passed, "note": self.note}


class Ladder:
    def __init__(self, campaign: Campaign, store: Store, harness: Any, workers: int = 2,
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
        with self.store.session() as s:
            run = Run(campaign=self.campaign.name, agent="ladder", fingerprint=fingerprint,
                      config=self.campaign.model_dump(mode="json") | {"ladder": {"per_family": per_family}})
            s.add(run)
            s.flush()
            self.run_id = run.id
        self.seq = 0
        rungs = [self._family(fam, per_family) for fam in ladder]
        with self.store.session() as s:
            run = s.get(Run, self.run_id)
            run.status, run.stop_reason = "finished", f"ladder over {len(rungs)} families"
            scored = [r for r in rungs if r.outcome is not None and r.outcome.score is not None]
            top = self.harness.objective.best([r.outcome.score for r in scored]) if scored else None
            best = next((r for r in scored if r.outcome.score == top), None)
            if best is not None:
                run.best_candidate_id = best.candidate_id
        return self.run_id, rungs

    def _family(self, fam, per_family: int) -> Rung:
        records: list[Record] = []
        sources: dict[str, tuple[int, Any]] = {}
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
                    p = self.agent.knob_move(fam, History(records, None, self.harness.objective), batch, tried,
                                             record_rejections=False)
                    if p is None:
                        break
                    p.proposer = "ladder"
                tried.add((fam.name, canon(p.knobs)))
                batch.append(p)
            if not batch:
                break
            refused = [screen(self.harness, p.source) for p in batch]  # never built
            with ThreadPoolExecutor(self.workers) as pool:
                builds = list(pool.map(lambda pr: None if pr[1] else self.harness.build(pr[0].source),
                                       zip(batch, refused)))
            for p, build, refusal in zip(batch, builds, refused):
                self.progress(f"{fam.name} {canon(p.knobs)}")
                outcome = refusal or assess(self.harness, p.source, build)
                cid = self._record(p, build, outcome)
                sources[canon(p.knobs)] = (cid, p, build)
                records.append(Record(seq=self.seq, family=fam.name, knobs=p.knobs, status=outcome.status,
                                      score=outcome.score, kept=False, source_hash=source_hash(p.source),
                                      log=outcome.log))
        passed = [r for r in records if r.score is not None]
        rung = Rung(fam.name, fam.rung, dict(fam.default), None, tried=len(records), passed=len(passed))
        if not passed:
            rung.note = next((r.log.splitlines()[0] for r in records if r.log), "no configuration passed the gate")
            return rung
        top = self.harness.objective.best([r.score for r in passed])
        best = next(r for r in passed if r.score == top)
        cid, proposal, build = sources[canon(best.knobs)]
        self.progress(f"{fam.name}: final measurement of the best")
        final = assess(self.harness, proposal.source, build)
        with self.store.session() as s:
            s.add(Evaluation(candidate_id=cid, kind="ladder", status=final.status, metrics=final.metrics,
                             log=final.log, device=final.device, seconds=final.seconds))
        rung.knobs, rung.outcome, rung.candidate_id = best.knobs, final, cid
        rung.registers, rung.has_hgmma = build.registers, build.has_hgmma
        rung.spills = (build.spill_stores or 0) + (build.spill_loads or 0) if build.spill_stores is not None else None
        return rung

    def _record(self, p: Proposal, build, outcome) -> int:
        build_id = self.store.build_id(build.facts()) if build is not None else None
        with self.store.session() as s:
            status = {"ok": "measured"}.get(outcome.status, outcome.status)
            cand = Candidate(run_id=self.run_id, seq=self.seq, hypothesis=p.hypothesis, proposer=p.proposer,
                             family=p.family, knobs=p.knobs, source=p.source, source_hash=source_hash(p.source),
                             status=status, build_id=build_id)
            s.add(cand)
            s.flush()
            kind = "check" if outcome.status == "rejected" else "benchmark"
            s.add(Evaluation(candidate_id=cand.id, kind=kind, status=outcome.status, metrics=outcome.metrics,
                             log=outcome.log, device=outcome.device, seconds=outcome.seconds))
            self.seq += 1
            return cand.id
