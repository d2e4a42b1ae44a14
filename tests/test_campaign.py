from __future__ import annotations

import pytest

from autodiscovery import campaign as campaigns
from autodiscovery.campaign import CampaignError


def test_shipped_campaign_loads_with_defaults():
    c = campaigns.load("hopper-gemm")
    assert (c.problem.M, c.problem.N, c.problem.K) == (4096, 4096, 4096)
    assert c.problem.flops == 2 * 4096**3
    assert c.seed_path().name == "naive.cu" and c.seed_path().is_file()
    assert [p.stem for p in campaigns.available()] == [
        "bias_gelu", "edge-codesign", "gemm-sweep", "hopper-gemm", "llama3-8b-gemm", "llama3-8b-rest", "llama3-8b-small",
        "llama70b-qwen72b-gemm", "matmul", "rmsnorm", "softmax", "sum_reduction"]


def test_overrides_are_parsed_and_validated():
    c = campaigns.load("hopper-gemm", ["budget.candidates=12", "problem.M=1024", "harness.nvcc_flags=[-O2]",
                                       "stop.target=0.9"])
    assert c.budget.candidates == 12 and c.problem.M == 1024
    assert c.harness.nvcc_flags == ["-O2"] and c.stop.target == 0.9


@pytest.mark.parametrize(
    "override, message",
    [
        ("budget.candidatez=3", "budget.candidatez: Extra inputs are not permitted"),
        ("budget.candidates=many", "budget.candidates: Input should be a valid integer"),
        ("problem.M=-4", "problem.M: Input should be greater than 0"),
        ("harness.tolerance=0.5", "harness.tolerance: Input should be less than or equal to 0.1"),
        ("problem.dtype_in=fp8", "problem.dtype_in: Input should be 'bf16'"),
        ("budget=3", "budget: Input should be a valid dictionary"),
        ("nonsense", "is not of the form key.path=value"),
        ("budget.candidates.x=1", "budget.candidates is not a section"),
    ],
)
def test_bad_overrides_name_the_key(override, message):
    with pytest.raises(CampaignError) as exc:
        campaigns.load("hopper-gemm", [override])
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_bad_value_is_blamed_on_the_set_that_gave_it():
    with pytest.raises(CampaignError) as exc:
        campaigns.load("hopper-gemm", ["budget.candidates=12", "problem.M=abc"])
    assert str(exc.value).startswith("--set problem.M=abc: problem.M: Input should be a valid integer")
    with pytest.raises(CampaignError) as exc:
        campaigns.load("hopper-gemm", ["harness.nvcc_flags=[-O2]", "harness.warmup_ms=-1"])
    assert str(exc.value).startswith("--set harness.warmup_ms=-1: harness.warmup_ms: ")
    with pytest.raises(CampaignError) as exc:
        campaigns.load("hopper-gemm", ["seed=hopper_gemm/missing.cu"])
    assert str(exc.value).startswith("--set seed=hopper_gemm/missing.cu: seed: file not found")
    with pytest.raises(CampaignError, match=r"^--set stop.target=\[1: the value is not valid YAML: "):
        campaigns.load("hopper-gemm", ["stop.target=[1"])


def test_broken_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nproblem: [1, 2\n")
    with pytest.raises(CampaignError, match=r"bad.yaml: line 2: not valid YAML: expected ',' or ']'"):
        campaigns.load(str(bad))
    colon = tmp_path / "colon.yaml"
    colon.write_text("name: x\nproblem:\n  M: 1024\n  N 1024\n  K: 1024\nbudget: {candidates: 3}\n")
    with pytest.raises(CampaignError) as exc:
        campaigns.load(str(colon))
    assert str(exc.value) == ("colon.yaml: line 4: not valid YAML: could not find expected ':' "
                              "(while scanning a simple key)")
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("name: x\nharnes: {}\n")
    with pytest.raises(CampaignError, match=r"unknown.yaml: line 2: harnes: Extra inputs are not permitted"):
        campaigns.load(str(unknown))
    noseed = tmp_path / "noseed.yaml"
    noseed.write_text("name: x\nseed: hopper_gemm/missing.cu\n")
    with pytest.raises(CampaignError, match="noseed.yaml: line 2: seed: file not found"):
        campaigns.load(str(noseed))
    indent = tmp_path / "indent.yaml"  # line 4 indented less than the section it belongs to
    indent.write_text("name: x\nharness:\n    name: hopper_gemm\n  tolerance: 0.01\nbudget: {candidates: 3}\n")
    with pytest.raises(CampaignError, match=r"^indent.yaml: line 4: not valid YAML: this line is indented other "
                                            r"than the lines around it \(.*\), while parsing a block mapping that "
                                            r"begins on line 1$"):
        campaigns.load(str(indent))
    typo = tmp_path / "typo.yaml"
    typo.write_text("name: x\nharness: {name: hopper_gemm}\nbudget:\n  minutes: 3\n  candidates: \"x\"\n")
    with pytest.raises(CampaignError, match=r"^typo.yaml: line 5: budget.candidates: Input should be a valid integer"):
        campaigns.load(str(typo))
    with pytest.raises(CampaignError, match=r"^--set budget.candidates=y: budget.candidates: Input should be"):
        campaigns.load(str(typo), ["budget.candidates=y"])  # a value the command line gave is blamed on it
    entry = tmp_path / "entry.yaml"
    entry.write_text("name: x\nsuite:\n  - {label: a, problem: {M: 64}}\n  - {label: b, problem: {M: -1}}\n")
    with pytest.raises(CampaignError, match=r"^entry.yaml: .*suite entry 'b'|^entry.yaml: line 4"):
        campaigns.load(str(entry))
    with pytest.raises(CampaignError, match="unknown campaign .nope. \\(available: bias_gelu, edge-codesign, gemm-sweep, hopper"):
        campaigns.load("nope")
    with pytest.raises(CampaignError, match="campaign file not found"):
        campaigns.load(str(tmp_path / "missing.yaml"))


def test_a_harness_whose_settings_hold_no_name_is_refused_in_one_line(tmp_path, monkeypatch):
    """A harness's `Settings` subclass `HarnessSettings` (its `name` typed for every reader): one that does
    not is named in the error, before anything runs."""
    (tmp_path / "my_harness.py").write_text(
        "from autodiscovery.campaign import Strict\nfrom harnesses.hopper_gemm import HopperGemmHarness\n\n"
        "class S(Strict):\n    name: str = 'my_harness:H'\n\nclass H(HopperGemmHarness):\n    Settings = S\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "c.yaml").write_text("name: x\nharness: {name: 'my_harness:H'}\n")
    with pytest.raises(campaigns.CampaignError, match=r"c.yaml: line 2: harness.name: H.Settings must be a subclass of "
                                                      r"autodiscovery.campaign.HarnessSettings"):
        campaigns.load(str(tmp_path / "c.yaml"))
