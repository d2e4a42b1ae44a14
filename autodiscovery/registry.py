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
    from autodiscovery.interfaces import AgentBase, HarnessBase

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


def harness(name: str) -> type[HarnessBase]:
    """The harness class named in a campaign's `harness.name`."""
    return _load("harness", name, HARNESSES)


def harness_for(config: dict) -> type[HarnessBase]:
    """The harness class of a campaign's configuration, as loaded or as a run recorded it: the one its
    `harness.name` names, or the subclass its settings choose (`HarnessBase.for_config`: a baseline that
    changes the objective)."""
    settings = config.get("harness") or {}
    return harness(settings.get("name", "hopper_gemm")).for_config(config)


def make_harness(campaign: Campaign) -> HarnessBase:
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
