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
    origin_id: int | None = None
    """A candidate of another run that this one continues (the seed of a run started with --from)."""


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
    """registers, smem_static, spill_stores, spill_loads, stack, has_hgmma of its build, where there was one."""
    tflops: float | None = None
    parent_seq: int | None = None
    """The candidate it was made from, in this run (None: the seed, or one from another run)."""
    verdict: str | None = None
    """keep or revert, once decided."""
    reason: str = ""
    """Why it was kept, reverted or refused, in words."""
    profile: dict[str, Any] = field(default_factory=dict)
    """Its latest Nsight Compute profile ({candidate, baseline, ...}), where `profile` stored one."""


@dataclass
class History:
    records: list[Record]
    incumbent: Record | None
    objective: Objective = field(default_factory=lambda: Objective("× cuBLAS", True, ("ratio", "median")))
    """What the scores mean and which way is better."""

    @property
    def hashes(self) -> set[str]:
        return {r.source_hash for r in self.records}
