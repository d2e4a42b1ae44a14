"""The measured figures of the README and the documentation, each recomputed from the database it names
(`autodiscovery/figures.py`): every tagged figure agrees, a drifted one fails, and every figure of the
README's results table is tagged."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from autodiscovery import ROOT, figures

DATA = Path(__file__).parent / "data"


def test_every_tagged_figure_agrees_with_its_database():
    found = figures.found()
    assert len(found) >= 50
    assert figures.check(found) == []


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "docs" / "runs").mkdir(parents=True)
    shutil.copy(DATA / "h100_run.db", tmp_path / "docs" / "runs" / "run.db")
    return tmp_path


def page(root: Path, text: str) -> list[str]:
    (root / "README.md").write_text(text)
    return figures.check(figures.found(root), figures.Reader(root))


def test_a_figure_is_its_database_value_rounded_as_printed(project):
    """h100_run.db's run 1 has its best at 1.00896× cuBLAS (#6, 27 candidates evaluated): printed to any
    places it agrees; one place off does not, nor a count printed other than exactly."""
    tag = "<!-- fig docs/runs/run.db {ref} {what} -->"
    assert page(project, f"**{tag.format(ref='1', what='best')}1.009× cuBLAS**, "
                         f"{tag.format(ref='1', what='best')}1.01, {tag.format(ref='1/6', what='score')}1.00896") == []
    assert page(project, f"{tag.format(ref='1', what='evaluated')}27 candidates") == []
    (wrong,) = page(project, f"| x | {tag.format(ref='1', what='best')}1.010× |")
    assert wrong.startswith("README.md:1: 1.010 (docs/runs/run.db 1 best): the database says 1.008958")
    (count,) = page(project, f"{tag.format(ref='1', what='evaluated')}27.0 and {tag.format(ref='1', what='evaluated')}28")
    assert "28 (docs/runs/run.db 1 evaluated): the database says 27" in count
    (missing,) = page(project, "<!-- fig docs/runs/none.db 1 best -->1.0")
    assert "no database docs/runs/none.db" in missing
    (unknown,) = page(project, "<!-- fig docs/runs/run.db 1 nonsense -->1.0")
    assert "unknown quantity of a run: nonsense" in unknown


def test_every_figure_of_the_readme_results_table_is_tagged():
    """Each number of the README's table of results that reads as a measurement (a ratio, a percentage,
    seconds, a count of problems) carries its tag; the settings it quotes (1.05× apart) are not figures."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| on | found | page |"):text.index("Every measured table")]
    untagged = []
    for m in re.finditer(r"(?<![\w.³])([−+-]?\d[\d,]*(?:\.\d+)?)(?=(?:×(?! apart)(?!\d)|%| s\b| of \d))", table):
        if not re.search(r"-->[\s*_]*$", table[max(0, m.start() - 8):m.start()]):
            untagged.append(table[max(0, m.start() - 30):m.end() + 10])
    assert untagged == []


def test_the_quantities_read_what_the_run_recorded(project):
    """Each kind of quantity, on h100_run.db's run 1: what was left proposed, the pool's window and an idle
    share scaled to a percentage, a candidate's benchmark seconds and their sum and mean over the run, a
    metric scaled from ms to µs, its head-to-head, and the best over the database's runs; a scale that is
    not a number is an error."""
    tag = "<!-- fig docs/runs/run.db {ref} {what} -->{figure}"
    cases = [("1", "proposed", "2"), ("1", "pool:window_s", "118.3"), ("1", "pool:idle.proposal*100", "1.2%"),
             ("1/6", "eval_s:benchmark", "3.25"), ("1/6", "metric:ms.candidate*1000", "170.9 µs"),
             ("1/6", "h2h", "1.129×"), ("all", "best_of_runs_at_or_past", "1"),
             ("all", "best_of_runs_at_least:tflops:500", "1")]
    values = figures.Reader(project)
    sums = [values.value(figures.Figure("x", 0, "docs/runs/run.db", f"1/{seq}", "eval_s:benchmark", "0"))
            for seq in range(28) if _measured(values, seq)]
    cases += [("1", "sum_of:eval_s:benchmark", f"{sum(sums):.2f}"), ("1", "mean_of:eval_s:benchmark", f"{sum(sums) / len(sums):.3f}")]
    assert page(project, " ".join(tag.format(ref=r, what=w, figure=f) for r, w, f in cases)) == []
    (bad,) = page(project, tag.format(ref="1", what="best*x", figure="1"))
    assert "what follows * is not a number" in bad
    (project / "docs" / "runs" / "check.json").write_text('{"rows": [{"error": 0.01421}]}')
    assert page(project, "<!-- fig docs/runs/check.json file rows.0.error*100 -->+1.42%") == []  # a file a command wrote
    (drift,) = page(project, "<!-- fig docs/runs/check.json file rows.0.error*100 -->+1.5%")
    assert "the database says 1.4210" in drift


def test_a_figure_of_two_quantities(project):
    """Two quantities made one: #6's score over #1's (a ratio), its change against it as a percentage, their
    difference and sum; a drifted one fails naming both, and a ratio to nothing is an error, not a crash."""
    values = figures.Reader(project)
    six, one = (values.quantity("docs/runs/run.db", f"1/{seq}", "score") for seq in (6, 1))
    tag = "<!-- fig docs/runs/run.db 1/6 score {op} docs/runs/run.db 1/1 score{scale} -->{figure}"
    cases = [("over", "", f"{six / one:.4f}×"), ("vs", " *100", f"{(six / one - 1) * 100:+.2f}%"),
             ("minus", "", f"{six - one:.5f}"), ("plus", "", f"{six + one:.5f}")]
    assert page(project, " ".join(tag.format(op=o, scale=s, figure=f) for o, s, f in cases)) == []
    (drift,) = page(project, tag.format(op="over", scale="", figure=f"{six / one + 0.01:.4f}"))
    assert "(docs/runs/run.db 1/6 score over docs/runs/run.db 1/1 score): the database says" in drift
    (project / "docs" / "runs" / "zero.json").write_text('{"none": 0}')
    (zero,) = page(project, "<!-- fig docs/runs/run.db 1/6 score over docs/runs/zero.json file none -->1")
    assert "docs/runs/zero.json file none is 0: nothing to divide by" in zero


def _measured(values: figures.Reader, seq: int) -> bool:
    try:
        return values.value(figures.Figure("x", 0, "docs/runs/run.db", f"1/{seq}", "eval_s:benchmark", "0")) is not None
    except figures.FigureError:
        return False


UNTAGGED_AT_MOST = {
    "docs/architecture/layout.md": 1,
    "docs/concepts/agents.md": 1,
    "docs/concepts/loop.md": 4,
    "docs/concepts/trust.md": 3,
    "docs/guides/codesign.md": 6,
    "docs/guides/scale-out.md": 7,
    "docs/reference/campaign.md": 5,
    "docs/results/3000x5000x2000.md": 7,
    "docs/results/codesign.md": 29,
    "docs/results/default-run.md": 4,
    "docs/results/gate-calibration.md": 4,
    "docs/results/l2-promotion.md": 1,
    "docs/results/large-gemm.md": 16,
    "docs/results/launch.md": 3,
    "docs/results/llama3-suite.md": 2,
    "docs/results/placement.md": 1,
    "docs/results/reference-ops.md": 1,
    "docs/results/shapes.md": 7,
    "docs/results/sweep.md": 6,
    "docs/results/tile-fit.md": 8,
    "docs/results/triton.md": 5,
}
"""Each page's numbers that read as measured figures and carry no tag (`figures.untagged`), at most: the
figures still to trace to a database (or to remove), and the settings quoted in prose that read alike. A
page may only come down; a page not named here has none."""


def test_no_page_gains_an_untagged_figure():
    over = {page: (len(hits), UNTAGGED_AT_MOST.get(page, 0), hits[-1]) for page, hits in figures.untagged().items()
            if len(hits) > UNTAGGED_AT_MOST.get(page, 0)}
    assert over == {}, "untagged figures (count, allowed, the last): tag each with its database"


def test_what_reads_as_an_untagged_figure(tmp_path):
    """A ratio, a time, a share: untagged. A tagged one, a shape, a setting "apart", code, a comment and a
    generated table: not."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "ran 1.234× cuBLAS in 12.5 µs, 97% busy, 81 s in; 320×2632×10352; kept 1.05× apart\n"
        "<!-- fig docs/x.db 1 best -->1.020× and `1.5×` <!-- 2.0× -->\n"
        "```\n3.0× in code\n```\n<!-- suite: docs/x.db run 1 -->\n| 0.993 | 4.0× |\n<!-- end -->\nafter 5 ms\n")
    got = figures.untagged(tmp_path)
    assert got == {"README.md": [(1, "1.234×"), (1, "12.5 µs"), (1, "97%"), (1, "81 s"), (9, "5 ms")]}


def test_a_keeps_distance_and_when_it_was_measured(project):
    """`over:SEQ`: a candidate's objective over another's of the run (h100_run.db's #6, 1.00896× cuBLAS,
    over #5's 0.89280: 1.130); `measured_at`: its first benchmark's end, before its decision (`kept_at`);
    a candidate the run does not have is an error, not a figure."""
    tag = "<!-- fig docs/runs/run.db 1/6 {what} -->{figure}"
    assert page(project, tag.format(what="over:5", figure="1.130") + " apart, " +
                tag.format(what="measured_at", figure="47.1") + " s in, " +
                tag.format(what="kept_at", figure="50.8") + " s") == []
    (wrong,) = page(project, tag.format(what="over:5", figure="1.13") + " and " +
                    tag.format(what="over:5", figure="1.140"))
    assert "the database says 1.130" in wrong
    (missing,) = page(project, tag.format(what="over:99", figure="1.0"))
    assert "has no objective to divide by" in missing
