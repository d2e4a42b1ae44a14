"""Phase C of the co-design agent: the analytical model (`model.py`) fitted on the points phases A and B
simulated, judged on each of them left out of its own fit, and the kernels it ranks best, ranked on
the facts of their PTX (compiled once a kernel, kept on disk)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from autodiscovery.interfaces import Proposal, Record
from autodiscovery.toolkit.text import canon
from harnesses.accelsim.arch import Architecture
from harnesses.accelsim.model import (
    Fit,
    compile_facts,
    features,
    held_out_confirms,
    leave_one_out,
    prior,
)

if TYPE_CHECKING:
    import jinja2

    from autodiscovery.agents.space import Family
    from autodiscovery.objective import Objective


class ModelPicks:
    """Phase C's part of `CodesignAgent` (`agent.py`), which holds what it reads and makes the proposals."""

    kernel: Family
    arch: Family
    shape: dict[str, int]
    env: jinja2.Environment
    """The kernel templates."""
    ptx_dir: Path
    """Where each kernel's PTX and its facts are kept."""
    nvcc: str | None
    model_trust: float
    shortlist: int
    objective: Objective
    key: Callable[[dict, dict], tuple[str, str]]
    proposal: Callable[..., Proposal]

    def trusted(self, by: dict) -> bool:
        """Phase C ends early, its other picks saved, only when the model ranks the points of A and B
        well, each left out of its own fit (`model_trust`), and its first pick, which it never saw,
        is simulated ahead of all of them, as the model said by picking it."""
        first = by["C"][0] if by["C"] else None
        if first is None or not (first.knobs.get("model") or {}).get("trusted"):
            return False
        sign = -1 if self.objective.higher_is_better else 1
        fitted = [sign * r.score for r in [*by["A"], *by["B"]] if r.score is not None]
        return held_out_confirms(None if first.score is None else sign * first.score, fitted)

    def _device_source(self, kernel: dict) -> str:
        assert self.kernel.template is not None  # the co-design's kernel family is a template
        return self.env.get_template(self.kernel.template).render(**{**kernel, "PERSISTENT": 0})

    def facts_path(self, kernel: dict) -> Path:
        """Where a kernel's PTX facts are kept (its PTX beside them)."""
        return self.ptx_dir / f"{hashlib.sha256(self._device_source(kernel).encode()).hexdigest()[:20]}.json"

    def ptx(self, kernel: dict) -> dict[str, int]:
        """The main loop's instruction counts and ptxas's registers per thread, from the kernel's PTX
        (compiled once, kept on disk beside its facts). The device code does not depend on the number
        of persistent blocks, so kernels that differ only there share one compile. {} without nvcc."""
        facts = self.facts_path(kernel)
        if facts.exists():
            return json.loads(facts.read_text())
        return {} if self.nvcc is None else compile_facts(self._device_source(kernel), self.nvcc, facts)

    def _features(self, kernel: dict, arch: dict, ptx: dict | None = None) -> dict[str, float]:
        return features(kernel, Architecture(**arch), **self.shape, ptx=self.ptx(kernel) if ptx is None else ptx)

    def fit(self, recs: list[Record]) -> tuple[Fit | None, dict]:
        """The model fitted on the simulated stock-architecture points of A and B, and how well it
        predicts each of them when left out."""
        stock = dict(self.arch.default)
        pts = [r for r in recs if r.score is not None and canon(r.knobs["arch"]) == canon(stock)]
        if len(pts) < 4:
            return None, {"n": len(pts), "trusted": False, "why": "fewer than 4 simulated points"}
        rows = [self._features(r.knobs["kernel"], stock) for r in pts]
        cycles = [float(r.score) for r in pts if r.score is not None]  # all of them: pts are scored
        loo = leave_one_out(rows, cycles)
        rho = loo["rank_correlation"]
        fit = Fit(rows, cycles)
        info = {"n": len(pts), "loo_rank_correlation": None if rho is None else round(rho, 3),
                "loo_median_abs_error": None if loo["median_abs_error"] is None else round(loo["median_abs_error"], 4),
                "terms": fit.terms(), "ptx": bool(self.ptx(pts[0].knobs["kernel"])),
                "threshold": self.model_trust, "trusted": rho is not None and rho >= self.model_trust,
                "points": [{"seq": r.seq, "predicted": round(p), "simulated": r.score}
                           for r, p in zip(pts, loo["predicted"])]}
        return fit, info

    def _model_picks(self, n: int, stock: dict, done: set, recs: list[Record],
                     picked: list[Record] | tuple[()] = ()) -> list[Proposal]:
        """The model's best kernels that neither A, B nor earlier picks (`picked`) simulated, nor any
        kernel the model cannot tell apart from one of those."""
        fit, info = self.fit(recs)
        score = fit.predict if fit is not None else prior
        same = lambda terms: canon({name: round(v, 6) for name, v in terms.items()})  # noqa: E731
        valid = [k for k in self.kernel.valid_configurations(self.shape) if self.key(k, stock) not in done]
        # Every valid configuration is ranked on facts estimated from its knobs; the best few that the
        # estimates tell apart are compiled and ranked again on their PTX and registers.
        rough: dict[str, tuple[float, dict]] = {}
        for k in valid:
            terms = self._features(k, stock, ptx={})
            rough.setdefault(same(terms), (score(terms), k))
        shortlist = [k for _, k in sorted(rough.values(), key=lambda t: t[0])[:self.shortlist]]
        with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
            facts = list(pool.map(self.ptx, shortlist))
        scored = sorted(((score(self._features(k, stock, ptx=f)), k, f) for k, f in zip(shortlist, facts)),
                        key=lambda t: t[0])
        # Configurations the model cannot tell apart (the same terms) are one pick, not several, and
        # none repeats a kernel already simulated under another name (a launch bound that binds nothing).
        picks = []
        seen = {same(self._features(r.knobs["kernel"], stock)) for r in [*recs, *picked]
                if canon(r.knobs["arch"]) == canon(stock)}
        for cycles, k, f in scored:
            alike = same(self._features(k, stock, ptx=f))
            if alike not in seen:
                seen.add(alike)
                picks.append((cycles, k))
        test = info["trusted"] and not picked  # a model that ranks A and B well: its first pick is the test
        take = 1 if test else n
        out = []
        for cycles, k in picks[:take]:
            rho = info.get("loo_rank_correlation")
            how = (f"the fitted model's pick ({cycles:.0f} cycles predicted; leave-one-out rank correlation "
                   f"{rho if rho is not None else '–'} on {info['n']} points, "
                   + ("trusted if this pick, held out, beats every point of A and B: then the other picks are "
                      "not simulated)" if test else "simulated to check it)")
                   if fit is not None else f"the model's prior pick ({cycles:.0f} cycles predicted)")
            p = self.proposal("C", k, stock, how)
            p.knobs["predicted"] = round(cycles)
            p.knobs["model"] = info
            out.append(p)
        return out
