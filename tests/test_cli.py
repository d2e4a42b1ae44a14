"""The CLI through typer's CliRunner, over a database filled by a replayed run."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing

import pytest
from conftest import HAS_GPU, needs_nvcc
from replay import ReplayHarness
from typer.testing import CliRunner

from autodiscovery import campaign as campaigns
from autodiscovery.agents.search import SearchAgent
from autodiscovery.cli import app
from autodiscovery.running import runner
from autodiscovery.store import Store

cli = CliRunner()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One replayed run, recorded once for the module."""
    path = tmp_path_factory.mktemp("cli") / "cli.db"
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=6", "stop.target=5"])
    harness = ReplayHarness(SearchAgent(campaign).space)
    runner.run_campaign("hopper-gemm", ["budget.candidates=6", "stop.target=5"], Store(path), harness=harness)
    return path


@pytest.fixture
def db(recorded, tmp_path):
    """A copy of the recorded run's database of the test's own (a test may write to it)."""
    path = tmp_path / "cli.db"
    with closing(sqlite3.connect(recorded)) as src, closing(sqlite3.connect(path)) as dst:
        src.backup(dst)
    return str(path)


def invoke(*args):
    return cli.invoke(app, list(args))


def test_campaigns_lists_what_ships():
    res = invoke("campaigns")
    assert res.exit_code == 0 and "hopper-gemm" in res.output


def test_runs_show_lineage_json(db):
    rows = json.loads(invoke("--db", db, "runs", "--json").output)
    assert len(rows) == 1 and rows[0]["status"] == "finished" and rows[0]["evaluated"] == 6
    assert rows[0]["best_score"] > 0.1 and rows[0]["device"] == "Replayed NVIDIA H100"

    run = json.loads(invoke("--db", db, "show", "1", "--json").output)
    assert run["config"]["budget"]["candidates"] == 6 and run["fingerprint"]["gpu"]
    assert run["candidates"][0]["proposer"] == "seed" and "source" in run["candidates"][0]
    assert run["llm_calls"] == []

    chain = json.loads(invoke("--db", db, "lineage", "1", "--json").output)
    assert chain[0]["seq"] == 0 and chain[-1]["seq"] == rows[0]["best_seq"]
    assert all(r["hypothesis"] for r in chain)

    cand = json.loads(invoke("--db", db, "show", "1/1", "--json").output)
    assert cand["family"] == "tiled" and cand["evaluations"][0]["kind"] == "benchmark"


@pytest.fixture(params=[80, 120, 200])
def width(request, monkeypatch):
    """The CLI's consoles at this many columns: what a test reads must not depend on it."""
    from autodiscovery import cli as cli_module

    for console in (cli_module.console, cli_module.err):
        monkeypatch.setattr(console, "_width", request.param)
    return request.param


def test_tables(db, width):
    for args in (["runs"], ["show", "1"], ["show", "1/0"], ["lineage", "1"], ["doctor", "--campaign", "hopper-gemm"]):
        res = invoke("--db", db, *args)
        assert res.exit_code in ((0, 1) if args[0] == "doctor" else (0,)), res.output
        laid_out = [line for line in res.output.splitlines() if not line.startswith("each step's hypothesis (whole:")]
        assert max(len(line) for line in laid_out) <= max(width, 80) or args[0] == "show"  # a hint is never wrapped
    assert "lineage of run 1" in invoke("--db", db, "lineage", "1").output
    assert "run 1 candidate #1 · tiled" in invoke("--db", db, "show", "1/1").output  # one unwrapped line


def test_one_line_messages_are_never_wrapped(db, width, tmp_path):
    out = tmp_path / "deep" / ("a-rather-long-folder-name-" * 3) / "kernel.cu"
    res = invoke("--db", db, "export", "1", "--out", str(out))
    assert res.exit_code == 0 and f"wrote {out}" in res.output
    res = invoke("--db", db, "show", "77")
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1


def test_export_writes_the_best_kernel(db, tmp_path):
    out = tmp_path / "best" / "kernel.cu"
    res = invoke("--db", db, "export", "1", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "@manifest" in out.read_text()
    meta = json.loads(out.with_suffix(".cu.json").read_text())
    assert meta["run"] == 1 and meta["score"] > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["show", "9"], "no run 9"),
        (["show", "1/99"], "has no candidate #99"),
        (["show", "x/y"], "'x/y' is not RUN or RUN/SEQ"),
        (["lineage", "7"], "no run 7"),
        (["run", "--campaign", "nope"], "unknown campaign 'nope'"),
        (["run", "--set", "budget.candidates=zero"], "budget.candidates: Input should be a valid integer"),
        (["run", "--resume", "42"], "no run 42"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(db, args, message, width):
    res = invoke("--db", db, *args)
    assert res.exit_code == 2
    assert message in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_run_without_a_gpu_says_so_before_any_work(tmp_path):
    path = tmp_path / "nogpu.db"
    res = invoke("--db", str(path), "run", "--campaign", "hopper-gemm")
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "no NVIDIA driver" in res.output or "no usable NVIDIA GPU" in res.output or "nvcc not found" in res.output
    assert not path.exists()  # nothing started, and no empty database left where there was none


def test_run_without_nvcc_names_it(tmp_path):
    res = invoke("--db", str(tmp_path / "x.db"), "run", "--set", "harness.nvcc=/nonexistent/nvcc")
    assert res.exit_code == 2 and "nvcc not found" in res.output


def test_ladder_lists_each_familys_best(tmp_path, monkeypatch):
    from autodiscovery.agents.space import Space

    harness = ReplayHarness(Space("hopper_gemm"))
    results = runner.ladder("hopper-gemm", [], ["4096"], Store(tmp_path / "l.db"), per_family=4, harness=harness)
    (campaign, run_id, rungs, used), = results
    assert campaign.problem.describe() == "4096×4096×4096" and used is harness
    assert [r.family for r in rungs] == [f.name for f in Space("hopper_gemm").ladder()]
    for r in rungs:
        row = r.row(harness)
        assert row["score"] is not None and row["ci_low"] <= row["score"] <= row["ci_high"]
        assert row["tried"] == (1 if r.family == "naive" else 4)
    # the reported configuration is the best of those tried, and each final figure was re-measured
    with Store(tmp_path / "l.db").session() as s:
        from autodiscovery.store import Evaluation
        finals = s.query(Evaluation).filter(Evaluation.kind == "ladder").count()
    assert finals == len(rungs)


def test_the_ladder_command_as_a_user_runs_it(tmp_path, width):
    """No harness handed in: the command builds it from the campaign, as on a GPU machine."""
    res = invoke("--db", str(tmp_path / "l.db"), "ladder", "--shape", "2048", "--per-family", "2", "--family", "tiled",
                 "--set", "harness.name=replay:CampaignReplay")
    assert res.exit_code == 0, res.output
    assert "ladder at" in res.output and "tiled" in res.output
    rows = json.loads(invoke("--db", str(tmp_path / "l.db"), "ladder", "--shape", "2048", "--per-family", "2",
                             "--family", "tiled", "--set", "harness.name=replay:CampaignReplay", "--json").output)
    (shape,) = rows
    assert shape["shape"] == [2048, 2048, 2048] and [r["family"] for r in shape["rungs"]] == ["tiled"]
    assert shape["rungs"][0]["tried"] == 2 and shape["rungs"][0]["score"] > 0


def test_ladder_shapes_are_checked():
    with pytest.raises(Exception, match="neither N nor MxNxK"):
        runner.parse_shape("4096x12")
    assert runner.parse_shape("1024x512x256") == (1024, 512, 256)


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_stops_at_a_safe_point_then_at_once_and_names_the_resume(db, monkeypatch, presses):
    """The first Ctrl-C asks the loop to stop between two candidates; a second stops at once."""
    import os
    import signal

    seen = {}

    def start(name, overrides, store, view, dry_run=False, stop=None, started=None, from_=None, campaign=None):
        started(7)
        for _ in range(presses):
            os.kill(os.getpid(), signal.SIGINT)
        seen["asked"] = stop.requested  # the loop checks this before every candidate
        return 1

    monkeypatch.setattr(runner, "run_campaign", start)
    before = signal.getsignal(signal.SIGINT)  # default, or ignored where the tests run in the background
    res = invoke("--db", db, "run", "--quiet")
    assert res.exit_code == 130
    said = " ".join(res.output.split())
    if presses == 1:  # the hint names the database the run was given
        assert seen["asked"] and f"continue with `autodiscovery run --resume 1 --db {db}`" in said
    else:
        assert "asked" not in seen and f"continue with `autodiscovery run --resume 7 --db {db}`" in said
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back


@needs_nvcc
def test_a_seed_that_does_not_compile_stops_a_dry_run_before_it_starts(tmp_path):
    """The seed does not compile: a dry run checks it first, says why in one line naming the file, records
    no run, and exits non-zero."""
    seed = tmp_path / "broken.cu"
    seed.write_text(campaigns.load("hopper-gemm").seed_path().read_text().replace("float acc = 0.0f;", "float acc = nope;"))
    res = invoke("--db", str(tmp_path / "f.db"), "run", "--dry-run", "--quiet", "--set", f"seed={seed}",
                 "--set", f"harness.cache_dir={tmp_path / 'cache'}")
    said = " ".join(res.output.split())
    assert res.exit_code == 2 and f"seed {seed}: does not compile: broken.cu(" in said, res.output
    assert 'identifier "nope" is undefined' in said and "run 1" not in said
