"""The shipped search space and the search agent's walk over it."""

from __future__ import annotations

import math
import random

import pytest
from conftest import needs_nvcc

from autodiscovery import campaign as campaigns
from autodiscovery.agents.search import SearchAgent
from autodiscovery.agents.space import Space
from autodiscovery.interfaces import History, Record
from autodiscovery.toolkit.text import canon
from harnesses.hopper_gemm import HopperGemmHarness
from harnesses.hopper_gemm.build import Builder
from harnesses.hopper_gemm.manifest import parse, resolve

GEMM = HopperGemmHarness.objective

SHAPE = {"M": 4096, "N": 4096, "K": 4096}


@pytest.fixture(scope="module")
def space():
    return Space("hopper_gemm")


WHOLE = 200_000
"""A family with up to this many configurations in its product is walked whole; a larger one is drawn from."""


def valid_configurations(fam, shape, draws: int = 20_000, seed: int = 0) -> list[dict]:
    """The family's valid configurations: all of them where its product is small, else the valid ones
    among `draws` configurations drawn from the product with a seed (by mixed-radix index)."""
    keys = list(fam.knobs)
    sizes = [len(fam.knobs[k]) for k in keys]
    total = math.prod(sizes)
    if total <= WHOLE:
        return [k for k in fam.configurations() if not fam.violations(k, shape)]
    out, rng = [], random.Random(seed)
    for index in rng.sample(range(total), draws):
        knobs = {}
        for k, n in zip(keys, sizes):
            index, i = divmod(index, n)
            knobs[k] = fam.knobs[k][i]
        if not fam.violations(knobs, shape):
            out.append(knobs)
    return out


def test_ladder_has_the_seed_and_two_families_beyond(space):
    ladder = space.ladder()
    assert [f.name for f in ladder][:3] == ["naive", "tiled", "mma_sync"]
    for fam in ladder[1:]:
        assert fam.knobs and not fam.violations(fam.default, SHAPE)
        valid = valid_configurations(fam, SHAPE, draws=2000)
        assert len(valid) >= 10, fam.name


def test_a_space_that_has_rendered_pickles_and_renders_the_same_after():
    """An executor sends the agent (or a harness holding its space) to its workers by pickling it."""
    import pickle

    space = Space("hopper_gemm")
    knobs = space.families["wgmma_cluster"].default
    source = space.render("wgmma_cluster", knobs)
    assert pickle.loads(pickle.dumps(space)).render("wgmma_cluster", knobs) == source


def test_a_space_of_ones_own_includes_the_shipped_partials_and_its_own_first(tmp_path):
    """A template finds the partials of seeds/_shared/ by name; a file of that name beside it comes first.
    What renders is one source, the partial's text in it."""
    (tmp_path / "families.yaml").write_text(
        "families:\n  vec:\n    rung: 1\n    template: vec.cu.j2\n    summary: VEC floats a load\n"
        "    knobs: {VEC: [1, 4], HINTS: [0, 1]}\n    default: {VEC: 4, HINTS: 1}\n")
    (tmp_path / "vec.cu.j2").write_text('{% from "_vectors.cuh.j2" import load_vec with context %}{{ load_vec() }}\n')
    source = Space(str(tmp_path)).render("vec", {"VEC": 4, "HINTS": 1})
    assert "const float4 t = __ldcs(reinterpret_cast<const float4*>(p));" in source and "{%" not in source
    (tmp_path / "_vectors.cuh.j2").write_text("{% macro load_vec() %}// my own{% endmacro %}")
    assert Space(str(tmp_path)).render("vec", {"VEC": 4, "HINTS": 1}) == "// my own\n"


FAMILIES = [f.name for f in Space("hopper_gemm").ladder()]


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.long
def test_every_valid_configuration_renders_a_launchable_manifest(space, name):
    """Every valid configuration of a family whose product is small; of a larger one (the cluster
    family's millions), the valid ones among 200,000 drawn, which take every value of every knob. A
    family a test, so that the suite's workers share them."""
    for fam in [space.families[name]]:
        configurations = valid_configurations(fam, SHAPE, draws=200_000) if fam.template else [{}]
        for knobs in configurations:
            launch = resolve(parse(space.render(fam.name, knobs)), 4096, 4096, 4096)
            assert launch.kernel == "gemm"
        if fam.template and math.prod(len(v) for v in fam.knobs.values()) > WHOLE:
            assert len(configurations) > 2000, fam.name
            for k, values in fam.knobs.items():
                assert {c[k] for c in configurations} == set(values), (fam.name, k)


def test_constraints_reject_with_reasons(space):
    fam = space.families["mma_sync"]
    bad = dict(fam.default) | {"STAGES": max(fam.knobs["STAGES"]), "BM": max(fam.knobs["BM"]),
                               "BN": max(fam.knobs["BN"]), "BK": max(fam.knobs["BK"])}
    reasons = fam.violations(bad, SHAPE)
    assert reasons and all("(" in r for r in reasons)


def rec(seq, family, knobs, score, kept=False, status=None):
    return Record(seq=seq, family=family, knobs=knobs, status=status or ("kept" if kept else "reverted"),
                  score=score, kept=kept, source_hash=f"h{seq}")


def test_agent_climbs_then_tunes_then_moves_on():
    agent = SearchAgent(campaigns.load("hopper-gemm", ["agent.search.knob_patience=3"]))
    ladder = [f.name for f in agent.space.ladder()]
    seed = rec(0, "naive", {}, 0.005, kept=True)
    first = agent.propose(History([seed], seed, GEMM), 2)
    assert [p.family for p in first] == ladder[1:3]  # structural moves first, in rung order
    assert all(p.proposer == "search:structural" and p.source for p in first)
    assert first[0].knobs == agent.space.families[ladder[1]].default

    # Every rung tried, the top one kept: knob moves within the incumbent's family.
    top = ladder[-1]
    tried = [rec(i + 1, f, agent.space.families[f].default, 0.05 * (i + 1), kept=True)
             for i, f in enumerate(ladder[1:])]
    best = tried[-1]
    h = History([seed, *tried], best, GEMM)
    moves = agent.propose(h, 3)
    valid = [p for p in moves if not p.rejected]
    assert len(valid) == 3 and all(p.family == top and p.proposer == "search:knob" for p in valid)
    assert len({canon(p.knobs) for p in valid} | {canon(best.knobs)}) == 4  # nothing proposed twice
    assert all("→" in p.hypothesis for p in valid)
    for p in moves:
        if p.rejected:
            assert p.source == "" and p.rejected

    # Three knob moves in the top family without a keep: nothing lower is close enough to take a turn,
    # so the top family goes on; the search ends only when every valid configuration was tried.
    more = [rec(10 + i, top, p.knobs, 0.01) for i, p in enumerate(valid)]
    again = agent.propose(History([seed, *tried, *more], best, GEMM), 2)
    assert [p.family for p in again] == [top, top]
    fam = agent.space.families[top]
    every = [k for k in fam.configurations() if not fam.violations(k, SHAPE)]
    done = [rec(100 + i, top, k, 0.01) for i, k in enumerate(every) if canon(k) != canon(best.knobs)]
    assert agent.propose(History([seed, *tried, *done], best, GEMM), 2) == []


def test_close_families_take_turns_after_patience():
    """A lower family within 5% of the incumbent gets its round once the top one had its moves."""
    agent = SearchAgent(campaigns.load("hopper-gemm", ["agent.search.knob_patience=2"]))
    ladder = [f.name for f in agent.space.ladder()]
    top, below = ladder[-1], ladder[-2]
    seed = rec(0, "naive", {}, 0.005, kept=True)
    low = rec(1, below, agent.space.families[below].default, 0.82, kept=True)
    best = rec(2, top, agent.space.families[top].default, 0.85, kept=True)
    first = agent.propose(History([seed, low, best], best, GEMM), 2)
    assert [p.family for p in first] == [top, top]  # the incumbent's family first
    tried = [rec(3 + i, top, p.knobs, 0.5) for i, p in enumerate(first)]
    turn = agent.propose(History([seed, low, best, *tried], best, GEMM), 2)
    assert [p.family for p in turn] == [below, below]  # then the close one's round
    assert agent.propose(History([seed, low, best, *tried], best, GEMM), 2) == turn  # the same walk again


@needs_nvcc
@pytest.mark.long
def test_family_defaults_and_a_sample_of_valid_configurations_compile_without_spills(space, tmp_path):
    """Every family's default builds without spills, and constraints let through only what builds: one
    other valid configuration a family, drawn with a seed (the seed naive.cu beside them)."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(7)
    builder = Builder(tmp_path)
    picks = []
    for fam in space.ladder():
        picks.append((fam.name, fam.default))
        if fam.knobs:
            valid = [k for k in valid_configurations(fam, SHAPE) if k != fam.default]
            picks += [(fam.name, k) for k in rng.sample(valid, 1)]
    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(lambda p: builder.build(space.render(*p), "gemm"), picks))
    for (name, knobs), report in zip(picks, reports):
        assert report.ok, f"{name} {knobs}: {report.log[-1500:]}"
        assert report.spill_stores == 0 and report.spill_loads == 0, f"{name} {knobs} spills"


def test_neighbours_are_one_knob_away_or_repaired(space):
    campaign = campaigns.load("hopper-gemm")
    agent = SearchAgent(campaign)
    fam = space.families["wgmma_cluster"]
    near = agent.neighbours(fam, fam.default)
    assert near and len({canon(k) for k in near}) == len(near)
    diffs = [sum(k[n] != fam.default[n] for n in k) for k in near]
    assert all(not fam.violations(k, SHAPE) for k in near)
    assert set(diffs) == {1, 2, 3} and diffs == sorted(diffs)  # single moves first, then repaired ones
    # Every knob moves; a move its constraints refuse on its own comes with the nearest repair.
    assert {n for k in near for n in k if k[n] != fam.default[n]} == set(fam.knobs)
    assert {**fam.default, "EPILOGUE": "tma", "QSIZE": 3} in near  # tma alone overflows shared memory
    # Stream-K needs a producer of 40 registers, which needs consumers of 232: two knobs repair it.
    assert {**fam.default, "STREAMK": 1, "PRODUCER_REGS": 40, "CONSUMER_REGS": 232} in near
    # The order is the seed's: the same seed gives the same walk, another seed another order.
    assert SearchAgent(campaign).neighbours(fam, fam.default) == near
    other = SearchAgent(campaigns.load("hopper-gemm", ["agent.search.seed=7"])).neighbours(fam, fam.default)
    assert sorted(map(canon, other)) == sorted(map(canon, near)) and other != near


def test_after_the_climb_the_top_family_is_tuned_by_neighbour_moves(space):
    campaign = campaigns.load("hopper-gemm", ["agent.search.batch=6"])
    agent = SearchAgent(campaign)
    fam = space.ladder()[-1]
    records = [Record(seq=i, family=f.name, knobs=dict(f.default), status="kept", score=0.1 * (i + 1), kept=True,
                      source_hash=str(i)) for i, f in enumerate(space.ladder())]
    moves = agent.propose(History(records=records, incumbent=records[-1], objective=GEMM), 6)
    assert all(p.family == fam.name and p.rejected is None for p in moves)
    assert [p.knobs for p in moves] == agent.neighbours(fam, fam.default)[:6]
    assert all("one step from the family's best" in p.hypothesis for p in moves)


def test_a_higher_family_far_below_gets_one_round_then_no_more():
    """A family above the incumbent's rung that lost is tuned for one round of `knob_patience` moves;
    still far below the incumbent after it, it takes no more of the budget."""
    agent = SearchAgent(campaigns.load("hopper-gemm", ["agent.search.knob_patience=2"]))
    ladder = agent.space.ladder()
    below, top = ladder[-2], ladder[-1]
    climbed = [rec(i, f.name, dict(f.default), 0.01 * i) for i, f in enumerate(ladder[:-2])]
    best = rec(20, below.name, dict(below.default), 1.0, kept=True)
    lost = rec(21, top.name, dict(top.default), 0.7)
    first = agent.propose(History([*climbed, best, lost], best, GEMM), 4)
    assert [p.family for p in first] == [below.name] * 2 + [top.name] * 2  # its round comes
    tried = [rec(30 + i, p.family, p.knobs, 0.99 if p.family == below.name else 0.7)
             for i, p in enumerate(first)]
    after = agent.propose(History([*climbed, best, lost, *tried], best, GEMM), 4)
    assert {p.family for p in after} == {below.name}  # the round is over and it stayed far below
    close = [rec(40, top.name, next(p.knobs for p in after), 0.97)]  # within 5%: it takes turns again
    again = agent.propose(History([*climbed, best, lost, *tried, *close], best, GEMM), 4)
    assert top.name in {p.family for p in again}


@pytest.mark.parametrize("shape", [SHAPE, {"M": 1000, "N": 776, "K": 520}, {"M": 16, "N": 4096, "K": 14336}])
def test_valid_configurations_are_the_product_filtered_by_the_constraints(space, shape):
    """`valid_configurations` checks a constraint as soon as the knobs it names are set (the cluster
    family's product is tens of millions); it yields what filtering the whole product yields, in the same
    order. The cluster family is compared on two values of every knob, its default and another (2^17
    settings, of which the constraints refuse most)."""
    for fam in space.families.values():
        if not fam.template:
            continue
        if math.prod(len(v) for v in fam.knobs.values()) > WHOLE:
            fam = fam.model_copy(update={"knobs": {k: [fam.default[k], next(x for x in v if x != fam.default[k])]
                                                   for k, v in fam.knobs.items()}})
        every = [k for k in fam.configurations() if not fam.violations(k, shape)]
        assert list(fam.valid_configurations(shape)) == every, fam.name
        assert every or fam.name == "naive", fam.name


@pytest.mark.parametrize("name", sorted(p.parent.name for p in campaigns.SEARCH_SPACES.glob("*/families.yaml")))
def test_the_head_a_fit_reads_is_the_whole_sources_manifest(name):
    """A fit reads the source rendered up to the end of its manifest (`Space.head`): for every templated
    family of every shipped space, at its default and at configurations drawn from its product, the head
    begins the whole render and holds its manifest, character for character."""
    from autodiscovery.agents.space import SpaceError
    from autodiscovery.toolkit.manifest import MANIFEST_RE

    space, rng = Space(name), random.Random(3)
    for fam in space.ladder():
        if not fam.template:
            continue
        assert space._head(fam.template) is not None, fam.name  # the shipped templates are all cut short
        draws = [fam.default] + [{k: rng.choice(v) for k, v in fam.knobs.items()} for _ in range(40)]
        compared = 0
        for knobs in draws:
            try:
                whole = space.render(fam.name, knobs)
            except SpaceError:
                continue  # a configuration the template refuses
            head = space.head(fam.name, knobs)
            manifest = MANIFEST_RE.search(whole)
            assert manifest and whole.startswith(head) and len(head) == manifest.end(), (fam.name, knobs)
            assert len(head) < len(whole)
            compared += 1
        assert compared >= 10, fam.name


def test_a_mistake_in_a_families_file_names_its_line(tmp_path):
    """As a campaign's: YAML syntax where the mistake is, a field of a family at the field's line."""
    from pathlib import Path

    from autodiscovery.agents.space import SpaceError

    shipped = (Path(__file__).parents[1] / "search_spaces" / "hopper_gemm" / "families.yaml").read_text()
    lines = shipped.splitlines()
    rung = next(i for i, line in enumerate(lines) if line.strip() == "rung: 2") + 1
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "families.yaml").write_text(shipped.replace("    rung: 2\n", "    rung: two\n", 1))
    with pytest.raises(SpaceError, match=rf"families.yaml: line {rung}: families.tiled.rung: Input should be a valid"):
        Space(str(tmp_path / "a"))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "families.yaml").write_text(shipped.replace("    rung: 2\n", "    rung: 2\n     bad: 1\n", 1))
    with pytest.raises(SpaceError, match=rf"families.yaml: line {rung + 1}: not valid YAML"):
        Space(str(tmp_path / "b"))
