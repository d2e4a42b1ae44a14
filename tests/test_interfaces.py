"""The agent's Protocol and the harness's roles: the shipped ones play what they implement, a harness of
evaluating alone is one, a role played in part is refused, and the architecture page says each as the
code declares it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autodiscovery import campaign as campaigns
from autodiscovery import registry, roles
from autodiscovery.campaign import ProblemBase
from autodiscovery.interfaces import Agent, Objective


@pytest.mark.parametrize("name, campaign", [("hopper_gemm", "hopper-gemm"), ("accelsim", "edge-codesign")])
def test_shipped_harnesses_are_harnesses(name, campaign):
    cls = registry.harness(name)
    harness = cls(campaigns.load(campaign))
    assert isinstance(harness, roles.Evaluating) and isinstance(cls.objective, Objective)
    assert roles.declared(cls).Settings.model_fields["name"].default == name


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


class Bare:
    """A harness of evaluating alone: the six members of `Evaluating` and a constructor."""

    name = "bare"
    objective = Objective("score", higher_is_better=True, path=("score",))

    def __init__(self, campaign=None) -> None:
        pass

    def preflight(self, need_gpu: bool = True) -> dict:
        return {}

    def build(self, source):
        raise AssertionError("not built here")

    def evaluate(self, source, build, bar=None):
        raise AssertionError("not measured here")

    def head_to_head(self, challenger, incumbent):
        raise AssertionError("not measured here")


class HalfBriefing(Bare):
    """Tells the LLM agent the task but not the machine: a role played in part."""

    def brief(self, fingerprint: dict) -> str:
        return "the task"


class NoBuild:
    name = "no-build"
    objective = Bare.objective


def test_a_harness_plays_the_roles_it_implements_and_no_others():
    """A harness is what it implements: the bare one evaluates and plays no other role, and what it does
    not declare reads as the defaults (one at a time, no columns, the settings' base model)."""
    assert isinstance(Bare(), roles.Evaluating) and roles.played(Bare) == ["Evaluating"]
    assert roles.declared(Bare) == roles.Declared() and roles.declared(Bare).Problem is ProblemBase
    assert roles.incomplete(Bare) == []
    assert roles.played(registry.harness("accelsim")) == [
        "Evaluating", "Checking", "Replaying", "Summarizing", "Charting", "Doctoring"]
    gemm = set(roles.played(registry.harness("hopper_gemm")))
    assert gemm == {r.__name__ for r in roles.ROLES} - {"Summarizing"}
    assert {"Briefing", "Inspecting", "Sanitizing", "Choosing"} <= set(roles.played(registry.harness("reference")))
    assert not {"Fitting", "Profiling", "Exporting"} & set(roles.played(registry.harness("reference")))


def test_a_role_played_in_part_is_refused_when_the_harness_is_loaded(monkeypatch):
    """A harness with some of a role's members but not all is refused by the registry, naming the role,
    what it is for and the members it lacks; one without the members of evaluating, likewise."""
    import sys

    monkeypatch.setitem(sys.modules, "half_harness", sys.modules[__name__])
    with pytest.raises(registry.RegistryError, match=r"harness 'half_harness:HalfBriefing' cannot be used: Briefing "
                                                     r"\(the LLM agent's prompts\) lacks build_notes, hardware, "
                                                     r"prompt_profile"):
        registry.harness("half_harness:HalfBriefing")
    with pytest.raises(registry.RegistryError, match=r"Evaluating \(what the loop needs\) lacks build, evaluate, "
                                                     r"head_to_head, preflight"):
        registry.harness("half_harness:NoBuild")
    assert registry.harness("half_harness:Bare") is Bare


def test_a_setting_that_changes_the_objective_makes_its_class():
    """The registry's factory makes a campaign's harness as its settings choose it (`Choosing`): the
    class for its `harness.baseline`, else the named one; a recorded run's class is read from its
    configuration the same way. A class made directly is the class asked for."""
    import pickle

    lt, gemmex = campaigns.load("hopper-gemm", ["harness.baseline=best_lt"]), campaigns.load("hopper-gemm")
    made = registry.make_harness(lt)
    assert made.objective.name == "× best Lt" and type(made) is not registry.harness("hopper_gemm")
    assert type(registry.make_harness(gemmex)) is registry.harness("hopper_gemm")
    assert registry.harness_for(lt.model_dump(mode="json")) is type(made)
    assert type(pickle.loads(pickle.dumps(made))) is type(made)
    compile_ = registry.harness_for(campaigns.load("softmax", ["harness.baseline=compile"]).model_dump(mode="json"))
    assert compile_.objective.name == "× compile"


def test_a_harness_without_a_profiler_says_so():
    """`profile` needs a harness that plays `Profiling`: hopper_gemm's does, the others do not."""
    assert isinstance(registry.harness("hopper_gemm"), roles.Profiling)
    assert not isinstance(registry.harness("accelsim"), roles.Profiling)
    assert not isinstance(registry.harness("reference"), roles.Profiling)


PAGE = Path(__file__).parent.parent / "docs" / "architecture" / "interfaces.md"


def _named(text: str) -> set[str]:
    """The names a page's backticks give members: `propose(history, n)` -> propose, `name`, `batch` -> both."""
    return {m.group(1) for m in re.finditer(r"`([A-Za-z_][A-Za-z_0-9]*)(?:\([^`]*\))?`", text)}


def _section(title: str) -> str:
    page = PAGE.read_text()
    start = page.index(f"## {title}\n")
    end = page.find("\n## ", start + 1)
    return page[start:end if end > 0 else None]


def _table(title: str) -> set[str]:
    """The members a section's table names in its first column."""
    rows = [line.split("|")[1] for line in _section(title).splitlines() if line.startswith("| `")]
    return set().union(*(_named(cell) for cell in rows))


def _members(cls) -> set[str]:
    names = set(getattr(cls, "__annotations__", {})) | {n for n in vars(cls) if not n.startswith("_")}
    return {n for n in names if not n.startswith("_")}


def test_the_interfaces_page_names_every_member_of_the_agent_and_nothing_else():
    """The Agent table lists the Protocol's members as interfaces.py declares them: a member added,
    renamed or removed in the code fails here until the page says it."""
    table, optional = _table("Agent"), {"Settings", "section", "check"}
    assert _members(Agent) <= table, f"not on the page: {sorted(_members(Agent) - table)}"
    assert not table - optional - _members(Agent), f"on the page, not in the code: {sorted(table - optional - _members(Agent))}"


def test_the_interfaces_page_names_each_role_with_its_members():
    """Each row of the roles table names a role and exactly the members its Protocol declares, and every
    role of the code has its row."""
    rows = {}
    for line in _section("Roles of a harness").splitlines():
        cells = line.split("|")
        if line.startswith("| `") and len(cells) > 4:
            (role,) = _named(cells[1])
            rows[role] = _named(cells[4])
    assert set(rows) == {r.__name__ for r in roles.ROLES}
    for role in roles.ROLES:
        assert rows[role.__name__] == set(roles.members(role)), (role.__name__, rows[role.__name__] ^ set(roles.members(role)))


def test_the_interfaces_page_names_every_declaration():
    """What a harness declares of itself (`roles.Declared`) is each a row of its table, with nothing else."""
    from dataclasses import fields

    assert _table("What a harness declares") == {f.name for f in fields(roles.Declared)}
