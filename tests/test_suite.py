"""Suites: one campaign over several problems, each tuned by a run of its own under the suite's run; the
dispatch table read from them; a suite resumed where it stopped; a problem the seed refuses recorded
with the reason; each later problem's run warm-started from the bests before it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from replay import ShapedReplay
from typer.testing import CliRunner

from autodiscovery import campaign as campaigns
from autodiscovery.cli import app
from autodiscovery.review import exports
from autodiscovery.running import suite
from autodiscovery.running.driver import Quiet, Stop
from autodiscovery.store import Run, Store

SUITE = ("suite=[{label: 'qkv 16', problem: {M: 16, N: 6144, K: 4096}}, "
         "{label: 'qkv 2048', problem: {M: 2048, N: 6144, K: 4096}}, "
         "{label: ragged, problem: {M: 100, N: 1000, K: 1001}}]")


@pytest.fixture
def seed(tmp_path):
    """The naive seed, stating that it needs K % 8 == 0 (so the ragged problem is refused)."""
    text = (campaigns.SEEDS / "hopper_gemm" / "naive.cu").read_text()
    path = tmp_path / "naive_k8.cu"
    path.write_text(text.replace("smem: 0\n", "smem: 0\nrequires: [\"K % 8 == 0\"]\n", 1))
    return path


def overrides(seed) -> list[str]:
    return ["harness.name=replay:ShapedReplay", SUITE, f"seed={seed}", "budget.candidates=6", "stop.patience=4"]


def test_a_suite_tunes_each_problem_and_records_the_dispatch_table(tmp_path, seed):
    db = str(tmp_path / "runs.db")
    args = ["--db", db, "run", "--campaign", "hopper-gemm", "--quiet"]
    for o in overrides(seed):
        args += ["--set", o]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert "dispatch table" in res.output and "suite 1: finished (suite: 3 problems tuned)" in res.output

    data = json.loads(CliRunner().invoke(app, ["--db", db, "report", "1", "--json"]).output)
    rows = {r["label"]: r for r in data["rows"]}
    assert list(rows) == ["qkv 16", "qkv 2048", "ragged"]
    assert rows["qkv 16"]["shape"] == "16×6144×4096" and rows["qkv 16"]["run"] == 2
    assert rows["qkv 16"]["score"] < rows["qkv 2048"]["score"]  # the stand-in scales with M
    assert rows["ragged"]["status"] == "failed" and "K % 8 == 0" in rows["ragged"]["stop_reason"]
    assert rows["ragged"]["score"] is None
    scores = [rows[k]["score"] for k in ("qkv 16", "qkv 2048")]
    said = data["summary"]
    assert said["problems"] == 3 and said["with_best"] == 2 and said["worst"] == min(scores)
    assert said["median"] == pytest.approx(sum(scores) / 2)
    assert said["at_or_past"] == sum(v >= 1 for v in scores)

    store = Store(db)
    with store.session() as s:
        kids = s.query(Run).filter(Run.parent_id == 1).order_by(Run.id).all()
        assert [k.campaign for k in kids] == ["hopper-gemm/qkv 16", "hopper-gemm/qkv 2048", "hopper-gemm/ragged"]
        assert kids[1].config["problem"]["M"] == 2048 and kids[1].config["suite"] is None
        first_of_second = [c for c in kids[1].candidates if c.seq > 0][:1]
        # the second problem starts from the first one's best, recorded a moment before
        assert first_of_second and first_of_second[0].proposer == "search:warm"
        assert f"the best of run {kids[0].id} at 16×6144×4096" in first_of_second[0].hypothesis

    text = CliRunner().invoke(app, ["--db", db, "report", "1"], env={"COLUMNS": "80"}).output
    assert "qkv 2048" in text and "refuses" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    shown = CliRunner().invoke(app, ["--db", db, "show", "1"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0 and "dispatch table" in shown.output and "qkv 2048" in shown.output  # not an empty table
    assert "candidates" not in shown.output.splitlines()[3:5]


def test_a_suites_summary_counts_the_unrounded_figures_and_the_time_to_the_first_at_the_reference():
    """0.9997 is below 1.000 (shown rounded, it would read as reached); candidates a minute are weighed by
    each run's measuring time; the first keep at or past the reference is the median of those that got
    there; a problem without a best counts as a problem, not as a figure."""
    from harnesses.hopper_gemm import HopperGemmHarnessBestLt

    def row(score, first=None, per_minute=None, window=None):
        return {"score": score, "first_at_s": first, "per_minute": per_minute, "window_s": window}

    said = exports.summary([row(1.02, 10.0, 60.0, 30.0), row(0.9997, None, 30.0, 60.0), row(1.0, 30.0),
                            row(None)], HopperGemmHarnessBestLt.objective)
    assert said["at_or_past"] == 2 and said["with_best"] == 3 and said["problems"] == 4
    assert said["worst"] == 0.9997 and said["median"] == 1.0
    assert said["per_minute"] == pytest.approx(40.0) and said["first_at_median_s"] == 20.0 and said["reached"] == 2
    from autodiscovery.review.display import summary_text

    text = summary_text(said, HopperGemmHarnessBestLt.objective)
    assert text == ("median 1.000× best Lt, worst 1.000× best Lt; 2 of 4 at or above 1.000× best Lt, 20 s in "
                    "(the median of those); 40 candidates a minute")


def test_a_recorded_suites_dispatch_table_reads_whole_at_80_columns():
    """Every column of a best-Lt suite's dispatch table at 80 columns: its heads and its kernels' names
    whole (a name wraps at its space, never inside a word), no line past 80."""
    db = str(Path(__file__).parent.parent / "docs" / "llama70b-qwen72b-h200" / "best-lt-5-of-16.db")
    text = CliRunner().invoke(app, ["--db", db, "report", "1"], env={"COLUMNS": "80"}).output
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    head = next(line for line in lines if line.startswith("problem"))
    assert head.split() == ["problem", "shape", "run", "kernel", "TFLOP/s", "×", "best", "Lt", "×", "GemmEx", "cands"]
    assert text.count("wgmma_splitk") == 4 and text.count("wgmma_cluster") == 1


def test_a_suite_resumes_where_it_stopped(tmp_path, seed):
    store = Store(tmp_path / "runs.db")
    campaign = campaigns.load("hopper-gemm", overrides(seed))
    made: list[ShapedReplay] = []

    def harness(c, stop_in: str | None = "qkv 2048"):
        h = ShapedReplay(c)
        if stop_in and c.name.endswith(stop_in):
            h.interrupt_after = 1  # Ctrl-C in the middle of the second problem's run
        made.append(h)
        return h

    with pytest.raises(KeyboardInterrupt):
        suite.start(campaign, [], store, Quiet(), Stop(), make_harness=harness)
    with store.session() as s:
        assert Run.find(s, 1).status == "interrupted"
        assert [(k.campaign, k.status) for k in s.query(Run).filter(Run.parent_id == 1).order_by(Run.id)] == [
            ("hopper-gemm/qkv 16", "finished"), ("hopper-gemm/qkv 2048", "interrupted")]

    suite.resume(1, [], store, Quiet(), Stop(), make_harness=lambda c: harness(c, None))
    data = exports.dispatch(store, 1)
    assert data["status"] == "finished"
    assert [(r["label"], r["run"]) for r in data["rows"]] == [("qkv 16", 2), ("qkv 2048", 3), ("ragged", 4)]
    assert all(r["score"] is not None for r in data["rows"][:2])
    with store.session() as s:
        second = Run.find(s, 3)
        assert second.status == "finished" and second.candidates[0].status == "kept"  # resumed, not started again


def test_a_suite_tunes_as_many_problems_as_asked_then_goes_on_when_resumed(tmp_path, seed):
    """`--problems N` stops between two problems (a long suite in pieces); each piece's problems are
    finished runs, and `--resume` goes on from the first not tuned, never tuning one twice."""
    db = str(tmp_path / "runs.db")
    args = ["--db", db, "run", "--campaign", "hopper-gemm", "--quiet", "--problems", "1"]
    for o in overrides(seed):
        args += ["--set", o]
    first = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert first.exit_code == 0, first.output
    assert "stopped after 1 of 3 problems, as --problems asked" in first.output
    assert "run --resume 1" in first.output
    store = Store(db)

    def kids() -> list[tuple[str, str]]:
        with store.session() as s:
            return [(k.campaign, k.status) for k in s.query(Run).filter(Run.parent_id == 1).order_by(Run.id)]

    assert kids() == [("hopper-gemm/qkv 16", "finished")]
    with store.session() as s:
        assert Run.find(s, 1).status == "interrupted"
    resumed = CliRunner().invoke(app, ["--db", db, "run", "--resume", "1", "--problems", "1"], env={"COLUMNS": "80"})
    assert resumed.exit_code == 0 and "stopped after 2 of 3 problems" in resumed.output, resumed.output
    assert kids() == [("hopper-gemm/qkv 16", "finished"), ("hopper-gemm/qkv 2048", "finished")]
    last = CliRunner().invoke(app, ["--db", db, "run", "--resume", "1"], env={"COLUMNS": "80"})
    assert last.exit_code == 0 and "suite 1: finished (suite: 3 problems tuned)" in last.output, last.output
    assert [k for k, _ in kids()] == ["hopper-gemm/qkv 16", "hopper-gemm/qkv 2048", "hopper-gemm/ragged"]
    one = CliRunner().invoke(app, ["--db", str(tmp_path / "one.db"), "run", "--campaign", "hopper-gemm",
                                   "--problems", "1", "--set", "harness.name=replay:ShapedReplay"])
    assert one.exit_code == 2 and "--problems is for a suite" in one.output
    assert not (tmp_path / "one.db").exists()


def test_suite_entries_are_checked_when_the_campaign_loads():
    with pytest.raises(campaigns.CampaignError, match="suite entry 'b': problem.M"):
        campaigns.load("hopper-gemm", ["suite=[{label: a, problem: {M: 16}}, {label: b, problem: {M: 0}}]"])
    with pytest.raises(campaigns.CampaignError, match="the label 'a' is given twice"):
        campaigns.load("hopper-gemm", ["suite=[{label: a, problem: {M: 16}}, {label: a, problem: {M: 32}}]"])
    with pytest.raises(campaigns.CampaignError, match="at least one"):
        campaigns.load("hopper-gemm", ["suite=[]"])


def test_a_suite_does_not_start_from_one_candidate(tmp_path, seed):
    db = str(tmp_path / "runs.db")
    args = ["--db", db, "run", "--campaign", "hopper-gemm", "--quiet"]
    for o in overrides(seed):
        args += ["--set", o]
    assert CliRunner().invoke(app, args).exit_code == 0
    res = CliRunner().invoke(app, [*args[:3], "--from", "2", *args[3:]])
    assert res.exit_code == 2 and "is a suite: it runs with `autodiscovery run --campaign`" in res.output
    assert "Traceback" not in res.output
