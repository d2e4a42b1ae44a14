"""The measured figures of the README and the documentation, each recomputed from the database it names.

A figure is written after a tag that names where it comes from:

    **<!-- fig docs/h100-default-run-cost/run.db 1/6 score -->1.020× cuBLAS**

that is: the database (from the project's root), the run (`RUN`) or candidate (`RUN/SEQ`), and the
quantity (below). A figure made of two quantities names both, joined by `over` (their ratio), `vs` (the
first's change against the second: a/b − 1), `minus` or `plus`, and may end in `*N`:

    <!-- fig docs/codesign-512/singles.db 1 best vs docs/codesign-512/run.db 1 summary:phases.1.cycles *100 -->−1.3%

The number right after the tag is the figure as printed; the check recomputes the
quantity, unrounded, and fails where the printed number is not it rounded to the places printed (a
count, exactly). `python -m autodiscovery.figures` lists every figure with its value; `--check` exits 1
on the first list of those that drifted (the tests run it on every page); `--untagged` lists what reads
as a measured figure and carries no tag (the tests hold each page's count from growing).

Quantities, `NAME` or `NAME:ARG`, and `*N` after any of them to print it scaled (`*100`: a fraction as a
percentage; `*1000`: milliseconds as microseconds):
- of a candidate (`RUN/SEQ`): `score`, `ci_low`, `ci_high`, `fig:KEY` (a figure of the harness's
  columns: `tflops`, `x_best_lt`...), `over:SEQ` (its objective over candidate SEQ's, each measured
  apart), `metric:PATH` (its measurement's metrics at a dotted path),
  `h2h`, `h2h_ci_low`, `h2h_ci_high` (its last head-to-head's ratio), `eval_s:KIND` (the seconds of its
  last evaluation of a kind: benchmark, head_to_head, sanitize), `kept_at` (seconds from the run's start
  to its decision, a keep or not), `measured_at` (to the end of its first benchmark);
- of a run (`RUN`): `best` and `best_fig:KEY` (its best's), `elapsed`, `evaluated`, `proposed`,
  `first_at` (seconds to its first keep at or past the baseline), `busy`, `per_minute` and `pool:PATH`
  (its devices' time, `review/pool.py`: `window_s`, `benchmark`, `sanitize`, `idle.proposal`...);
- of a run: `sum_of:Q`, `mean_of:Q`, `median_of:Q` and `count_of:Q`, a candidate's quantity Q over the
  run's candidates that have one (a suite's: over its problems' runs; `sum_of:eval_s:sanitize`: the
  seconds its sanitizer runs took in all);
  `change` (its best against its first candidate, the baseline it started from: a fraction),
  `summary:PATH` (the harness's report data at a dotted path, list items by number);
- of a suite (`RUN`): `median`, `worst`, `at_or_past` (problems whose best is at or past the baseline,
  unrounded), `at_least:KEY:BAR` (problems whose figure KEY is at least BAR, unrounded), `min:KEY`,
  `max:KEY` (KEY `score` for the objective, or a problem's row: `per_minute`), `problems`,
  `suite_per_minute`, `first_at_median`;
- of a JSON file a measurement wrote (REF `file`, the file in place of the database): the value at a
  dotted path (`rows.0.error*100`);
- of the whole database (`all`): `best_of_runs_at_or_past`, the problems whose best over all their runs
  is at or past the baseline (a figure that is the best of several runs a problem), and
  `best_of_runs_at_least:KEY:BAR`, those whose best's figure KEY is at least BAR.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autodiscovery import ROOT, AutoDiscoveryError

_REF = r"all|file|\d+(?:/\d+)?"
TAG = re.compile(rf"<!-- fig (?P<db>\S+) (?P<ref>{_REF}) (?P<what>\S+)"
                 rf"(?: (?P<op>over|vs|minus|plus) (?P<db2>\S+) (?P<ref2>{_REF}) (?P<what2>\S+)(?: \*(?P<scale>[\d.]+))?)?"
                 r" -->[\s*_]*(?P<figure>[−+-]?\d[\d,]*(?:\.\d+)?)")
OPS = {"over": lambda a, b: a / b, "vs": lambda a, b: a / b - 1, "minus": lambda a, b: a - b, "plus": lambda a, b: a + b}
"""How a figure of two quantities is made from them: their ratio, the first's change against the second, their
difference, their sum."""


class FigureError(AutoDiscoveryError):
    pass


@dataclass
class Figure:
    page: str
    line: int
    db: str
    ref: str
    what: str
    printed: str
    op: str | None = None
    """`over`, `vs`, `minus` or `plus` where the figure is made of two quantities (the second: `other`)."""
    other: tuple[str, str, str] | None = None
    """The second quantity's database, reference and name."""
    scale: float = 1.0
    """What a figure of two quantities is printed scaled by (`*100`: a change as a percentage)."""

    def __str__(self) -> str:
        second = f" {self.op} {' '.join(self.other)}{f' *{self.scale:g}' if self.scale != 1 else ''}" if self.other else ""
        return f"{self.page}:{self.line}: {self.printed} ({self.db} {self.ref} {self.what}{second})"


def found(root: Path = ROOT) -> list[Figure]:
    """Every tagged figure of the README and the pages under docs/."""
    paths = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    out = []
    for path in paths:
        text = path.read_text()
        for m in TAG.finditer(text):
            out.append(Figure(str(path.relative_to(root)), text.count("\n", 0, m.start()) + 1, m["db"], m["ref"],
                              m["what"], m["figure"], m["op"], (m["db2"], m["ref2"], m["what2"]) if m["op"] else None,
                              float(m["scale"] or 1)))
    return out


def _at(node: Any, path: str) -> Any:
    """What a dotted path names in nested mappings and lists (a list's items by number); None where not."""
    for part in path.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            node = node.get(part) if isinstance(node, dict) else None
    return node


def _shown(store: Any, run_id: int) -> list[dict]:
    """A run's candidates as `report.show_run` gives them."""
    return _read(store, run_id, "show_run")["candidates"]


@functools.lru_cache(maxsize=512)
def _read(store: Any, run_id: int, view: str) -> Any:
    """A view of a run (`report.show_run`, `run_row`, `sections`; `pool`; `exports.dispatch`), read once
    for every figure that asks it: the stores a `Reader` opens are read-only and live as long as it does."""
    from autodiscovery.review import exports, report
    from autodiscovery.review.pool import pool

    readers = {"show_run": report.show_run, "run_row": report.run_row, "sections": report.sections,
               "pool": pool, "dispatch": exports.dispatch}
    return readers[view](store, run_id)


def _number(printed: str) -> tuple[float, int]:
    """The printed figure as a number, and the places it is printed to."""
    text = printed.replace("−", "-").replace(",", "")
    return float(text), len(text.partition(".")[2])


class Reader:
    """The databases the figures name, each opened once, read-only."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self.stores: dict[str, Any] = {}

    def store(self, db: str) -> Any:
        from autodiscovery.store import Store

        if db not in self.stores:
            if not (self.root / db).is_file():
                raise FigureError(f"no database {db}")
            self.stores[db] = Store(self.root / db, create=False, read_only=True)
        return self.stores[db]

    def value(self, f: Figure) -> float:
        """The figure's value: its quantity, or its two quantities made one (`OPS`) and scaled."""
        first = self.quantity(f.db, f.ref, f.what)
        if f.op is None or f.other is None:
            return first
        second = self.quantity(*f.other)
        if f.op in ("over", "vs") and second == 0:
            raise FigureError(f"{' '.join(f.other)} is 0: nothing to divide by")
        return OPS[f.op](first, second) * f.scale

    def quantity(self, db: str, ref: str, what: str) -> float:
        """A quantity (`what`, scaled by its `*N`) of a run, a candidate, a database or a file."""
        named = what
        what, _, factor = named.rpartition("*") if "*" in named else (named, "", "1")
        try:
            scale = float(factor)
        except ValueError:
            raise FigureError(f"{named}: what follows * is not a number") from None
        name, _, arg = what.partition(":")
        run, _, seq = ref.partition("/")
        if run == "file":  # a measurement's own JSON file, read at a dotted path
            path = self.root / db
            if not path.is_file():
                raise FigureError(f"no file {db}")
            got = _at(json.loads(path.read_text()), what)
            if not isinstance(got, int | float):
                raise FigureError(f"{db}: {what} has no value")
            return float(got) * scale
        store = self.store(db)
        if run == "all":
            got = self._database(store, name, arg)
        else:
            got = self._candidate(store, int(run), int(seq), name, arg) if seq else self._run(store, int(run), name, arg)
        if not isinstance(got, int | float):
            raise FigureError(f"{db} {ref}: {named} has no value")
        return float(got) * scale

    @staticmethod
    def _candidate(store: Any, run_id: int, seq: int, name: str, arg: str) -> Any:
        from autodiscovery.store import Candidate, EvalKind, EvalStatus, Run

        if name in ("kept_at", "measured_at", "metric", "h2h", "h2h_ci_low", "h2h_ci_high", "eval_s"):
            with store.session() as s:
                c, run = Candidate.by_seq(s, run_id, seq), s.get(Run, run_id)
                if c is None or run is None:
                    raise FigureError(f"run {run_id} has no candidate #{seq}")
                if name == "kept_at":
                    if c.decision is None:
                        raise FigureError(f"run {run_id}'s candidate #{seq} was never decided")
                    return (c.decision.created_at - run.created_at).total_seconds()
                if name == "measured_at":  # its first benchmark's end, from the run's start
                    ends = [e.created_at for e in c.evaluations if e.kind == EvalKind.benchmark]
                    return (min(ends) - run.created_at).total_seconds() if ends else None
                if name == "metric":
                    return _at(c.measurement.metrics if c.measurement is not None else None, arg)
                if name == "eval_s":  # the seconds of its last evaluation of that kind
                    done = [e.seconds for e in c.evaluations if e.kind == arg and e.seconds is not None]
                    return done[-1] if done else None
                h2h = [e for e in c.evaluations if e.kind == EvalKind.head_to_head and e.status == EvalStatus.ok]
                if not h2h:
                    raise FigureError(f"run {run_id}'s candidate #{seq} had no head-to-head")
                ratio = (h2h[-1].metrics or {}).get("ratio") or {}
                return ratio.get({"h2h": "median", "h2h_ci_low": "ci_low", "h2h_ci_high": "ci_high"}[name])
        row = next((r for r in _shown(store, run_id) if r["seq"] == seq), None)
        if row is None:
            raise FigureError(f"run {run_id} has no candidate #{seq}")
        if name in ("score", "ci_low", "ci_high"):
            return row[name]
        if name == "fig":
            return row["figures"].get(arg)
        if name == "over":  # its objective over another candidate's of the run (a keep "1.12× apart")
            other = next((r for r in _shown(store, run_id) if str(r["seq"]) == arg), None)
            if other is None or not other["score"] or row["score"] is None:
                raise FigureError(f"run {run_id}'s candidate #{arg} has no objective to divide by")
            return row["score"] / other["score"]
        raise FigureError(f"unknown quantity of a candidate: {name}")

    @staticmethod
    def _run(store: Any, run_id: int, name: str, arg: str) -> Any:
        from autodiscovery.review import exports, report
        from autodiscovery.store import Run

        if name in ("best", "best_fig", "elapsed", "evaluated", "proposed"):
            row = _read(store, run_id, "run_row")
            return {"best": row["best_score"], "elapsed": row["elapsed_s"], "evaluated": row["evaluated"],
                    "proposed": row["proposed"], "best_fig": (row["best_figures"] or {}).get(arg)}[name]
        if name in ("sum_of", "mean_of", "median_of", "count_of"):  # a candidate's quantity over the run's
            import statistics

            from autodiscovery.store import Candidate

            with store.session() as s:  # a suite's: those of its problems' runs
                runs = [run_id, *(r.id for r in s.query(Run).filter(Run.parent_id == run_id))]
                seqs = [(c.run_id, c.seq) for c in s.query(Candidate).filter(Candidate.run_id.in_(runs))]
            quantity, _, rest = arg.partition(":")
            values = []
            for rid, seq in seqs:
                try:
                    v = Reader._candidate(store, rid, seq, quantity, rest)
                except FigureError:
                    continue
                if isinstance(v, int | float):
                    values.append(v)
            if name == "count_of":
                return len(values)
            if not values:
                return None
            return sum(values) if name == "sum_of" else statistics.mean(values) if name == "mean_of" else statistics.median(values)
        if name == "change":  # the best against the run's first candidate (the baseline it started from)
            row, first = _read(store, run_id, "run_row"), _shown(store, run_id)[0]["score"]
            return row["best_score"] / first - 1 if row["best_score"] is not None and first else None
        if name == "summary":  # the harness's report data (`report.sections`), at a dotted path
            return _at(_read(store, run_id, "sections")[1], arg)
        if name == "first_at":
            with store.session() as s:
                run = s.get(Run, run_id)
                return exports.first_at(run, report.harness_of(run).objective) if run is not None else None
        if name in ("busy", "per_minute", "pool"):
            return _at(_read(store, run_id, "pool"), arg if name == "pool" else name)
        if name not in SUITE:
            raise FigureError(f"unknown quantity of a run: {name}")
        data = _read(store, run_id, "dispatch")
        summary, rows = data["summary"], data["rows"]
        if name in ("median", "worst", "at_or_past", "problems"):
            return summary[name]
        if name == "suite_per_minute":
            return summary["per_minute"]
        if name == "first_at_median":
            return summary["first_at_median_s"]
        key = arg.split(":")[0]
        values = [r[key] if key in r else r["figures"].get(key) for r in rows]
        values = [v for v in values if isinstance(v, int | float)]
        if name == "at_least":
            key, _, bar = arg.partition(":")
            return sum(v >= float(bar) for v in values)
        if name in ("min", "max"):
            return (min if name == "min" else max)(values) if values else None
        raise FigureError(f"unknown quantity of a run: {name}")


    @staticmethod
    def _database(store: Any, name: str, arg: str) -> Any:
        """`best_of_runs_at_or_past`: over every problem's run in the database (a suite's own row left out),
        the problems (by their sizes and types) whose best over all their runs is at or past the baseline."""
        from autodiscovery.review import report
        from autodiscovery.store import Run

        if name not in ("best_of_runs_at_or_past", "best_of_runs_at_least"):
            raise FigureError(f"unknown quantity of a database: {name}")
        best: dict[str, tuple[float, Any, Any]] = {}
        with store.session() as s:
            for run in s.query(Run).all():
                if str(run.agent).startswith("suite") or run.best is None or run.best.measurement is None:
                    continue
                objective = report.harness_of(run).objective
                score = objective.read(run.best.measurement.metrics)
                key = repr(sorted(((run.config or {}).get("problem") or {}).items()))
                if isinstance(score, int | float) and (key not in best or objective.better(score, best[key][0], 0)):
                    best[key] = (score, objective, (run.id, run.best.seq))
        if name == "best_of_runs_at_or_past":
            return sum(o.reached(v, o.reference) for v, o, _ in best.values() if o.reference is not None)
        key, _, bar = arg.partition(":")
        figures = []
        for _, _, (run_id, seq) in best.values():
            shown = next(c for c in _shown(store, run_id) if c["seq"] == seq)
            figures.append(shown["figures"].get(key))
        return sum(isinstance(v, int | float) and v >= float(bar) for v in figures)


MEASURED = re.compile(r"(?<![\w.×^³])\d[\d,]*(?:\.\d+)?\s?(?:×(?!\s?\d)(?! apart)|µs|ms|TFLOP/s|GB/s|%|\ss\b|\scycles)")
"""What reads as a measured figure in prose: a ratio (not a shape's 320×2632), a time, a rate, a share, cycles."""


def untagged(root: Path = ROOT) -> dict[str, list[tuple[int, str]]]:
    """Each page's numbers that read as measured figures and carry no tag (outside code, comments and the
    tables a page's generated sections render from their database): the figures still to trace. Settings
    quoted in prose (a 1.05× target) read alike; the tests hold each page's count from growing."""
    out: dict[str, list[tuple[int, str]]] = {}
    for path in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        fenced = generated = False
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("```"):
                fenced = not fenced
            if re.match(r"<!-- [\w-]+: .*-->", line):
                generated = True
            elif line.startswith("<!-- end -->"):
                generated = False
            if fenced or generated:
                continue
            bare = re.sub(r"<!--.*?-->|`[^`]*`", " ", TAG.sub(" FIG", line))
            for m in MEASURED.finditer(bare):
                out.setdefault(str(path.relative_to(root)), []).append((i, m.group().strip()))
    return out


def check(figures: list[Figure], reader: Reader | None = None) -> list[str]:
    """Each figure that is not its database's value rounded as printed, in words."""
    reader = reader or Reader()
    wrong = []
    for f in figures:
        try:
            value = reader.value(f)
        except AutoDiscoveryError as exc:
            wrong.append(f"{f}: {exc}")
            continue
        printed, places = _number(f.printed)
        exact = f.what.split(":")[0] in COUNTS
        if (value != printed) if exact else abs(value - printed) > 0.5 * 10 ** -places + 1e-9:
            wrong.append(f"{f}: the database says {value:.{0 if exact else places + 3}f}")
    return wrong


SUITE = ("median", "worst", "at_or_past", "problems", "suite_per_minute", "first_at_median", "at_least", "min", "max")
"""The quantities of a suite's run."""
COUNTS = ("evaluated", "proposed", "count_of", "at_or_past", "at_least", "problems", "best_of_runs_at_or_past",
          "best_of_runs_at_least")
"""Quantities that are counts: printed exactly."""


def main(argv: list[str]) -> int:
    figures = found()
    reader = Reader()
    if "--untagged" in argv:
        pages = untagged()
        for page, hits in pages.items():
            for at, text in hits:
                print(f"{page}:{at}: {text}")
        print(f"{sum(map(len, pages.values()))} untagged on {len(pages)} pages")
        return 0
    if "--check" in argv:
        wrong = check(figures, reader)
        for line in wrong:
            print(line)
        print(f"{len(figures) - len(wrong)} of {len(figures)} figures agree with their databases")
        return 1 if wrong else 0
    for f in figures:
        try:
            print(f"{f}: {reader.value(f):.6g}")
        except AutoDiscoveryError as exc:
            print(f"{f}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
