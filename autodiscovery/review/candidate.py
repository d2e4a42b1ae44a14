"""One candidate in a terminal (`show RUN/SEQ`): what it tried, what became of it and what it measured,
in a screen or two at any width; the whole record is `--json`, the source `--source`.

Every line is cut to the width, every cut says so (`…`), and a long text (a hypothesis, a log) is shown
up to a few lines with what was left out counted."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from autodiscovery.status import EvalKind, EvalStatus

if TYPE_CHECKING:
    from autodiscovery.interfaces import Objective
    from autodiscovery.roles import Shown

HYPOTHESIS_LINES = 6
DECISION_LINES = 3
LOG_LINES = 4


def wrapped(label: str, text: str | None, width: int, most: int) -> list[str]:
    """`label: text` wrapped to `width`, at most `most` lines; a cut one ends with '…'."""
    if not text:
        return []
    lines = textwrap.wrap(f"{label}: {' '.join(text.split())}", width, subsequent_indent="  ",
                          break_long_words=True, break_on_hyphens=False)
    if len(lines) > most:
        lines = lines[:most]
        lines[-1] = lines[-1][:width - 1].rstrip() + "…"
    return lines


def clipped(text: str, width: int, most: int, indent: str = "  ") -> list[str]:
    """A log's first `most` lines, each cut to the width, and how many more there are."""
    rows = [r for r in text.splitlines() if r.strip()]
    out = [indent + (r if len(indent + r) <= width else r[:width - len(indent) - 1] + "…") for r in rows[:most]]
    if len(rows) > most:
        out.append(f"{indent}… {len(rows) - most} more line{'s' if len(rows) - most > 1 else ''}")
    return out


def evaluation_line(e: dict, objective: Objective, width: int) -> str:
    """kind, status, the objective with its interval where it measured, pairs, seconds, device."""
    parts = [e["kind"], e["status"]]
    m = e.get("metrics") or {}
    score = objective.read(m) if e["status"] == EvalStatus.ok else None
    if e["kind"] == EvalKind.head_to_head and isinstance(r := m.get("ratio"), dict) and "median" in r:
        parts.append(f"{r['median']:.3f}× the incumbent ({r.get('ci_low', 0):.3f}–{r.get('ci_high', 0):.3f})")
    elif isinstance(score, (int, float)):
        bounds = objective.bounds(m)
        parts.append(objective.format(score) + (f" ({bounds[0]:.3f}–{bounds[1]:.3f})" if bounds else ""))
    if m.get("pairs"):
        screened = m.get("screened")
        parts.append(f"{m['pairs']} pairs" + (" (screened)" if screened else ""))
    if e.get("seconds"):
        parts.append(f"{e['seconds']:.1f} s")
    line = "  " + " · ".join(str(p) for p in parts)
    return line if len(line) <= width else line[:width - 1] + "…"


def lines(data: dict, harness: Shown, width: int) -> list[str]:
    """The candidate, as plain lines no wider than `width` (the caller prints them and the hints)."""
    width = max(40, width)
    out = [f"run {data['run']} candidate #{data['seq']} · {data['family']} · {data['status']} · {data['proposer']}"]
    out += wrapped("hypothesis", data["hypothesis"], width, HYPOTHESIS_LINES)
    if data["decision"]:
        out += wrapped("decision", f"{data['verdict']}: {data['decision']}", width, DECISION_LINES)
    if data["knobs"]:
        out += wrapped("knobs", ", ".join(f"{k}={v}" for k, v in data["knobs"].items()), width, 4)
    build = {k: data[k] for k in ("registers", "spill_stores", "spill_loads", "stack", "smem_static")
             if data.get(k) is not None} | dict(data.get("facts") or {})
    if build:
        out += wrapped("build", ", ".join(f"{k}={v}" for k, v in build.items()), width, 3)
    evaluations = [e for e in data["evaluations"] if e["kind"] != "profile" or e["status"] != EvalStatus.ok]
    if evaluations:
        out.append("evaluations:")
        for e in evaluations:
            out.append(evaluation_line(e, harness.objective, width))
            if e["log"]:
                out += clipped(e["log"], width, LOG_LINES, "    ")
    if data["build"] and data["build"]["log"]:
        out.append("build log:")
        out += clipped(data["build"]["log"], width, LOG_LINES)
    return out
