"""The co-design agent: kernel x architecture, in the phases of the edge study.

A baseline (stock kernel, stock architecture); B kernel knobs with the architecture frozen (TPE);
C kernels the analytical model ranks best, simulated to check the model (trusted, and the rest of C
saved, only when its first pick, held out, beats A and B); D the architecture with the best kernel
frozen: first one change at a time from stock (what each change buys, and which knobs do nothing at
this shape), then the best changes in pairs and all together (do they add up?), then TPE over the
knobs that matter; E the best kernels of B/C crossed with the best architectures of D, and the stock
kernel on the best architecture (so the cross can be set against the sum of its parts). Every
candidate's knobs say its phase, kernel and architecture, so the walk rebuilds itself from history.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
import yaml

from autodiscovery import ROOT
from autodiscovery.agents import tpe
from autodiscovery.agents.space import Family
from autodiscovery.campaign import SEARCH_SPACES, SEEDS, Campaign, validated
from autodiscovery.interfaces import AgentBase, History, Proposal, Record
from autodiscovery.toolkit.text import canon
from harnesses.accelsim import tools
from harnesses.accelsim.arch import Architecture, block
from harnesses.accelsim.model_picks import ModelPicks
from harnesses.accelsim.settings import CodesignSettings, Settings
from harnesses.hopper_gemm.settings import Problem

NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five"}


def combinations(singles: list[tuple[str, Any, float]], reference: float, top: int,
                 fits: Callable[[list[tuple[str, Any]]], bool] = lambda changes: True,
                 ) -> tuple[list[list[tuple[str, Any]]], list[list[tuple[str, Any]]]]:
    """Phase D's combined points from its single changes (knob, value, cycles) against the reference
    (the best kernel on the stock architecture): the pairs among the `top` best changes, one value a
    knob, the most promising pair (the largest sum of savings) first; then all of them together, the
    best first, each added only while the design `fits` the budget. The best changes are those that
    bought most; where fewer than `top` bought anything, those that cost least alone fill the places
    (two changes that each cost a little alone can help together). A change with no effect at all is
    never paired. Returns the points and the pairs that do not fit."""
    best: dict[str, tuple[Any, float]] = {}
    for knob, value, cycles in sorted(singles, key=lambda t: t[2]):
        if cycles != reference and knob not in best:
            best[knob] = (value, cycles)
    chosen = sorted(best.items(), key=lambda kv: kv[1][1])[:top]
    pairs = sorted(([a, b] for i, a in enumerate(chosen) for b in chosen[i + 1:]),
                   key=lambda pair: sum(c for _, (_, c) in pair))
    changes = lambda picked: [(k, v) for k, (v, _) in picked]  # noqa: E731
    out: list[list[tuple[str, Any]]] = []
    left_out: list[list[tuple[str, Any]]] = []
    for pair in pairs:
        (out if fits(changes(pair)) else left_out).append(changes(pair))
    together: list = []
    for change in chosen:
        if fits(changes([*together, change])):
            together.append(change)
    if len(together) > 2:
        out.append(changes(together))
    return out, left_out


class CodesignAgent(ModelPicks, AgentBase):
    """Phases A to E over the kernel and the architecture spaces; phase C's model and its picks are
    `model_picks.py`'s."""

    name = "codesign"
    Settings = CodesignSettings
    exhausted_reason = "all phases done (A baseline, B kernel, C model check, D architecture, E cross)"

    def __init__(self, campaign: Campaign) -> None:
        s = validated(campaign.agent.of(CodesignAgent), CodesignSettings)
        data = yaml.safe_load((SEARCH_SPACES / s.space / "space.yaml").read_text())
        self.kernel = Family.model_validate(data["kernel"])
        self.arch = Family.model_validate({"name": "arch", "rung": 0, "summary": "architecture", "template": "-",
                                           "default": Architecture().model_dump(), **data["arch"]})
        self.templates = SEEDS / s.space
        self.phases, self.seed = s.phases, s.seed
        p = validated(campaign.problem, Problem)  # the GEMM's M, N and K, as every co-design problem has them
        self.shape = {"M": p.M, "N": p.N, "K": p.K}
        h = campaign.harness if isinstance(campaign.harness, Settings) else Settings()  # another harness: defaults
        self.batch = h.parallel or os.cpu_count() or 1
        self.costs = h.arch
        self.model_trust, self.shortlist, self.n_pairs = s.model_trust, s.shortlist, s.pairs
        self.nvcc = tools.find_nvcc11(h).path or shutil.which("nvcc")
        cache = Path(h.cache_dir)
        self.ptx_dir = (cache if cache.is_absolute() else ROOT / cache) / "ptx"
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(self.templates)),
                                      undefined=jinja2.StrictUndefined, keep_trailing_newline=True)

    # ---- artifacts --------------------------------------------------------------------------------
    def render(self, kernel: dict, arch: dict) -> str:
        assert self.kernel.template is not None  # the co-design's kernel family is a template (space.yaml)
        return self.env.get_template(self.kernel.template).render(**kernel) + "\n" + block(Architecture(**arch))

    def same_work(self, kernel: dict) -> dict:
        """The kernel's knobs with what does not change its launch at this shape undone: PERSISTENT at or
        above the tile count launches one block a tile, as PERSISTENT 0 does (the same kernel, the same
        cycles), so such kernels are one point, simulated once."""
        k = dict(kernel)
        tiles = (self.shape["M"] // max(1, k.get("BLOCK_M", 1))) * (self.shape["N"] // max(1, k.get("BLOCK_N", 1)))
        if k.get("PERSISTENT") and k["PERSISTENT"] >= tiles:
            k["PERSISTENT"] = 0
        return k

    def key(self, kernel: dict, arch: dict) -> tuple[str, str]:
        """A point of the space as simulations see it: kernels that launch the same work are one."""
        return canon(self.same_work(kernel)), canon(arch)

    def over_budget(self, arch: dict) -> str | None:
        try:
            return self.costs.budget.over(self.costs.cost(Architecture(**arch)))
        except ValueError as exc:  # an architecture the model refuses is not over budget: it is invalid
            return str(exc).splitlines()[0]

    def proposal(self, phase: str, kernel: dict, arch: dict, text: str) -> Proposal:
        why = self.kernel.violations(kernel, self.shape) + self.arch.violations(arch, {})
        if not why and (over := self.over_budget(arch)):
            why = [over]
        source = "" if why else self.render(kernel, arch)
        return Proposal(f"Phase {phase}: {text}", source, f"codesign:{phase}", "wmma",
                        {"phase": phase, "kernel": kernel, "arch": arch}, rejected="; ".join(why) or None)

    def seed_proposal(self, campaign: Campaign | None = None) -> Proposal:
        return self.proposal("A", dict(self.kernel.default), dict(self.arch.default),
                             "the baseline kernel on the stock 32-SM architecture")

    # ---- the phases -------------------------------------------------------------------------------
    def propose(self, history: History, n: int) -> list[Proposal]:
        self.objective = history.objective
        recs = [r for r in history.records if r.knobs.get("phase")]
        by = {p: [r for r in recs if r.knobs["phase"] == p] for p in "ABCDE"}
        done = {self.key(r.knobs["kernel"], r.knobs["arch"]) for r in recs}
        stock = dict(self.arch.default)
        if len(by["B"]) < self.phases.B:
            return self._tpe("B", self.kernel, [(r.knobs["kernel"], r) for r in by["A"] + by["B"]],
                             min(n, self.phases.B - len(by["B"])), lambda k: (k, stock), done)
        if len(by["C"]) < self.phases.C and not self.trusted(by):
            return self._model_picks(min(n, self.phases.C - len(by["C"])), stock, done, [*by["A"], *by["B"]],
                                     by["C"])
        best_kernel = self._best([*by["A"], *by["B"], *by["C"]], "kernel")
        if len(by["D"]) < self.phases.D and best_kernel is not None:
            room = min(n, self.phases.D - len(by["D"]))
            ablation = self._ablation(best_kernel, stock)
            singles = [p for p in ablation if self.key(best_kernel, p.knobs["arch"]) not in done][:room]
            if singles and not by["D"] and len(ablation) > self.phases.D:
                # the budget cannot try every change alone: the first single says which ones it leaves out
                singles[0].knobs["not_tried"] = [p.knobs["change"] for p in ablation[self.phases.D:]]
            if singles:
                for p in singles:
                    done.add(self.key(best_kernel, p.knobs["arch"]))
                return singles
            if combined := self._combined(by, best_kernel, stock, done, room, self.phases.D - len(by["D"])):
                return combined
            fam = self._live_knobs(by, best_kernel, stock)
            return self._tpe("D", fam, [(r.knobs["arch"], r) for r in by["D"] if
                                        canon(r.knobs["kernel"]) == canon(best_kernel)],
                             room, lambda a: (best_kernel, a), done)
        return self._cross(by, done, n)

    # ---- phase D: what each change buys ------------------------------------------------------------
    def singles(self, stock: dict) -> list[tuple[str, Any]]:
        """One change from stock per knob: the fastest-looking value of a latency or size (the smallest
        latency, the most banks or registers), every other value of a choice (the scheduler)."""
        out = []
        for k, values in self.arch.knobs.items():
            others = [v for v in values if v != stock[k]]
            if not others:
                continue
            if all(isinstance(v, int) for v in values):
                pick = min(others) if "latency" in k or "initiation" in k else max(others)
                out.append((k, pick))
            else:
                out.extend((k, v) for v in others)
        return out

    def _ablation(self, kernel: dict, stock: dict) -> list[Proposal]:
        out, left_out = [], []
        for k, v in self.singles(stock):
            arch = {**stock, k: v}
            if self.arch.violations(arch, {}):
                continue
            if over := self.over_budget(arch):
                left_out.append({"change": f"{k}={v}", "why": over, **self.costs.cost(Architecture(**arch))})
                continue
            p = self.proposal("D", kernel, arch, f"one change from stock, the best kernel frozen: {k} "
                                                 f"{stock[k]} → {v} (what it alone buys)")
            p.knobs["change"] = f"{k}={v}"
            out.append(p)
        if out and left_out:  # the first single carries what the budget left out, for the report
            out[0].knobs["over_budget"] = left_out
        return out

    @staticmethod
    def _reference(by: dict, kernel: dict, stock: dict) -> float | None:
        """The best kernel's cycles on the stock architecture: what phase D's changes are set against."""
        return next((r.score for r in [*by["A"], *by["B"], *by["C"]] if r.score is not None
                     and canon(r.knobs["kernel"]) == canon(kernel) and canon(r.knobs["arch"]) == canon(stock)), None)

    def _combined(self, by: dict, kernel: dict, stock: dict, done: set, n: int, left: int) -> list[Proposal]:
        """Phase D after its single changes: up to `n` of the pairs among the best of them, and all of
        them together, not simulated yet; the first carries what the budget (`left` simulations more)
        leaves out."""
        ref = self._reference(by, kernel, stock)
        singles = [(*r.knobs["change"].split("=", 1), r.score) for r in by["D"] if r.knobs.get("change")
                   and r.score is not None and canon(r.knobs["kernel"]) == canon(kernel)]
        if ref is None or n <= 0:
            return []
        typed = lambda k, v: next(x for x in self.arch.knobs[k] if str(x) == v)  # noqa: E731
        # A combination's reason to be over the budget (None: it fits), asked once.
        why = functools.cache(lambda changes: self.over_budget({**stock, **dict(changes)}))
        combos, over = combinations([(k, typed(k, v), c) for k, v, c in singles], ref, self.n_pairs,
                                    lambda changes: why(tuple(changes)) is None)
        todo = [c for c in combos if self.key(kernel, {**stock, **dict(c)}) not in done]
        out = []
        for changes in todo[:n]:
            arch = {**stock, **dict(changes)}
            done.add(self.key(kernel, arch))
            what = " and ".join(f"{k} {stock[k]} → {v}" for k, v in changes)
            p = self.proposal("D", kernel, arch, f"{NUMBERS.get(len(changes), len(changes))} changes from "
                                                 f"stock together, the best kernel frozen: {what} (do they add up?)")
            p.knobs["changes"] = [f"{k}={v}" for k, v in changes]
            out.append(p)
        if out and len(todo) == len(combos):  # D's first combined point: what it will not simulate, and why
            named = lambda c: [f"{k}={v}" for k, v in c]  # noqa: E731
            out[0].knobs["combined_left_out"] = (
                [{"changes": named(c), "why": why(tuple(c))} for c in over]
                + [{"changes": named(c), "why": f"phase D's budget ({self.phases.D} simulations) ran out first"}
                   for c in todo[left:]])
        return out

    def _live_knobs(self, by: dict, kernel: dict, stock: dict) -> Family:
        """The architecture family with the knobs whose single change did not move the cycles at all
        held at stock (simulations are deterministic: equal cycles mean the knob is inert here)."""
        ref = self._reference(by, kernel, stock)
        inert = {r.knobs["change"].split("=")[0] for r in by["D"] if r.knobs.get("change") and r.score == ref}
        live = {k for r in by["D"] if r.knobs.get("change") and r.score is not None and r.score != ref
                for k in [r.knobs["change"].split("=")[0]]}
        fixed = inert - live
        if ref is None or not fixed:
            return self.arch
        return self.arch.model_copy(update={"knobs": {k: ([stock[k]] if k in fixed else v)
                                                      for k, v in self.arch.knobs.items()}})

    def _best(self, recs: list[Record], part: str, k: int = 1) -> Any:
        sign = -1 if self.objective.higher_is_better else 1  # best first
        scored = [r for _, r in sorted(((sign * r.score, r) for r in recs if r.score is not None),
                                       key=lambda sr: sr[0])]
        picks, seen = [], set()
        for r in scored:
            key = canon(self.same_work(r.knobs[part]) if part == "kernel" else r.knobs[part])
            if key not in seen:
                seen.add(key)
                picks.append(r.knobs[part])
        return picks[:k] if k > 1 else (picks[0] if picks else None)

    def _tpe(self, phase: str, fam: Family, history: list[tuple[dict, Record]], n: int,
             pair: Callable[[dict], tuple[dict, dict]], done: set[tuple[str, str]]) -> list[Proposal]:
        study, dists = tpe.study(fam.knobs, [(knobs, r.score) for knobs, r in history], self.seed + len(history),
                                 self.objective.higher_is_better)
        key = lambda knobs: str(self.key(*pair(knobs)))  # noqa: E731  (the same work: one point, one result)
        seen = {key(knobs): r.score for knobs, r in history}
        out: list[Proposal] = []
        for trial, knobs in tpe.untried(study, dists, seen, 200, key):
            if len(out) >= n:
                break
            kernel, arch = pair(knobs)
            pair_key = self.key(kernel, arch)
            if pair_key in done or fam.violations(knobs, self.shape if fam is self.kernel else {}) or (
                    fam is not self.kernel and self.over_budget(arch)):
                tpe.tell(study, trial, None)
                done.add(pair_key)
                continue
            done.add(pair_key)
            what = "kernel" if fam is self.kernel else "architecture"
            frozen = "architecture frozen at stock" if fam is self.kernel else "the best kernel frozen"
            changes = ", ".join(f"{k}={v}" for k, v in knobs.items() if fam.default.get(k) != v) or "defaults"
            out.append(self.proposal(phase, kernel, arch, f"{what} move ({frozen}): {changes}; "
                                                          "TPE fitted to the cycles simulated so far"))
        return out

    def _cross(self, by: dict, done: set, n: int) -> list[Proposal]:
        kernels = self._best([*by["A"], *by["B"], *by["C"]], "kernel", self.phases.E_kernels) or []
        archs = self._best(by["D"], "arch", self.phases.E_archs) or []
        out = []
        best_arch = archs[0] if isinstance(archs, list) and archs else archs or None
        stock_kernel = dict(self.kernel.default)
        if best_arch and self.key(stock_kernel, best_arch) not in done:  # the cross's missing part
            done.add(self.key(stock_kernel, best_arch))
            out.append(self.proposal("E", stock_kernel, best_arch, "the stock kernel on the best architecture of D "
                                                                   "(what the architecture alone buys)"))
        if not archs:  # no phase D: nothing to cross
            return out
        for k in kernels if isinstance(kernels, list) else [kernels]:
            for a in archs if isinstance(archs, list) else [archs]:
                if self.key(k, a) not in done and len(out) < n:
                    done.add(self.key(k, a))
                    out.append(self.proposal("E", k, a, "a best kernel of B/C crossed with a best architecture of D"))
        return out
