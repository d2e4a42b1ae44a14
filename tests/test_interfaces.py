"""The shipped harnesses and agents offer every hook the loop uses, through the two Protocols."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autodiscovery import campaign as campaigns
from autodiscovery import registry
from autodiscovery.campaign import ProblemBase
from autodiscovery.interfaces import Agent, Briefing, Fitting, Harness, HarnessBase, Objective, Showing


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


class Lt(Bare):
    """A bare harness whose objective is another baseline's, where a campaign chooses that one."""

    for_baseline = "best_lt"


def test_a_baseline_that_changes_the_objective_picks_its_subclass():
    """The registry's factory makes a campaign's harness as its settings choose it: the subclass that stands
    for its `harness.baseline`, else the class; a recorded run's class is read from its configuration the
    same way. No class is swapped behind a constructor: a class made directly is the class asked for."""
    import pickle

    lt, gemmex = campaigns.load("hopper-gemm", ["harness.baseline=best_lt"]), campaigns.load("hopper-gemm")
    assert Bare.for_config(lt.model_dump(mode="json")) is Lt and Bare.for_config({"harness": None}) is Bare
    assert Bare.for_config(gemmex.model_dump(mode="json")) is Bare
    assert type(Bare(lt)) is Bare and type(pickle.loads(pickle.dumps(Lt()))) is Lt
    made = registry.make_harness(lt)
    assert type(made).for_baseline == "best_lt" and made.objective.name == "× best Lt"
    assert type(registry.make_harness(gemmex)) is registry.harness("hopper_gemm")
    assert registry.harness_for(lt.model_dump(mode="json")) is type(made)
    assert registry.harness_for(campaigns.load("softmax", ["harness.baseline=compile"]).model_dump(mode="json")).for_baseline \
        == "compile"


def test_no_profiler_is_declared_not_probed(tmp_path):
    """`profile` is an optional capability declared by `profiles`: the bare harness has none, hopper's has."""
    assert not Bare.profiles and registry.harness("hopper_gemm").profiles
    assert not registry.harness("accelsim").profiles and not registry.harness("reference").profiles
    with pytest.raises(NotImplementedError, match="bare harness has no profiler"):
        Bare().profile("", None)


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


def test_the_interfaces_page_names_every_member_of_the_two_protocols_and_nothing_else():
    """The page's tables list each Protocol's members as interfaces.py declares them: a member added,
    renamed or removed in the code fails here until the page says it."""
    for title, protocol, optional in (("Agent", Agent, {"Settings", "section", "check"}), ("Harness", Harness, set())):
        table = _table(title)
        assert _members(protocol) <= table, f"{title}: not on the page: {sorted(_members(protocol) - table)}"
        extra = table - optional - _members(protocol)
        assert not extra, f"{title}: on the page, not in the code: {sorted(extra)}"


def test_the_interfaces_page_names_every_optional_hook_of_harness_base():
    """Every public member of `HarnessBase` is named on the page (its tables or its optional hooks): a hook
    added to the code fails here until the page says what it is."""
    page = _named(PAGE.read_text())
    hooks = _members(HarnessBase) - {"name"}
    assert hooks <= page, f"HarnessBase members the page does not name: {sorted(hooks - page)}"


def test_the_narrow_views_are_on_the_page_as_the_code_declares_them():
    """Each narrow view's row names exactly the members its Protocol declares."""
    rows = {}
    for line in _section("Narrow views of a harness").splitlines():
        cells = line.split("|")
        if line.startswith("| `") and len(cells) > 3:
            (view,) = _named(cells[1])
            rows[view] = _named(cells[3])
    assert set(rows) == {"Briefing", "Fitting", "Showing"}
    for view, protocol in (("Briefing", Briefing), ("Fitting", Fitting), ("Showing", Showing)):
        assert rows[view] == _members(protocol), (view, rows[view] ^ _members(protocol))


def test_the_shipped_harnesses_offer_every_narrow_view():
    for name in ("hopper_gemm", "accelsim", "reference"):
        cls = registry.harness(name)
        for protocol in (Briefing, Fitting, Showing):
            assert _members(protocol) <= set(dir(cls)), (name, protocol.__name__)
