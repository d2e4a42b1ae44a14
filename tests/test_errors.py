"""What a new user trips over: each mistake is one line on stderr that names it, with a non-zero exit,
never a traceback, an "internal error" or a secret."""

from __future__ import annotations

import re
import sqlite3

import pytest
from typer.testing import CliRunner

from autodiscovery.cli import app

cli = CliRunner()


def invoke(*args, **kwargs):
    return cli.invoke(app, [str(a) for a in args], **kwargs)


def one_line(res, code: int = 2) -> str:
    assert res.exit_code == code, res.output
    text = res.output.strip()
    assert len(text.splitlines()) == 1 and "internal error" not in text and "Traceback" not in text, text
    return text


@pytest.fixture
def recorded(tmp_path):
    """A database with one replayed run."""
    from replay import ReplayHarness

    from autodiscovery.agents.search import SearchAgent
    from autodiscovery.campaign import load
    from autodiscovery.running import runner
    from autodiscovery.store import Store

    path = tmp_path / "one.db"
    campaign = load("hopper-gemm", ["budget.candidates=3"])
    store = Store(path)
    runner.run_campaign("hopper-gemm", ["budget.candidates=3"], store, harness=ReplayHarness(SearchAgent(campaign).space))
    store.engine.dispose()  # the log checkpointed into the file now, not whenever the engine is collected
    return path


def test_a_database_password_is_never_shown():
    url = "postgresql+psycopg://someone:s3cret-pw@127.0.0.1:1/nothing"
    for args in (["runs"], ["show", "1"], ["run", "--dry-run", "--quiet"]):
        res = invoke("--db", url, *args)
        text = one_line(res)
        assert "s3cret-pw" not in res.output and "someone:***@127.0.0.1:1/nothing" in text


def test_a_file_that_is_not_a_database_is_named(tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("these are my notes, not a database\n" * 100)
    for args in (["runs"], ["show", "1"], ["report", "1"]):
        text = one_line(invoke("--db", junk, *args))
        assert text == f"error: {junk} is not an AutoDiscovery database (not an SQLite file)"
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE inventory (item TEXT)")
    text = one_line(invoke("--db", other, "run", "--dry-run", "--quiet"))
    assert f"{other} is not an AutoDiscovery database (it holds other tables: inventory)" in text
    with sqlite3.connect(other) as conn:  # nothing of ours was added to it
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["inventory"]


def test_read_commands_never_create_a_database(tmp_path):
    missing = tmp_path / "no-such-folder" / "runs.db"
    for args in (["runs"], ["show", "1"], ["lineage", "1"], ["report", "1"], ["export", "1", "--out", tmp_path / "x.cu"],
                 ["diff", "1/0", "1/1"], ["prompt", "1"]):
        text = one_line(invoke("--db", missing, *args))
        assert f"no AutoDiscovery database at {missing}: the file does not exist" in text
    assert not missing.parent.exists()
    empty = tmp_path / "empty.db"
    empty.touch()
    assert "nothing was recorded there" in one_line(invoke("--db", empty, "runs"))


def test_report_and_export_destinations_that_cannot_be_written(recorded, tmp_path):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    assert f"{folder} is a folder: name a file to write" in one_line(invoke("--db", recorded, "report", "1", "--out", folder))
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    text = one_line(invoke("--db", recorded, "report", "1", "--out", blocker / "sub" / "r.html"))
    assert text == f"error: cannot write {blocker / 'sub' / 'r.html'}: {blocker} is a file, not a folder"
    assert "is a file: name a folder" in one_line(invoke("--db", recorded, "report", "1", "--png", blocker))
    text = one_line(invoke("--db", recorded, "export", "1", "--out", blocker / "best.cu"))
    assert text == f"error: cannot write {blocker / 'best.cu'}: {blocker} is a file, not a folder"
    assert f"{folder} is a folder" in one_line(invoke("--db", recorded, "export", "1", "--out", folder))


def test_why_cuda_sees_no_device_is_said_in_words():
    """What the evaluation child says when CUDA cannot start: never a kernel fault (no kernel ran)."""
    from harnesses.hopper_gemm.device import no_device

    assert no_device("CUDA_ERROR_NO_DEVICE", "") == \
        "no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES is '')"
    assert no_device("CUDA_ERROR_NO_DEVICE", None) == "no CUDA device is visible to this process"
    assert "stub" in no_device("CUDA_ERROR_STUB_LIBRARY", None)
    assert "update the driver" in no_device("CUDA_ERROR_INSUFFICIENT_DRIVER", None)
    assert no_device("CUDA_ERROR_UNKNOWN", None) == "CUDA cannot start (CUDA_ERROR_UNKNOWN)"


def test_values_are_checked_and_the_accepted_ones_listed(recorded):
    text = one_line(invoke("--db", recorded, "runs", "--status", "bogus"))
    assert text == "error: --status 'bogus' is not a run status (running, finished, interrupted, failed)"
    assert one_line(invoke("run", "--gpus", "abc")) == "error: --gpus 'abc': give all, a count (2) or GPU indices (0,1)"
    text = one_line(invoke("run", "--set", "harness.gpus=abc"))
    assert text == ("error: --set harness.gpus=abc: harness.gpus: 'abc' is none of: all, a count of GPUs (2), "
                    "a list of GPU indices ([0, 1])")


def test_help_keeps_text_in_brackets():
    import re

    res = invoke("run", "--help")
    assert res.exit_code == 0
    flat = re.sub(r"[│\s]+", " ", res.output)
    assert "or path to a YAML file (default: hopper-gemm; with --from, that run's campaign)." in flat


@pytest.mark.parametrize("command", ["show", "runs", "run", "report", "lineage", "check"])
def test_a_flag_is_shown_as_a_flag_it_takes_no_value(command):
    """Help that showed `--json <bool>` asked for `--json true`, which a flag refuses: a flag shows no type."""
    res = invoke(command, "--help", env={"COLUMNS": "120"})
    flags = [line for line in res.output.splitlines() if re.search(r"│ --(json|quiet|dry-run|config|source)\b", line)]
    assert flags or command == "check"
    assert not [line for line in flags if "<bool>" in line], flags


BIG = "99999999999999999999"  # past 2**63: no database holds such an id


@pytest.mark.parametrize("args, said", [
    (["show", BIG], f"no run {BIG} in"), (["lineage", BIG], f"no run {BIG} in"), (["report", BIG], f"no run {BIG} in"),
    (["export", BIG, "--out", "x.cu"], f"no run {BIG} in"), (["diff", "1/0", f"{BIG}/1"], f"no run {BIG} in"),
    (["prompt", f"{BIG}/0"], f"no run {BIG} in"), (["replay", BIG], f"no run {BIG} in"),
    (["show", f"1/{BIG}"], f"run 1 has no candidate #{BIG}"),
])
def test_an_id_past_what_a_database_holds_is_not_there(recorded, args, said):
    assert said in one_line(invoke("--db", recorded, *args))


def test_a_run_that_cannot_start_leaves_no_database_it_made(tmp_path, recorded):
    """A run refused before it records anything (here: no such compiler) removes the database it had just
    made, in one line as before; a database that was there already stays, whole."""
    new = tmp_path / "new" / "runs.db"
    new.parent.mkdir()
    res = invoke("--db", new, "run", "--campaign", "hopper-gemm", "--quiet", "--set", "harness.nvcc=/no/such/nvcc")
    assert "nvcc" in one_line(res) and list(new.parent.iterdir()) == []
    before = recorded.read_bytes()
    res = invoke("--db", recorded, "run", "--campaign", "hopper-gemm", "--quiet", "--set", "harness.nvcc=/no/such/nvcc")
    assert "nvcc" in one_line(res) and recorded.exists()
    assert invoke("--db", recorded, "runs").exit_code == 0 and recorded.read_bytes() == before
