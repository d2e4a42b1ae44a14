"""The built-in search agent: climbs the ladder of kernel families, then tunes knobs.

A run starts from what the databases know: the best configurations recorded at the nearest other
problems, in the run's database and any kernel databases it names (`warm.py`), are measured first; with
`start: top` they, or else the highest rungs, open the run in the seed's place. Structural moves come
next (the next untried family above the incumbent's, at its default, or where the harness's fit of the
shape puts its tile knobs), since the large gains are structural; then knob moves: first the settings of
the shape knobs that the fit rates faster than the family's best, then the neighbours of the family's
best (one knob to another value, nearest first; where that breaks a constraint, with one more knob
changed to repair it), those the fit rates much slower last, a hill climb that follows each keep; once
those are all tried, Optuna's TPE sampler fitted to every measurement so far (the fit's order:
`shape_order`). Knob moves go across the families worth tuning: the incumbent's, a higher family that
was tried but did not win (for one round, then while it is within `CLOSE`, 5%, of the incumbent), and a
lower one within `CLOSE` of the incumbent. They take turns in rounds of `knob_patience` moves without a
keep, the incumbent's family first, so the budget is spent where the gains are likely; the search is
exhausted only when every valid configuration of those families was tried. When to stop otherwise is the
loop's (budget, target, `stop.patience`). The agent keeps no state of its own: everything is rebuilt
from the history (and the warm start from the database, where the runs it draws on are finished), so a
resumed run continues the same walk, and a given `agent.search.seed` gives the same walk.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from typing import Any, Literal

from autodiscovery import registry
from autodiscovery.agents import tpe, warm
from autodiscovery.agents.search_settings import SearchSettings
from autodiscovery.agents.shape_order import FIT_GAIN, ShapeOrder, nearest_others
from autodiscovery.agents.space import Family, Space
from autodiscovery.campaign import Campaign, validated
from autodiscovery.interfaces import AgentBase, History, Proposal, Record
from autodiscovery.roles import Evaluating, Fitting, declared
from autodiscovery.store import CandidateStatus, Store
from autodiscovery.toolkit.text import canon

MAX_ASKS = 60  # TPE draws per move before falling back to the first untried valid configuration
TPE_POINTS = 1000  # past this many of a family's configurations measured, its untried ones are taken in order
CLOSE = 0.95  # a family below the incumbent's rung is still tuned while its best is within 5% of it
START_SHARE = 0.05  # `start: auto` begins at the top where the seed would take more of the run's minutes
SEED_LAUNCHES = 10  # a seed's evaluation, about: the gate's draws, the estimates and the first pairs
PICKS = 2  # the cost model's fastest recorded configurations tried after the warm start's


SEED_ONLY = ("nothing to propose beyond the seed: to improve it, name a search space (agent.search.space: a folder holding "
             "families.yaml) or propose with --agent llm")
"""Why a run whose space is its seed alone ends after it."""


def _own_space(campaign: Campaign) -> Space:
    """The space of a campaign that names none: its harness's, or, where the harness has none (the
    reference harness), the seed alone."""
    own = declared(registry.harness(campaign.harness.name)).space
    return Space(own) if own is not None else Space.of_seed(campaign.seed_path())


class SearchAgent(AgentBase):
    name = "search"
    Settings = SearchSettings
    speculate = True  # a proposal is a computation on the history, nothing more

    def __init__(self, campaign: Campaign) -> None:
        s = validated(campaign.agent.of(SearchAgent), SearchSettings)
        self.batch_setting = s.batch
        self.batch = s.batch or 4
        self.space = Space(s.space) if s.space else _own_space(campaign)
        if s.space is None and declared(registry.harness(campaign.harness.name)).space is None:
            self.exhausted_reason = SEED_ONLY
        self.space.fits(registry.harness(campaign.harness.name))  # another harness's space: refused now
        self.seed = s.seed
        self.patience = s.knob_patience
        self.overlap = s.overlap is not False
        self.devices = 1
        self.shape = campaign.problem.names()
        self.warm_start = s.warm_start
        self.kernels = warm.kernel_stores(s.kernels)  # a database that cannot be read is refused now
        self.start = s.start if s.start != "auto" else self.auto_start(campaign)
        self.problem = campaign.problem.model_dump(mode="json")
        self.harness_name = campaign.harness.name
        self.campaign_name = campaign.name.partition("/")[0]  # a suite's problem's: the suite's
        self.own_records = s.own_records
        self.cost_model = s.cost_model
        self.campaign = campaign
        self.learned: str | None = None
        """What the cost model learnt from, in words (None: no model)."""
        self.fits = ShapeOrder(self.space, self.shape)
        self.warm: list[tuple[str, dict[str, Any], str]] = []
        """(family, knobs, hypothesis) to measure first: the warm start, made when the run is bound."""

    def auto_start(self, campaign: Campaign) -> Literal["bottom", "top"]:
        """`start: auto`: the top where the seed's evaluation is estimated to take more than START_SHARE of
        the run's minutes (its family's rate over the problem's work), else the bottom."""
        try:
            found = self.space.configuration_of_source(campaign.seed_path().read_text())
        except OSError:  # no seed file to read: the seed's proposal says why
            return "bottom"
        rate = self.space.families[found[0]].tflops if found is not None else None
        work = campaign.problem.work()
        if rate is None or work is None:
            return "bottom"
        seconds = SEED_LAUNCHES * work / (rate * 1e12)
        return "top" if seconds > START_SHARE * campaign.budget.minutes * 60 else "bottom"

    def bind(self, store: Store | None, run_id: int, harness: Evaluating, fingerprint: dict,
             devices: int | None = None) -> None:
        self.fits.harness = harness if isinstance(harness, Fitting) else None
        self.devices = devices or declared(harness).parallel
        sources: list[warm.Source] = [(store, run_id)] if store is not None else []
        sources += [(kernels, None) for kernels in self.kernels]
        picks: list[warm.Best] = []
        if self.cost_model and sources:
            picks = self.learn(sources, fingerprint)
        if self.warm_start:
            self.warm = warm.refitted(self.recorded_bests(sources, fingerprint), self.space, self.fits)
        self.warm += [p for p in picks if (p[0], canon(p[1])) not in {(f, canon(k)) for f, k, _ in self.warm}]
        if self.batch_setting is None:
            self.batch = max(4, self.devices)

    def seed_proposal(self, campaign: Campaign) -> Proposal:
        seed = super().seed_proposal(campaign)
        if (found := self.space.configuration_of_source(seed.source)) is not None:
            seed.family, seed.knobs = found
        return seed

    def opening(self, campaign: Campaign, history: History) -> list[Proposal]:
        """The run's first candidates: the seed (`start: bottom`), or what the warm start offers, else the
        highest rungs fitted to the problem (`start: top`)."""
        if self.start == "bottom":
            return [self.seed_proposal(campaign)]
        return self.propose(history, self.batch) or [self.seed_proposal(campaign)]

    # ---- warm start --------------------------------------------------------------------------
    def recorded_bests(self, sources: list[warm.Source], fingerprint: dict) -> list[warm.Best]:
        """(family, knobs, where it comes from) of the best candidates of the `warm_start` runs nearest this
        problem in `sources` ((store, the run to leave out) for the run's own database and each kernel
        database; `warm.py`)."""
        cc = fingerprint.get("cc")
        problem = warm.Problem(self.harness_name, self.problem, self.shape, fingerprint.get("gpu"),
                               str(cc) if cc is not None else None,
                               None if self.own_records else self.campaign_name)
        return warm.bests(sources, problem, self.space, self.warm_start)

    def learn(self, sources: list[warm.Source], fingerprint: dict) -> list[warm.Best]:
        """The cost model, learnt from the benchmarks of `sources` (this campaign's own earlier runs in the
        kernel databases left out where `own_records` is false), set on the fit the search orders its
        moves by; and its PICKS fastest of the configurations recorded there, valid at this shape, as
        moves (family, knobs, hypothesis). None of either where too few benchmarks teach anything."""
        from autodiscovery.agents import costmodel

        harness = registry.harness(self.harness_name)
        fixed = {k: v for k, v in self.problem.items() if k not in self.shape}
        found = costmodel.lessons(sources, harness, self.space, fixed, self.shape,
                                  None if self.own_records else self.campaign_name)
        model = costmodel.CostModel.learn(found, self.space, costmodel.Fits(self.campaign, self.space))
        if model is None:
            return []
        self.fits.model, self.fits.gpu = model, str(fingerprint.get("gpu") or "")
        self.learned = model.describe()
        return costmodel.fastest(found, self.space, self.fits, self.learned, PICKS)

    def _warm_moves(self, tried: set, n: int) -> list[Proposal]:
        out: list[Proposal] = []
        for family, knobs, hypothesis in self.warm:
            fam = self.space.families[family]
            if len(out) >= n or (family, canon(knobs)) in tried or fam.violations(knobs, self.shape):
                continue
            tried.add((family, canon(knobs)))
            out.append(self._proposal(fam, knobs, hypothesis, "warm"))
        return out

    # ---- the walk ---------------------------------------------------------------------------
    def completed(self, history: History) -> History:
        """The history with each recorded configuration completed by the knobs its family gained since
        (at the values it had without them), so a run recorded before a knob existed resumes its walk."""
        done = {}
        for r in history.records:
            fam = self.space.families.get(r.family or "")
            knobs = fam.complete(r.knobs) if fam is not None and r.knobs else r.knobs
            done[id(r)] = r if knobs is r.knobs else dataclasses.replace(r, knobs=knobs)
        inc = history.incumbent
        return dataclasses.replace(history, records=[done[id(r)] for r in history.records],
                                   incumbent=done.get(id(inc), inc) if inc is not None else None)

    def ahead(self, history: History) -> bool:
        """Whether the next proposals may be asked for before the verdicts of the candidates `history`
        shows as proposed (pending). Warm-start moves may (they are a fixed list); structural moves may
        where the same families are due whatever the pending verdicts leave as the incumbent (`propose`
        then makes only those, never a knob move that would depend on the verdicts); knob moves may once
        no structural move is due and, on one device, only knob moves are pending (they then miss those
        verdicts: TPE counts the pending ones as running trials, and nothing is proposed twice; on several
        devices they may while structural verdicts are pending too, or the devices would wait). A
        structural move thus always waits for every verdict it depends on."""
        if not self.overlap:
            return False
        history = self.completed(history)
        tried = {(r.family, canon(r.knobs)) for r in history.records}
        if self._warm_left(tried):
            return True
        pending = [r for r in history.records if r.status == CandidateStatus.proposed]
        due = {tuple(f.name for f in self._due(history, rung)) for rung in
               {self._rung(history.incumbent), *(self._rung(r) for r in pending)}}
        if len(due) > 1:
            return False
        return bool(due.pop()) or self.devices > 1 or all(r.proposer == "search:knob" for r in pending)

    def _warm_left(self, tried: set) -> bool:
        return any((family, canon(knobs)) not in tried and not self.space.families[family].violations(knobs, self.shape)
                   for family, knobs, _ in self.warm)

    def _due(self, history: History, rung: int) -> list[Family]:
        """The structural moves due with the incumbent at `rung`: the untried families above it, the
        nearest first; with no incumbent yet on a run that starts at the top, the highest first."""
        families = {r.family for r in history.records}
        due = [f for f in self.space.ladder() if f.rung > rung and f.name not in families]
        return due[::-1] if self.start == "top" and history.incumbent is None else due

    def propose(self, history: History, n: int) -> list[Proposal]:
        history = self.completed(history)
        tried = {(r.family, canon(r.knobs)) for r in history.records}
        out: list[Proposal] = self._warm_moves(tried, n)
        if out:  # measured first: the climb below starts from where they leave the incumbent
            return out
        inc_rung = self._rung(history.incumbent)
        for due in self._due(history, inc_rung):
            if len(self._valid(out)) >= n:
                break
            out.append(self._structural(due, history))
            tried.add((due.name, canon(out[-1].knobs)))
        if out and any(r.status == CandidateStatus.proposed for r in history.records):
            return out  # asked ahead (`ahead`): knob moves wait for the verdicts
        exhausted: set[str] = set()
        while len(self._valid(out)) < n:
            fam = self._active(history, exhausted, inc_rung, out)
            if fam is None:
                break
            move = self.knob_move(fam, history, out, tried)
            if move is None:
                exhausted.add(fam.name)
                continue
            tried.add((fam.name, canon(move.knobs)))
            out.append(move)
        return out

    @staticmethod
    def _valid(out: list[Proposal]) -> list[Proposal]:
        return [p for p in out if p.rejected is None]

    def _rung(self, rec: Record | None) -> int:
        if rec is None or rec.family not in self.space.families:
            return 0
        return self.space.families[rec.family].rung

    def _structural(self, fam: Family, history: History) -> Proposal:
        knobs = dict(fam.default)
        if fam.template and fam.violations(knobs, self.shape):
            knobs = next(fam.valid_configurations(self.shape), knobs)
        knobs, fitted = self.fits.start(fam, knobs)
        settings = ", ".join(f"{k}={v}" for k, v in knobs.items()) or "no knobs"
        start = f"Start at {settings}: {fitted}" if fitted else f"Start at its default configuration ({settings})."
        return self._proposal(fam, knobs, f"Structural move to rung {fam.rung}, {fam.name}: {fam.summary}. "
                                          f"{start}", "structural")

    def _active(self, history: History, exhausted: set[str], inc_rung: int,
                pending: list[Proposal] | tuple[()] = ()) -> Family | None:
        """The family to tune next: the one in the earliest round of `knob_patience` moves without a
        keep; within a round the incumbent's family first, then by best score."""
        inc = history.incumbent
        inc_score = inc.score if inc is not None and inc.score else None
        options = []
        for fam in self.space.families.values():
            if not fam.knobs or fam.name in exhausted:
                continue
            recs = [r for r in history.records if r.family == fam.name and r.status != CandidateStatus.rejected]
            moves = len(recs) + sum(p.family == fam.name and p.rejected is None for p in pending)
            if not recs:
                continue
            best = max((r.score for r in recs if r.score is not None), default=None)
            close = best is not None and inc_score is not None and best >= CLOSE * inc_score
            if not close and (fam.rung < inc_rung or (fam.rung > inc_rung and moves > self.patience)):
                continue  # a lower family far below; a higher one that had its round and stayed far below
            last_keep = max((i for i, r in enumerate(recs) if r.kept), default=0)
            stale = moves - 1 - last_keep
            options.append((stale // self.patience, fam.name != (inc.family if inc else None), -(best or 0.0),
                            fam.name, fam))
        return min(options)[-1] if options else None

    # ---- knob moves -------------------------------------------------------------------------
    def knob_move(self, fam: Family, history: History, pending: list[Proposal],
                  tried: set[tuple[str | None, str]]) -> Proposal | None:
        """The next configuration of `fam` to try: a neighbour of its best, else TPE's pick (while the family
        has at most TPE_POINTS configurations measured), else the first untried valid one (a draw a
        constraint refuses is told to TPE as a failure and skipped: a refusal would take budget)."""
        best = self._best(fam, history)
        default = dict(fam.default)
        if (best is not None and (fam.name, canon(default)) not in tried and not fam.violations(default, self.shape)
                and (here := self.fits.fit(fam, best.knobs)) is not None
                and (there := self.fits.fit(fam, default)) is not None
                and there.estimate <= here.estimate * (1 + 2 * FIT_GAIN)):
            # The structural move started where the fit put the tile; the default, which the fit rates
            # close, is the check on the fit.
            return self._knob_proposal(fam, default, history, f"the family's default, which the fit of the shape "
                                                              f"rates close ({there.describe()})")
        if best is not None:
            for knobs, why in self.fits.order(fam, best.knobs, self.neighbours(fam, best.knobs)):
                if (fam.name, canon(knobs)) not in tried:
                    return self._knob_proposal(fam, knobs, history, why)
        candidates: list[Record | Proposal] = [*history.records, *pending]
        points = [(r.knobs, r.score if isinstance(r, Record) else None)  # still being measured: not a failure
                  for r in candidates if self._configured(fam, r)
                  and not (isinstance(r, Record) and r.status == CandidateStatus.proposed)]
        if len(points) <= TPE_POINTS:  # past it TPE's fit costs about a second a draw, and few points are left
            study, dists = tpe.study(fam.knobs, points, self.seed + len(history.records) + len(pending),
                                     history.objective.higher_is_better)
            seen = {canon(knobs): score for knobs, score in points}
            seen |= {key: None for f, key in tried if f == fam.name and key not in seen}
            for trial, knobs in tpe.untried(study, dists, seen, MAX_ASKS):
                if fam.violations(knobs, self.shape):
                    tried.add((fam.name, canon(knobs)))
                    tpe.tell(study, trial, None)
                    continue
                return self._knob_proposal(fam, knobs, history)
        # TPE keeps landing on tried or invalid points: fall back to the first untried valid one.
        for knobs in fam.valid_configurations(self.shape):
            if (fam.name, canon(knobs)) not in tried:
                return self._knob_proposal(fam, knobs, history)
        return None

    @staticmethod
    def _configured(fam: Family, r: Record | Proposal) -> bool:
        """Whether a candidate is one of the family's configurations (an edited kernel, the LLM
        agent's, keeps the family's name but no knobs that describe it)."""
        return r.family == fam.name and set(r.knobs) == set(fam.knobs)

    def _best(self, fam: Family, history: History) -> Record | None:
        scored = [(r.score, r) for r in history.records if self._configured(fam, r) and r.score is not None]
        best = max(scored, key=lambda sr: sr[0] if history.objective.higher_is_better else -sr[0], default=None)
        return best[1] if best is not None else None

    def neighbours(self, fam: Family, knobs: dict[str, Any]) -> list[dict[str, Any]]:
        """The valid configurations one knob away (each knob to its other values, nearest first), then,
        for a one-knob move a constraint refuses, that move with one other knob changed to make it
        valid, or else two. Each group in an order drawn from the agent's seed."""
        others = functools.partial(nearest_others, fam)
        single, repaired, twice = [], [], []
        for k in fam.knobs:
            for v in others(k, knobs.get(k)):
                moved = {**knobs, k: v}
                if not fam.violations(moved, self.shape):
                    single.append(moved)
                    continue
                found = False
                for k2 in fam.knobs:
                    if k2 == k:
                        continue
                    fixed = next((f for v2 in others(k2, knobs.get(k2))
                                  if not fam.violations(f := {**moved, k2: v2}, self.shape)), None)
                    if fixed is not None:
                        repaired.append(fixed)
                        found = True
                if not found and (fixed := self.fits.repaired(fam, moved, {k})) is not None:
                    twice.append(fixed)  # a move that needs two other knobs changed with it
        rng = random.Random(f"{self.seed}:{fam.name}:{canon(knobs)}")
        rng.shuffle(single)
        rng.shuffle(repaired)
        rng.shuffle(twice)
        repaired += twice
        out, seen = [], set()
        for knobs_ in single + repaired:
            if (key := canon(knobs_)) not in seen:
                seen.add(key)
                out.append(knobs_)
        return out

    def _knob_proposal(self, fam: Family, knobs: dict[str, Any], history: History,
                       why: str = "TPE rates this region as promising") -> Proposal:
        best = self._best(fam, history)
        if best:
            changes = ", ".join(f"{k} {best.knobs.get(k)}→{v}" for k, v in knobs.items() if best.knobs.get(k) != v)
            text = (f"Knob move in {fam.name}: {changes} relative to the family's best "
                    f"({history.objective.format(best.score, '.3g')}); {why}.")
        else:
            text = f"Knob move in {fam.name}: try {canon(knobs)}; no configuration of it has passed yet."
        return self._proposal(fam, knobs, text, "knob", parent_seq=best.seq if best else None)

    def _proposal(self, fam: Family, knobs: dict[str, Any], text: str, move: str,
                  parent_seq: int | None = None) -> Proposal:
        why = fam.violations(knobs, self.shape)
        source = self.space.render(fam.name, knobs) if not why else ""
        return Proposal(hypothesis=text, source=source, proposer=f"search:{move}", family=fam.name,
                        knobs=knobs, rejected="; ".join(why) or None, parent_seq=parent_seq)
