"""What passes between the loop, its agents and its harnesses: a proposal, a launch a cubin must define,
an evaluation's outcome, and what an agent sees of a run (a record a candidate, and the history).
`autodiscovery.interfaces` carries them with the two interfaces."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autodiscovery.objective import Objective

if TYPE_CHECKING:
    from autodiscovery.store import EvalStatus, Verdict


@dataclass
class Entry:
    """One launch of a candidate's plan, as the built cubin must define it."""

    kernel: str
    """The entry point's name (an extern "C" __global__ function)."""
    arg_bytes: list[int]
    """The size of each argument passed, in order (a pointer 8, an int32 4, a CUtensorMap 128)."""
    where: str = ""
    """How the manifest names this launch ('launches[1]'), for messages."""
    trusted: list[str] = field(default_factory=list)
    """Tensors it passes by a name the harness cannot place before the GPU runs the problem (a module's
    parameters), taken on trust until then: a misspelt input shows here."""


@dataclass
class Outcome:
    """What a harness reports for one evaluation."""

    status: EvalStatus
    metrics: dict = field(default_factory=dict)
    log: str = ""
    seconds: float = 0.0
    device: str = ""
    score: float | None = None
    """The objective's value, for an `ok` outcome (the harness sets it; the store keeps the metrics, where
    the objective's `path` finds it again)."""


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
    """The objective's value of its own measurement (None when it did not pass the gate)."""
    kept: bool
    source_hash: str
    hypothesis: str = ""
    log: str = ""
    source: str = ""
    proposer: str = ""
    build: dict[str, Any] = field(default_factory=dict)
    """What the store keeps of its build, where there was one: registers, smem_static, spill_stores,
    spill_loads, stack, and the harness's own facts."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """The metrics of its own measurement, where it passed the gate (what a harness's columns read)."""
    parent_seq: int | None = None
    """The candidate it was made from, in this run (None: the seed, or one from another run)."""
    verdict: Verdict | None = None
    """keep or revert, once decided."""
    reason: str = ""
    """Why it was kept, reverted or refused, in words."""
    profile: dict[str, Any] = field(default_factory=dict)
    """Its latest profile (what the harness's `profile` measured), where `autodiscovery profile` stored one."""


@dataclass
class History:
    records: list[Record]
    incumbent: Record | None
    objective: Objective
    """What the scores mean and which way is better."""
