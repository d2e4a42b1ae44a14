"""A harness and an agent from outside the packages, with nothing of them in the core: the run time of a
Python function, in milliseconds (fewer is better), driven through every command a user has (run,
show, lineage, report and its HTML page, replay, export), each of which shows the harness's objective,
its column, its report section and its chart."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from toy_harness import VARIANTS
from typer.testing import CliRunner

from autodiscovery.cli import app

HERE = Path(__file__).parent


def campaign_file(tmp_path: Path, agent: str = "{kind: 'toy_harness:ToyAgent'}",
                  harness: str = "{name: 'toy_harness:ToyHarness', repeats: 20}", **stop) -> Path:
    path = tmp_path / "toy.yaml"
    path.write_text(
        "name: toy-sum\n"
        "description: a Python function summing a list, timed\n"
        f"harness: {harness}\n"
        f"seed: {HERE / 'toy_harness.py'}\n"
        f"agent: {agent}\n"
        "budget: {candidates: 8, minutes: 5}\n"
        f"stop: {json.dumps({'patience': 10, 'min_gain': 0.05, **stop})}\n")
    return path


def cli(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args], terminal_width=200)


@pytest.fixture
def wide(monkeypatch):
    """The CLI's consoles 200 columns wide, so a table's headings read whole."""
    from autodiscovery import cli as cli_module

    for console in (cli_module.console, cli_module.err):
        monkeypatch.setattr(console, "_width", 200)


def test_a_toy_harness_runs_through_every_command(tmp_path, wide):
    db = str(tmp_path / "toy.db")
    res = cli("--db", db, "run", "--campaign", campaign_file(tmp_path), "--quiet")
    assert res.exit_code == 0, res.output
    assert " ms" in res.output and " calls/s" in res.output and "cuBLAS" not in res.output
    assert "every variant timed in run 1" in res.output  # its section, after the run
    run = json.loads(cli("--db", db, "show", "1", "--json").output)
    status = {c["family"]: c["status"] for c in run["candidates"]}
    assert status["broken"] == "compile_error" and status["wrong"] == "incorrect"
    assert status["builtin"] == "kept"  # sum() beats any loop by far
    assert run["objective"] == "ms"
    kept = next(c for c in run["candidates"] if c["family"] == "builtin")
    assert kept["figures"]["calls_per_s"] == pytest.approx(1e3 / kept["score"])
    assert kept["facts"]["bytecode_bytes"] > 0 and kept["ci_low"] <= kept["score"] <= kept["ci_high"]
    shown = cli("--db", db, "show", "1").output
    assert "calls/s" in shown and "bytecode B" in shown and "every variant timed" in shown
    assert "TFLOP" not in shown and "HGMMA" not in shown

    chain = json.loads(cli("--db", db, "lineage", "1", "--json").output)
    assert chain[-1]["family"] == "builtin" and chain[-1]["score_text"].endswith(" ms")
    assert chain[-1]["score"] < chain[0]["score"]  # fewer milliseconds is better
    table = cli("--db", db, "lineage", "1").output
    assert "calls/s" in table and "CI" in table and "bytecode B" in table
    rows = json.loads(cli("--db", db, "runs", "--json").output)
    assert rows[0]["objective"] == "ms" and rows[0]["best_text"].endswith(" ms")
    assert rows[0]["best_summary"].endswith(" calls/s")

    out = tmp_path / "toy.html"
    res = cli("--db", db, "report", "1", "--out", out, "--png", tmp_path / "png")
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert '<table id="toy-timed">' in page and 'id="chart-toy-timed"' in page and 'id="toy-bars' in page
    assert "<th>calls/s</th>" in page and "<th>ms</th>" in page and "cuBLAS" not in page
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == ["lineage.png", "progress.png", "toy-timed.png"]

    replayed = json.loads(cli("--db", db, "replay", "1", "--json").output)
    assert [s["seq"] for s in replayed["steps"]] == [r["seq"] for r in chain]
    assert all(s["replayed"]["status"] == "ok" and s["replayed"]["figures"]["calls_per_s"] > 0
               for s in replayed["steps"])
    assert replayed["same_machine"]
    assert "ms rec." in cli("--db", db, "replay", "1").output

    best = tmp_path / "best.py"
    res = cli("--db", db, "export", "1", "--out", best)
    assert res.exit_code == 0 and best.read_text() == "def total(xs):\n    return sum(xs)\n"
    assert json.loads((tmp_path / "best.py.json").read_text())["figures"]["calls_per_s"] > 0
    res = cli("--db", db, "export", "1", "--library", tmp_path / "lib")  # a harness that writes none says so
    assert res.exit_code != 0 and "the toy harness does not write libraries" in res.output


def test_a_harness_of_evaluating_alone_runs_the_loop_and_every_review(tmp_path, wide):
    """`BareToy` has the six members of `Evaluating`, a constructor and nothing else (no base class, no
    settings model, no check, columns or reports): it runs the loop to a kept kernel, and every review
    command reads its run, saying what it does not do where it is asked for it."""
    db = str(tmp_path / "bare.db")
    res = cli("--db", db, "run", "--campaign", campaign_file(tmp_path, harness="{name: 'toy_harness:BareToy'}"), "--quiet")
    assert res.exit_code == 0, res.output
    run = json.loads(cli("--db", db, "show", "1", "--json").output)
    status = {c["family"]: c["status"] for c in run["candidates"]}
    assert status["broken"] == "compile_error" and status["wrong"] == "incorrect" and status["builtin"] == "kept"
    assert run["objective"] == "ms" and run["fingerprint"]["gpu"] == "none (CPU)"
    for command in (["runs"], ["show", "1"], ["lineage", "1"], ["report", "1"], ["show", "1/2"]):
        res = cli("--db", db, *command)
        assert res.exit_code == 0 and " ms" in res.output, (command, res.output)
    replayed = json.loads(cli("--db", db, "replay", "1", "--json").output)  # measured one by one
    assert replayed["steps"] and all(s["replayed"]["status"] == "ok" for s in replayed["steps"])
    res = cli("--db", db, "profile", "1/0")
    assert res.exit_code != 0 and "the toy_harness:BareToy harness has no profiler" in res.output
    res = cli("--db", db, "export", "1", "--library", tmp_path / "lib")
    assert res.exit_code != 0 and "the bare-toy harness does not write libraries" in res.output


def test_an_agent_of_its_own_validates_its_own_section(tmp_path):
    db = str(tmp_path / "toy.db")
    res = cli("--db", db, "run", "--quiet", "--campaign",
              campaign_file(tmp_path, agent="{kind: 'toy_harness:ToyAgent', toy: {variants: [builtin]}}"))
    assert res.exit_code == 0, res.output
    families = [c["family"] for c in json.loads(cli("--db", db, "show", "1", "--json").output)["candidates"]]
    assert families == ["while", "builtin"]
    res = cli("run", "--campaign", campaign_file(tmp_path, agent="{kind: 'toy_harness:ToyAgent', toy: {variants: [nope]}}"))
    assert res.exit_code == 2 and "agent.toy.variants: no variant named nope" in res.output
    res = cli("run", "--campaign", campaign_file(tmp_path, agent="{kind: 'toy_harness:ToyAgent', toy: {speed: 3}}"))
    assert res.exit_code == 2 and "agent.toy.speed: Extra inputs are not permitted" in res.output


def test_a_target_in_the_objective_stops_the_run(tmp_path):
    db = str(tmp_path / "target.db")
    res = CliRunner().invoke(app, ["--db", db, "run", "--campaign", str(campaign_file(tmp_path, target=1e9)),
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    rows = json.loads(CliRunner().invoke(app, ["--db", db, "runs", "--json"]).output)
    assert rows[0]["stop_reason"].startswith("target reached: ") and " ms ≤ " in rows[0]["stop_reason"]


def test_unknown_harness_is_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: bad\nharness: {{name: 'nowhere:Nothing'}}\nseed: {HERE / 'toy_harness.py'}\n")
    res = CliRunner().invoke(app, ["run", "--campaign", str(path)])
    assert res.exit_code == 2 and "harness 'nowhere:Nothing' cannot be loaded" in res.output
    assert len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize("width", [80, 44])
def test_measures_table_breaks_no_word_at_any_width(tmp_path, monkeypatch, width):
    """`measure`'s table: a table where its columns fit with no word broken, else a record a measurement,
    at 80 columns as at 44: every heading and figure whole on its line."""
    from autodiscovery import cli as cli_module

    for console in (cli_module.console, cli_module.err):
        monkeypatch.setattr(console, "_width", width)
    (tmp_path / "builtin.py").write_text(VARIANTS["builtin"])
    monkeypatch.chdir(tmp_path)
    res = cli("measure", "builtin.py", "--campaign", campaign_file(tmp_path), "--repeat", "2")
    assert res.exit_code == 0, res.output
    table = [line for line in res.output.splitlines() if not line.startswith("spread of")]  # a message: unwrapped
    assert all(len(line) <= width for line in table), res.output
    words = {w.strip("·") for line in table for w in line.replace("│", " ").split()}
    assert {"builtin.py:", "gate", "measurement", "status", "ok", "calls/s", "eval"} <= words, res.output
    assert len(re.findall(r"(?<![\d.])\d\.\d{4}(?![\d.])", res.output)) >= 2, res.output  # each ms figure whole


def test_measure_records_its_measurements_where_asked(tmp_path, wide):
    """`measure --record` keeps what it measured as a run of its own (agent `measure`), so that a figure
    can name it: the kernel its one candidate, each measurement an evaluation, the code in its fingerprint;
    without it nothing is written."""
    kernel = tmp_path / "builtin.py"
    kernel.write_text(VARIANTS["builtin"])
    db = tmp_path / "measured.db"
    plain = cli("--db", db, "measure", kernel, "--campaign", campaign_file(tmp_path), "--repeat", "2")
    assert plain.exit_code == 0, plain.output
    assert not db.exists() and "recorded" not in plain.output
    res = cli("--db", db, "measure", kernel, "--campaign", campaign_file(tmp_path), "--repeat", "3", "--record")
    assert res.exit_code == 0, res.output
    assert "recorded as run 1 (its measurements: `autodiscovery show 1/0 --db" in " ".join(res.output.split())
    run = json.loads(cli("--db", db, "show", "1", "--json").output)
    assert run["agent"] == "measure" and run["status"] == "finished" and run["stop_reason"] == "measured 3 times"
    assert run["config"]["measure"] == {"kernel": str(kernel), "repeat": 3} and run["fingerprint"]["code"]["source"]
    (cand,) = run["candidates"]
    assert cand["status"] == "measured" and cand["score"] > 0
    shown = json.loads(cli("--db", db, "show", "1/0", "--json").output)
    assert [e["kind"] for e in shown["evaluations"]] == ["benchmark"] * 3
    assert json.loads(cli("--db", db, "runs", "--json").output)[0]["best_text"].endswith(" ms")
