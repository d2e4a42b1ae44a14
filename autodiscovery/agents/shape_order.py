"""The order the harness's fit of the run's shape gives the search agent's moves.

A harness may offer `fit(source, knobs)` (`roles.Fitting`): an estimate of a configuration's time at the run's shape
(its tiles, waves and work per SM), with `describe()` in words. Where the search learnt a cost model
from the recorded benchmarks (`costmodel.py`), each fit's estimate is the model's correction of it. The search agent asks it where a
structural move should start in a family (`start`: the default, or a setting of the family's shape
knobs the fit rates more than FIT_GAIN faster) and in what order to try the neighbours of a family's
best (`order`). Fits are kept: a walk asks for the same ones again.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from autodiscovery.agents.space import Family, Space
from autodiscovery.toolkit.text import canon

if TYPE_CHECKING:
    from autodiscovery.agents.costmodel import CostModel
    from autodiscovery.roles import Fitting

FIT_GAIN = 0.1
"""A structural move leaves a family's default for another setting of its shape knobs only when the
harness's fit of the shape estimates that one more than 10% faster."""
FIT_EDGE = 0.03
"""Knob moves the fit estimates more than 3% faster than the family's best go first (fastest first); a
move of a shape knob it estimates more than FIT_GAIN slower goes last."""
FIT_NUDGE = 0.01
"""One-knob moves the fit estimates more than 1% (and at most FIT_EDGE) faster come next, fastest first,
ahead of the moves it cannot tell apart."""
LEANER = 0.1
"""Of the moves the fit cannot tell apart, those that move more than 10% fewer bytes the estimate leaves out
(a fit's `l2_gb`, where it states any) come first, the fewest first."""
WARM_LEANER = 0.25
"""A warm start is also tried refitted to the nearest setting of its shape knobs that moves more than a
quarter fewer such bytes, among those the fit estimates no slower (FIT_NUDGE): a best recorded at another
shape may be tiled to read an operand more often than it needs here."""


def nearest_others(fam: Family, k: str, around: Any) -> list[Any]:
    """The other values of knob `k`, nearest to `around` in its list first."""
    vals = fam.knobs[k]
    i = vals.index(around) if around in vals else 0
    return sorted((v for v in vals if v != around), key=lambda v: abs(vals.index(v) - i))


class ShapeOrder:
    """The harness's fit of the run's shape, asked by the search agent (no harness, or one with no fit:
    no opinion)."""

    def __init__(self, space: Space, shape: dict[str, int]) -> None:
        self.space, self.shape = space, shape
        self.harness: Fitting | None = None
        self.model: CostModel | None = None
        """The cost model learnt at the run's start, where there is one: it corrects every fit."""
        self.gpu = ""
        self._fits: dict[tuple, Any] = {}
        self._settings: dict[tuple, list] = {}

    def start(self, fam: Family, knobs: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Where a structural move starts in `fam`: `knobs` (its default), or, where the harness's fit of
        the shape estimates another setting of the family's shape knobs more than FIT_GAIN faster, that
        one (among the fastest, the fit's own tie-break, then the fewest knobs changed to repair a
        constraint, then the fewest changes);
        with the fit in words ('' without a fit)."""
        here = self.fit(fam, knobs)
        if here is None:
            return knobs, ""

        def repairs(moved: dict[str, Any]) -> int:
            return sum(moved[k] != knobs.get(k) for k in moved if k not in fam.shape_knobs)

        options = [(f.estimate, repairs(moved), changes, canon(moved), moved, f)
                   for moved, changes, f in self.settings(fam, knobs)]
        best = min(options, key=lambda o: (o[0], o[5].tie_break, o[1], o[2], o[3]), default=None)
        if best is None or best[0] * (1 + FIT_GAIN) >= here.estimate:
            return knobs, f"its default fits the shape ({here.describe()})."
        return best[4], (f"the shape is better served by {best[5].describe()} than by the default's "
                         f"{here.describe()} (estimated {here.estimate / best[0]:.2f}× faster).")

    def leaner(self, fam: Family, knobs: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
        """The setting of `fam`'s shape knobs nearest `knobs` (the fewest knobs changed, then the fewest bytes,
        then the fastest) whose tiles read more than WARM_LEANER fewer operand bytes from L2, among those
        the fit estimates no slower (FIT_NUDGE); with why. None without a fit or such a setting."""
        here = self.fit(fam, knobs)
        if here is None or not here.l2_gb:
            return None
        options = [(changes, f.l2_gb, f.estimate, canon(moved), moved, f) for moved, changes, f in self.settings(fam, knobs)
                   if f.estimate <= here.estimate * (1 + FIT_NUDGE) and f.l2_gb < here.l2_gb * (1 - WARM_LEANER)]
        if not options:
            return None
        _, gb, _, _, moved, f = min(options, key=lambda o: o[:4])
        return moved, (f"{f.describe()}, whose tiles read {gb:.3g} GB of operands from L2 where {here.describe()} "
                       f"read {here.l2_gb:.3g} GB, at an estimate no slower.")

    def fit(self, fam: Family, knobs: dict[str, Any]) -> Any:
        """The harness's fit of this configuration at the run's shape (kept: a walk asks for the same ones)."""
        if self.harness is None or not fam.shape_knobs or not fam.template:
            return None
        key = (id(self.harness), fam.name, canon(knobs))
        if key not in self._fits:
            fit = self.harness.fit(self.space.head(fam.name, knobs), knobs)
            if fit is not None and self.model is not None:
                from autodiscovery.agents.costmodel import Learned

                sizes = tuple(self.shape.items())
                fit = Learned(fit, self.model.factor(self.gpu, sizes, fam.name, knobs, fit))
            self._fits[key] = fit
        return self._fits[key]

    def settings(self, fam: Family, knobs: dict[str, Any]) -> list[tuple[dict[str, Any], int, Any]]:
        """(knobs, knobs changed, fit) for every other setting of the family's shape knobs from `knobs`,
        each made valid by the nearest change of up to two other knobs where a constraint refuses it
        (a tile may need its own register split or epilogue). Kept, like the fits: the walk asks again."""
        key = (id(self.harness), fam.name, canon(knobs))
        if key in self._settings:
            return self._settings[key]
        out = []
        for values in itertools.product(*(fam.knobs[k] for k in fam.shape_knobs)):
            wanted = {**knobs, **dict(zip(fam.shape_knobs, values))}
            if wanted == knobs:
                continue
            moved = self.repaired(fam, wanted, set(fam.shape_knobs)) if fam.violations(wanted, self.shape) else wanted
            if moved is not None and (f := self.fit(fam, moved)) is not None:
                out.append((moved, sum(moved[k] != knobs.get(k) for k in moved), f))
        self._settings[key] = out
        return out

    def repaired(self, fam: Family, moved: dict[str, Any], keep: set[str]) -> dict[str, Any] | None:
        """`moved` made valid by changing one knob outside `keep` (nearest value first), else two; None
        where that does not do. Only knobs that every violated constraint leaves a way to satisfy are
        tried: a change must move a knob each of them names (one that names only `keep` has no repair)."""
        free = [k for k in fam.knobs if k not in keep]
        refusing = fam.refusing(moved, self.shape)
        if refusing is not None:
            if any(not (named - keep) for named in refusing):
                return None
            def covers(*ks: str) -> bool:
                return all(named.intersection(ks) for named in refusing)
        else:
            def covers(*ks: str) -> bool:
                return True
        for k in free:
            if not covers(k):
                continue
            for v in nearest_others(fam, k, moved.get(k)):
                if not fam.violations(fixed := {**moved, k: v}, self.shape):
                    return fixed
        for k1, k2 in itertools.combinations(free, 2):
            if not covers(k1, k2):
                continue
            for v1, v2 in itertools.product(nearest_others(fam, k1, moved.get(k1)),
                                              nearest_others(fam, k2, moved.get(k2))):
                if not fam.violations(fixed := {**moved, k1: v1, k2: v2}, self.shape):
                    return fixed
        return None

    def order(self, fam: Family, knobs: dict[str, Any], moves: list[dict[str, Any]]) -> list[tuple[dict, str]]:
        """`moves` from `knobs` (the family's best), reordered by the harness's fit of the shape, with
        the why of each: the settings of the shape knobs (tile, CTAs, K split) the fit estimates more than
        FIT_EDGE faster come first, fastest first (of equals, by the fit's own tie-break), including those
        more than one knob away, and with them the moves of other knobs it so estimates; then the moves it
        estimates more than FIT_NUDGE faster; then those whose tiles read more than LEANER fewer operand
        bytes from L2, the fewest first; moves it estimates more than FIT_GAIN slower go last; the rest keep
        their order. Without a fit, `moves` as they are."""
        here = self.fit(fam, knobs)
        plain = "one step from the family's best"
        if here is None:
            return [(m, plain) for m in moves]
        fits = {canon(m): (m, c, f) for m, c, f in self.settings(fam, knobs)}
        for m in moves:  # a move of another knob the fit reads (how the operands reach L2, say)
            if (key := canon(m)) not in fits and (f := self.fit(fam, m)) is not None:
                fits[key] = (m, sum(m[k] != knobs.get(k) for k in m), f)
        faster = sorted(((f.estimate, f.tie_break, c, key, m, f)
                         for key, (m, c, f) in fits.items() if f.estimate * (1 + FIT_EDGE) < here.estimate),
                        key=lambda o: o[:4])
        first = [(m, f"the fit of the shape rates {f.describe()} {here.estimate / f.estimate:.2f}× faster than the "
                     f"best's {here.describe()}") for *_, m, f in faster]
        ahead = {canon(m) for m, _ in first}
        nudged: list[tuple[float, int, dict[str, Any], str]] = []
        lean: list[tuple[float, int, dict[str, Any], str]] = []
        middle: list[tuple[dict[str, Any], str]] = []
        last: list[tuple[dict[str, Any], str]] = []
        here_gb = here.l2_gb
        for m in moves:
            if canon(m) in ahead:
                continue
            f = fits.get(canon(m))
            if f is not None and f[2].estimate * (1 + FIT_NUDGE) < here.estimate:
                nudged.append((f[2].estimate, len(nudged), m, f"{plain}, which the fit of the shape rates "
                                                             f"{here.estimate / f[2].estimate:.3f}× faster"))
                continue
            slow = f is not None and f[2].estimate > here.estimate * (1 + FIT_GAIN)
            gb = f[2].l2_gb if f is not None else 0
            if not slow and here_gb and gb and gb < here_gb * (1 - LEANER):
                lean.append((gb, len(lean), m, f"{plain}, whose tiles read {gb:.3g} GB of operands from L2 where the "
                                               f"best's read {here_gb:.3g} GB"))
                continue
            (last if slow else middle).append((m, plain if not slow else
                                               f"{plain}, though the fit of the shape rates it slower"))
        return (first + [(m, why) for _, _, m, why in sorted(nudged, key=lambda o: o[:2])]
                + [(m, why) for _, _, m, why in sorted(lean, key=lambda o: o[:2])] + middle + last)
