"""What leaves the database: a run's best kernel (`export`), whether it was sanitized, a suite's
dispatch table, and the tuned kernels as a library (`export --library`)."""

from __future__ import annotations

import statistics
from pathlib import Path

from autodiscovery.interfaces import columns
from autodiscovery.objective import Objective
from autodiscovery.review.report import NotFound, _metrics, _run, candidate_row, harness_of, tally
from autodiscovery.roles import Exporting
from autodiscovery.status import Sanitized
from autodiscovery.store import Candidate, EvalKind, EvalStatus, Run, Store, Verdict


def export(store: Store, run_id: int) -> tuple[str, dict]:
    """The best kernel's source (its manifest rides in it) and a summary of where it came from."""
    with store.session() as s:
        run = _run(s, run_id)
        if run.best is None:
            raise NotFound(f"run {run_id} has no kept candidate to export")
        return run.best.source, candidate_row(run.best, harness_of(run)) | {
            "run": run_id, "campaign": run.campaign, "device": run.fingerprint.get("gpu"),
            "sanitized": sanitized(run.best)}


def sanitized(cand: Candidate) -> dict:
    """Whether a candidate ran under compute-sanitizer before it was kept, and what that found: `clean`,
    `findings`, `timeout`, or `never` (kept where no sanitizer ran, or before the harness had one)."""
    evs = [e for e in cand.evaluations
           if e.kind == EvalKind.sanitize and e.status not in (EvalStatus.running, EvalStatus.interrupted)]
    if not evs:
        return {"state": Sanitized.never}
    last = evs[-1]
    status = EvalStatus(last.status)
    state = {EvalStatus.ok: Sanitized.clean, EvalStatus.incorrect: Sanitized.findings}.get(status, status)
    return {"state": state, "tools": (last.metrics or {}).get("tools", {}),
            "findings": (last.metrics or {}).get("findings", [])}


def dispatch(store: Store, run_id: int) -> dict:
    """A suite's dispatch table: for each of its problems, in the suite's order, the run that tuned it
    and that run's best (its objective, interval, the harness's suite figures), or why there is none;
    how soon it first kept a kernel at or past the baseline, and how many candidates it measured a
    minute; and over the problems (`summary`)."""
    from autodiscovery.campaign import validate
    from autodiscovery.review.pool import pool
    from autodiscovery.running.suite import runs_of

    with store.session() as s:
        parent = _run(s, run_id)
        if not (parent.config or {}).get("suite"):
            raise NotFound(f"run {run_id} is not a suite (its campaign names no `suite:`)")
        harness = harness_of(parent)
        kids = runs_of(s, parent)
        campaign = validate(parent.config, f"campaign of run {run_id}")
        rows = []
        for entry in campaign.suite or []:  # a suite: checked above
            child, problem = kids.get(entry.label), campaign.entry(entry).problem
            row = {"label": entry.label, "problem": problem.model_dump(mode="json"), "shape": problem.describe(),
                   "run": None, "status": "not yet run", "stop_reason": None, "best_seq": None, "family": None,
                   "knobs": {}, "score": None, "score_text": "–", "ci_low": None, "ci_high": None, "figures": {},
                   "evaluated": 0, "elapsed_s": 0.0, "first_at_s": None, "per_minute": None, "window_s": None}
            if child is not None:
                row |= {"run": child.id, "status": child.status, "stop_reason": child.stop_reason,
                        "evaluated": tally(c.status for c in child.candidates)["evaluated"],
                        "elapsed_s": child.elapsed_s, "first_at_s": first_at(child, harness.objective)}
                if child.best is not None:
                    m = _metrics(child.best, harness)
                    row |= {"best_seq": child.best.seq, "family": child.best.family, "knobs": dict(child.best.knobs),
                            **{k: m[k] for k in ("score", "score_text", "ci_low", "ci_high")},
                            "figures": {k: v for k, v in m["figures"].items()
                                        if k in {c.key for c in columns(harness, "suite")}}}
            rows.append(row)
        out = {"run": run_id, "campaign": parent.campaign, "status": parent.status, "stop_reason": parent.stop_reason,
               "device": parent.fingerprint.get("gpu"), "objective": harness.objective.name, "harness": harness,
               "rows": rows}
    for row in rows:
        if isinstance(run := row["run"], int) and (used := pool(store, run)) is not None:
            row["per_minute"], row["window_s"] = used["per_minute"], used["window_s"]
    return out | {"summary": summary(rows, harness.objective)}


def first_at(run: Run, objective: Objective) -> float | None:
    """Seconds from the run's start to its first keep at or past the objective's reference (1.0× cuBLAS),
    None where it kept none."""
    if objective.reference is None:
        return None
    kept = sorted((c.decision.created_at, c) for c in run.candidates
                  if c.decision is not None and c.decision.verdict == Verdict.keep)
    for when, cand in kept:
        score = objective.read(cand.measurement.metrics) if cand.measurement is not None else None
        if isinstance(score, int | float) and objective.reached(score, objective.reference):
            return round((when - run.created_at).total_seconds(), 1)
    return None


def summary(rows: list[dict], objective: Objective) -> dict:
    """Over a suite's problems: how many have a best, the median and the worst of the bests, how many are
    at or past the reference (the unrounded figure: 0.9997 is below 1), candidates a minute over all their
    runs' measuring time, and the median of the seconds to the first keep at or past the reference."""
    scores = [r["score"] for r in rows if r["score"] is not None]
    windows = [r for r in rows if r["window_s"]]
    firsts = [r["first_at_s"] for r in rows if r["first_at_s"] is not None]
    ref = objective.reference
    return {"problems": len(rows), "with_best": len(scores),
            "median": statistics.median(scores) if scores else None,
            "worst": (min(scores) if objective.higher_is_better else max(scores)) if scores else None,
            "at_or_past": sum(objective.reached(v, ref) for v in scores) if ref is not None else None,
            "per_minute": (sum(r["per_minute"] * r["window_s"] for r in windows) / sum(r["window_s"] for r in windows)
                           if windows else None),
            "first_at_median_s": statistics.median(firsts) if firsts else None, "reached": len(firsts)}


def library(store: Store, run_ids: list[int], folder: Path) -> dict:
    """The best kernel of each run, or of each problem of a suite, written as a library by their harness;
    from several runs or suites, the better of a shape tuned in more than one."""
    from autodiscovery.campaign import validate
    from autodiscovery.running.suite import runs_of

    run_ids = list(dict.fromkeys(run_ids))
    items, named, name = [], None, ""
    harness: Exporting | None = None
    with store.session() as s:
        for run_id in run_ids:
            parent = _run(s, run_id)
            runs = runs_of(s, parent) if (parent.config or {}).get("suite") else {parent.campaign: parent}
            this = harness_of(parent)
            if not isinstance(this, Exporting):
                raise NotFound(f"run {run_id}: the {this.name} harness does not write libraries")
            if harness is not None and this.name != name:
                raise NotFound(f"run {run_id} was measured by the {this.name} harness and run {named} by "
                               f"{name}: a library holds one harness's kernels")
            harness, name, named = this, this.name, run_id
            for label, run in runs.items():
                if run.best is None:
                    continue
                m = _metrics(run.best, harness_of(run))  # its figures as its own baseline makes them
                items.append({"run": run.id, "seq": run.best.seq, "label": label,
                              "campaign": validate(run.config, f"campaign of run {run.id}"),
                              "fingerprint": run.fingerprint, "source": run.best.source,
                              "family": run.best.family, "knobs": dict(run.best.knobs),
                              "score": m["score"], "figures": m["figures"], "sanitized": sanitized(run.best)})
        if not items:
            which = f"run {run_ids[0]} has" if len(run_ids) == 1 else f"runs {', '.join(map(str, run_ids))} have"
            raise NotFound(f"{which} no kept kernel to export")
    assert harness is not None  # items came from a run, whose harness was read with them
    table = harness.export_library(items, folder)
    never = [f"{i['label']} (run {i['run']} #{i['seq']})" for i in items if i["sanitized"]["state"] != Sanitized.clean]
    if never and isinstance(table, dict) and "summary" in table:
        table["summary"] += (f"; {len(never)} of {len(items)} never sanitized clean before they were kept: "
                             + ", ".join(never[:6]) + (", ..." if len(never) > 6 else ""))
    return table
