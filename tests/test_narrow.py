"""The review commands at 80 columns, on the databases the project ships: every table line fits, a
hypothesis or a decision is cut to one line (with the command that shows it whole), `show` keeps the
config behind --config, hints keep --db, and a run that is not there is named with its database."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from autodiscovery import ROOT
from autodiscovery.cli import app
from autodiscovery.cli.common import hint

DEFAULT = str(ROOT / "docs" / "h100-default-run" / "run.db")
LLAMA = str(ROOT / "docs" / "llama3-8b-h100" / "run.db")
CODESIGN = str(ROOT / "docs" / "codesign-1024-default" / "run.db")
SOFTMAX = str(ROOT / "docs" / "reference-runs" / "softmax.db")


@pytest.fixture(autouse=True)
def narrow(monkeypatch):
    """The CLI's consoles at 80 columns, whatever the terminal the tests run in."""
    from autodiscovery import cli as cli_module

    for console in (cli_module.console, cli_module.err):
        monkeypatch.setattr(console, "_width", 80)


def lines(*args: str) -> list[str]:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.output.splitlines()


def table_lines(out: list[str]) -> list[str]:
    """The lines Rich lays out (a message line is printed whole, never wrapped: it may be longer)."""
    return [line for line in out if not line.startswith(("run ", "pool:", "one candidate whole", "continues ",
                                                          "each step's hypothesis"))]


def test_lineage_of_the_default_run_is_a_screen():
    out = lines("lineage", "1", "--db", DEFAULT)  # was 1,230 lines, its hypothesis column 6 characters wide
    assert len(out) <= 20 and all(len(line) <= 80 for line in table_lines(out))
    heads = next(line for line in out if line.startswith("step"))
    assert heads.split() == ["step", "#", "family", "TFLOP/s", "×", "cuBLAS", "CI", "×", "best", "Lt", "regs", "spills"]
    steps = [line for line in out if line.startswith("   ") and line.split()[0].isdigit()]
    assert len(steps) == 7 and steps[1].endswith("…")  # each hypothesis on one line, cut
    assert f"whole: `autodiscovery show 1/SEQ --db {DEFAULT}`" in " ".join(" ".join(out).split())
    whole = " ".join(lines("show", "1/1", "--db", DEFAULT))
    assert "hypothesis: Structural move from naive" in whole and "k-major" in " ".join(whole.split())


@pytest.mark.parametrize("db, run", [(DEFAULT, "1"), (LLAMA, "2"), (CODESIGN, "1"), (SOFTMAX, "1")])
def test_every_table_fits_80_columns(db, run):
    for args in (["runs"], ["show", run], ["lineage", run], ["report", run]):
        out = lines(*args, "--db", db)
        wide = [line for line in table_lines(out) if len(line) > 80]
        assert not wide, (args, wide)


def test_show_keeps_the_config_behind_a_flag():
    out = lines("show", "1", "--db", DEFAULT)  # was 436 lines, about 125 of them the config
    text = "\n".join(out)
    assert len(out) <= 40 and '"harness"' not in text and '"budget"' not in text
    assert out[1].startswith("on NVIDIA H100 80GB HBM3 · ") and "nvcc 13.0.88" in " ".join(out[1:4])
    assert f"`autodiscovery show 1 --config --db {DEFAULT}`" in text  # the hint keeps --db
    rows = [line for line in out if line[:2].strip().isdigit()]
    assert len(rows) == 29 and all(len(line) <= 80 for line in rows)  # every candidate on one line
    config = "\n".join(lines("show", "1", "--config", "--db", DEFAULT))
    assert '"config"' in config and '"budget"' in config and '"fingerprint"' in config


def test_the_runs_of_a_suite_sit_under_it():
    out = lines("runs", "--db", LLAMA)  # was 153 lines: each problem's name folded over three
    assert len(out) <= 60
    row = next(line for line in out if line.split()[:1] == ["2"])
    assert row.split()[:4] == ["2", "↳", "qkv", "8192"]


def test_a_missing_run_names_its_database():
    for args in (["show", "9"], ["lineage", "9"], ["report", "9"], ["run", "--resume", "9"]):
        res = CliRunner().invoke(app, [*args, "--db", DEFAULT])
        assert res.exit_code == 2 and " ".join(res.output.split()) == f"error: no run 9 in {DEFAULT}", res.output


def test_hints_name_the_database_without_its_password():
    assert hint("show 3", "runs/x.db") == "autodiscovery show 3 --db runs/x.db"
    assert hint("show 3", "postgresql://ad:s3cret@db.example/runs") == \
        "autodiscovery show 3 --db 'postgresql://ad:***@db.example/runs'"
    assert hint("show 3", None) == "autodiscovery show 3"


def test_campaigns_name_their_harness_and_fit():
    out = lines("campaigns")
    assert all(len(line) <= 80 for line in out)
    rows = {line.split()[0]: line.split()[1] for line in out if line and not line[0].isspace() and len(line.split()) > 1}
    assert rows["hopper-gemm"] == "hopper_gemm" and rows["softmax"] == "reference" and rows["edge-codesign"] == "accelsim"
