"""The agent the loop talks to, and what passes between it, the loop and a harness (from `records.py`
and `objective.py`, named here too). The harness's side is in `roles.py`.

An `Agent` proposes candidates; a harness builds, checks and measures them and says what the number
means (its `Objective`). The loop uses these members of an agent and nothing else. The optional ones have
defaults in `AgentBase`, so an agent states only what it does differently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from autodiscovery.campaign import Campaign
from autodiscovery.objective import VIEWS, Chart, Column, Objective, Section, columns  # noqa: F401
from autodiscovery.records import Entry, History, Outcome, Proposal, Record  # noqa: F401

if TYPE_CHECKING:
    from autodiscovery.roles import Evaluating
    from autodiscovery.store import Store


@runtime_checkable
class Agent(Protocol):
    name: str
    batch: int
    """Proposals a round."""
    exhausted_reason: str
    """The stop reason when `propose` returns nothing."""
    overlap: bool
    """Whether proposals may be asked for while earlier candidates are still measured (`ahead`)."""
    speculate: bool
    """Whether proposals cost nothing but time (no request, no state): then they may also be asked for
    only to start their builds, before the verdicts they depend on are in."""

    def ahead(self, history: History) -> bool:
        """Whether the next proposals may be asked for now, with the verdicts of the last candidates not yet
        known (`history` shows them as proposed): True only where they do not depend on those verdicts."""

    def propose(self, history: History, n: int) -> list[Proposal]:
        """Up to `n` new proposals given everything tried so far; [] when it has nothing left."""

    def seed_proposal(self, campaign: Campaign) -> Proposal:
        """The campaign's seed as a proposal."""

    def opening(self, campaign: Campaign, history: History) -> list[Proposal]:
        """A new run's first candidates (`history` holds none yet): the seed, or where the agent starts
        instead."""

    def bind(self, store: Store, run_id: int, harness: Evaluating, fingerprint: dict,
             devices: int | None = None) -> None:
        """Called once the run exists, before the first proposal: the harness (the agent asks it the roles
        it uses: `Fitting`, `Briefing`) and the devices evaluations run on at once (None: the harness's
        `parallel`)."""

    def preflight(self) -> None:
        """Raise an AutoDiscoveryError now if the agent cannot work (an endpoint that refuses, say)."""


class NoSettings(BaseModel):
    """The settings of an agent that has none."""

    model_config = ConfigDict(extra="forbid")


class AgentBase:
    """Defaults for the optional hooks of `Agent`."""

    name = "agent"
    batch: int = 1
    exhausted_reason = "search space exhausted: the agent has nothing left to propose"
    overlap: bool = False
    """Whether proposals may be asked for while earlier candidates are still measured (off: each round is
    proposed once every candidate before it is decided)."""
    speculate: bool = False
    """Whether proposals cost nothing but time (no request to pay for, no state kept): they may then be
    asked for speculatively, only to start their builds."""
    Settings: ClassVar[type[BaseModel]] = NoSettings
    """The pydantic model of the agent's section of the campaign's `agent:` (`agent.<section>`)."""
    section: ClassVar[str | None] = None
    """The name of that section (None: the agent's `name`)."""

    def __init__(self, campaign: Campaign | None = None) -> None:
        """An agent is made from its campaign (`registry.agent(kind)(campaign)`); the base keeps nothing."""

    @classmethod
    def check(cls, settings: BaseModel) -> None:
        """Raise ValueError('field: why') when these settings cannot work for this agent as the one that
        proposes (a section may be valid for a run of another agent)."""

    def seed_proposal(self, campaign: Campaign) -> Proposal:
        return Proposal(hypothesis="The seed: the starting point every change is measured from.",
                        source=campaign.seed_path().read_text(), proposer="seed",
                        family=campaign.seed_path().name.split(".")[0])

    def opening(self, campaign: Campaign, history: History) -> list[Proposal]:
        return [self.seed_proposal(campaign)]

    def bind(self, store: Store, run_id: int, harness: Evaluating, fingerprint: dict,
             devices: int | None = None) -> None:
        pass

    def preflight(self) -> None:
        pass

    def propose(self, history: History, n: int) -> list[Proposal]:
        raise NotImplementedError(f"the {self.name} agent proposes nothing")

    def ahead(self, history: History) -> bool:
        """By default: `overlap` (an agent whose proposals depend on its history says more precisely)."""
        return self.overlap
