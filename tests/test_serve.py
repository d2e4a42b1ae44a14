"""`autodiscovery serve` over recorded runs (tests/data/h100_run.db, the databases shipped in docs/):
the runs page with its filters and pages, a run's page and its live route, a candidate, the tree, a
suite, a co-design run; and what keeps it safe: everything from a candidate or a model escaped, no
secret in any response, localhost by default, the database never written."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from serving import grown, request, served
from typer.testing import CliRunner

from autodiscovery.cli import app
from autodiscovery.store import Candidate, Decision, LlmCall, Run, Store

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'
KEY = "sk-planted0123456789abcdefSECRET"


@pytest.fixture()
def db(tmp_path) -> Path:
    """The recorded H100 run, with a hostile hypothesis, log and family, an LLM call that made candidate 6
    (a key planted in its prompt and reply), and a database URL with a password in a log."""
    path = tmp_path / "h100_run.db"
    shutil.copy(DATA / "h100_run.db", path)
    store = Store(path)
    with store.session() as s:
        run = Run.find(s, 1)
        c3, c6 = Candidate.by_seq(s, 1, 3), Candidate.by_seq(s, 1, 6)
        c3.hypothesis = f"Try {HOSTILE} now"
        Candidate.by_seq(s, 1, 0).family = "<script>f()</script>"  # a kept step's: in the charts' labels too
        c3.evaluations[0].log = f"{HOSTILE}\nconnecting to postgresql://tuner:hunter22secret@db.example/runs"
        s.add(LlmCall(run_id=run.id, candidate_id=c6.id, model="scripted-model",
                      prompt=json.dumps([{"role": "system", "content": "rules"},
                                         {"role": "user", "content": f"key {KEY} {HOSTILE}"}]),
                      reply=f"HYPOTHESIS: clusters of two\n<<<<<<< SEARCH\n{HOSTILE}\n=======\nx\n"
                            f">>>>>>> REPLACE\n{KEY}",
                      input_tokens=1200, output_tokens=340, cost=0.0123, latency_ms=2100.0))
    store.engine.dispose()  # its pooled connection closed (the log checkpointed) now, not when collected
    return path


def fingerprint(path: Path) -> tuple[str, float]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime


def visible(html: str) -> str:
    """A page's text as a reader sees it (tags out, entities in)."""
    import html as lib

    return lib.unescape(re.sub(r"<[^>]+>", " ", html))


# ---- the pages -------------------------------------------------------------------------------------------

def test_the_runs_page_lists_filters_and_pages_runs(tmp_path):
    path = tmp_path / "llama.db"
    shutil.copy(ROOT / "docs/llama3-8b-h100/run.db", path)
    with served(path) as base:
        page = request(base + "/")
        assert page.status == 200
        assert "52 runs · page 1 of 2" in visible(page.body)
        assert page.body.count('<tr><td class="num"><a href="/runs/') == 50
        second = request(base + "/?page=2")
        assert second.body.count('<tr><td class="num"><a href="/runs/') == 2 and 'href="/runs/1"' in second.body
        suite = request(base + "/?campaign=llama3-8b-rest")  # the suite and the runs of its problems
        rows = re.findall(r'<tr><td class="num"><a href="/runs/(\d+)"', suite.body)
        assert rows and {"31", "32", "33"} <= set(rows) and "suite" in suite.body
        assert all(c.startswith("llama3-8b-rest") for c in re.findall(r"<td>(llama3[^<]*?)(?: <|</td>)", suite.body))
        none = request(base + "/?status=failed")
        assert "0 runs" in visible(none.body)
        row = re.search(r'<tr><td class="num"><a href="/runs/33">.*?</tr>', page.body, re.S).group(0)
        shown = " ".join(visible(row).split())
        assert "llama3-8b-rest/o 512" in shown and "finished" in shown and "24" in shown
        assert "0.980× cuBLAS" in shown and "2026-11-26 01:33:43 UTC" in shown and "1 min 52 s" in shown


def test_a_run_page_shows_its_state_charts_lineage_and_candidates(db):
    with served(db) as base:
        page = request(base + "/runs/1")
        assert page.status == 200
        text = " ".join(visible(page.body).split())
        assert "incumbent #6 wgmma_cluster, 1.009× cuBLAS" in text
        assert re.search(r"nearest stop patience ?: 20 of 20 candidates in a row without a keep 100%", text)
        assert "busy" in text and "benchmarks" in text  # the devices' share, as `show` says it
        assert 'id="chart-progress"' in page.body and 'id="kept"' in page.body and 'id="baseline' in page.body
        assert '<table id="lineage">' in page.body and 'href="/runs/1/candidates/6"' in page.body
        assert page.body.count('<tr><td class="num"><a href="/runs/1/candidates/') == 29
        assert "LLM 1 call" in text and "1,200 tokens in, 340 out" in text and "cost 0.0123" in text
        assert 'href="/runs/1/tree"' in page.body


def test_the_live_route_answers_what_changed_and_nothing_else(db):
    with served(db) as base:
        first = request(base + "/runs/1/live").json()
        assert first["running"] is False
        assert set(first["fragments"]) == {"live", "chart-progress", "lineage-part", "harness-part", "kept-steps",
                                           "candidates"}
        assert first["fragments"]["chart-progress"].startswith('<div class="chart" id="chart-progress"><svg')
        same = request(base + f"/runs/1/live?since={first['token']}").json()
        assert same == {"token": first["token"], "running": False, "fragments": {}}
        with Store(db).session() as s:  # a run goes on writing: a candidate proposed, then measured
            run = Run.find(s, 1)
            run.status = "running"
            c = Candidate(run_id=1, seq=29, parent_id=run.best_candidate_id, hypothesis="one more",
                          proposer="test", family="wgmma_cluster", source="// one more", source_hash="x")
            s.add(c)
        changed = request(base + f"/runs/1/live?since={first['token']}").json()
        assert changed["token"] != first["token"] and changed["running"] is True
        assert 'href="/runs/1/candidates/29"' in changed["fragments"]["candidates"]
        assert "27 evaluated, 3 proposed, not yet evaluated" in visible(changed["fragments"]["live"])  # going on


def test_a_candidate_page_has_everything_recorded_of_it(db):
    with served(db) as base:
        page = request(base + "/runs/1/candidates/6")
        assert page.status == 200
        text = " ".join(visible(page.body).split())
        assert "candidate #6: wgmma_cluster kept" in text and "made from #4" in text
        assert re.search(r"Decision keep ?: head to head [\d.]+× better", text)
        assert '<pre class="diff" id="diff-parent">' in page.body
        assert '<span class="add">+cluster: [1, 1, 1]</span>' in page.body
        assert '<div class="highlight">' in page.body and "__global__" in text
        assert "registers" in text and "benchmark ok" in text and "head_to_head" in text
        assert "scripted-model" in text and "1200 tokens in, 340 out" in text and "HYPOTHESIS: clusters of two" in text
        assert '<div class="role">system</div>' in page.body and '<div class="role">user</div>' in page.body
        seed = request(base + "/runs/1/candidates/0")
        assert seed.status == 200 and "none: " in visible(seed.body)


def test_the_tree_links_every_candidate_under_its_parent(db):
    with served(db) as base:
        page = request(base + "/runs/1/tree")
        nodes = re.findall(r'<div class="node( chain)?"><span class="bar">((?:│ )*)</span>'
                           r'<a href="/runs/1/candidates/(\d+)">', page.body)
        assert sorted(int(seq) for *_, seq in nodes) == list(range(29))
        chain = re.findall(r'<li><a href="/runs/1/candidates/(\d+)">', page.body)
        marked = [seq for mark, _, seq in nodes if mark]
        assert chain[-1] == "6" and marked == [s for s in chain if s in {n[2] for n in nodes}]


def test_missing_runs_and_candidates_are_a_page_that_says_so(db):
    with served(db) as base:
        for path, words in [("/runs/99", "no run 99"), ("/runs/1/candidates/99", "no candidate #99"),
                            ("/runs/1/tree?page=x", None), ("/nothing", "Not Found")]:
            r = request(base + path)
            assert (r.status, words is None or words in r.body) == ((200, True) if words is None else (404, True)), path


def test_a_suite_shows_its_dispatch_table(tmp_path):
    path = tmp_path / "llama.db"
    shutil.copy(ROOT / "docs/llama3-8b-h100/run.db", path)
    with served(path) as base:
        page = request(base + "/runs/31")
        text = " ".join(visible(page.body).split())
        assert "Suite 31: llama3-8b-rest" in text and '<table id="dispatch">' in page.body
        assert 'href="/runs/32"' in page.body and 'href="/runs/33"' in page.body and "0.980× cuBLAS" in text
        assert "42 evaluated, 2 left proposed" in text and "nearest stop" not in text  # its problems' runs, together
        problem = request(base + "/runs/33")
        assert 'a problem of <a href="/runs/31">suite 31</a>' in problem.body
        live = request(base + "/runs/31/live").json()
        assert set(live["fragments"]) == {"live", "dispatch"}
        assert request(base + f"/runs/31/live?since={live['token']}").json()["fragments"] == {}
        with Store(path).session() as s:  # one of its problems' runs records a candidate: the suite's page changes
            s.add(Candidate(run_id=33, seq=24, hypothesis="more", proposer="test", source="//", source_hash="y"))
        assert request(base + f"/runs/31/live?since={live['token']}").json()["token"] != live["token"]


def test_a_co_design_run_shows_its_phases_attribution_and_pareto_front(tmp_path):
    path = tmp_path / "codesign.db"
    shutil.copy(ROOT / "docs/codesign-1024-default/run.db", path)
    with served(path) as base:
        page = request(base + "/runs/1")
        assert page.status == 200
        for table in ("phases", "attribution", "pareto-area"):
            assert f'<table id="{table}">' in page.body, table
        assert 'id="chart-pareto"' in page.body or 'id="pareto-area-points"' in page.body
        assert "cycles" in visible(page.body) and "cuBLAS" not in visible(page.body)


def test_a_reference_run_shows_its_speed_ups_and_roofline(tmp_path):
    path = tmp_path / "softmax.db"
    shutil.copy(ROOT / "docs/reference-runs/softmax.db", path)
    with served(path) as base:
        text = " ".join(visible(request(base + "/runs/1").body).split())
        assert re.search(r"incumbent #\d+ \w+, [\d.]+× eager, [\d.]+× compile, \d+ GB/s, [\d.]+% roofline", text)


def test_thousands_of_candidates_and_hundreds_of_runs_come_by_page_and_quickly(db):
    import time

    grown(db, copies=70, runs=200)  # run 2: 2030 candidates; 202 runs in all
    with served(db) as base:
        request(base + "/runs/2")  # drawn once: the page and its polls reuse the drawing of a state
        took = {}
        for path in ("/", "/?page=5", "/runs/2", "/runs/2?page=21", "/runs/2/live", "/runs/2/tree?page=5",
                     "/runs/2/candidates/2000"):
            start = time.perf_counter()
            r = request(base + path)
            took[path] = time.perf_counter() - start
            assert r.status == 200, path
        assert max(took.values()) < 5, took
        runs = request(base + "/?page=5").body
        assert "202 runs · page 5 of 5" in visible(runs) and 'href="/runs/1"' in runs
        last = request(base + "/runs/2?page=21").body
        assert "page 21 of 21 (2030 candidates)" in visible(last)
        assert last.count('<tr><td class="num"><a href="/runs/2/candidates/') == 30
        assert visible(request(base + "/runs/2/tree?page=5").body).count("#") >= 30


def test_a_stored_profile_is_shown_as_its_harness_shows_it(tmp_path):
    path = tmp_path / "skinny.db"
    shutil.copy(ROOT / "docs/skinny-h100/run.db", path)
    with served(path) as base:
        page = request(base + "/runs/1/candidates/15").body
        assert '<table id="profile-' in page and "tensor pipe busy (%)" in page and "Nsight Compute" in page


# ---- safe by default ----------------------------------------------------------------------------------------

def test_what_came_from_a_candidate_or_a_model_is_shown_as_text(db):
    with served(db) as base:
        for path in ("/", "/runs/1", "/runs/1/candidates/3", "/runs/1/candidates/6", "/runs/1/tree", "/runs/1/live"):
            body = request(base + path).body
            assert "<script>alert" not in body and "<img src=x" not in body, path
            assert body.count("<script") == (1 if path.startswith("/runs/1") and path.count("/") == 2 else 0), path
        page = request(base + "/runs/1/candidates/3").body
        assert HOSTILE in visible(page)  # shown, as text
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page
        live = request(base + "/runs/1/live").body
        assert "<script" not in live and "\\u003cscript" not in live


def test_no_secret_in_any_response(db, monkeypatch):
    env_key = "env-held-key-0123456789"
    with Store(db).session() as s:
        Candidate.by_seq(s, 1, 5).evaluations[0].log = f"authorization failed for {env_key}"
    monkeypatch.setenv("OPENAI_API_KEY", env_key)
    with served(db) as base:
        for path in ("/", "/runs/1", "/runs/1/live", "/runs/1/candidates/3", "/runs/1/candidates/5",
                     "/runs/1/candidates/6", "/runs/1/tree"):
            body = request(base + path).body
            assert KEY not in body and "hunter22secret" not in body and env_key not in body, path
        page = visible(request(base + "/runs/1/candidates/3").body)
        assert "postgresql://tuner:***@db.example/runs" in page
        assert "[redacted key]" in visible(request(base + "/runs/1/candidates/6").body)


def test_responses_carry_a_policy_that_runs_only_the_pages_own_script(db):
    with served(db) as base:
        page = request(base + "/runs/1")
        policy = page.headers["content-security-policy"]
        nonce = re.search(r"script-src 'nonce-([^']+)'", policy).group(1)
        assert f'<script nonce="{nonce}">' in page.body and "unsafe-inline" not in policy.split("style-src")[0]
        assert page.headers["x-frame-options"] == "DENY" and page.headers["cache-control"] == "no-store"
        assert request(base + "/runs/1").headers["content-security-policy"] != policy  # a nonce a response


def test_the_database_is_never_written_and_writes_are_refused(db):
    assert not Path(f"{db}-wal").exists()  # settled: no run has it open
    before = fingerprint(db)
    with served(db) as base:
        for path in ("/", "/runs/1", "/runs/1/live", "/runs/1/tree", "/runs/1/candidates/6", "/runs/1/candidates/3"):
            assert request(base + path).status == 200
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            for path in ("/", "/runs/1", "/runs/1/live"):
                assert request(base + path, method=method, data=b"x=1").status == 405, (method, path)
    assert fingerprint(db) == before
    with pytest.raises(Exception, match="readonly|read-only"):
        with Store(db, create=False, read_only=True).session() as s:
            s.add(Decision(run_id=1, candidate_id=1, verdict="keep"))
            s.flush()


def test_other_host_names_are_refused(db):
    with served(db) as base:
        assert request(base + "/", headers={"Host": "attacker.example"}).status == 400
        assert request(base + "/", headers={"Host": "127.0.0.1.attacker.example"}).status == 400
        for host in ("localhost:1234", "127.0.0.1", "[::1]:8765", "LOCALHOST"):
            assert request(base + "/", headers={"Host": host}).status == 200, host


def test_a_read_only_store_never_migrates_or_creates(tmp_path):
    """An older schema is read from a copy in memory brought up to date: the file is as it was."""
    old = tmp_path / "old.db"
    shutil.copy(DATA / "old_m002.db", old)
    before = fingerprint(old)
    store = Store(old, create=False, read_only=True)
    assert "older schema (4 migrations behind): read from a copy in memory" in store.note
    with store.session() as s:
        assert s.get(Run, 1) is not None and s.get(Run, 1).owner is None  # a column of a later migration
    assert fingerprint(old) == before and sorted(p.name for p in tmp_path.iterdir()) == ["old.db"]
    with pytest.raises(Exception, match="does not exist"):
        Store(tmp_path / "none.db", read_only=True)
    assert not (tmp_path / "none.db").exists()


# ---- the command ------------------------------------------------------------------------------------------

def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args], terminal_width=80)


@pytest.mark.parametrize("kind", ["missing", "not sqlite", "other tables"])
def test_a_database_it_cannot_serve_is_one_line(tmp_path, kind):
    path = tmp_path / "x.db"
    if kind == "not sqlite":
        path.write_text("hello\n" * 100)
    elif kind == "other tables":
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE notes (x)")
    res = cli("--db", path, "serve", "--port", "0")
    assert res.exit_code == 2
    line, = res.output.strip().splitlines()
    said = {"missing": "does not exist", "not sqlite": "not an AutoDiscovery database",
            "other tables": "holds other tables"}[kind]
    assert line.startswith("error: ") and said in line


def test_serve_binds_to_localhost_by_default_and_says_where(db):
    proc = subprocess.Popen([sys.executable, "-m", "autodiscovery", "--db", str(db), "serve", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=os.environ | {"COLUMNS": "80"})
    try:
        lines = [proc.stdout.readline().rstrip("\n") for _ in range(2)]
        assert lines[0] == f"serving {db}, read-only"
        url = re.fullmatch(r"open (http://127\.0\.0\.1:(\d+)/) \(Ctrl-C stops\)", lines[1])
        assert url, lines
        assert request(url.group(1)).status == 200
        assert all(len(ln) <= 80 for ln in lines) or len(str(db)) > 50
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_port_in_use_is_one_line(db):
    from autodiscovery import serve

    sock = serve.bind("127.0.0.1", 0)
    try:
        res = cli("--db", db, "serve", "--port", sock.getsockname()[1])
        assert res.exit_code == 2 and "is in use: --port names another" in res.output
    finally:
        sock.close()


def test_serve_reads_postgresql_read_only_and_hides_its_password():
    import pg

    if why := pg.available():
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    server = pg.Server().start()
    try:
        url = server.database()
        with Store(url).session() as s:
            s.add(Run(campaign="hopper-gemm", agent="search", config={}, status="finished"))
        secret_url = url.replace("postgresql+psycopg://postgres@", "postgresql+psycopg://postgres:pw-hunter22@")
        with served(secret_url) as base:
            page = request(base + "/")
            assert page.status == 200 and "hopper-gemm" in page.body and "pw-hunter22" not in page.body
            assert "postgres:***@" in page.body or "postgres@" in page.body
        with pytest.raises(Exception, match="read-only"):
            with Store(secret_url, create=False, read_only=True).session() as s:
                s.add(Run(campaign="x", agent="x", config={}))
                s.flush()
    finally:
        server.stop()


def test_a_clients_bad_path_or_query_is_a_4xx_in_one_line_and_no_page_names_where_the_files_are(db):
    """Bounded: a few hundred requests a client might send by mistake or on purpose, each answered with a
    4xx (or the page, where the query only pages past the end), never a 5xx, and the server answers
    normally after them. No page, the error pages included, shows the database's folder."""
    hostile = ["/runs/99999999999999999999999999", "/runs/99999999999999999999999999/live",
               "/runs/1/candidates/99999999999999999999999999", "/runs/9223372036854775808/tree",
               "/?campaign=" + "a" * 100_000, "/?campaign=%25" * 3, "/?status=" + "x" * 5000, "/?status=nope",
               "/?page=" + "9" * 40, "/?page=-5", "/runs/1?page=" + "9" * 40, "/runs/-1", "/runs/abc",
               "/runs/1/candidates/-3", "/nothing/here", "/runs/1/../../etc/passwd"]
    hostile += [f"/?campaign={'%' * n}&status=finished" for n in range(1, 40)]
    with served(db) as base:
        for path in hostile:
            page = request(base + path)
            assert page.status < 500, (path, page.status, page.body[:300])
            assert str(db.parent) not in page.body, path
        assert request(base + "/runs/99999999999999999999999999").status == 404
        assert request(base + "/?campaign=" + "a" * 100_000).status == 400
        assert request(base + "/?status=nope").status == 400
        ok = request(base + "/")
        assert ok.status == 200 and "h100_run.db" in ok.body and str(db.parent) not in ok.body
        assert request(base + "/runs/1").status == 200
