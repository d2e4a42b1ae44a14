"""What the LLM agent tells the model: the rules, the hardware, the kernel to change with its build and
profile facts, how the run got here, other kernels for ideas, and the last attempts with their verdicts
and diffs; fitted to the model's context by leaving out the least useful parts first."""

from __future__ import annotations

import difflib
import functools
import warnings
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import jinja2

from autodiscovery.agents.programs import Draw, Entry
from autodiscovery.interfaces import History, Record, columns
from autodiscovery.roles import Briefing, Evaluating, generic_brief
from autodiscovery.store import CandidateStatus
from autodiscovery.toolkit.manifest import is_triton

LOG_LINES = 12  # lines of a compile error or gate failure shown per attempt
SHOWN = frozenset(CandidateStatus) - {CandidateStatus.proposed}
"""Statuses of the attempts a prompt lists: concluded ones (a proposal still waiting says nothing yet)."""


def language(source: str) -> str:
    """The fence a kernel's code is shown in: `python` for a Triton file (its `@triton.jit` functions),
    `cuda` for CUDA C++."""
    return "python" if is_triton(source) else "cuda"


def environment() -> jinja2.Environment:
    folder = resources.files("autodiscovery.agents") / "prompts"
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, trim_blocks=True)


def trim(log: str, lines: int = LOG_LINES) -> str:
    keep = [line for line in (log or "").splitlines() if line.strip() and "ptxas info" not in line]
    errors = [line for line in keep if "error" in line.lower()] or keep
    return "\n".join(errors[:lines])


def score_text(r: Record, harness: Evaluating) -> str:
    """A record's score in the objective, with the harness's prompt figures: '0.877× …, 677.4 TFLOP/s'."""
    if r.score is None:
        return ""
    figures = [c.named(v) for c in columns(harness, "prompt")
               if (v := c.value(r.metrics, r.build)) is not None]
    return ", ".join([harness.objective.format(r.score), *figures])


def build_text(b: dict, harness: Evaluating) -> str:
    """The compiler's facts in one line, then the harness's own notes: '168 registers, 0 B static shared
    memory, no spills, 0 B stack, …'."""
    if not b or b.get("registers") is None:
        return ""
    parts = [f"{b['registers']} registers"]
    if b.get("smem_static") is not None:
        parts.append(f"{b['smem_static']} B static shared memory")
    stores, loads = b.get("spill_stores") or 0, b.get("spill_loads") or 0
    parts.append(f"{stores} B spill stores, {loads} B spill loads" if stores or loads else "no spills")
    if b.get("stack") is not None:
        parts.append(f"{b['stack']} B stack")
    return ", ".join([*parts, *(harness.build_notes(b) if isinstance(harness, Briefing) else [])])


def diff(old: str, new: str, lines: int) -> str:
    """A unified diff of two kernels, at most `lines` lines of it ('' when they are the same)."""
    out = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "before", "after", n=2, lineterm=""))[2:]
    if len(out) > lines:
        out = [*out[:lines], f"… ({len(out) - lines} more lines)"]
    return "\n".join(out)


@dataclass
class Parts:
    """The optional parts of a prompt: what fitting it to a context leaves out, in this order."""

    attempts: list[dict] = field(default_factory=list)
    inspirations: list[dict] = field(default_factory=list)
    lineage: list[dict] = field(default_factory=list)

    def cut(self) -> bool:
        """Leave out the least useful part left; False when only the essentials remain."""
        with_diff = next((a for a in self.attempts if a["diff"]), None)
        if with_diff is not None:
            with_diff["diff"] = ""  # the oldest attempt's diff first
        elif self.attempts:
            self.attempts.pop(0)
        elif self.inspirations:
            self.inspirations.pop()
        elif len(self.lineage) > 1:
            self.lineage.pop(0)  # the kept step the incumbent came from stays
        else:
            return False
        return True


class PromptBuilder:
    """Renders the system and user messages of a proposal: the harness says what the task is and what the
    machine is (`brief`, `hardware`: where it is `Briefing`; else the task in words from its objective), and
    how its figures read; the rest is the run's own history."""

    def __init__(self, harness: Evaluating, fingerprint: dict, attempts_shown: int = 8, diff_lines: int = 40) -> None:
        self.harness, self.fingerprint = harness, fingerprint
        self.briefing = harness if isinstance(harness, Briefing) else None
        self.attempts_shown, self.diff_lines = attempts_shown, diff_lines
        self.env = environment()

    def system(self) -> str:
        brief = self.briefing.brief(self.fingerprint) if self.briefing else generic_brief(self.harness.objective)
        return self.env.get_template("system.j2").render(brief=brief)

    def _score(self, r: Record) -> str:
        return score_text(r, self.harness)

    def parts(self, history: History, draw: Draw) -> Parts:
        by_seq = {r.seq: r for r in history.records}
        parent = draw.parent.record
        chain = [r for r in history.records if r.kept or r.seq == 0]
        lineage, before = [], None
        for r in chain:
            gain = f"{r.score / before.score:.2f}× over #{before.seq}" if r.score and before and before.score \
                else ""
            lineage.append({"seq": r.seq, "family": r.family or "?", "score": self._score(r) or r.status,
                            "gain": gain, "hypothesis": _one_line(r.hypothesis)})
            before = r if r.score else before
        shown = [r for r in history.records if r.seq != 0 and r.status in SHOWN]
        attempts = []
        for r in shown[-self.attempts_shown:] if self.attempts_shown else []:
            base = by_seq.get(r.parent_seq) if r.parent_seq is not None else None
            attempts.append({
                "seq": r.seq, "status": r.status, "score": self._score(r), "build": build_text(r.build, self.harness),
                "from": r.parent_seq, "hypothesis": _one_line(r.hypothesis), "reason": _one_line(r.reason),
                "log": trim(r.log) if r.score is None and r.status != CandidateStatus.rejected else "",
                "diff": diff(base.source, r.source, self.diff_lines) if base and r.source and self.diff_lines else "",
            })
        inspirations = [self._inspiration(e, parent) for e in draw.inspirations]
        return Parts(attempts, inspirations, lineage)

    def _inspiration(self, e: Entry, parent: Record) -> dict:
        """An inspiration as the prompt shows it: its code whole, or as a diff from the parent where that is
        shorter."""
        r = e.record
        change = diff(parent.source, r.source, 10**9)
        as_diff = bool(change) and len(change) < len(r.source)
        return {"seq": r.seq, "role": e.role, "family": r.family or "?", "score": self._score(r) or r.status,
                "build": build_text(r.build, self.harness), "hypothesis": r.hypothesis,
                "code": change if as_diff else r.source.strip(), "lang": "diff" if as_diff else language(r.source)}

    def user(self, history: History, draw: Draw, parts: Parts, variant_note: bool) -> str:
        parent, incumbent = draw.parent.record, history.incumbent or draw.parent.record
        return self.env.get_template("propose.j2").render(**{
            "hardware": self.briefing.hardware(self.fingerprint, history) if self.briefing else "",
            "parent": {"seq": parent.seq, "role": draw.parent.role, "family": parent.family or "?",
                       "score": self._score(parent) or "not measured", "build": build_text(parent.build, self.harness),
                       "source": parent.source.strip(), "lang": language(parent.source),
                       "profile": self.briefing.prompt_profile(parent.seq, parent.profile)
                                  if parent.profile and self.briefing else ""},
            "incumbent": {"seq": incumbent.seq, "score": self._score(incumbent) or "not measured"},
            "from_incumbent": parent.seq == incumbent.seq,
            "lineage": parts.lineage, "inspirations": parts.inspirations, "attempts": parts.attempts,
            "variant_note": variant_note,
        })

    def fit(self, history: History, draw: Draw, room: int | None, reserve: int = 0) -> str:
        """The user message, with parts left out until it and `reserve` more tokens fit in `room`."""
        parts = self.parts(history, draw)
        note = draw.variant > 0
        text = self.user(history, draw, parts, note)
        if room is None:
            return text
        while tokens(text) + reserve > room and parts.cut():
            text = self.user(history, draw, parts, note)
        return text


def _one_line(text: str, limit: int = 400) -> str:
    """One line, cut at a word within `limit` characters."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[:limit].rsplit(" ", 1)[0] + " …"


def tokens(text: str) -> int:
    """Tokens in `text`: counted with tiktoken where it is installed (and its tables are at hand), else
    estimated (3.5 characters a token, on the high side for code)."""
    encoding = _encoding()
    return len(encoding.encode(text)) if encoding is not None else int(len(text) / 3.5) + 1


@functools.lru_cache(maxsize=1)
def _encoding() -> Any:
    """Looked up once a process: fitting a prompt counts it again after every cut. Without tiktoken, or
    without its tables (fetched from the network on first use), tokens are estimated, and a warning says
    why once."""
    try:
        import tiktoken
    except ImportError:
        return None
    try:
        return tiktoken.get_encoding("o200k_base")
    except Exception as exc:  # tiktoken's own failures (a download refused, a cache unreadable) are many
        warnings.warn(f"tiktoken's o200k_base tables could not be loaded ({type(exc).__name__}: {exc}): "
                      "prompt sizes are estimated at 3.5 characters a token", RuntimeWarning, stacklevel=2)
        return None

