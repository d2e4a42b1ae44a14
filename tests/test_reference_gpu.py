"""On a GPU with PyTorch: each shipped reference campaign's naive seed and tuned default through the
real gate and timing (correct, faster than eager where the tuned kernel is), and a short run of each
through the command a user types."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autodiscovery import campaign as campaigns
from autodiscovery.agents.space import Space
from autodiscovery.cli import app
from harnesses.reference import ReferenceHarness

pytestmark = pytest.mark.gpu
NAMES = ["bias_gelu", "rmsnorm", "softmax", "sum_reduction"]


@pytest.mark.parametrize("name", NAMES)
def test_seed_and_tuned_default_pass_the_gate(name, build_cache):
    camp = campaigns.load(name, [f"harness.cache_dir={build_cache}", "harness.pairs=10"])
    h = ReferenceHarness(camp)
    fp = h.preflight()
    assert fp["problem"]["dists"][:3] == ["own", "normal", "uniform"]
    space = Space(camp.agent.search.space)
    seed = camp.seed_path().read_text()
    tuned = space.render("tuned", space.families["tuned"].default)
    for source in (seed, tuned):
        out = h.evaluate(source, h.build(source))
        assert out.status == "ok", out.log
        m = out.metrics
        assert m["checked_launches"] >= camp.harness.gate_draws + m["pairs"]
        assert max(m["worst_rel_err"].values()) < 1e-5 and 0 < m["roofline_pct"] <= 100
    assert out.score > 1.0  # the tuned kernel beats PyTorch eager


@pytest.mark.parametrize("name", NAMES)
def test_a_short_run(name, tmp_path, build_cache):
    db = str(tmp_path / "run.db")
    res = CliRunner().invoke(app, ["--db", db, "run", "--campaign", name, "--quiet", "--set", "budget.candidates=3",
                                   "--set", f"harness.cache_dir={build_cache}"])
    assert res.exit_code == 0, res.output
    chain = json.loads(CliRunner().invoke(app, ["--db", db, "lineage", "1", "--json"]).output)
    above = {f.name for f in Space(campaigns.load(name).agent.search.space).ladder() if f.rung >= 2}  # CUDA or Triton
    assert [r["family"] for r in chain][:1] == ["naive"] and chain[-1]["family"] in above
    assert chain[-1]["score"] > 1.0 and chain[-1]["figures"]["gbps"] > 1000


def test_a_triton_candidate_is_checked_and_timed_as_a_cuda_one(build_cache):
    """The softmax space's Triton family through the same gate, timing and sanitizer as its CUDA kernels
    (on an H100: 1.199× eager, 1.020× torch.compile, 89.8% of the roofline); the same file with its store's
    mask left off writes past the output into a guard zone and is refused."""
    camp = campaigns.load("softmax", [f"harness.cache_dir={build_cache}", "harness.pairs=10"])
    h = ReferenceHarness(camp)
    h.preflight()
    space = Space(camp.agent.search.space)
    fam = space.families["triton_rows"]
    honest = space.render("triton_rows", fam.default)
    out = h.evaluate(honest, h.build(honest))
    assert out.status == "ok", out.log
    assert out.metrics["checked_launches"] >= camp.harness.gate_draws and max(out.metrics["worst_rel_err"].values()) < 1e-5
    assert out.score > 1.0
    clean = h.sanitize(honest, h.build(honest))
    assert clean is not None and clean.status == "ok", clean.log if clean else ""
    masked = "tl.store(out + base + offs, e / tl.sum(e, axis=0), mask=mask)"
    unmasked = space.render("triton_rows", fam.default | {"BLOCK": 32768}).replace(masked, masked.replace(", mask=mask)", ")"))
    out = h.evaluate(unmasked, h.build(unmasked))
    assert out.status == "incorrect" and "guard zone: wrote 65536 bytes past the end of out" in out.log, out.log
