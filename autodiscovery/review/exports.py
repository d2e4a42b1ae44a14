"""What leaves the database: a run's best kernel (`export`), whether it was sanitized, a suite's
dispatch table, and the tuned kernels as a library (`export --library`)."""

from __future__ import annotations

from autodiscovery.interfaces import columns
from autodiscovery.review.report import NotFound, _metrics, _run, candidate_row, harness_of, tally
from autodiscovery.store import Candidate, EvalKind, EvalStatus, Store


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
        return {"state": "never"}
    last = evs[-1]
    state = {str(EvalStatus.ok): "clean", str(EvalStatus.incorrect): "findings"}.get(str(last.status), str(last.status))
    return {"state": state, "tools": (last.metrics or {}).get("tools", {}),
            "findings": (last.metrics or {}).get("findings", [])}


def dispatch(store: Store, run_id: int) -> dict:
    """A suite's dispatch table: for each of its problems, in the suite's order, the run that tuned it
    and that run's best (its objective, interval, the harness's suite figures), or why there is none."""
    from autodiscovery.campaign import validate
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
                   "evaluated": 0, "elapsed_s": 0.0}
            if child is not None:
                row |= {"run": child.id, "status": child.status, "stop_reason": child.stop_reason,
                        "evaluated": tally(c.status for c in child.candidates)["evaluated"],
                        "elapsed_s": child.elapsed_s}
                if child.best is not None:
                    m = _metrics(child.best, harness)
                    row |= {"best_seq": child.best.seq, "family": child.best.family, "knobs": dict(child.best.knobs),
                            **{k: m[k] for k in ("score", "score_text", "ci_low", "ci_high")},
                            "figures": {k: v for k, v in m["figures"].items()
                                        if k in {c.key for c in columns(harness, "suite")}}}
            rows.append(row)
        return {"run": run_id, "campaign": parent.campaign, "status": parent.status, "stop_reason": parent.stop_reason,
                "device": parent.fingerprint.get("gpu"), "objective": harness.objective.name, "harness": harness,
                "rows": rows}


def library(store: Store, run_ids: list[int], folder) -> dict:
    """The best kernel of each run, or of each problem of a suite, written as a library by their harness;
    from several runs or suites, the better of a shape tuned in more than one."""
    from autodiscovery.campaign import validate
    from autodiscovery.running.suite import runs_of

    run_ids = list(dict.fromkeys(run_ids))
    items, harness, named = [], None, None
    with store.session() as s:
        for run_id in run_ids:
            parent = _run(s, run_id)
            runs = runs_of(s, parent) if (parent.config or {}).get("suite") else {parent.campaign: parent}
            this = harness_of(parent)
            if not this.library:
                raise NotFound(f"run {run_id}: the {this.name} harness does not write libraries")
            if harness is not None and this.name != harness.name:
                raise NotFound(f"run {run_id} was measured by the {this.name} harness and run {named} by "
                               f"{harness.name}: a library holds one harness's kernels")
            harness, named = this, run_id
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
    never = [f"{i['label']} (run {i['run']} #{i['seq']})" for i in items if i["sanitized"]["state"] != "clean"]
    if never and isinstance(table, dict) and "summary" in table:
        table["summary"] += (f"; {len(never)} of {len(items)} never sanitized clean before they were kept: "
                             + ", ".join(never[:6]) + (", ..." if len(never) > 6 else ""))
    return table
