"""Agents propose candidates; the loop builds, gates, measures and keeps or reverts them."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from autodiscovery import AutoDiscoveryError

REGISTRY = {
    "search": "autodiscovery.agents.search:SearchAgent",
    "llm": "autodiscovery.agents.llm:LlmAgent",
    "codesign": "autodiscovery.agents.codesign:CodesignAgent",
}


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

    @property
    def hashes(self) -> set[str]:
        return {r.source_hash for r in self.records}


class Agent(Protocol):
    name: str

    def propose(self, history: History, n: int) -> list[Proposal]:
        """Up to `n` new proposals given everything tried so far; [] when it has nothing left."""
        ...


def get(name: str):
    if name not in REGISTRY:
        raise AutoDiscoveryError(f"unknown agent '{name}' (available: {', '.join(REGISTRY)})")
    module, _, cls = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), cls)
