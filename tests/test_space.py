"""The shipped search space and the search agent's walk over it."""

from __future__ import annotations

import pytest
from conftest import needs_nvcc

from autodiscovery import campaign as campaigns
from autodiscovery.agents import History, Record
from autodiscovery.agents.search import SearchAgent, canon
from autodiscovery.space import Space
from harnesses.hopper_gemm.build import Builder
from harnesses.hopper_gemm.manifest import parse, resolve

SHAPE = {"M": 4096, "N": 4096, "K": 4096}


@pytest.fixture(scope="module")
def space():
    return Space("hopper_gemm")


def test_ladder_has_the_seed_and_two_families_beyond(space):
    ladder = space.ladder()
    assert [f.name for f in ladder][:3] == ["naive", "tiled", "mma_sync"]
    for fam in ladder[1:]:
        assert fam.knobs and not fam.violations(fam.default, SHAPE)
        valid = [k for k in fam.configurations() if not fam.violations(k, SHAPE)]
        assert len(valid) >= 10, fam.name


def test_every_valid_configuration_renders_a_launchable_manifest(space):
    for fam in space.ladder():
        for knobs in (fam.configurations() if fam.template else [{}]):
            if fam.violations(knobs, SHAPE):
                continue
            launch = resolve(parse(space.render(fam.name, knobs)), 4096, 4096, 4096)
            assert launch.kernel == "gemm"


def test_constraints_reject_with_reasons(space):
    fam = space.families["mma_sync"]
    bad = dict(fam.default) | {"STAGES": max(fam.knobs["STAGES"]), "BM": max(fam.knobs["BM"]),
                               "BN": max(fam.knobs["BN"]), "BK": max(fam.knobs["BK"])}
    reasons = fam.violations(bad, SHAPE)
    assert reasons and all("(" in r for r in reasons)


@needs_nvcc
def test_family_defaults_compile_without_spills(space, tmp_path):
    builder = Builder(tmp_path)
    for fam in space.ladder():
        report = builder.build(space.render(fam.name, fam.default), "gemm")
        assert report.ok, f"{fam.name}: {report.log[-2000:]}"
        assert report.spill_stores == 0 and report.spill_loads == 0, fam.name


def rec(seq, family, knobs, score, kept=False, status=None):
    return Record(seq=seq, family=family, knobs=knobs, status=status or ("kept" if kept else "reverted"),
                  score=score, kept=kept, source_hash=f"h{seq}")


def test_agent_climbs_then_tunes_then_moves_on():
    agent = SearchAgent(campaigns.load("hopper-gemm", ["agent.search.knob_patience=3"]))
    seed = rec(0, "naive", {}, 0.005, kept=True)
    first = agent.propose(History([seed], seed), 2)
    assert [p.family for p in first] == ["tiled", "mma_sync"]
    assert all(p.proposer == "search:structural" and p.source for p in first)
    assert first[0].knobs == agent.space.families["tiled"].default

    tiled = rec(1, "tiled", first[0].knobs, 0.05, kept=True)
    mma = rec(2, "mma_sync", first[1].knobs, 0.5, kept=True)
    h = History([seed, tiled, mma], mma)
    moves = agent.propose(h, 3)
    valid = [p for p in moves if not p.rejected]
    assert len(valid) == 3 and all(p.family == "mma_sync" and p.proposer == "search:knob" for p in valid)
    assert len({canon(p.knobs) for p in valid} | {canon(mma.knobs)}) == 4  # nothing proposed twice
    assert all("→" in p.hypothesis for p in valid)
    for p in moves:
        if p.rejected:
            assert p.source == "" and p.rejected

    # Three knob moves in mma_sync without a keep: the family is done, the space is exhausted.
    tried = [rec(3 + i, "mma_sync", p.knobs, 0.4) for i, p in enumerate(valid)]
    assert agent.propose(History([seed, tiled, mma, *tried], mma), 2) == []
