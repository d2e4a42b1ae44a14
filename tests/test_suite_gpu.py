"""On an H100/H200: a suite of three shapes (skinny, ragged, square) run through the command a user types,
its dispatch table with both baselines."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autodiscovery.cli import app

pytestmark = pytest.mark.gpu


def test_a_suite_of_three_shapes(tmp_path, build_cache):
    db = str(tmp_path / "run.db")
    suite = ("suite=[{label: skinny, problem: {M: 128, N: 8192, K: 8192}}, "
             "{label: ragged, problem: {M: 1000, N: 776, K: 520}}, {label: square, problem: {M: 2048, N: 2048, K: 2048}}]")
    res = CliRunner().invoke(app, ["--db", db, "run", "--campaign", "hopper-gemm", "--quiet", "--set", suite,
                                   "--set", "budget.candidates=6", "--set", f"harness.cache_dir={build_cache}"])
    assert res.exit_code == 0, res.output
    print(res.output)
    rows = json.loads(CliRunner().invoke(app, ["--db", db, "report", "1", "--json"]).output)["rows"]
    assert [r["label"] for r in rows] == ["skinny", "ragged", "square"]
    for r in rows:
        assert r["score"] is not None and r["score"] > 0.1, r
        assert r["figures"]["x_best_lt"] is not None, r  # the best cuBLASLt algorithm timed beside GemmEx
