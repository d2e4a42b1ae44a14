"""Agents propose candidates; the loop builds, gates, measures and keeps or reverts them.

What an agent must offer is `autodiscovery.interfaces.Agent`; here are what passes through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autodiscovery.interfaces import Objective


@dataclass
class Proposal:
    """One candidate: a hypothesis in words and the kernel it leads to."""

    hypothesis: str
    source: str
    proposer: str
    family: str | None = None
    knobs: dict[str, Any] = field(default_factory=dict)
    rejected: str | None = None
    """Why it was refused before compiling (a failed constraint), if it was."""
    llm_calls: list[int] = field(default_factory=list)
    """Ids of the logged LLM calls that led to it."""
    parent_seq: int | None = None
    """The candidate it was made from (its source edited, its knobs moved); None: the incumbent."""


@dataclass
class Record:
    """What an agent sees of one earlier candidate."""

    seq: int
    family: str | None
    knobs: dict[str, Any]
    status: str
    score: float | None
    """× cuBLAS of its own measurement (None when it did not pass the gate)."""
    kept: bool
    source_hash: str
    hypothesis: str = ""
    log: str = ""
    source: str = ""
    proposer: str = ""
    build: dict[str, Any] = field(default_factory=dict)
    """registers, spill_stores, spill_loads, stack of its build, where there was one."""
    tflops: float | None = None


@dataclass
class History:
    records: list[Record]
    incumbent: Record | None
    objective: Objective = field(default_factory=lambda: Objective("× cuBLAS", True, ("ratio", "median")))
    """What the scores mean and which way is better."""

    @property
    def hashes(self) -> set[str]:
        return {r.source_hash for r in self.records}
