"""How the cost model ranks at shapes it has not seen (`costmodel.py`): each shape recorded in the shipped
databases left out in turn, the model trained on the rest, and the configurations measured there ranked
by it and by the fit alone. `python -m autodiscovery.agents.costmodel [--campaign NAME] [--out JSON]`
(or `python -m autodiscovery.agents.held_out`).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from autodiscovery import AutoDiscoveryError
from autodiscovery.agents.costmodel import CostModel, Fits, Lesson, kind, lessons, picks

if TYPE_CHECKING:
    from autodiscovery.agents.space import Space
    from autodiscovery.roles import Fit


def _ranks(a: np.ndarray) -> np.ndarray:
    order = np.argsort(a, kind="stable")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(len(a))
    for v in np.unique(a):  # ties share their mean rank
        ranks[a == v] = ranks[a == v].mean()
    return ranks


def rank_quality(predicted: np.ndarray, measured: np.ndarray, kinds: list[tuple] | None = None,
                 n: int = 2) -> dict[str, float]:
    """How a ranking by `predicted` (lower first) agrees with the measured log times: Spearman's rank
    correlation, whether its first pick is the measured best (within 1%), its regret (the measured
    time of its first pick over the best's), and the regret of the best of its first `n` picks as the
    search makes them (`picks`, each of another of `kinds`; in order without them) and in its order."""
    best = int(np.argmin(measured))
    pick = int(np.argmin(predicted))
    spearman = (float(np.corrcoef(_ranks(predicted), _ranks(measured))[0, 1])
                if np.std(measured) > 0 and np.std(predicted) > 0 else 0.0)
    order = [int(i) for i in np.argsort(predicted, kind="stable")]
    chosen = [order[i] for i in picks([kinds[i] for i in order] if kinds else [(i,) for i in order], n)]
    in_order = order[:n]
    return {"spearman": spearman if np.isfinite(spearman) else 0.0,
            "first_is_best": float(measured[pick] <= measured[best] + math.log(1.01)),
            "regret": float(np.exp(measured[pick] - measured[best])),
            f"regret_of_{n}": float(np.exp(min(measured[i] for i in chosen) - measured[best])),
            f"regret_of_{n}_in_order": float(np.exp(min(measured[i] for i in in_order) - measured[best]))}


def held_out(lessons: list[Lesson], space: Space, fit_of: Callable[[Lesson], Fit | None], least: int = 5,
             only: int | None = None, group: Callable[[tuple], str] | None = None) -> dict[str, dict[str, float]]:
    """Each shape (its sizes, on every GPU) with at least `least` configurations measured, left out in turn
    (`only` of them, spread evenly over the shapes in the order of their sizes): the model learnt from the
    others, its ranking and the fit's of that shape's configurations on each GPU. Means over the shapes,
    and the worst regret; with `group` (sizes -> a label), the same over each group's shapes too (keyed
    "cost model, LABEL")."""
    by_shape: dict[tuple, list[Lesson]] = {}
    for x in lessons:
        if fit_of(x) is not None:
            by_shape.setdefault(x.sizes, []).append(x)
    shapes = sorted(k for k, v in by_shape.items() if len(v) >= least)
    if only is not None and len(shapes) > only:
        shapes = [shapes[i * len(shapes) // only] for i in range(only)]
    out: dict[str, list[dict[str, float]]] = {}
    for sizes in shapes:
        model = CostModel.learn([x for x in lessons if x.sizes != sizes], space, fit_of)
        if model is None:
            continue
        for gpu in sorted({x.gpu for x in by_shape[sizes]}):
            test = [x for x in by_shape[sizes] if x.gpu == gpu]
            if len(test) < least:
                continue
            measured = np.array([x.log_time for x in test])
            fits = [fit_of(x) for x in test]
            est = np.array([math.log(f.estimate) for f in fits if f is not None])
            learned = est + np.log([model.factor(x.gpu, x.sizes, x.family, x.knobs, f)
                                    for x, f in zip(test, fits) if f is not None])
            kinds = [kind(x.family, x.knobs, f) for x, f in zip(test, fits) if f is not None]
            for name, ranked in (("cost model", learned), ("fit", est)):
                quality = rank_quality(ranked, measured, kinds)
                out.setdefault(name, []).append(quality)
                if group is not None:
                    out.setdefault(f"{name}, {group(sizes)}", []).append(quality)
    return {name: {"shapes": len(rows), **{k: statistics.fmean(r[k] for r in rows) for k in rows[0]},
                   "worst_regret": max(r["regret"] for r in rows)} if rows else {"shapes": 0}
            for name, rows in (out or {"cost model": [], "fit": []}).items()}


def main(argv: list[str]) -> int:
    """Each shape shipped under docs/ left out in turn: the cost model's ranking beside the fit's (--out: JSON)."""
    import argparse

    from autodiscovery import campaign as campaigns
    from autodiscovery import provenance, registry
    from autodiscovery.agents import warm
    from autodiscovery.agents.search import SearchAgent

    ap = argparse.ArgumentParser(prog="python -m autodiscovery.agents.costmodel", description=main.__doc__)
    ap.add_argument("--campaign", default=campaigns.DEFAULT_CAMPAIGN, help="whose harness and space")
    ap.add_argument("--out", type=Path, help="also write the rows as JSON here")
    ap.add_argument("leave_out", nargs="*", metavar="!PATTERN", help="kernel databases to leave out")
    args = ap.parse_args(argv)
    c = campaigns.load(args.campaign)
    space, problem, names = SearchAgent(c).space, c.problem.model_dump(mode="json"), list(c.problem.names())
    found = lessons([(s, None) for s in warm.kernel_stores(["shipped", *args.leave_out])], registry.harness(c.harness.name), space,
                    {k: v for k, v in problem.items() if k not in names}, names)
    result = held_out(found, space, Fits(c, space),
                      group=lambda sizes: f"{names[0]} {'<' if dict(sizes)[names[0]] < 512 else '≥'} 512")
    rows = [{"ranking": label, **r} for label, r in
            sorted(result.items(), key=lambda kv: (kv[0].count(","), kv[0].partition(",")[2], kv[0])) if r.get("shapes")]
    print(f"{len(found)} benchmarks at {(pairs := len({x.shape for x in found}))} (GPU, shape) pairs; each left out in turn")
    print(f"{'ranking by':20} {'shapes':>6} {'spearman':>9} {'first is best':>14} {'regret':>7} {'worst':>7}")
    for r in rows:
        print(f"{r['ranking']:20} {r['shapes']:6d} {r['spearman']:9.3f} {r['first_is_best']:14.2f} {r['regret']:7.4f} "
              f"{r['worst_regret']:7.4f}")
    if args.out:
        args.out.write_text(json.dumps({"campaign": c.name, "code": provenance.code(), "benchmarks": len(found),
                                        "pairs": pairs, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except AutoDiscoveryError as exc:
        sys.exit(f"error: {exc}")
