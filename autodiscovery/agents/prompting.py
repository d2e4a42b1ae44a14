"""What the LLM agent tells the model: the rules, the hardware, the kernel to change with its build and
profile facts, how the run got here, other kernels for ideas, and the last attempts with their verdicts
and diffs; fitted to the model's context by leaving out the least useful parts first."""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field
from importlib import resources

import jinja2

from autodiscovery.agents.programs import Draw, Entry
from autodiscovery.interfaces import History, Record

LOG_LINES = 12  # lines of a compile error or gate failure shown per attempt
SHOWN = ("kept", "reverted", "measured", "built", "rejected", "compile_error", "incorrect", "timeout", "crashed")
"""Statuses of the attempts a prompt lists: concluded ones (a proposal still waiting says nothing yet)."""
PROFILE_ROWS = [  # (key in a profile summary, label, format)
    ("time_us", "duration (µs)", ".1f"), ("sm_clock_mhz", "SM clock (MHz)", ".0f"),
    ("tensor_pipe_pct", "tensor pipe busy (%)", ".1f"), ("sm_throughput_pct", "SM throughput (% of peak)", ".1f"),
    ("l2_hit_pct", "L2 hit rate (%)", ".1f"), ("dram_throughput_pct", "DRAM throughput (% of peak)", ".1f"),
    ("dram_mb", "DRAM traffic (MB)", ".0f"), ("registers", "registers per thread", ".0f"),
    ("smem_kb", "dynamic shared memory (KB)", ".0f"), ("grid", "grid (blocks)", ".0f"),
]


def environment() -> jinja2.Environment:
    folder = resources.files("autodiscovery.agents") / "prompts"
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, trim_blocks=True)


def trim(log: str, lines: int = LOG_LINES) -> str:
    keep = [line for line in (log or "").splitlines() if line.strip() and "ptxas info" not in line]
    errors = [line for line in keep if "error" in line.lower()] or keep
    return "\n".join(errors[:lines])


def score_text(r: Record, unit: str = "× cuBLAS") -> str:
    if r.score is None:
        return ""
    tflops = f", {r.tflops:.1f} TFLOP/s" if r.tflops else ""
    return f"{r.score:.3f}{unit}{tflops}"


def build_text(b: dict) -> str:
    """ptxas's facts in one line: '168 registers, 0 B static shared memory, no spills, 0 B stack, HGMMA'."""
    if not b or b.get("registers") is None:
        return ""
    parts = [f"{b['registers']} registers"]
    if b.get("smem_static") is not None:
        parts.append(f"{b['smem_static']} B static shared memory")
    stores, loads = b.get("spill_stores") or 0, b.get("spill_loads") or 0
    parts.append(f"{stores} B spill stores, {loads} B spill loads" if stores or loads else "no spills")
    if b.get("stack") is not None:
        parts.append(f"{b['stack']} B stack")
    if b.get("has_hgmma") is not None:
        parts.append("wgmma (HGMMA) in the SASS" if b["has_hgmma"] else "no wgmma (HGMMA) in the SASS")
    return ", ".join(parts)


def profile_rows(profile: dict) -> list[tuple[str, str, str]]:
    """(metric, this kernel, the baseline) rows of a stored profile, stall reasons last."""
    cand, base = profile.get("candidate") or {}, profile.get("baseline") or {}

    def f(v, spec: str) -> str:
        return "–" if v is None else format(v, spec)

    rows = [(label, f(cand.get(k), spec), f(base.get(k), spec)) for k, label, spec in PROFILE_ROWS
            if k in cand or k in base]
    for reason in dict.fromkeys([*(cand.get("stalls") or {}), *(base.get("stalls") or {})]):
        rows.append((f"stall: {reason} (warps per issue)", f((cand.get("stalls") or {}).get(reason), ".2f"),
                     f((base.get("stalls") or {}).get(reason), ".2f")))
    return rows


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
    """Renders the system and user messages of a proposal."""

    def __init__(self, facts: dict, attempts_shown: int = 8, diff_lines: int = 40, unit: str = "× cuBLAS") -> None:
        self.facts, self.attempts_shown, self.diff_lines, self.unit = facts, attempts_shown, diff_lines, unit
        self.env = environment()

    def system(self) -> str:
        return self.env.get_template("system.j2").render(**self.facts)

    def parts(self, history: History, draw: Draw) -> Parts:
        by_seq = {r.seq: r for r in history.records}
        parent = draw.parent.record
        chain = [r for r in history.records if r.kept or r.seq == 0]
        lineage, before = [], None
        for r in chain:
            gain = f"{r.score / before.score:.2f}× over #{before.seq}" if r.score and before and before.score \
                else ""
            lineage.append({"seq": r.seq, "family": r.family or "?", "score": score_text(r, self.unit) or r.status,
                            "gain": gain, "hypothesis": _one_line(r.hypothesis)})
            before = r if r.score else before
        shown = [r for r in history.records if r.seq != 0 and r.status in SHOWN]
        attempts = []
        for r in shown[-self.attempts_shown:] if self.attempts_shown else []:
            base = by_seq.get(r.parent_seq) if r.parent_seq is not None else None
            attempts.append({
                "seq": r.seq, "status": r.status, "score": score_text(r, self.unit), "build": build_text(r.build),
                "from": r.parent_seq, "hypothesis": _one_line(r.hypothesis), "reason": _one_line(r.reason),
                "log": trim(r.log) if r.score is None and r.status != "rejected" else "",
                "diff": diff(base.source, r.source, self.diff_lines) if base and r.source and self.diff_lines else "",
            })
        inspirations = [self._inspiration(e, parent) for e in draw.inspirations]
        return Parts(attempts, inspirations, lineage)

    def _inspiration(self, e: Entry, parent: Record) -> dict:
        r = e.record
        change = diff(parent.source, r.source, 10**9)
        as_diff = bool(change) and len(change) < len(r.source)
        return {"seq": r.seq, "role": e.role, "family": r.family or "?", "score": score_text(r, self.unit) or r.status,
                "build": build_text(r.build), "hypothesis": r.hypothesis,
                "code": change if as_diff else r.source.strip(), "lang": "diff" if as_diff else "cuda"}

    def user(self, history: History, draw: Draw, parts: Parts, cublas_tflops: str, variant_note: bool) -> str:
        parent, incumbent = draw.parent.record, history.incumbent or draw.parent.record
        return self.env.get_template("propose.j2").render(**{
            **self.facts,
            "parent": {"seq": parent.seq, "role": draw.parent.role, "family": parent.family or "?",
                       "score": score_text(parent, self.unit) or "not measured", "build": build_text(parent.build),
                       "source": parent.source.strip(), "profile": profile_rows(parent.profile)},
            "incumbent": {"seq": incumbent.seq, "score": score_text(incumbent, self.unit) or "not measured"},
            "from_incumbent": parent.seq == incumbent.seq,
            "lineage": parts.lineage, "inspirations": parts.inspirations, "attempts": parts.attempts,
            "cublas_tflops": cublas_tflops, "variant_note": variant_note,
        })

    def fit(self, history: History, draw: Draw, room: int | None, cublas_tflops: str, reserve: int = 0) -> str:
        """The user message, with parts left out until it and `reserve` more tokens fit in `room`."""
        parts = self.parts(history, draw)
        note = draw.variant > 0
        text = self.user(history, draw, parts, cublas_tflops, note)
        if room is None:
            return text
        while tokens(text) + reserve > room and parts.cut():
            text = self.user(history, draw, parts, cublas_tflops, note)
        return text


def cublas_tflops(history: History) -> str:
    """The baseline's TFLOP/s as the run measured it (the median over the measurements)."""
    figures = sorted(r.tflops / r.score for r in history.records if r.tflops and r.score)
    return f"{figures[len(figures) // 2]:.0f}" if figures else ""


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
def _encoding():
    """Looked up once a process: fitting a prompt counts it again after every cut."""
    try:
        import tiktoken

        return tiktoken.get_encoding("o200k_base")
    except Exception:
        return None

