"""Small text helpers shared by the loop, the agents and the harnesses."""

from __future__ import annotations

import json
from typing import Any


def first_line(text: str | None) -> str:
    """The first non-blank line, stripped ('' if there is none)."""
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def canon(knobs: dict[str, Any]) -> str:
    """One string per set of knob values, whatever their order."""
    return json.dumps(knobs, sort_keys=True)


def plural(n: int, noun: str, many: str | None = None) -> str:
    """'1 candidate', '3 candidates' ('1 tuned shape', '2 tuned shapes'; `many` where +s is wrong)."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"


def tail(text: str | None, lines: int = 40) -> str:
    """The last `lines` lines of a process's output, stripped: where a failure says what it was."""
    return "\n".join((text or "").strip().splitlines()[-lines:])
