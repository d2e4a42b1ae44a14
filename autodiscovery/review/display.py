"""Rich output: the live view of a run, and the tables of `runs`, `show` and `lineage`."""

from __future__ import annotations

import time
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.tree import Tree

from autodiscovery.interfaces import Objective, Section

STATUS_STYLE = {
    "kept": "bold green", "reverted": "yellow", "incorrect": "red", "compile_error": "red",
    "crashed": "red", "timeout": "red", "rejected": "dim", "measured": "cyan", "built": "cyan",
}


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "–" if x is None else format(x, spec)


class LiveDisplay:
    """The live view of `autodiscovery run`: progress, the best so far, the latest candidates."""

    def __init__(self, console: Console | None = None, rows: int = 12) -> None:
        self.console = console or Console()
        self.rows: list[tuple] = []
        self.max_rows = rows
        self.best = "–"
        self.note = ""
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console)
        self.task = None
        self.live: Live | None = None
        self.objective = Objective("× cuBLAS", True, ("ratio", "median"))

    def _render(self) -> Group:
        table = Table(expand=True, show_edge=False)
        for col in ("#", "family", "hypothesis", "verdict", "TFLOP/s", self.objective.name, "regs"):
            table.add_column(col, overflow="ellipsis", no_wrap=col != "hypothesis",
                             ratio=4 if col == "hypothesis" else None)
        for row in self.rows[-self.max_rows:]:
            table.add_row(*row)
        header = Panel(f"best so far: {self.best}    {self.note}", title=self.title, expand=True)
        return Group(header, self.progress, table)

    def started(self, run: Any, campaign: Any, objective: Objective) -> None:
        self.objective = objective
        self.title = " · ".join(filter(None, [f"run {run.id}", campaign.name, campaign.problem.describe()]))
        self.task = self.progress.add_task("candidates", total=campaign.budget.candidates)
        done = sum(c.status != "proposed" for c in run.candidates)
        self.progress.update(self.task, completed=done)
        self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
        self.live.start()

    def building(self, seqs: list[int]) -> None:
        self.note = f"building {', '.join(f'#{s}' for s in seqs)} ({time.strftime('%H:%M:%S')})"
        self._refresh()

    def finished(self, cand: Any, outcome: Any, verdict: str, reason: str, best: Any) -> None:
        metrics = outcome.metrics if outcome is not None else {}
        tflops = metrics.get("tflops", {}).get("candidate")
        score = outcome.score if outcome is not None and outcome.status == "ok" else None
        regs = cand.build.registers if cand.build is not None else None
        status = cand.status
        style = STATUS_STYLE.get(status, "")
        self.rows.append((str(cand.seq), cand.family or "", cand.hypothesis, f"[{style}]{status}[/]",
                          fmt(tflops, ".1f"), self.objective.format(score) if score is not None else "–",
                          fmt(regs, "d")))
        if self.task is not None:
            self.progress.advance(self.task)
        if best is not None and best.score is not None:
            self.best = f"#{best.seq} {best.family or ''} {self.objective.format(best.score)}"
        self.note = f"last: #{cand.seq} {status}: {reason[:90]}"
        self._refresh()

    def stopped(self, reason: str) -> None:
        self.note = f"stopped: {reason}"
        self._refresh()
        if self.live:
            self.live.stop()

    def _refresh(self) -> None:
        if self.live:
            self.live.update(self._render())


def runs_table(rows: list[dict]) -> Table:
    """One line a run, read whole at 80 columns: only the campaign's name folds when it is long."""
    cells = [[str(r["id"]), r["campaign"], r["agent"], r["status"],
              str(r["evaluated"]) + (f" +{r['proposed']}" if r["proposed"] else ""), r["best_text"],
              r["created_at"][:10]] for r in rows]
    left_proposed = any(r["proposed"] for r in rows)
    t = Table(title="runs", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False,
              caption="+N: candidates left proposed, not evaluated when the run stopped" if left_proposed else None)
    for i, col in enumerate(("run", "campaign", "agent", "status", "evaluated", "best", "started")):
        fold = col == "campaign"
        t.add_column(col, no_wrap=not fold, overflow="fold" if fold else "ellipsis",
                     justify="right" if col in ("run", "evaluated", "best") else "left",
                     min_width=None if fold else max([len(col), *(len(c[i]) for c in cells)]))
    for c in cells:
        t.add_row(*c)
    return t


def lineage_table(run_id: int, rows: list[dict], objective: str = "score") -> Table:
    t = Table(title=f"lineage of run {run_id}: the kept chain from the seed to the best")
    for col in ("step", "#", "family", "hypothesis", "TFLOP/s", objective, "CI", "regs", "spills"):
        t.add_column(col, overflow="fold")
    for i, r in enumerate(rows):
        ci = f"{r['ci_low']:.3f}–{r['ci_high']:.3f}" if r.get("ci_low") is not None else "–"
        spills = None if r["spill_stores"] is None else r["spill_stores"] + (r["spill_loads"] or 0)
        where = str(r["seq"]) if r.get("run", run_id) == run_id else f"{r['run']}/{r['seq']}"  # --from another run
        t.add_row(str(i), where, r["family"] or "", r["hypothesis"], fmt(r["tflops"], ".1f"),
                  r["score_text"], ci, fmt(r["registers"], "d"), fmt(spills, "d"))
    return t


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


def diff_table(data: dict) -> Table:
    a, b = data["a"], data["b"]
    t = Table(title=f"{a['ref']} against {b['ref']}: +{data['lines_added']} −{data['lines_removed']} lines")
    for col in ("", a["ref"], b["ref"]):
        t.add_column(col, overflow="fold")
    rows = [("family", a["family"] or "–", b["family"] or "–"), ("status", a["status"], b["status"]),
            ("score", a.get("score_text", "–"), b.get("score_text", "–")),
            ("TFLOP/s", fmt(a.get("tflops"), ".1f"), fmt(b.get("tflops"), ".1f")),
            ("registers", fmt(a.get("registers"), "d"), fmt(b.get("registers"), "d")),
            ("spills (stores/loads)", f"{fmt(a.get('spill_stores'), 'd')}/{fmt(a.get('spill_loads'), 'd')}",
             f"{fmt(b.get('spill_stores'), 'd')}/{fmt(b.get('spill_loads'), 'd')}")]
    rows += [(f"knob {k}", str(va), str(vb)) for k, (va, vb) in data["knobs_changed"].items()]
    for row in rows:
        t.add_row(*row)
    return t


def candidates_table(rows: list[dict], objective: str = "score") -> Table:
    t = Table(title="candidates")
    for col in ("#", "family", "proposer", "status", "TFLOP/s", objective, "regs", "decision"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(str(r["seq"]), r["family"] or "", r["proposer"], r["status"], fmt(r["tflops"], ".1f"),
                  r["score_text"], fmt(r["registers"], "d"), (r["decision"] or "")[:80])
    return t


def measure_table(kernel: str, outcomes: list, objective=None) -> Table:
    if objective is not None and "cuBLAS" not in objective.name:  # a simulated kernel: its cycles
        t = Table(title=f"{kernel}: simulated")
        for col in ("#", "status", objective.name, "bound", "% of bound", "sim s", "detail"):
            t.add_column(col, overflow="fold")
        for i, o in enumerate(outcomes):
            m = o.metrics
            t.add_row(str(i + 1), o.status, fmt(o.score, ".0f"), fmt(m.get("bound_cycles"), ".0f"),
                      fmt(m.get("pct_of_bound"), ".1f"), fmt(o.seconds, ".1f"),
                      "" if o.status == "ok" else (o.log.splitlines() or [""])[0][:100])
        return t
    t = Table(title=f"{kernel}: gate and interleaved timing against cuBLAS")
    for col in ("#", "status", "TFLOP/s", "cuBLAS TFLOP/s", "× cuBLAS", "CI", "SM MHz", "W", "eval s", "detail"):
        t.add_column(col, overflow="fold")
    for i, o in enumerate(outcomes):
        m = o.metrics
        r = m.get("ratio", {})
        p = m.get("power", {})
        ci = f"{r['ci_low']:.4f}–{r['ci_high']:.4f}" if o.status == "ok" else "–"
        t.add_row(str(i + 1), o.status, fmt(m.get("tflops", {}).get("candidate"), ".1f"),
                  fmt(m.get("tflops", {}).get("cublas"), ".1f"), fmt(o.score, ".4f"), ci,
                  fmt(p.get("sm_clock_mhz", {}).get("mean"), ".0f"), fmt(p.get("power_w", {}).get("mean"), ".0f"),
                  fmt(o.seconds, ".2f"), "" if o.status == "ok" else o.log.splitlines()[0][:100])
    return t


PROFILE_ROWS = [
    ("time_us", "duration (µs)", ".1f"), ("sm_clock_mhz", "SM clock (MHz)", ".0f"),
    ("tensor_pipe_pct", "tensor pipe busy (%)", ".1f"), ("sm_throughput_pct", "SM throughput (% of peak)", ".1f"),
    ("l2_hit_pct", "L2 hit rate (%)", ".1f"), ("dram_mb", "DRAM traffic (MB)", ".1f"),
    ("dram_throughput_pct", "DRAM busy (% of peak)", ".1f"),
    ("registers", "registers / thread", ".0f"), ("smem_kb", "dynamic shared memory (KB)", ".0f"),
    ("grid", "grid (blocks)", ".0f"),
]


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


def profile_table(label: str, profile: dict) -> Table:
    """Candidate and baseline side by side: Nsight Compute's figures, then each kernel's top stall reasons."""
    cand, base = profile["candidate"], profile["baseline"]
    t = Table(title=f"{label}: Nsight Compute, candidate against the baseline")
    for col in ("metric", "candidate", "baseline"):
        t.add_column(col, overflow="fold")
    for key, name, spec in PROFILE_ROWS:
        if key in cand or key in base:
            t.add_row(name, fmt(cand.get(key), spec), fmt(base.get(key), spec))
    reasons = list(dict.fromkeys([*cand.get("stalls", {}), *base.get("stalls", {})]))
    for r in reasons:
        t.add_row(f"stall: {r} (warps per issue)", fmt(cand.get("stalls", {}).get(r), ".2f"),
                  fmt(base.get("stalls", {}).get(r), ".2f"))
    t.add_row("kernel", cand.get("kernel", ""), ", ".join(profile.get("baseline_kernels", [])))
    return t


def replay_table(data: dict) -> Table:
    """Recorded beside replayed, step by step; ⚠ where they differ by more than the noise."""
    cycles = "cuBLAS" not in data["objective"]
    t = Table(title=f"replay of run {data['run']} ({data['campaign']}) on {data['fingerprint'].get('gpu', '?')}"
                    f"{'' if data['same_machine'] else ' (another machine or toolchain than the recording)'}")
    cols = ["step", "#", "technique"]
    cols += ["recorded", "replayed", "Δ"] if cycles else ["TFLOP/s rec.", "TFLOP/s now", "% of peak",
                                                           "× cuBLAS rec.", "× cuBLAS now", "Δ"]
    for col in [*cols, ""]:
        t.add_column(col, overflow="fold")
    for s in data["steps"]:
        rec, rep = s["recorded"], s["replayed"]
        name = f"{s['phase']}: {s['family']}" if s.get("phase") else (s["family"] or "?")
        now = fmt(rep["score"], ".0f" if cycles else ".3f") if rep["status"] == "ok" else f"[red]{rep['status']}[/]"
        delta = f"{s['delta']:+.1%}" if s["delta"] is not None else "–"
        flag = "[yellow]⚠[/]" if s["flag"] else ""
        if cycles:
            t.add_row(str(s["step"]), str(s["seq"]), name, fmt(rec["score"], ".0f"), now, delta, flag)
        else:
            t.add_row(str(s["step"]), str(s["seq"]), name, fmt(rec["tflops"], ".1f"), fmt(rep["tflops"], ".1f"),
                      fmt(rep["pct_peak"], ".1f"), fmt(rec["score"], ".3f"), now, delta, flag)
    return t


def fingerprints_table(data: dict) -> Table:
    t = Table(title="where the recording and the replay differ")
    for col in ("", "recorded", "this machine"):
        t.add_column(col, overflow="fold")
    for k, (was, now) in data["differences"].items():
        t.add_row(k, str(was), str(now))
    return t


def ladder_table(shape: tuple[int, int, int], run_id: int, rows: list[dict]) -> Table:
    M, N, K = shape
    t = Table(title=f"ladder at {M}×{N}×{K} (run {run_id}): each family's best, interleaved with cuBLAS")
    for col in ("rung", "family", "configuration", "TFLOP/s", "× cuBLAS", "CI", "regs", "spills", "HGMMA", "passed"):
        t.add_column(col, overflow="fold")
    for r in rows:
        ci = f"{r['ci_low']:.3f}–{r['ci_high']:.3f}" if r["ci_low"] is not None else "–"
        knobs = " ".join(f"{k}={v}" for k, v in r["knobs"].items()) or "–"
        hg = {True: "yes", False: "no", None: "–"}[r["has_hgmma"]]
        t.add_row(str(r["rung"]), r["family"], knobs if r["score"] is not None else f"[red]{r['note']}[/]",
                  fmt(r["tflops"], ".1f"), fmt(r["score"]), ci, fmt(r["registers"], "d"), fmt(r["spills"], "d"),
                  hg, f"{r['passed']}/{r['tried']}")
    return t


def sections_table(sections: list[Section]) -> Group:
    """A harness's report tables, one after the other."""
    tables = []
    for sec in sections:
        t = Table(title=sec.title, caption=sec.caption or None)
        for col in sec.columns:
            t.add_column(col, overflow="fold")
        for row in sec.rows:
            t.add_row(*row)
        tables.append(t)
    return Group(*tables)
