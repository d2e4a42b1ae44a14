"""What a search run starts from: the best configurations recorded at the nearest problems, in the run's
own database and in any kernel databases the campaign names (`agent.search.kernels`; `shipped`: those
under the project's docs/; `!PATTERN` leaves out the databases whose path matches it). They are
candidates like any other once proposed: built, gated and timed at this problem, never trusted for what
they measured where they were recorded. A best recorded on another GPU of the same compute capability
(an H100's, on an H200) builds and runs here too: it is tried behind this GPU's own (OTHER_GPU)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autodiscovery.agents.space import Space, SpaceError
from autodiscovery.toolkit.text import canon

if TYPE_CHECKING:
    from autodiscovery.agents.shape_order import ShapeOrder
    from autodiscovery.store import Store

Source = tuple["Store", int | None]
"""A database a warm start reads, and the run in it to leave out (the run being started), or None."""
Best = tuple[str, dict[str, Any], str]
"""A recorded best: its family, its knobs, and where it comes from, in words for the hypothesis."""

OTHER_GPU = math.log(2)
"""A best recorded on another GPU of this one's compute capability counts as far from the problem as one
recorded on this GPU at twice a size: at the same problem, this GPU's own comes first; a sibling's at
the same problem comes before this GPU's at a problem eight times the tokens."""


@dataclass(frozen=True)
class Problem:
    """The problem a warm start is for: which recorded runs are of it but for its sizes."""

    harness: str
    fields: dict[str, Any]
    """The campaign's problem as recorded (its sizes and the rest: element types, say)."""
    sizes: dict[str, int]
    gpu: str | None
    cc: str | None = None
    """The GPU's compute capability ("9.0"): runs recorded on another GPU of the same one qualify too."""
    not_of: str | None = None
    """A campaign whose runs in the kernel databases do not qualify (its suites' problems' neither): the
    one a run is of, where it learns nothing from its own earlier results (`own_records`)."""

    def excludes(self, campaign: str) -> bool:
        return self.not_of is not None and (campaign == self.not_of or campaign.startswith(f"{self.not_of}/"))


def kernel_stores(names: list[str]) -> list[Store]:
    """The kernel databases a warm start reads, opened read-only: each path (from the working folder,
    else the project's), `shipped` for every database under the project's docs/, less those a `!PATTERN`
    matches (a glob matched against the end of the database's path: `!llama70b-*/*.db`). A pattern that
    leaves out none of them is refused: mistyped, it would let in what it was written to keep out."""
    from autodiscovery import ROOT
    from autodiscovery.store import Store, StoreError

    paths: list[Path] = []
    left_out = [name[1:] for name in names if name.startswith("!")]
    for name in names:
        if name == "shipped":
            paths += sorted((ROOT / "docs").glob("**/*.db"))
        elif not name.startswith("!"):
            paths.append(Path(name) if Path(name).exists() else ROOT / name)
    if unmatched := [p for p in left_out if not any(path.resolve().match(p) for path in paths)]:
        raise SpaceError(f"agent.search.kernels: '!{unmatched[0]}' leaves out none of the {len(paths)} databases "
                         "it is given (a glob matched against the end of a database's path: '!llama70b-*/*.db')")
    out = []
    for path in paths:
        if any(path.resolve().match(pattern) for pattern in left_out):
            continue
        try:
            out.append(Store(path, create=False, read_only=True))
        except StoreError as exc:
            raise SpaceError(f"agent.search.kernels: {exc}") from None
    return out


def bests(sources: list[Source], problem: Problem, space: Space, count: int) -> list[Best]:
    """(family, knobs, where it comes from) of the best candidates of the `count` runs nearest `problem`
    (the sum of |log| of the size ratios) among those of the same harness, the same problem but for its
    sizes, on the same GPU (or another of its compute capability, OTHER_GPU farther), whose best is a
    configuration of `space`, distinct configurations only. At equal distance the databases come in the
    order of `sources` (the run's own first: its runs are of this machine and this campaign, a suite's
    tuned just before this problem for that), then by run.
    `sources`: (store, the run to leave out, or None) for each database read."""
    found = [(recorded.distance, order, recorded) for order, (store, run_id) in enumerate(sources)
             for recorded in _bests_in(store, run_id, problem, space)]
    out: list[Best] = []
    seen = set()
    for _, _, recorded in sorted(found, key=lambda f: (f[0], f[1], f[2].run)):
        family, knobs, where = recorded.family, recorded.knobs, recorded.where
        if (family, canon(knobs)) in seen:
            continue
        seen.add((family, canon(knobs)))
        out.append((family, knobs, where))
        if len(out) == count:
            break
    return out


@dataclass(frozen=True)
class _Recorded:
    """A run's best as a warm start weighs it: how far its problem is from this one, and what it is."""

    distance: float
    run: int
    family: str
    knobs: dict[str, Any]
    where: str


def _bests_in(store: Store, run_id: int | None, problem: Problem, space: Space) -> list[_Recorded]:
    from autodiscovery import registry
    from autodiscovery.store import Run

    sizes = set(problem.sizes)
    fixed = {k: v for k, v in problem.fields.items() if k not in sizes}
    named = "" if run_id is not None else f" in {_named(store)}"
    found: list[_Recorded] = []
    with store.session() as s:
        for run in s.query(Run).filter(Run.id != (run_id or -1), Run.best_candidate_id.is_not(None)):
            config, best = run.config or {}, run.best
            recorded = config.get("problem") or {}
            if (best is None or (config.get("harness") or {}).get("name") != problem.harness or run.fingerprint.get("dry_run")
                    or (run_id is None and problem.excludes(run.campaign))
                    or {k: v for k, v in recorded.items() if k not in sizes} != fixed
                    or not all(isinstance(recorded.get(k), int) and recorded[k] > 0 for k in sizes)):
                continue
            gpu = run.fingerprint.get("gpu")
            sibling = gpu != problem.gpu
            if sibling and (problem.cc is None or str(run.fingerprint.get("cc")) != problem.cc):
                continue
            fam = space.families.get(best.family or "")
            if fam is None or not fam.template or not set(best.knobs) <= set(fam.knobs):
                continue
            distance = sum(abs(math.log(recorded[k] / v)) for k, v in problem.sizes.items()) + OTHER_GPU * sibling
            objective = registry.harness_for(config).objective  # as that run measured
            value = objective.read(best.measurement.metrics) if best.measurement else None
            there = f", {objective.format(value)} there" if isinstance(value, int | float) else ""
            where = "×".join(str(recorded[k]) for k in problem.sizes) + (f" on {gpu}" if sibling else "")
            found.append(_Recorded(distance, run.id, fam.name, {**fam.default, **best.knobs},
                                   f"the best of run {run.id}{named} at {where}{there}"))
    return found


def _named(store: Store) -> str:
    """A kernel database as a hypothesis names it: its path within the project, or its file's name."""
    from autodiscovery import ROOT

    path = Path(store.shown.removeprefix("sqlite:///"))
    if not path.is_absolute():
        return store.shown
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def settings_text(knobs: dict[str, Any]) -> str:
    """Knobs as a hypothesis names them: 'BM=128, BN=256'."""
    return ", ".join(f"{k}={v}" for k, v in knobs.items())


def refitted(bests: list[Best], space: Space, fits: ShapeOrder) -> list[Best]:
    """(family, knobs, hypothesis): the recorded bests, each followed by its refit to this shape where the
    harness's fit puts the family's tile knobs elsewhere (a best of a larger problem may tile a smaller
    one badly), or where a setting the fit rates no slower reads far fewer operand bytes (`leaner`).
    Made once, when the run is bound."""
    harness = fits.harness
    out = []
    for family, knobs, where in bests:
        fam = space.families[family]
        fitted = harness.fit(space.head(family, knobs), knobs) if harness is not None else None
        here = f" Here: {fitted.describe()}." if fitted is not None else ""
        out.append((family, knobs, f"Warm start from {where}: {family} at {settings_text(knobs)}, recorded at a "
                                   f"nearby problem.{here}"))
        refit, why = fits.start(fam, knobs)
        if refit == knobs and (lean := fits.leaner(fam, knobs)) is not None:
            refit, why = lean
        if refit != knobs:
            out.append((family, refit, f"Warm start from {where}, refitted to this problem: {family} at "
                                       f"{settings_text(refit)}: {why}"))
    return out
