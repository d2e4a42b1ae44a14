"""Rich output: the tables of `runs`, `show`, `lineage`, `diff`, `measure`, `replay` and `ladder` (the live
view of a run is `live.py`'s). Every table speaks in the harness's objective (its name, format and
interval) and shows the harness's own columns where they ask to be (`interfaces.Column.views`)."""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from autodiscovery import provenance
from autodiscovery.interfaces import Objective, columns
from autodiscovery.objective import Column, Section
from autodiscovery.roles import Shown, declared, identity
from autodiscovery.status import CandidateStatus as C
from autodiscovery.status import EvalStatus

STATUS_STYLE = {
    C.kept: "bold green", C.reverted: "yellow", C.incorrect: "red", C.compile_error: "red",
    C.crashed: "red", C.timeout: "red", C.rejected: "dim", C.measured: "cyan", C.built: "cyan",
}


def fmt(x: float | None, spec: str = ".3f") -> str:
    if x is None:
        return "–"
    return format(round(x) if spec.endswith("d") and isinstance(x, float) else x, spec)


def interval(objective: Objective, low: float | None, high: float | None, spec: str = ".3f") -> str:
    return f"{low:{spec}}–{high:{spec}}" if low is not None and high is not None else "–"


def figure_cells(harness: object, view: str, figures: dict, after: bool) -> list[str]:
    """The texts of a harness's columns of `view` on one side of the objective, from a row's figures."""
    return [c.text(figures.get(c.key)) for c in columns(harness, view, after)]


def figure_heads(harness: object, view: str, after: bool, suffix: str = "") -> list[str]:
    return [c.label + suffix for c in columns(harness, view, after)]


def runs_table(rows: list[dict]) -> Table:
    """One line a run, read whole at 80 columns: the runs of a suite under it by their problem's label,
    and only a campaign's name folds when it is long."""
    cells, suite = [], None
    for r in rows:
        name = r["campaign"]
        if suite and name.startswith(suite + "/"):
            name = "↳ " + name[len(suite) + 1:]  # a problem of the suite listed above
        elif str(r["agent"]).startswith("suite"):
            suite = name
        cells.append([str(r["id"]), escape(name), r["agent"], r["status"],
                      str(r["evaluated"]) + (f" +{r['proposed']}" if r["proposed"] else ""), r["best_text"],
                      r["created_at"][:10]])
    notes = []
    if any(r["proposed"] for r in rows if r["status"] != "running"):
        notes.append("+N: candidates left proposed, not evaluated when the run stopped")
    if any(r["proposed"] for r in rows if r["status"] == "running"):
        notes.append("+N on a running run: proposed, not yet evaluated")
    t = compact("runs", "; ".join(notes) or None)
    for i, col in enumerate(("run", "campaign", "agent", "status", "evaluated", "best", "started")):
        fold = col == "campaign"
        t.add_column(col, no_wrap=not fold, overflow="fold" if fold else "ellipsis",
                     justify="right" if col in ("run", "evaluated", "best") else "left",
                     min_width=None if fold else max([len(col), *(len(c[i]) for c in cells)]))
    for c in cells:
        t.add_row(*c)
    return t


def compact(title: str, caption: str | None = None) -> Table:
    """A table that reads at 80 columns: a rule under the heads, no frame, one space between columns."""
    return Table(title=title, caption=caption, box=box.SIMPLE_HEAD, padding=0, show_edge=False)


def whole(t: Table, cells: list[list[str]], heads: list[str], cut: str | None = None) -> Table:
    """Columns and rows: every column as wide as its widest cell and never wrapped, but `cut`, which takes
    the rest of the line and is cut to it with an ellipsis."""
    t.expand = cut is not None
    for i, col in enumerate(heads):
        if col == cut:
            t.add_column(col, no_wrap=True, overflow="ellipsis", ratio=1, min_width=8)
        else:
            t.add_column(col, no_wrap=True, overflow="ellipsis",
                         width=max([len(col), *(Text.from_markup(c[i]).cell_len for c in cells)]))
    for c in cells:
        t.add_row(*c)
    return t


def one_line(text: str | None) -> str:
    """A text on one line (its line breaks and runs of spaces as one space), escaped for Rich."""
    return escape(" ".join((text or "").split()))


def where(fingerprint: dict, harness: Shown, width: int = 80) -> str:
    """Where a run ran: the device and the toolchain its measurements depend on, in lines of `width` that
    break between two facts, never inside one."""
    facts = identity(harness, fingerprint)
    parts = [f"on {facts.pop('gpu', None) or 'no GPU'}"]
    for k, v in facts.items():
        text = str(v)
        parts.append(text if text.startswith(k) else f"{k} {text[:24]}")
    if (code := provenance.short(fingerprint.get("code"))) is not None:
        parts.append(code)
    if fingerprint.get("dry_run"):
        parts.append("dry run")
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 3 + len(part) > width:
            lines[-1] += " ·"
            lines.append(part)
        else:
            lines[-1] += f" · {part}"
    return "\n".join(escape(line) for line in lines)


def lineage_table(run_id: int, rows: list[dict], harness: Shown,
                  whole_hint: str | None = None) -> tuple[Table, str, Table]:
    """The kept chain, a row a step, the figures whole at 80 columns; then a heading (a message line: print
    it unwrapped) and each step's hypothesis cut to a line (`whole_hint`, `show RUN/SEQ` by default, gives
    it whole)."""
    objective = harness.objective
    compiled = any(r.get("registers") is not None for r in rows)  # compiler facts, where the builds have them
    heads = ["step", "#", "family", *figure_heads(harness, "lineage", False), objective.name]
    heads += [*(["CI"] if objective.interval else []), *figure_heads(harness, "lineage", True),
              *(["regs", "spills"] if compiled else [])]
    cells, notes = [], []
    for i, r in enumerate(rows):
        spills = None if r["spill_stores"] is None else r["spill_stores"] + (r["spill_loads"] or 0)
        at = str(r["seq"]) if r.get("run", run_id) == run_id else f"{r['run']}/{r['seq']}"  # --from another run
        ci = [interval(objective, r.get("ci_low"), r.get("ci_high"))] if objective.interval else []
        cells.append([str(i), at, escape(r["family"] or ""), *figure_cells(harness, "lineage", r["figures"], False),
                      fmt(r.get("score"), objective.spec), *ci, *figure_cells(harness, "lineage", r["figures"], True),
                      *([fmt(r["registers"], "d"), fmt(spills, "d")] if compiled else [])])
        notes.append(f"{i:>4}  {one_line(r['hypothesis'])}")
    t = whole(compact(f"lineage of run {run_id}: the kept chain from the seed to the best"), cells, heads)
    hypotheses = Table.grid()
    hypotheses.add_column(no_wrap=True, overflow="ellipsis")
    for note in notes:
        hypotheses.add_row(note)
    heading = f"\n[bold]each step's hypothesis[/] (whole: `{escape(whole_hint or f'autodiscovery show {run_id}/SEQ')}`)"
    return t, heading, hypotheses


def tree(run_id: int, rows: list[dict]) -> Tree:
    """How the run branched: each candidate under the one it was made from."""
    root = Tree(f"run {run_id}: every candidate under its parent (★ the best)")
    nodes: list[Tree] = []
    for r in rows:
        verdict = r["verdict"] or r["status"]
        colour = {"keep": "green", "revert": "red"}.get(r["verdict"] or "", "yellow")
        label = (f"#{r['seq']} {r['family'] or '?'} [{colour}]{verdict}[/] {r.get('score_text', '–')}"
                 f"{' ★' if r.get('best') else ''}")
        parent = root if r["depth"] == 0 else nodes[r["depth"] - 1]
        node = parent.add(label)
        del nodes[r["depth"]:]
        nodes.append(node)
    return root


def diff_table(data: dict, harness: Shown) -> Table:
    a, b = data["a"], data["b"]
    t = Table(title=f"{a['ref']} against {b['ref']}: +{data['lines_added']} −{data['lines_removed']} lines")
    for col in ("", a["ref"], b["ref"]):
        t.add_column(col, overflow="fold")
    rows = [("family", a["family"] or "–", b["family"] or "–"), ("status", a["status"], b["status"]),
            ("score", a.get("score_text", "–"), b.get("score_text", "–"))]
    rows += [(c.label, c.text(a["figures"].get(c.key)), c.text(b["figures"].get(c.key))) for c in columns(harness, "diff")]
    rows += [("registers", fmt(a.get("registers"), "d"), fmt(b.get("registers"), "d")),
             ("spills (stores/loads)", f"{fmt(a.get('spill_stores'), 'd')}/{fmt(a.get('spill_loads'), 'd')}",
              f"{fmt(b.get('spill_stores'), 'd')}/{fmt(b.get('spill_loads'), 'd')}")]
    rows += [(f"knob {k}", str(va), str(vb)) for k, (va, vb) in data["knobs_changed"].items()]
    for row in rows:
        t.add_row(*row)
    return t


def candidates_table(rows: list[dict], harness: Shown) -> Table:
    """Every candidate, a line each at 80 columns: its decision cut to what is left of the line."""
    compiled = any(r.get("registers") is not None for r in rows)
    heads = ["#", "family", "proposer", "status", *figure_heads(harness, "candidates", False),
             harness.objective.name, *figure_heads(harness, "candidates", True), *(["regs"] if compiled else []),
             "decision"]
    cells = [[str(r["seq"]), escape(r["family"] or ""), escape(r["proposer"].removeprefix("search:")), r["status"],
              *figure_cells(harness, "candidates", r["figures"], False), fmt(r.get("score"), harness.objective.spec),
              *figure_cells(harness, "candidates", r["figures"], True),
              *([fmt(r["registers"], "d")] if compiled else []), one_line(r["decision"])] for r in rows]
    return whole(compact("candidates"), cells, heads, cut="decision")


def measure_section(kernel: str, outcomes: list, harness: Shown) -> Section:
    """Each measurement of one kernel file: its status, the objective with its interval and the harness's
    columns, how long the evaluation took, and why it failed where it did (laid out by `sections_table`:
    no word broken at any width)."""
    objective = harness.objective
    heads = ["#", "status", *figure_heads(harness, "measure", False), objective.name,
             *(["CI"] if objective.interval else []), *figure_heads(harness, "measure", True), "eval s", "detail"]
    precise = objective.spec if objective.spec.endswith("d") else ".4f"
    rows = []
    for i, o in enumerate(outcomes):
        ok = o.status == EvalStatus.ok
        m = o.metrics if ok else {}
        figures = {c.key: c.value(m, {}) for c in columns(harness, "measure")}
        low, high = objective.bounds(m) or (None, None)
        ci = [interval(objective, low, high, spec=".4f")] if objective.interval else []
        rows.append([str(i + 1), str(o.status), *figure_cells(harness, "measure", figures, False),
                     fmt(o.score, precise), *ci, *figure_cells(harness, "measure", figures, True),
                     fmt(o.seconds, ".2f"), "" if ok else escape((o.log.splitlines() or [""])[0][:100])])
    return Section("measure", f"{kernel}: gate and measurement ({objective.name})", heads, rows)


def llm_table(rows: list[dict]) -> Table:
    """The run's LLM requests by model: what they cost, what failed, what a retry or a later turn recovered."""
    t = Table(title="LLM requests")
    for col in ("model", "calls", "ok", "failed (by kind)", "recovered", "proposals", "kept", "tokens in/out",
                "cost", "median s"):
        t.add_column(col, overflow="fold")
    for r in rows:
        failed = ", ".join(f"{k} {n}" for k, n in r["errors"].items()) or "–"
        t.add_row(r["model"], str(r["calls"]), str(r["ok"]), failed, str(r["recovered"]), str(r["proposals"]),
                  str(r["kept"]), f"{r['input_tokens']}/{r['output_tokens']}", fmt(r["cost"], ".4f"),
                  fmt(r["median_latency_s"], ".2f"))
    return t


def replay_section(data: dict, harness: Shown) -> Section:
    """Recorded beside replayed, step by step; ⚠ where they differ by more than the noise (laid out by
    `sections_table`: no word broken at any width)."""
    objective = harness.objective
    exact = objective.interval is None
    title = (f"replay of run {data['run']} ({data['campaign']}) on {data['fingerprint'].get('gpu', '?')}"
             f"{'' if data['same_machine'] else ' (another machine or toolchain than the recording)'}")
    both, now = columns(harness, "replay"), columns(harness, "replay-now")
    cols = ["step", "#", "technique"]
    for c in both:
        cols += [f"{c.label} rec.", f"{c.label} now"]
    cols += [c.label for c in now if c not in both]
    cols += ["recorded", "replayed", "Δ"] if exact else [f"{objective.name} rec.", f"{objective.name} now", "Δ"]
    spec = objective.spec
    rows = []
    for s in data["steps"]:
        rec, rep = s["recorded"], s["replayed"]
        name = f"{s['phase']}: {s['family']}" if s.get("phase") else (s["family"] or "?")
        now_text = fmt(rep["score"], spec) if rep["status"] == EvalStatus.ok else f"[red]{rep['status']}[/]"
        delta = f"{s['delta']:+.1%}" if s["delta"] is not None else "–"
        cells = [str(s["step"]), str(s["seq"]), name]
        for c in both:
            cells += [c.text(rec["figures"].get(c.key)), c.text(rep["figures"].get(c.key))]
        cells += [c.text(rep["figures"].get(c.key)) for c in now if c not in both]
        cells += [fmt(rec["score"], spec), now_text, delta, "[yellow]⚠[/]" if s["flag"] else ""]
        rows.append(cells)
    return Section("replay", title, [*cols, ""], rows)


def fingerprints_table(data: dict) -> Table:
    t = Table(title="where the recording and the replay differ")
    for col in ("", "recorded", "this machine"):
        t.add_column(col, overflow="fold")
    for k, (was, now) in data["differences"].items():
        t.add_row(k, str(was), str(now))
    return t


def ladder_table(problem: str, run_id: int, rows: list[dict], harness: Shown) -> Table:
    """Each family's best at one problem: its configuration folds, the figures stay whole."""
    objective = harness.objective
    t = Table(title=f"ladder at {problem} (run {run_id}): each family's best", box=box.SIMPLE_HEAD,
              padding=(0, 1, 0, 0), show_edge=False)
    heads = ["rung", "family", "configuration", *figure_heads(harness, "ladder", False), objective.name,
             *(["CI"] if objective.interval else []), "regs", "spills", *figure_heads(harness, "ladder", True),
             "passed"]
    cells = []
    for r in rows:
        knobs = " ".join(f"{k}={v}" for k, v in r["knobs"].items()) or "–"
        ci = [interval(objective, r["ci_low"], r["ci_high"])] if objective.interval else []
        cells.append([str(r["rung"]), r["family"], knobs if r["score"] is not None else f"[red]{r['note']}[/]",
                      *figure_cells(harness, "ladder", r["figures"], False), fmt(r["score"], objective.spec), *ci,
                      fmt(r["registers"], "d"), fmt(r["spills"], "d"),
                      *figure_cells(harness, "ladder", r["figures"], True), f"{r['passed']}/{r['tried']}"])
    for i, col in enumerate(heads):
        fold = col == "configuration"
        t.add_column(col, no_wrap=not fold, overflow="fold" if fold else "ellipsis",
                     min_width=None if fold else max([len(col), *(len(c[i]) for c in cells)]))
    for c in cells:
        t.add_row(*c)
    return t


class _Shown:
    """A harness's columns, less those no row has a value of."""

    columns: tuple[Column, ...]

    def __init__(self, harness: Shown, keys: set[str]) -> None:
        self.columns = tuple(c for c in declared(harness).columns if c.key in keys)


def dispatch_table(data: dict) -> Table:
    """A suite's dispatch table: each problem, the kernel its run found best, its figures; where a
    problem has no best yet, its run's state says why."""
    objective = data["harness"].objective
    harness = _Shown(data["harness"], {k for r in data["rows"] for k, v in r["figures"].items() if v is not None})
    # One space between columns (the box's): its eight fit 80 columns with the kernel's name whole.
    said = summary_text(data["summary"], objective) if data.get("summary") else ""
    t = Table(title=f"suite {data['run']} ({data['campaign']}): dispatch table", box=box.SIMPLE_HEAD,
              padding=(0, 0, 0, 0), show_edge=False,
              caption=f"{data['status']}" + (f" ({data['stop_reason']})" if data["stop_reason"] else "")
              + (f"\n{said}" if said else ""))
    heads = ["problem", "shape", "run", "kernel", *figure_heads(harness, "suite", False), objective.name,
             *figure_heads(harness, "suite", True), "cands"]
    cells = []
    for r in data["rows"]:
        if r["score"] is not None:  # its configuration: `lineage RUN`, or the --json
            kernel = f"{r['family'] or '?'} #{r['best_seq']}"
        else:
            kernel = f"[red]{escape(r['stop_reason'] or r['status'])}[/]"
        cells.append([r["label"], r["shape"], fmt(r["run"], "d"), kernel,
                      *figure_cells(harness, "suite", r["figures"], False), fmt(r["score"], objective.spec),
                      *figure_cells(harness, "suite", r["figures"], True), str(r["evaluated"])])
    for i, col in enumerate(heads):
        width = max([len(col), *(len(c[i]) for c in cells)])
        if col == "kernel":
            t.add_column(col, overflow="fold", ratio=1, min_width=12)
        else:  # the label folds past 12 characters; the figures stay whole
            t.add_column(col, no_wrap=col != "problem", overflow="fold" if col == "problem" else "ellipsis",
                         min_width=min(width, 12) if col == "problem" else width)
    for c in cells:
        t.add_row(*c)
    return t


def summary_text(summary: dict, objective: Objective) -> str:
    """A suite over its problems in a line or two: 'median 0.993× best Lt, worst 0.985× best Lt; 1 of 3 at
    or above 1.000× best Lt, 16 s in (the median of those); 32 candidates a minute'."""
    if not summary.get("with_best"):
        return ""
    parts = [f"median {objective.format(summary['median'])}, worst {objective.format(summary['worst'])}"]
    if summary.get("at_or_past") is not None and objective.reference is not None:
        way = "above" if objective.higher_is_better else "below"
        reached = f"{summary['at_or_past']} of {summary['problems']} at or {way} {objective.format(objective.reference)}"
        if summary.get("first_at_median_s") is not None:
            reached += f", {summary['first_at_median_s']:.0f} s in (the median of those)"
        parts.append(reached)
    if summary.get("per_minute"):
        parts.append(f"{summary['per_minute']:.0f} candidates a minute")
    return "; ".join(parts)
