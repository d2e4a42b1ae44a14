"""A harness and an agent from outside the packages run through `autodiscovery run`, with nothing of
them in core: the run time of a Python function, in microseconds (fewer is better)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from autodiscovery.cli import app

HERE = Path(__file__).parent


def campaign_file(tmp_path: Path, **stop) -> Path:
    path = tmp_path / "toy.yaml"
    path.write_text(
        "name: toy-sum\n"
        "description: a Python function summing a list, timed\n"
        "harness: {name: 'toy_harness:ToyHarness', repeats: 20}\n"
        f"seed: {HERE / 'toy_harness.py'}\n"
        "agent: {kind: 'toy_harness:ToyAgent'}\n"
        "budget: {candidates: 8, minutes: 5}\n"
        f"stop: {json.dumps({'patience': 10, 'min_gain': 0.05, **stop})}\n")
    return path


def test_a_toy_harness_runs_through_the_cli(tmp_path):
    db = str(tmp_path / "toy.db")
    res = CliRunner().invoke(app, ["--db", db, "run", "--campaign", str(campaign_file(tmp_path)), "--quiet"])
    assert res.exit_code == 0, res.output
    assert " µs" in res.output and "× cuBLAS" not in res.output
    run = json.loads(CliRunner().invoke(app, ["--db", db, "show", "1", "--json"]).output)
    status = {c["family"]: c["status"] for c in run["candidates"]}
    assert status["broken"] == "compile_error" and status["wrong"] == "incorrect"
    assert status["builtin"] == "kept"  # sum() beats any loop by far
    assert run["objective"] == "µs"
    chain = json.loads(CliRunner().invoke(app, ["--db", db, "lineage", "1", "--json"]).output)
    assert chain[-1]["family"] == "builtin" and chain[-1]["score_text"].endswith(" µs")
    assert chain[-1]["score"] < chain[0]["score"]  # fewer microseconds is better
    rows = json.loads(CliRunner().invoke(app, ["--db", db, "runs", "--json"]).output)
    assert rows[0]["objective"] == "µs" and rows[0]["best_text"].endswith(" µs")


def test_a_target_in_the_objective_stops_the_run(tmp_path):
    db = str(tmp_path / "target.db")
    res = CliRunner().invoke(app, ["--db", db, "run", "--campaign", str(campaign_file(tmp_path, target=1e9)),
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    rows = json.loads(CliRunner().invoke(app, ["--db", db, "runs", "--json"]).output)
    assert rows[0]["stop_reason"].startswith("target reached: ") and " µs ≤ " in rows[0]["stop_reason"]


def test_unknown_harness_is_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: bad\nharness: {{name: 'nowhere:Nothing'}}\nseed: {HERE / 'toy_harness.py'}\n")
    res = CliRunner().invoke(app, ["run", "--campaign", str(path)])
    assert res.exit_code == 2 and "harness 'nowhere:Nothing' cannot be loaded" in res.output
    assert len(res.output.strip().splitlines()) == 1
