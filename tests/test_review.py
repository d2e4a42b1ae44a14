"""Reviewing a real run: `diff`, `lineage --tree`, `runs` filters and the HTML report, over a database
recorded by `autodiscovery run --campaign hopper-gemm` on an H100 (tests/data/h100_run.db), and a
co-design run replayed from the recorded 512³ results."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autodiscovery.cli import app
from autodiscovery.review import report
from autodiscovery.store import Store

DATA = Path(__file__).parent / "data"
cli = CliRunner()


@pytest.fixture()
def db(tmp_path) -> Path:
    path = tmp_path / "h100_run.db"
    shutil.copy(DATA / "h100_run.db", path)  # the recorded file stays as it was
    return path


def run_json(args: list[str]):
    out = cli.invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)  # a note on stderr (an older schema read in memory) is not the JSON


def test_diff_of_two_recorded_candidates(db):
    d = run_json(["diff", "1/5", "1/6", "--db", str(db)])
    assert d["a"]["family"] == "wgmma_persistent" and d["b"]["family"] == "wgmma_cluster"
    assert d["b"]["score"] > 1.0 > d["a"]["score"]
    assert d["knobs_changed"]["EPILOGUE"] == [None, "tma_split"] and "BM" not in d["knobs_changed"]
    assert "+cluster: [1, 1, 1]" in d["diff"].splitlines()
    assert d["lines_added"] == sum(1 for ln in d["diff"].splitlines() if ln[:1] == "+" and ln[:3] != "+++")
    same = run_json(["diff", "1/6", "1/6", "--db", str(db)])
    assert same["diff"] == "" and same["knobs_changed"] == {}
    bad = cli.invoke(app, ["diff", "1/6", "6", "--db", str(db)])
    assert bad.exit_code != 0 and "RUN/SEQ" in bad.output and "Traceback" not in bad.output


def test_the_tree_puts_every_candidate_under_its_parent(db):
    rows = run_json(["lineage", "1", "--tree", "--db", str(db)])
    cands = run_json(["show", "1", "--db", str(db)])["candidates"]
    assert sorted(r["seq"] for r in rows) == sorted(c["seq"] for c in cands)
    for i, r in enumerate(rows):
        if r["depth"] == 0:
            assert r["parent_seq"] is None
            continue
        parent = next(p for p in reversed(rows[:i]) if p["depth"] == r["depth"] - 1)
        assert parent["seq"] == r["parent_seq"]
    assert [r["seq"] for r in rows if r["best"]] == [6]
    # The structural climb branched from the seed and from wgmma_ws; the knob moves from the best.
    under_best = [r["seq"] for r in rows if r["parent_seq"] == 6]
    assert len(under_best) >= 15
    shown = cli.invoke(app, ["lineage", "1", "--tree", "--db", str(db)])
    assert shown.exit_code == 0  # the drawn tree wraps with the terminal: its content is checked as JSON above


def test_a_running_run_says_its_proposed_candidates_are_not_yet_evaluated(db):
    """`runs` and `show` say a stopped run's proposed candidates were left when it stopped, and a running
    run's that they are not yet evaluated: the stopped run's footnote is not shown for one that goes on."""
    import sqlite3
    from contextlib import closing

    stopped = cli.invoke(app, ["--db", str(db), "runs"], terminal_width=80).output
    assert "left proposed, not evaluated when the run stopped" in stopped
    assert "left proposed" in cli.invoke(app, ["--db", str(db), "show", "1"], terminal_width=80).output
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("update runs set status = 'running' where id = 1")
    going = " ".join(cli.invoke(app, ["--db", str(db), "runs"], terminal_width=80).output.split())
    assert "when the run stopped" not in going and "+N on a running run: proposed, not yet evaluated" in going
    shown = " ".join(cli.invoke(app, ["--db", str(db), "show", "1"], terminal_width=80).output.split())
    assert "proposed, not yet evaluated" in shown and "left proposed" not in shown


def test_runs_filters(db):
    assert [r["id"] for r in run_json(["runs", "--db", str(db)])] == [1]
    assert run_json(["runs", "--campaign", "edge-codesign", "--db", str(db)]) == []
    assert [r["id"] for r in run_json(["runs", "--status", "finished", "--db", str(db)])] == [1]
    assert run_json(["runs", "--status", "running", "--db", str(db)]) == []
    assert [r["id"] for r in run_json(["runs", "--since", "2026-11-22", "--db", str(db)])] == [1]
    assert run_json(["runs", "--since", "2026-11-23T00:00", "--db", str(db)]) == []
    assert report.parse_since("3d") < report.parse_since("2h")
    bad = cli.invoke(app, ["runs", "--since", "yesterday", "--db", str(db)])
    assert bad.exit_code != 0 and "--since" in bad.output and "Traceback" not in bad.output


class Page(HTMLParser):
    """The parts of the report a test checks: tables' rows, chart groups and their marks, links."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, int] = {}
        self.table: str | None = None
        self.groups: list[str] = []
        self.marks: dict[str, int] = {}
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.table = a.get("id")
        if tag == "tr" and self.table:
            self.rows[self.table] = self.rows.get(self.table, 0) + 1
        if tag == "g":
            self.groups.append(a.get("id") or "")
        if tag in ("use", "path") and self.groups:
            for g in self.groups:
                if g:
                    self.marks[g] = self.marks.get(g, 0) + (tag == "use")
        for key in ("src", "href", "xlink:href"):
            if a.get(key):
                self.urls.append(a[key])

    def handle_endtag(self, tag):
        if tag == "table":
            self.table = None
        if tag == "g" and self.groups:
            self.groups.pop()


def parse(path: Path) -> tuple[str, Page]:
    text = path.read_text()
    page = Page()
    page.feed(text)
    return text, page


def test_the_report_is_one_self_contained_page(db, tmp_path):
    out = tmp_path / "report.html"
    result = cli.invoke(app, ["report", "1", "--out", str(out), "--png", str(tmp_path / "png"), "--db", str(db)])
    assert result.exit_code == 0, result.output
    text, page = parse(out)
    cands = [c for c in run_json(["show", "1", "--db", str(db)])["candidates"] if c["status"] not in ("proposed",)]
    kept = [c for c in cands if c["verdict"] == "keep"]
    failed = [c for c in cands if c["score"] is None]
    # One chart mark per candidate: kept, reverted and failed drawn apart.
    assert page.marks.get("kept") == len(kept) == 7
    assert page.marks.get("reverted", 0) == len(cands) - len(kept) - len(failed)
    assert page.marks.get("failed", 0) == len(failed)
    assert {"best-so-far", "baseline", "lineage-bars", "spread"} <= set(page.marks) | {g for g in re.findall(r'<g id="([^"]+)"', text)}
    chain = run_json(["lineage", "1", "--db", str(db)])
    assert page.rows["lineage"] == len(chain) + 1  # the header row and one per step
    # Nothing is fetched: links only within the page, no external URL anywhere but XML namespaces.
    assert all(u.startswith("#") for u in page.urls), [u for u in page.urls if not u.startswith("#")][:3]
    assert not re.findall(r'https?://(?!www\.w3\.org/)', text)
    assert "1.009× cuBLAS" in text and "tma_split" in text
    # The same count as `runs` and `show`: evaluated, and what was left proposed when the run stopped.
    (row,) = run_json(["runs", "--db", str(db)])
    assert f'<span id="tally">{row["evaluated"]} evaluated, 2 left proposed</span>' in text
    assert row["evaluated"] == len(cands) and row["proposed"] == 2
    shown = cli.invoke(app, ["show", "1", "--db", str(db)]).output.splitlines()[0]
    assert shown.endswith(f"· {row['evaluated']} evaluated, 2 left proposed")
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == ["lineage.png", "progress.png", "spread.png"]
    assert all((tmp_path / "png" / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in ("progress.png",))


@pytest.fixture()
def pyplot():
    """Closes the figures a test drew."""
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


def charts(db: Path) -> tuple[dict, dict]:
    """The page's data and its charts as matplotlib figures, by name."""
    from autodiscovery.review import html as html_report
    from autodiscovery.review import report

    store = Store(db)
    data = html_report.collect(store, 1)
    return data, html_report.figures(data, report.harness_class(store, 1)).figs


def harness_for(objective: str) -> type:
    from harnesses.accelsim import AccelsimHarness
    from harnesses.hopper_gemm import HopperGemmHarness

    return {"cycles": AccelsimHarness, "× cuBLAS": HopperGemmHarness}[objective]


def made_up(objective: str, scores: list, kept: list[int], steps: list[dict] | None = None,
            baseline_tflops: float | None = None) -> dict:
    """What `figures` draws, for a run that was not recorded: one candidate a score (None: failed)."""
    cands = [{"seq": i, "status": "kept" if i in kept else "failed" if s is None else "reverted",
              "verdict": "keep" if i in kept else None if s is None else "revert", "score": s, "knobs": {}}
             for i, s in enumerate(scores)]
    return {"run": {"objective": objective}, "candidates": cands, "steps": steps or [], "harness": None,
            "best_measurement": {"tflops": {"cublas": baseline_tflops}} if baseline_tflops else {}}


def legend_labels(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


def clearance(fig, ax, text, y: float) -> float:
    """Points between a label (its background box included) and the horizontal line at `y`; below 0
    where the line runs through it."""
    from matplotlib.transforms import Bbox

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = text.get_window_extent(renderer)
    if text.get_bbox_patch() is not None:
        box = Bbox.union([box, text.get_bbox_patch().get_window_extent(renderer)])
    line = ax.transData.transform((0, y))[1]
    return max(box.y0 - line, line - box.y1) * 72 / fig.dpi


def test_the_progress_chart_shows_the_band_near_the_best_on_a_linear_scale(db, tmp_path, pyplot):
    out = tmp_path / "report.html"
    assert cli.invoke(app, ["report", "1", "--out", str(out), "--db", str(db)]).exit_code == 0
    text, page = parse(out)
    scores = [c["score"] for c in run_json(["show", "1", "--db", str(db)])["candidates"] if c["score"] is not None]
    best = max(scores)
    near = [s for s in scores if s >= 0.7 * best]  # within 30% of the best: 0.770× to 1.009×
    assert len(near) == 23 and min(near) < 0.78
    # The overview keeps every candidate on its log scale; the band near the best is shaded there and
    # drawn again, on a linear scale, in a panel of its own: one mark for each candidate in it.
    assert page.marks.get("kept") == 7 and "near-band" in re.findall(r'<g id="([^"]+)"', text)
    assert page.marks.get("near-kept", 0) + page.marks.get("near-reverted", 0) == len(near)
    _, figs = charts(db)
    fig = figs["progress"]
    overview, near_best = fig.axes
    assert overview.get_yscale() == "log" and near_best.get_yscale() == "linear"
    low, high = near_best.get_ylim()
    assert low < min(near) and best < high and high - low < 1.4 * (best - min(near))
    # 1.003× and 1.009× lie more than 3 points apart: the decisions near the best can be told apart.
    height = near_best.bbox.height * 72 / fig.dpi
    assert (1.009 - 1.003) / (high - low) * height > 3
    # A run whose scores are readable on one linear scale keeps its one panel (the co-design run).
    shutil.copy(Path(__file__).parent.parent / "docs" / "codesign-512" / "run.db", tmp_path / "codesign.db")
    _, figs = charts(tmp_path / "codesign.db")
    assert len(figs["progress"].axes) == 1 and figs["progress"].axes[0].get_yscale() == "linear"


def test_the_band_near_the_best_follows_the_objective_where_lower_is_better(pyplot):
    from autodiscovery.review import html as html_report

    cycles = [1_000_000, 200_000, 30_000, 12_000, 11_000, 10_500, 10_000, 10_200, 13_500, 20_000]
    figs = html_report.figures(made_up("cycles", cycles, kept=[0, 1, 2, 3, 4, 5, 6]), harness_for("cycles")).figs
    overview, near_best = figs["progress"].axes
    assert overview.get_yscale() == "log" and near_best.get_yscale() == "linear"
    low, high = near_best.get_ylim()
    assert low < 10_000 and 12_000 < high < 13_500  # within 30% of 10,000 cycles: up to 13,000
    marks = [a for a in near_best.collections if a.get_gid() in ("near-kept", "near-reverted")]
    assert sum(len(a.get_offsets()) for a in marks) == 5
    best = next(a for a in near_best.lines if a.get_gid() == "near-best-so-far")
    assert min(best.get_ydata()) == 10_000


def test_the_legend_names_only_the_series_drawn(db, pyplot):
    _, figs = charts(db)
    labels = legend_labels(figs["progress"])
    assert {"kept", "reverted", "best so far", "cuBLAS"} <= set(labels)
    assert "failed or refused" not in labels  # none in this run
    from autodiscovery.review import html as html_report

    some = html_report.figures(made_up("× cuBLAS", [0.5, None, 0.9, 0.8], kept=[0, 2]), harness_for("× cuBLAS")).figs
    assert "failed or refused" in legend_labels(some["progress"])
    none_kept = html_report.figures(made_up("cycles", [None, None], kept=[]), harness_for("cycles")).figs
    assert legend_labels(none_kept["progress"]) == ["failed or refused"]


def test_the_best_label_stays_clear_of_the_baseline(db, pyplot):
    data, figs = charts(db)
    fig = figs["lineage"]
    ax = fig.axes[0]
    labels = {t.get_text(): t for t in ax.texts}
    baseline = data["best_measurement"]["tflops"]["cublas"]
    assert "1.009×" in labels and baseline == pytest.approx(797, abs=1)
    for label in labels.values():
        assert clearance(fig, ax, label, baseline) > 3, label.get_text()
    fig = figs["progress"]
    near_best = fig.axes[-1]
    best = next(t for t in near_best.texts if t.get_gid() == "best-label")
    assert "#6" in best.get_text() and "1.009×" in best.get_text()
    assert clearance(fig, near_best, best, 1.0) > 3
    # A step just under cuBLAS and the best just over it: neither label crosses the line.
    from autodiscovery.review import html as html_report

    steps = [{"step": i, "family": f, "score": t / 797, "figures": {"tflops": t}}
             for i, (f, t) in enumerate([("tiled", 200.0), ("wgmma", 790.0), ("cluster", 801.0)])]
    made = made_up("× cuBLAS", [s["score"] for s in steps], kept=[0, 1, 2], steps=steps, baseline_tflops=797.0)
    fig = html_report.figures(made, harness_for("× cuBLAS")).figs["lineage"]
    ax = fig.axes[0]
    assert len(ax.texts) == 3
    for label in ax.texts:
        assert clearance(fig, ax, label, 797.0) > 3, label.get_text()


def test_the_page_shows_its_times_to_the_second_in_utc(db, tmp_path):
    from autodiscovery.store import Run

    with Store(db).session() as s:  # a toolchain change recorded on resuming carries its time
        run = Run.find(s, 1)
        run.fingerprint = run.fingerprint | {"toolchain_changes": [
            {"at": "2026-11-22T07:00:05", "cublas": {"was": "13.1.0", "now": "13.2.0"}}]}
    out = tmp_path / "report.html"
    assert cli.invoke(app, ["report", "1", "--out", str(out), "--db", str(db)]).exit_code == 0
    shown = re.sub(r"<[^>]+>", "", out.read_text()).replace("&#34;", '"')
    assert "started 2026-11-22 06:33:28 UTC" in shown
    assert '"at": "2026-11-22 07:00:05 UTC"' in shown
    times = re.findall(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d[\d:.]*(?: UTC)?", shown)
    assert len(times) == 2 and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", t) for t in times), times


def chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.environ.get("CI"):
        pytest.fail("chromium is missing on CI: .ci/run installs Debian's chromium")
    return found


def test_the_report_renders_in_headless_chromium(db, tmp_path):
    browser = chromium()
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs it)")
    out = tmp_path / "report.html"
    assert cli.invoke(app, ["report", "1", "--out", str(out), "--db", str(db)]).exit_code == 0
    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         "--window-size=1200,2400", f"--screenshot={shot}", out.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    console = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert console == [], console[:5]


def recorded_cycles() -> dict[str, int]:
    data = json.loads((DATA / "edge_512_run.json").read_text())
    return {json.dumps({"kernel": r["kernel"], "arch": r["arch"]}, sort_keys=True): r["cycles"]
            for r in data["results"]}


def codesign_run(tmp_path: Path) -> Path:
    """A co-design run driven by the recorded 512³ results (the analytical model where none was recorded)."""
    from replay import SimReplay, offline_agent

    from autodiscovery import campaign as campaigns
    from autodiscovery.running.driver import Driver

    c = campaigns.load("edge-codesign", ["harness.parallel=2"])
    db = tmp_path / "codesign.db"
    Driver(c, Store(db), SimReplay(recorded=recorded_cycles()), offline_agent(c, tmp_path), workers=2).new_run(
        {"gpu": "simulated"})
    return db


def test_a_co_design_report_has_its_phases_and_model(tmp_path):
    db = codesign_run(tmp_path)
    out = tmp_path / "codesign.html"
    result = cli.invoke(app, ["report", "1", "--out", str(out), "--png", str(tmp_path / "png"), "--db", str(db)])
    assert result.exit_code == 0, result.output
    text, page = parse(out)
    phases = report.summary(Store(db), 1)[1]["phases"]
    assert page.rows["phases"] == len(phases) + 1
    assert "cuBLAS" not in text and "cycles" in text
    assert {"phases.png", "model.png", "pareto.png", "progress.png", "lineage.png"} <= {
        p.name for p in (tmp_path / "png").iterdir()}
    data = report.summary(Store(db), 1)[1]
    assert page.marks.get("model-fit", 0) + page.marks.get("model-picks", 0) == len(data["model"]["points"])
    assert page.marks.get("model-picks", 0) >= 1
    assert page.marks.get("pareto-area-points", 0) == len(data["pareto"]["points"]) >= 2
    assert page.marks.get("pareto-power-points", 0) == len(data["pareto"]["points"])
    # The terminal's tables are in the page too, one row for each entry of their data.
    assert page.rows["attribution"] == len(data["attribution"]) + len(data["over_budget"]) + 1
    assert page.rows["cross"] == 6 + 1
    assert page.rows["model"] == len(data["model"]["points"]) + 1
    assert page.rows["pareto-area"] == len(data["pareto"]["front"]) + 1
    assert page.rows["pareto-power"] == len(data["pareto"]["power_front"]) + 1
    assert '<td class="num">35422</td>' in text  # the baseline's cycles, a number in the page


class RecordedGpu:
    """Stands in for the GPU harness in `replay`: each step's figures are its own recorded benchmark,
    scaled per family (to play a slower or faster machine), on a fingerprint that may differ."""

    from harnesses.hopper_gemm import HopperGemmHarness

    name = "recorded-gpu"
    objective = HopperGemmHarness.objective
    Problem = HopperGemmHarness.Problem
    columns = HopperGemmHarness.columns
    identity = HopperGemmHarness.identity
    build_workers = 1

    def __init__(self, db: Path, scale: dict[str, float] | None = None, fingerprint: dict | None = None) -> None:
        self.scale = scale or {}
        self.by_source: dict[str, tuple[str, dict]] = {}
        with Store(db).session() as s:
            from autodiscovery.store import Run

            run = s.get(Run, 1)
            self.fp = dict(run.fingerprint) | (fingerprint or {})
            for c in run.candidates:
                if c.measurement is not None and c.measurement.status == "ok":
                    self.by_source[c.source] = (c.family, dict(c.measurement.metrics))
        self.replayed: list[int] = []

    def preflight(self, need_gpu: bool = True) -> dict:
        return self.fp

    def build(self, source: str):
        from autodiscovery.toolkit.build import BuildReport

        return BuildReport(ok=True, cache_key=str(hash(source)), artifact="recorded")

    def replay(self, items):
        from autodiscovery.interfaces import Outcome

        self.replayed.append(len(items))
        out = []
        for source, _ in items:
            family, m = self.by_source[source]
            f = self.scale.get(family, 1.0)
            r = {k: v * f for k, v in m["ratio"].items() if k in ("median", "ci_low", "ci_high")}
            metrics = {"ratio": r, "tflops": {"candidate": m["tflops"]["candidate"] * f,
                                               "cublas": m["tflops"]["cublas"]}, "peak_tflops": self.fp["peak_tflops"]}
            out.append(Outcome("ok", metrics, "", 1.0, self.fp["gpu"], r["median"]))
        return out


def test_replay_puts_the_recorded_and_the_replayed_figures_side_by_side(db):
    from autodiscovery.review.replay import replay

    same = replay(1, Store(db), harness=RecordedGpu(db))
    chain = run_json(["lineage", "1", "--db", str(db)])
    assert [s["seq"] for s in same["steps"]] == [r["seq"] for r in chain]
    assert same["same_machine"] and same["differences"] == {}
    assert not any(s["flag"] for s in same["steps"])
    assert all(s["replayed"]["score"] == pytest.approx(s["recorded"]["score"]) for s in same["steps"])
    top = same["steps"][-1]["replayed"]
    figures = top["figures"]
    assert figures["pct_peak"] == pytest.approx(100 * figures["tflops"] / same["fingerprint"]["peak_tflops"])

    # Another GPU and cuBLAS: said, with the fingerprints side by side; a step 5% slower is flagged.
    other = RecordedGpu(db, scale={"wgmma_tma": 0.95, "tiled": 1.01},
                        fingerprint={"gpu": "NVIDIA H200", "cublas": "13.2.0"})
    moved = replay(1, Store(db), harness=other)
    assert other.replayed == [len(chain)]  # one evaluation process for the whole lineage
    assert not moved["same_machine"]
    assert moved["differences"]["gpu"] == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    assert moved["differences"]["cublas"] == ["13.1.0", "13.2.0"]
    flagged = {s["family"] for s in moved["steps"] if s["flag"]}
    assert flagged == {"wgmma_tma"}  # 1% is within the noise, 5% is not
    assert next(s for s in moved["steps"] if s["family"] == "wgmma_tma")["delta"] == pytest.approx(-0.05)


def test_replay_table_and_json_through_the_cli(db, monkeypatch):
    from autodiscovery import registry
    from harnesses.hopper_gemm import HopperGemmHarness

    class OnAnH200(RecordedGpu):
        Settings = HopperGemmHarness.Settings

        def __init__(self, campaign) -> None:
            super().__init__(db, scale={"wgmma_ws": 0.9}, fingerprint={"gpu": "NVIDIA H200"})

    monkeypatch.setattr(registry, "harness", lambda name: OnAnH200)
    out = cli.invoke(app, ["replay", "1", "--db", str(db)], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "1 of 7 steps differ from the recording by more than the noise" in out.output  # one unwrapped line
    from io import StringIO

    from rich.console import Console

    from autodiscovery.review.display import replay_section
    from autodiscovery.review.sections import sections_table

    data = run_json(["replay", "1", "--db", str(db)])
    for width in (60, 80, 100):  # each family's name whole on one line, however narrow the terminal
        shown = Console(width=width, file=StringIO(), color_system=None)
        shown.print(sections_table([replay_section(data, OnAnH200(None))]))
        text = shown.file.getvalue()
        steps = [line.rstrip() for line in text.splitlines() if line[:1].isdigit()]
        assert steps and max(map(len, steps)) <= width, text
        assert all(s["family"] in text for s in data["steps"]), text
    assert [s["flag"] for s in data["steps"]].count(True) == 1
    assert data["differences"]["gpu"] == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    missing = cli.invoke(app, ["replay", "9", "--db", str(db)])
    assert missing.exit_code != 0 and "no run 9" in missing.output


def test_a_co_design_replay_simulates_each_phase_winner_again(tmp_path):
    from replay import SimReplay

    from autodiscovery.review.replay import replay

    db = codesign_run(tmp_path)
    recorded = recorded_cycles()
    sim = SimReplay(recorded=recorded)
    out = replay(1, Store(db), harness=sim)
    phases = report.summary(Store(db), 1)[1]["phases"]
    assert [s["phase"] for s in out["steps"]] == [p["phase"] for p in phases]
    assert [s["replayed"]["score"] for s in out["steps"]] == [p["cycles"] for p in phases]
    assert not any(s["flag"] for s in out["steps"]) and len(sim.evaluated) == len(phases)


def test_a_database_from_an_earlier_version_upgrades_and_works_with_every_command(tmp_path):
    """tests/data/old_m002.db was written by an earlier version (migrations m001 and m002 only, no
    lease, no incumbent column). A command that only reads reads it as it is, from a copy in memory brought
    up to date, says so in one line, and leaves the file's bytes and its folder as they were; `migrate`
    upgrades it in place through the named migrations, and every review command reads it."""
    import sqlite3
    from contextlib import closing

    db = tmp_path / "old.db"
    shutil.copy(DATA / "old_m002.db", db)
    with closing(sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)) as conn:
        before = [r[0] for r in conn.execute("select name from _migrations order by name")]
    assert before == ["m001_initial", "m002_llm_calls"]
    untouched, beside = db.read_bytes(), sorted(p.name for p in tmp_path.iterdir())
    for command in (["runs"], ["show", "1"], ["lineage", "1"], ["report", "1"]):
        res = cli.invoke(app, [*command, "--db", str(db)])
        assert res.exit_code == 0, (command, res.output)
        assert "older schema (4 migrations behind): read from a copy in memory brought up to date" in res.output
        assert db.read_bytes() == untouched and sorted(p.name for p in tmp_path.iterdir()) == beside, command
    assert run_json(["runs", "--db", str(db)])[0]["evaluated"] >= 12  # read whole, as upgraded
    assert cli.invoke(app, ["migrate", "--db", str(db)]).exit_code == 0
    rows = run_json(["runs", "--db", str(db)])
    after = [r[0] for r in sqlite3.connect(db).execute("select name from _migrations order by name")]
    assert after[:2] == before and len(after) > 2 and all(re.fullmatch(r"m\d{3}_\w+", n) for n in after)
    cands = run_json(["show", "1", "--db", str(db)])["candidates"]
    assert rows[0]["evaluated"] == len(cands) >= 12 and rows[0]["best_score"] > 0.8
    chain = run_json(["lineage", "1", "--db", str(db)])
    assert chain[0]["family"] == "naive" and chain[-1]["score"] == rows[0]["best_score"]
    assert len(run_json(["lineage", "1", "--tree", "--db", str(db)])) == len(cands)
    assert run_json(["show", "1/3", "--db", str(db)])["seq"] == 3
    assert run_json(["diff", "1/2", f"1/{chain[-1]['seq']}", "--db", str(db)])["diff"]
    assert cli.invoke(app, ["report", "1", "--out", str(tmp_path / "r.html"), "--db", str(db)]).exit_code == 0
    assert cli.invoke(app, ["export", "1", "--out", str(tmp_path / "best.cu"), "--db", str(db)]).exit_code == 0
    assert "@manifest" in (tmp_path / "best.cu").read_text()


def test_a_run_against_the_best_lt_algorithm_names_it(tmp_path):
    """A GEMM campaign timed against the best cuBLASLt algorithm (harness.baseline best_lt) says so: its
    objective is `× best Lt`, below it is below that algorithm, and cublasGemmEx is the column beside it;
    the default campaign's is `× cuBLAS`, with the best Lt algorithm beside it."""
    from autodiscovery import campaign as campaigns
    from autodiscovery import registry
    from harnesses.hopper_gemm import HopperGemmHarness

    lt = registry.make_harness(campaigns.load("llama70b-qwen72b-gemm"))
    ex = HopperGemmHarness(campaigns.load("hopper-gemm"))
    assert (lt.objective.name, lt.objective.reference_name) == ("× best Lt", "the best cuBLASLt algorithm")
    assert (ex.objective.name, ex.objective.reference_name) == ("× cuBLAS", "cuBLAS")
    assert HopperGemmHarness.for_config(campaigns.load("llama70b-qwen72b-gemm").model_dump(mode="json")) is type(lt)
    db = tmp_path / "best-lt.db"
    shutil.copy(Path(__file__).resolve().parents[1] / "docs" / "llama70b-qwen72b-h200" / "best-lt-5-of-16.db", db)
    data = run_json(["report", "1", "--db", str(db)])
    assert data["objective"] == "× best Lt"
    row = next(r for r in data["rows"] if r["label"] == "llama down 32")
    assert row["score_text"] == "0.980× best Lt" and round(row["figures"]["x_gemmex"], 3) == 1.041
    assert "x_best_lt" not in row["figures"]  # the objective itself, not a second column
