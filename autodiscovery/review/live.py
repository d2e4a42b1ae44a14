"""The live view of `autodiscovery run`: progress, the best so far, the latest candidates, in the
harness's objective and its live columns, redrawn as the loop reports each step."""

from __future__ import annotations

import threading
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from autodiscovery.campaign import Campaign
from autodiscovery.interfaces import columns
from autodiscovery.review.display import STATUS_STYLE, figure_cells, figure_heads, fmt
from autodiscovery.roles import Evaluating
from autodiscovery.status import CandidateStatus, EvalStatus, Verdict
from autodiscovery.store import Run


class LiveDisplay:
    """The live view of `autodiscovery run`: progress, the best so far, the latest candidates. Its
    updates may come from several threads (decisions are made beside the loop on several devices)."""

    def __init__(self, console: Console | None = None, rows: int = 12) -> None:
        self.console = console or Console()
        self.lock = threading.RLock()
        self.rows: list[tuple] = []
        self.max_rows = rows
        self.best = "–"
        self.note = ""
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console)
        self.task: TaskID | None = None
        self.live: Live | None = None
        self.harness: Evaluating | None = None

    def _shown(self) -> Evaluating:
        if self.harness is None:
            raise RuntimeError("the live view shows a run once it has started")
        return self.harness

    def _render(self) -> Group:
        table = Table(expand=True, show_edge=False)
        h = self._shown()
        heads = ["#", "family", "hypothesis", "verdict", *figure_heads(h, "live", False),
                 h.objective.name, *figure_heads(h, "live", True), "regs"]
        for col in heads:
            table.add_column(col, overflow="ellipsis", no_wrap=col != "hypothesis",
                             ratio=4 if col == "hypothesis" else None)
        for row in self.rows[-self.max_rows:]:
            table.add_row(*row)
        header = Panel(f"best so far: {self.best}    {self.note}", title=self.title, expand=True)
        return Group(header, self.progress, table)

    def started(self, run: Run, campaign: Campaign, harness: Evaluating) -> None:
        self.harness = harness
        self.title = " · ".join(filter(None, [f"run {run.id}", campaign.name, campaign.problem.describe()]))
        self.task = task = self.progress.add_task("candidates", total=campaign.budget.candidates)
        done = sum(c.status != CandidateStatus.proposed for c in run.candidates)
        self.progress.update(task, completed=done)
        self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
        self.live.start()

    def building(self, seqs: list[int]) -> None:
        with self.lock:
            self._building(seqs)

    def _building(self, seqs: list[int]) -> None:
        self.note = f"building {', '.join(f'#{s}' for s in seqs)} ({time.strftime('%H:%M:%S')})"
        self._refresh()

    def finished(self, cand: Any, outcome: Any, verdict: Verdict | CandidateStatus, reason: str, best: Any) -> None:
        with self.lock:
            self._finished(cand, outcome, verdict, reason, best)

    def _finished(self, cand: Any, outcome: Any, verdict: Verdict | CandidateStatus, reason: str, best: Any) -> None:
        from autodiscovery.running.ledger import build_facts

        h = self._shown()
        objective = h.objective
        metrics = outcome.metrics if outcome is not None and outcome.status == EvalStatus.ok else {}
        build = build_facts(cand.build)
        figures = {c.key: c.value(metrics, build) for c in columns(h, "live")}
        score = outcome.score if outcome is not None and outcome.status == EvalStatus.ok else None
        status = cand.status
        style = STATUS_STYLE.get(status, "")
        self.rows.append((str(cand.seq), cand.family or "", cand.hypothesis, f"[{style}]{status}[/]",
                          *figure_cells(h, "live", figures, False),
                          objective.format(score) if score is not None else "–",
                          *figure_cells(h, "live", figures, True), fmt(build.get("registers"), "d")))
        if self.task is not None:
            self.progress.advance(self.task)
        if best is not None and best.score is not None:
            self.best = f"#{best.seq} {best.family or ''} {objective.format(best.score)}"
        self.note = f"last: #{cand.seq} {status}: {reason[:90]}"
        self._refresh()

    def stopped(self, reason: str) -> None:
        with self.lock:
            self.note = f"stopped: {reason}"
            self._refresh()
            if self.live:
                self.live.stop()
                if not self.console.is_terminal:  # Live leaves its last line open where it drew no cursor
                    self.console.line()

    def _refresh(self) -> None:
        if self.live:
            self.live.update(self._render())
