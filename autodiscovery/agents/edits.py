"""Edits in a model's reply: aider-style SEARCH/REPLACE blocks, or one whole kernel in a fenced block (CUDA
with a `__global__` entry, or a Triton file with a `@triton.jit` function).

A block is matched exactly first, then with relaxed leading whitespace. A block that matches nowhere is
never skipped: the result says which block failed and shows the nearest lines that do exist, so the
agent can answer the model precisely.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

BLOCK_RE = re.compile(
    r"^[ \t]*<{5,9} SEARCH[^\n]*\n(.*?)^[ \t]*={5,9}[ \t]*\n(.*?)^[ \t]*>{5,9} REPLACE[^\n]*$", re.S | re.M
)
FENCE_RE = re.compile(r"^```[\w+-]*[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
THINKING_RE = re.compile(r"<(think|thinking|reasoning)>.*?(</\1>|\Z)", re.S | re.I)
"""A reasoning model's thinking, when the server has no reasoning parser: drafts, never the answer."""
HYPOTHESIS_RE = re.compile(r"^\**\s*hypothesis\s*\**\s*:\s*\**\s*(.+)$", re.I | re.M)


@dataclass
class Edit:
    search: str
    replace: str


@dataclass
class Reply:
    hypothesis: str
    edits: list[Edit] = field(default_factory=list)
    whole: str | None = None


@dataclass
class Applied:
    source: str
    failed: list[int] = field(default_factory=list)
    applied: list[int] = field(default_factory=list)
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.failed and not self.message


def parse(reply: str) -> Reply:
    reply = THINKING_RE.sub("", reply)  # blocks drafted while thinking are never applied
    m = HYPOTHESIS_RE.search(reply)
    if m:
        hypothesis = m.group(1).strip().strip("*").strip()
    else:  # the first line of prose before any block
        prose = re.split(r"^```|^[ \t]*<{5,9} SEARCH", reply, maxsplit=1, flags=re.M)[0]
        hypothesis = next((line.strip() for line in prose.splitlines() if line.strip()), "")
    edits = [Edit(s, r) for s, r in BLOCK_RE.findall(reply)]
    whole = None
    if not edits:
        fenced = [f for f in FENCE_RE.findall(reply) if "__global__" in f or "@triton.jit" in f]
        whole = fenced[-1] if fenced else None
    return Reply(hypothesis[:2000], edits, whole)


def apply(source: str, reply: Reply) -> Applied:
    """Apply the reply's edits to `source`; failures are reported, never skipped."""
    if reply.whole is not None:
        return Applied(reply.whole if reply.whole.endswith("\n") else reply.whole + "\n")
    if not reply.edits:
        return Applied(source, message=(
            "Your reply had no usable edit: give SEARCH/REPLACE blocks "
            "(<<<<<<< SEARCH / ======= / >>>>>>> REPLACE) or the whole kernel in one fenced code block."))
    out = Applied(source)
    for i, edit in enumerate(reply.edits, 1):
        new = replace_once(out.source, edit.search, edit.replace)
        if new is None:
            out.failed.append(i)
        else:
            out.source = new
            out.applied.append(i)
    if out.failed:
        out.message = failure_message(out, reply)
    elif out.source == source:
        out.message = "Your edits left the kernel unchanged: change something that tests the hypothesis."
    return out


def replace_once(source: str, search: str, replace: str) -> str | None:
    if not search.strip():
        return None
    if search in source:
        return source.replace(search, replace, 1)
    lines, want = source.splitlines(keepends=True), search.splitlines(keepends=True)
    stripped = [line.lstrip() for line in want]
    for i in range(len(lines) - len(want) + 1):
        if [line.lstrip() for line in lines[i:i + len(want)]] == stripped:
            indent = _indent(lines[i]) if want[0].strip() else ""
            theirs = _indent(want[0])
            fixed = [_reindent(line, theirs, indent) for line in replace.splitlines(keepends=True)]
            if fixed and not fixed[-1].endswith("\n") and i + len(want) < len(lines):
                fixed[-1] += "\n"
            return "".join(lines[:i] + fixed + lines[i + len(want):])
    return None


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _reindent(line: str, theirs: str, ours: str) -> str:
    if line.startswith(theirs):
        return ours + line[len(theirs):]
    return line


def nearest(source: str, search: str) -> str:
    """The run of source lines most like `search`, to show the model what does exist."""
    lines, want = source.splitlines(), search.splitlines()
    n = max(1, len(want))
    best, best_i = 0.0, 0
    for i in range(max(1, len(lines) - n + 1)):
        ratio = difflib.SequenceMatcher(None, "\n".join(lines[i:i + n]), "\n".join(want)).ratio()
        if ratio > best:
            best, best_i = ratio, i
    return "\n".join(lines[best_i:best_i + n])


def failure_message(out: Applied, reply: Reply) -> str:
    parts = []
    for i in out.failed:
        parts.append(
            f"SEARCH block {i} does not match the current kernel (not exactly, nor with relaxed leading "
            f"whitespace). Did you mean these lines?\n```\n{nearest(out.source, reply.edits[i - 1].search)}\n```"
        )
    if out.applied:
        parts.append(f"Blocks {', '.join(map(str, out.applied))} applied and are kept; resend only the failed "
                     "block(s), with SEARCH text copied exactly from the kernel as it is now.")
    else:
        parts.append("No block applied. Resend the edit with SEARCH text copied exactly from the kernel.")
    return "\n\n".join(parts)
