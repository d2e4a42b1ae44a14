"""The reference harness's shipped campaigns: each loads, its seed is its space's first rung, the seed and
the tuned family's default resolve their launch manifests against the problem's sizes, and both build
for sm_90a without spills where nvcc is installed."""

from __future__ import annotations

import pytest
from conftest import needs_nvcc

from autodiscovery import campaign as campaigns
from autodiscovery.agents.space import Space
from harnesses.reference import ReferenceHarness

NAMES = ["bias_gelu", "matmul", "rmsnorm", "softmax", "sum_reduction"]
CUDA_FAMILY = {"matmul": "wmma"}
"""Each campaign's CUDA family above its seed: `tuned`, the matrix multiplication's `wmma`."""


def _setup(name: str, tmp_path=None):
    overrides = [f"harness.cache_dir={tmp_path}"] if tmp_path else []
    camp = campaigns.load(name, overrides)
    space = Space(camp.agent.search.space)
    return camp, ReferenceHarness(camp), space


@pytest.mark.parametrize("name", NAMES)
def test_campaign_seed_and_default_resolve(name):
    camp, harness, space = _setup(name)
    assert camp.harness.name == "reference" and camp.problem.file == f"problems/{name}.py"
    seed = camp.seed_path().read_text()
    assert space.configuration_of_source(seed) == ("naive", {})
    family = CUDA_FAMILY.get(name, "tuned")
    tuned = space.families[family]
    assert tuned.violations(tuned.default, camp.problem.names()) == []
    for source in (seed, space.render(family, tuned.default)):
        plan = harness.check(source)
        assert [o["name"] for o in plan["outputs"]] == ["out"]
        assert all(min(launch["grid"]) >= 1 for launch in plan["launches"])


@needs_nvcc
@pytest.mark.parametrize("name", NAMES)
def test_seed_and_default_build_without_spills(name, tmp_path):
    camp, harness, space = _setup(name, tmp_path)
    family = CUDA_FAMILY.get(name, "tuned")
    for source in (camp.seed_path().read_text(), space.render(family, space.families[family].default)):
        report = harness.build(source)
        assert report.ok, report.log
        assert report.registers and report.spill_stores == 0
