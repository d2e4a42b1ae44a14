"""The shipped harnesses and agents offer every hook the loop uses, through the two Protocols."""

from __future__ import annotations

import pytest

from autodiscovery import campaign as campaigns
from autodiscovery import registry
from autodiscovery.campaign import ProblemBase
from autodiscovery.interfaces import Agent, Harness, HarnessBase, Objective


@pytest.mark.parametrize("name, campaign", [("hopper_gemm", "hopper-gemm"), ("accelsim", "edge-codesign")])
def test_shipped_harnesses_are_harnesses(name, campaign):
    cls = registry.harness(name)
    harness = cls(campaigns.load(campaign))
    assert isinstance(harness, Harness) and isinstance(cls.objective, Objective)
    assert cls.Settings.model_fields["name"].default == name


@pytest.mark.parametrize("kind, campaign, extra", [
    ("search", "hopper-gemm", []), ("llm", "hopper-gemm", ["agent.llm.models=[{name: m}]"]),
    ("codesign", "edge-codesign", []),
])
def test_shipped_agents_are_agents(kind, campaign, extra, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    agent = registry.agent(kind)(campaigns.load(campaign, [f"agent.kind={kind}", *extra]))
    assert isinstance(agent, Agent)


def test_objectives_say_which_way_is_better():
    speed = registry.harness("hopper_gemm").objective
    cycles = registry.harness("accelsim").objective
    assert speed.better(1.05, 1.0, 0.01) and not speed.better(1.005, 1.0, 0.01)
    assert cycles.better(900, 1000, 0.05) and not cycles.better(990, 1000, 0.05)
    assert speed.format(0.8771) == "0.877× cuBLAS" and cycles.format(23977) == "23977 cycles"
    assert cycles.reached(23000, 24000) and not speed.reached(0.9, 1.0)


class Bare(HarnessBase):
    name = "bare"


def test_a_harness_declares_what_it_does_not_offer(tmp_path):
    """The optional capabilities read from the base class, each saying "not here": no problem of its own,
    no columns, no library, no lineage measured together, no fit, no sanitizer."""
    assert Bare.Problem is ProblemBase and Bare.columns == () and not Bare.library and Bare.for_config({}) is Bare
    bare = Bare()
    assert bare.replay([]) is None and bare.fit("", {}) is None and bare.sanitize("", None) is None
    with pytest.raises(NotImplementedError, match="bare harness does not write libraries"):
        Bare.export_library([], tmp_path)
    assert registry.harness("hopper_gemm").library and not registry.harness("accelsim").library
    assert registry.harness("accelsim").Problem is not ProblemBase
