"""What a harness's numbers mean and how they are shown, declared rather than special-cased: the
objective (its name, direction, where it sits in the metrics, its format), the columns a harness adds
beside it in each view, and the tables and charts it adds to a report. `autodiscovery.interfaces`
carries them to the Agent and Harness interfaces."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Objective:
    """What a harness's score is: its name and unit, which way is better, where it sits in the metrics,
    and how to read it (its interval, its baseline, how much it moves between two measurements)."""

    name: str
    """Shown after a value (a ratio to a baseline, a time, a count)."""
    higher_is_better: bool
    path: tuple[str, ...]
    """Where the score sits in an evaluation's metrics."""
    spec: str = ".3f"
    joiner: str = ""
    """Between the value and the name: '' gives '0.877×…', ' ' gives '23977 …'."""
    interval: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    """Where the ends of the score's confidence interval sit in the metrics (None: an exact figure)."""
    reference: float | None = None
    """The score the baseline itself would get (1.0 for a ratio to it): drawn as a line in charts."""
    reference_name: str = ""
    """What that line is called."""
    noise: float = 0.0
    """How far a measurement taken again may be from the recorded one before `replay` flags it, at
    least (0: an exact figure, any difference is flagged)."""
    time: tuple[str, ...] | None = None
    """Where the kernel's own time sits in the metrics, where the score is not it (a ratio to a
    baseline): what the search's cost model learns (`agents/costmodel.py`). None: none."""

    def read(self, metrics: dict | None, path: tuple[str, ...] | None = None) -> float | None:
        value: Any = metrics or {}
        for key in path or self.path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def bounds(self, metrics: dict | None) -> tuple[float, float] | None:
        """The score's confidence interval in these metrics, where the harness gives one."""
        if self.interval is None:
            return None
        low, high = self.read(metrics, self.interval[0]), self.read(metrics, self.interval[1])
        return (low, high) if low is not None and high is not None else None

    def format(self, value: float | None, spec: str | None = None) -> str:
        if value is None:
            return "–"
        spec = spec or self.spec
        value = round(value) if spec.endswith("d") and isinstance(value, float) else value
        return f"{format(value, spec)}{self.joiner}{self.name}"

    def better(self, a: float, b: float, margin: float = 0.0) -> bool:
        """Whether `a` beats `b` by more than the fraction `margin`."""
        return a > b * (1 + margin) if self.higher_is_better else a < b * (1 - margin)

    def times(self, a: float, b: float) -> float | None:
        """How many times better `a` is than `b` (below 1: worse); None where either is not positive."""
        if a is None or b is None or a <= 0 or b <= 0:
            return None
        return a / b if self.higher_is_better else b / a

    def reached(self, value: float, target: float) -> bool:
        return value >= target if self.higher_is_better else value <= target

    def best(self, values: list[float]) -> float:
        return max(values) if self.higher_is_better else min(values)


VIEWS = ("live", "candidates", "lineage", "diff", "measure", "ladder", "replay", "replay-now", "report",
         "summary", "prompt", "suite")
"""Where a harness's `Column` may appear: the live view of a run, `show RUN`, `lineage`, `diff`,
`measure`, `ladder`, `replay` (recorded and measured again; `replay-now`: measured again only), the
HTML report's lineage, the one-line summaries of a run's best (`run`, the report's header), the
LLM agent's prompts (after a score: '0.877× …, 677.4 TFLOP/s') and a suite's dispatch table."""


@dataclass(frozen=True)
class Column:
    """A figure a harness adds beside the objective wherever candidates are shown, read from an
    evaluation's metrics and its build's facts (a rate, a share of a peak, a clock, a compiler fact)."""

    key: str
    """Its name in --json (`figures`)."""
    label: str
    """Its heading, and its unit after a value in the summaries and prompts."""
    read: Callable[[dict, dict], Any]
    """(metrics, build facts) -> the value, or None."""
    spec: str = ".1f"
    views: frozenset[str] = frozenset()
    """Where it appears: any of `VIEWS`."""
    after: bool = False
    """Placed after the objective's columns (the default: before them)."""
    note: str = ""
    """What it means, where a page has room to say it (the HTML report's lineage)."""
    joiner: str = " "
    """Between a value and its label where a summary or a prompt names it: ' ' gives '677.4 TFLOP/s', ''
    gives '0.900× compile'."""

    def named(self, value: Any) -> str:
        return f"{self.text(value)}{self.joiner}{self.label}"

    def value(self, metrics: dict | None, build: dict | None = None) -> Any:
        try:
            return self.read(metrics or {}, build or {})
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            return None

    def text(self, value: Any) -> str:
        if value is None:
            return "–"
        if isinstance(value, bool):
            return "yes" if value else "no"
        return format(value, self.spec) if self.spec and isinstance(value, (int, float)) else str(value)


def columns(harness: object, view: str, after: bool | None = None) -> list[Column]:
    """The columns a harness (class or instance) declares (`roles.Declared.columns`) that show in `view`;
    with `after`, only those on that side of the objective."""
    from autodiscovery.roles import declared

    return [c for c in declared(harness).columns if view in c.views and (after is None or c.after == after)]


@dataclass
class Chart:
    """A chart a harness adds to the HTML report (a matplotlib figure); one named like a core chart
    (`lineage`) replaces it, one named by a `Section.chart` follows that table, any other gets a heading
    of its own (`title`)."""

    name: str
    figure: Any
    title: str = ""


@dataclass
class Section:
    """One table of what a harness adds to a report, as plain text cells: `report` prints it with Rich,
    the HTML report writes it as a table with this id, followed by the chart of that name if it drew one."""

    id: str
    title: str
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""
    chart: str = ""
