"""Where the harnesses and agents live: a name for each that ships, or any `module:Class`.

Core code names harnesses and agents only here, as strings, and imports one only when a campaign asks
for it; a harness kept anywhere on the Python path runs with `harness: {name: "package.module:Class"}`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from autodiscovery import AutoDiscoveryError

if TYPE_CHECKING:
    from autodiscovery.campaign import Campaign
    from autodiscovery.interfaces import AgentBase
    from autodiscovery.roles import Evaluating, Kind

HARNESSES = {
    "hopper_gemm": "harnesses.hopper_gemm:HopperGemmHarness",
    "accelsim": "harnesses.accelsim:AccelsimHarness",
    "reference": "harnesses.reference:ReferenceHarness",
}
AGENTS = {
    "search": "autodiscovery.agents.search:SearchAgent",
    "llm": "autodiscovery.agents.llm:LlmAgent",
    "codesign": "harnesses.accelsim.agent:CodesignAgent",
}


class RegistryError(AutoDiscoveryError):
    pass


def _load(kind: str, name: str, table: dict[str, str]) -> type:
    spec = table.get(name, name)
    if ":" not in spec:
        raise RegistryError(f"unknown {kind} '{name}' (available: {', '.join(table)}, or module:Class)")
    module, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise RegistryError(f"{kind} '{name}' cannot be loaded from {spec}: {exc}") from None


def harness(name: str) -> Kind:
    """The harness class named in a campaign's `harness.name`; refused, naming what it lacks, where it is
    not one (the members of `Evaluating`) or plays a role only in part (`roles.incomplete`)."""
    from autodiscovery.roles import Kind, incomplete

    cls = _load("harness", name, HARNESSES)
    lacks = incomplete(cls) if isinstance(cls, type) else ["it is not a class"]
    if lacks or not isinstance(cls, Kind):
        raise RegistryError(f"harness '{name}' cannot be used: {'; '.join(lacks or ['it is not a class'])} "
                            "(see autodiscovery/roles.py)")
    return cls


def harness_for(config: dict) -> Kind:
    """The harness class of a campaign's configuration, as loaded or as a run recorded it: the one its
    `harness.name` names, or the class it chooses for these settings (`roles.Choosing`: a baseline that
    changes the objective)."""
    from autodiscovery.roles import Choosing

    settings = config.get("harness") or {}
    cls = harness(settings.get("name", "hopper_gemm"))
    return cls.for_config(config) if isinstance(cls, Choosing) else cls


def make_harness(campaign: Campaign) -> Evaluating:
    """The harness a campaign runs with: the class its settings choose, made from it."""
    return harness_for({"harness": campaign.harness.model_dump(mode="json")})(campaign)


def agent(name: str) -> type[AgentBase]:
    """The agent class named in a campaign's `agent.kind`."""
    return _load("agent", name, AGENTS)


def agent_of_section(section: str) -> type[AgentBase]:
    """The agent a section of `agent:` belongs to, by its name (the shipped agents' sections are named
    after them)."""
    if section not in AGENTS:
        raise RegistryError(f"no agent has a section named '{section}' (shipped: {', '.join(AGENTS)}; a "
                            "module:Class agent's section is named by its `section` or `name`)")
    return agent(section)
