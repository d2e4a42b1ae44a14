"""Triton candidates under the reference harness without a GPU: the manifest in the file's docstring, the
plan (block from `num_warps`, constexprs from the sizes), `check` and the build (the static rule, the file
kept where the evaluation child imports it); a hostile file is refused at its line before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from autodiscovery import campaign as campaigns
from autodiscovery.agents.space import Space
from autodiscovery.campaign import SEEDS
from autodiscovery.cli import app
from harnesses.reference import ReferenceHarness, manifest, triton_compile

TRITON = triton_compile.available()


def one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def softmax(tmp_path):
    camp = campaigns.load("softmax", [f"harness.cache_dir={tmp_path / 'cache'}"])
    space = Space(camp.agent.search.space)
    fam = space.families["triton_rows"]
    return ReferenceHarness(camp), space.render("triton_rows", fam.default | {"ROWS": 2, "WARPS": 8})


def test_a_triton_file_is_planned_from_its_docstring_manifest(softmax):
    harness, source = softmax
    assert manifest.is_triton(source)
    plan = harness.check(source)
    (launch,) = plan["launches"]
    assert plan["language"] == "triton" and launch["grid"] == [2048, 1, 1] and launch["block"] == [256, 1, 1]
    assert launch["constexprs"] == {"BLOCK": 16384, "ROWS": 2} and (launch["num_warps"], launch["num_stages"]) == (8, 2)
    assert launch["args"] == [["tensor", "x"], ["tensor", "out"], ["i32", 4096], ["i32", 16384]]
    assert harness.entries(plan) == []  # no cubin to read before Triton compiles it


def test_the_build_keeps_the_file_and_refuses_a_hostile_one(softmax):
    harness, source = softmax
    built = harness.build(source)
    assert built.ok and built.compiler.startswith("Triton") and built.facts["kernels"] == ["softmax_rows"]
    assert Path(built.artifact).name == "kernel.py" and Path(built.artifact).read_text() == source
    assert harness.build(source).cached
    hostile = source.replace("import triton\n", "import os\nimport triton\n", 1)
    refused = harness.build(hostile)
    assert not refused.ok and "import os" in refused.log and refused.artifact is None


def test_check_reads_a_triton_file_and_refuses_one_that_reaches_the_host(softmax, tmp_path, monkeypatch):
    harness, source = softmax
    monkeypatch.chdir(tmp_path)
    Path("k.py").write_text(source)
    res = CliRunner().invoke(app, ["check", "k.py", "--campaign", "softmax", "--set", f"harness.cache_dir={tmp_path}/c"])
    assert res.exit_code == 0 and "ok build: built by Triton" in one_line(res.output), res.output
    Path("bad.py").write_text(source.replace("    first = tl.program_id(0) * ROWS\n",
                                             "    first = tl.program_id(0) * ROWS\n    open('/etc/passwd')\n"))
    res = CliRunner().invoke(app, ["check", "bad.py", "--campaign", "softmax", "--set", f"harness.cache_dir={tmp_path}/c"])
    said = one_line(res.output)
    assert res.exit_code == 1 and "FAIL plan" in said and "softmax_rows names 'open', which is not device code" in said
    Path("nomanifest.py").write_text(source[source.index('"""\n', 3) + 4:])
    res = CliRunner().invoke(app, ["check", "nomanifest.py", "--campaign", "softmax"])
    assert res.exit_code == 1 and '"""@manifest ... """ docstring' in one_line(res.output), res.output


def test_a_campaign_says_which_languages_its_candidates_may_be_in(tmp_path):
    camp = campaigns.load("softmax", [f"harness.cache_dir={tmp_path / 'cache'}", "harness.languages=[cuda]"])
    harness = ReferenceHarness(camp)
    space = Space(camp.agent.search.space)
    triton = space.render("triton_rows", space.families["triton_rows"].default)
    with pytest.raises(manifest.ManifestError, match=r"a Triton candidate: this campaign takes cuda candidates only"):
        harness.check(triton)
    harness.check(camp.seed_path().read_text())  # the CUDA seed is taken


def test_a_seed_in_a_language_the_campaign_refuses_is_told_the_seed_beside_it(tmp_path):
    cli = CliRunner()
    res = cli.invoke(app, ["--db", str(tmp_path / "r.db"), "run", "--campaign", "softmax", "--dry-run",
                           "--set", "harness.languages=[triton]", "--set", f"harness.cache_dir={tmp_path}"])
    assert res.exit_code == 2
    assert one_line(res.output) == ("error: seed softmax/naive.cu: at softmax: a CUDA candidate: this campaign takes "
                                    "triton candidates only (harness.languages); its seed naive.cu is CUDA: a Triton "
                                    "seed beside it is --set seed=softmax/triton.py")
    cuda_only = ReferenceHarness(campaigns.load("softmax", [f"harness.cache_dir={tmp_path}", "seed=softmax/triton.py",
                                                            "harness.languages=[cuda]"]))
    with pytest.raises(manifest.ManifestError, match=r"its seed triton.py is Triton: a CUDA seed beside it is "
                                                     r"--set seed=softmax/naive.cu$"):
        cuda_only.check((SEEDS / "softmax" / "triton.py").read_text())


def test_the_llm_agent_is_told_of_triton_and_a_whole_triton_file_is_taken_from_a_reply(tmp_path):
    from autodiscovery.agents import edits

    both = ReferenceHarness(campaigns.load("softmax", [f"harness.cache_dir={tmp_path}"]))
    cuda = ReferenceHarness(campaigns.load("softmax", [f"harness.cache_dir={tmp_path}", "harness.languages=[cuda]"]))
    said = one_line(both.brief({}))
    assert said.startswith("You are a GPU kernel engineer writing CUDA and Triton kernels")
    assert "You may instead write the kernels in Triton" in said and "there is no `triton.autotune`" in said
    assert "Triton" not in cuda.brief({})
    space = Space(campaigns.load("softmax").agent.search.space)
    triton = space.render("triton_rows", space.families["triton_rows"].default)
    reply = edits.parse(f"Hypothesis: two rows a program.\n\n```python\n{triton}```\n")
    assert reply.whole == triton and reply.hypothesis == "two rows a program."


@pytest.mark.skipif(TRITON, reason="Triton is installed here: the candidate is compiled")
def test_without_triton_the_build_says_where_it_will_compile(softmax):
    harness, source = softmax
    built = harness.build(source)
    assert built.ok and built.compiler == "Triton (not installed here: compiled on the GPU's machine)"


@pytest.mark.skipif(not TRITON, reason="Triton is not installed here")
def test_with_triton_the_build_compiles_for_the_target_and_says_why_not(softmax):
    """Triton's compiler for sm_90a, no GPU: a kernel it refuses fails the build with its words, and so does
    a manifest that passes a function fewer arguments than it takes."""
    harness, source = softmax
    harness._meta_facts()
    built = harness.build(source)
    assert built.ok and built.compiler.startswith("Triton ") and built.compiler.endswith(" for sm_90a")
    assert built.facts["compiled"]["softmax_rows"]["shared"] >= 0
    bad = harness.build(source.replace("offs = tl.arange(0, BLOCK)", "offs = tl.arange(0, 1000)"))
    assert not bad.ok and "arange's range must be a power of 2" in bad.log
    short = harness.build(source.replace("args: [x, out, batch_size, dim]", "args: [x, out, batch_size]"))
    assert not short.ok and "softmax_rows takes 4 arguments before its constexprs (x, out, rows, cols), the " \
                            "manifest passes 3" in short.log


@pytest.mark.parametrize("name, family", [("softmax", "triton_rows"), ("rmsnorm", "triton_cols"),
                                          ("bias_gelu", "triton_flat"), ("sum_reduction", "triton_cols"),
                                          ("matmul", "triton_tiles")])
def test_every_shipped_op_has_a_triton_family_that_passes_the_static_rule_and_its_plan(name, family, tmp_path):
    """Each of the shipped reference campaigns climbs from its CUDA seed through its CUDA family to a
    Triton one (rung 3), each configuration of which is device code only and plans at the problem's sizes."""
    camp = campaigns.load(name, [f"harness.cache_dir={tmp_path}"])
    harness, space = ReferenceHarness(camp), Space(camp.agent.search.space)
    fam = space.families[family]
    assert fam.rung == 3 and [f.rung for f in space.ladder()] == [1, 2, 3]
    for knobs in fam.valid_configurations(camp.problem.names()):
        source = space.render(family, knobs)
        assert manifest.is_triton(source)
        plan = harness.check(source)
        assert plan["language"] == "triton" and plan["launches"][0]["num_warps"] == knobs["WARPS"]


TRITON_SEEDS = [("softmax", "triton_rows"), ("rmsnorm", "triton_cols"), ("bias_gelu", "triton_flat"),
                ("sum_reduction", "triton_cols"), ("matmul", "triton_tiles")]


@pytest.mark.parametrize("name, family", TRITON_SEEDS)
def test_each_shipped_op_has_a_triton_seed_a_run_tunes_from(name, family, tmp_path):
    """`seeds/<op>/triton.py` is the Triton family's default, as its template renders it: a campaign seeded
    with it (`--set seed=<op>/triton.py --set harness.languages=[triton]`) starts in that family, at those
    knobs, and its knob moves stay there, in Triton."""
    from autodiscovery.agents.search import SearchAgent
    from autodiscovery.interfaces import History, Record

    camp = campaigns.load(name, [f"seed={name}/triton.py", "harness.languages=[triton]", f"harness.cache_dir={tmp_path}"])
    space = Space(camp.agent.search.space)
    fam = space.families[family]
    source = camp.seed_path().read_text()
    assert source == space.render(family, dict(fam.default))
    agent = SearchAgent(camp)
    seed = agent.seed_proposal(camp)
    assert (seed.family, seed.knobs) == (family, dict(fam.default))
    ReferenceHarness(camp).check(source)  # a Triton candidate the campaign's languages take
    kept = Record(seq=0, family=family, knobs=seed.knobs, status="kept", score=1.0, kept=True,
                  source_hash="", source=source)
    moves = agent.propose(History([kept], kept, ReferenceHarness.objective), 4)
    assert moves and {p.family for p in moves} == {family}
    assert all(manifest.is_triton(p.source) for p in moves)
