"""The store on SQLite and on a real PostgreSQL server: migrations, sessions, upgrades, concurrent use."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from autodiscovery.store import Base, Build, Candidate, Run, Store
from autodiscovery.store.migrations import MIGRATIONS, applied

ROOT = Path(__file__).parent.parent


@pytest.fixture
def store(db_url) -> Store:
    return Store(db_url)


def test_migrations_from_a_blank_database(db_url):
    Store(db_url)
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert applied(conn) == [name for name, _ in MIGRATIONS]
        if engine.dialect.name == "sqlite":
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        insp = inspect(conn)
        # The migrated schema is exactly what the models map, table by table and column by column.
        for table in Base.metadata.tables.values():
            assert {c["name"] for c in insp.get_columns(table.name)} == {c.name for c in table.columns}, table.name


def test_reopening_applies_nothing_twice(db_url):
    Store(db_url)
    Store(db_url)
    with create_engine(db_url).connect() as conn:
        names = applied(conn)
    assert len(names) == len(set(names)) == len(MIGRATIONS)


def test_session_commits_or_rolls_back(store):
    with store.session() as s:
        s.add(Run(campaign="c", agent="search", config={"a": 1}, fingerprint={"gpu": "x"}))
    with pytest.raises(RuntimeError):
        with store.session() as s:
            s.add(Run(campaign="d", agent="search", config={}, fingerprint={}))
            s.flush()
            raise RuntimeError("boom")
    with store.session() as s:
        runs = s.query(Run).all()
        assert [r.campaign for r in runs] == ["c"] and runs[0].config == {"a": 1}


def test_candidates_link_to_parents_and_runs(store):
    with store.session() as s:
        run = Run(campaign="c", agent="search", config={}, fingerprint={})
        s.add(run)
        s.flush()
        seed = Candidate(run_id=run.id, seq=0, source="a", source_hash="h0")
        s.add(seed)
        s.flush()
        s.add(Candidate(run_id=run.id, seq=1, parent_id=seed.id, source="b", source_hash="h1"))
        run.best_candidate_id = seed.id
        run_id = run.id
    with store.session() as s:
        child = Candidate.by_seq(s, run_id, 1)
        assert child.parent.seq == 0 and child.run.best.seq == 0


def test_any_sqlalchemy_url(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'sub' / 'url.db'}")
    with store.session() as s:
        s.add(Run(campaign="c", agent="a", config={}, fingerprint={}))
    assert (tmp_path / "sub" / "url.db").exists()


def _old_database(url: str) -> None:
    """A database as the first two migrations left it, with the duplicate seq two resumes could write."""
    from autodiscovery.store.migrations import _ledger, m001_initial, m002_llm_calls

    engine = create_engine(url)
    with engine.begin() as conn:
        m001_initial(conn)
        m002_llm_calls(conn)
        ledger = _ledger(conn)
        conn.execute(ledger.insert(), [{"name": "m001_initial"}, {"name": "m002_llm_calls"}])
        conn.execute(text("INSERT INTO runs (id, campaign, agent, config, fingerprint, status, created_at, updated_at, "
                          "elapsed_s) VALUES (1, 'c', 'search', '{}', '{}', 'interrupted', '2026-01-01', '2026-01-01', 5)"))
        for cid, seq in ((1, 0), (2, 1), (3, 1), (4, 2)):
            conn.execute(text("INSERT INTO candidates (id, run_id, seq, hypothesis, proposer, knobs, source, "
                              "source_hash, status, created_at) VALUES (:i, 1, :s, 'h', 'p', '{}', 'src', 'x', "
                              "'kept', '2026-01-01')"), {"i": cid, "s": seq})
        if engine.dialect.name == "postgresql":  # rows inserted with their ids: move the sequences past them
            for table in ("runs", "candidates"):
                conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                                  f"(SELECT MAX(id) FROM {table}))"))


def test_an_old_database_upgrades_in_place(db_url):
    _old_database(db_url)
    store = Store(db_url)
    with store.session() as s:
        run = s.get(Run, 1)
        assert [c.seq for c in run.candidates] == [0, 1, 2, 3] and run.owner is None
    with pytest.raises(Exception, match="(?i)unique"):
        with store.session() as s:
            s.add(Candidate(run_id=1, seq=3, hypothesis="", proposer="", knobs={}, source="", source_hash="",
                            status="proposed"))


def test_a_failed_migration_leaves_nothing_half_done(db_url, monkeypatch):
    from autodiscovery.store import migrations

    _old_database(db_url)

    def broken(conn):
        conn.execute(text("ALTER TABLE runs ADD COLUMN owner VARCHAR(300)"))
        raise RuntimeError("power cut")
    monkeypatch.setattr(migrations, "MIGRATIONS", [*MIGRATIONS[:2], ("m003_run_lease_and_unique_seq", broken)])
    with pytest.raises(RuntimeError):
        Store(db_url)
    with create_engine(db_url).connect() as conn:
        assert "owner" not in {c["name"] for c in inspect(conn).get_columns("runs")}  # rolled back
        assert applied(conn) == ["m001_initial", "m002_llm_calls"]
    monkeypatch.undo()
    Store(db_url)  # and it applies cleanly later


def test_two_processes_opening_a_new_database_at_once(db_url):
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            f"from autodiscovery.store import Store; Store({db_url!r}); print('ok')")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 and out.strip() == "ok" for p, (out, _) in zip(procs, outs)), outs
    with create_engine(db_url).connect() as conn:
        assert applied(conn) == [name for name, _ in MIGRATIONS]


@pytest.mark.long
def test_two_runs_write_one_database_at_once(db_url):
    """Two processes, each driving its own run (the same kernels, so the same builds), write one
    database at the same time: both finish, every candidate is recorded once, each build once."""
    Store(db_url)
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "concurrent_writer.py"), db_url, str(seed)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    run_ids = sorted(int(out.split()[-1]) for out, _ in outs)
    store = Store(db_url)
    with store.session() as s:
        runs = [s.get(Run, r) for r in run_ids]
        assert [r.status for r in runs] == ["finished", "finished"]
        for run in runs:
            seqs = [c.seq for c in run.candidates]
            assert seqs == list(range(len(seqs))) and len(seqs) == 24
            assert all(c.build_id is not None for c in run.candidates if c.status in ("kept", "reverted"))
        keys = [b.cache_key for b in s.query(Build)]
        assert len(keys) == len(set(keys))
        shared = {c.build_id for c in runs[0].candidates} & {c.build_id for c in runs[1].candidates} - {None}
        assert shared  # the same kernels built in both runs share one row


def test_every_command_works_on_postgresql(pg_server, tmp_path, monkeypatch):
    """A run driven into PostgreSQL, then every review command reading it back with --db URL."""
    import json

    from replay import ReplayHarness
    from typer.testing import CliRunner

    from autodiscovery import campaign as campaigns
    from autodiscovery.agents.search import SearchAgent
    from autodiscovery.cli import app
    from autodiscovery.running import runner

    url = pg_server.database()
    harness = ReplayHarness(SearchAgent(campaigns.load("hopper-gemm")).space)
    run_id = runner.run_campaign("hopper-gemm", ["budget.candidates=8", "stop.target=5"], Store(url), harness=harness)
    cli = CliRunner()

    def ok(*args: str) -> str:
        res = cli.invoke(app, [*args, "--db", url])
        assert res.exit_code == 0, (args, res.output)
        return res.output

    assert [r["id"] for r in json.loads(ok("runs", "--json"))] == [run_id]
    shown = json.loads(ok("show", str(run_id), "--json"))
    assert len(shown["candidates"]) == 8 and shown["status"] == "finished"
    best = json.loads(ok("lineage", str(run_id), "--json"))[-1]["seq"]
    assert json.loads(ok("show", f"{run_id}/{best}", "--json"))["seq"] == best
    assert json.loads(ok("lineage", str(run_id), "--tree", "--json"))[0]["depth"] == 0
    assert json.loads(ok("diff", f"{run_id}/0", f"{run_id}/{best}", "--json"))["lines_added"] > 0
    assert json.loads(ok("report", str(run_id), "--json"))
    ok("report", str(run_id), "--out", str(tmp_path / "r.html"))
    assert (tmp_path / "r.html").stat().st_size > 10_000
    ok("export", str(run_id), "--out", str(tmp_path / "best.cu"))
    assert "@manifest" in (tmp_path / "best.cu").read_text()
    assert "## The kernel to change" in json.loads(ok("prompt", str(run_id), "--json"))["user"]


def test_every_shipped_database_is_at_todays_schema():
    """The databases under docs/ open read-only as they are: the README's and the guides' commands, which
    only read, never have to migrate (and so rewrite) a tracked file."""
    from autodiscovery import ROOT

    shipped = sorted((ROOT / "docs").glob("**/*.db"))
    assert len(shipped) > 20
    for path in shipped:
        Store(path, create=False, read_only=True)  # an older schema is a StoreError naming `migrate`


def test_reading_a_database_leaves_nothing_beside_it_and_needs_no_writable_folder(tmp_path, monkeypatch):
    """A shipped database is in WAL mode with no log beside it: every command that only reads opens it
    as an unchanging file, and leaves its bytes and its folder as they were; a database a run has open
    (its log beside it) is read live; one in rollback-journal mode is read read-only. Where the folder
    cannot take SQLite's shared-memory file, a log left by a run cut off is read as an unchanging file."""
    import shutil
    from contextlib import closing

    from typer.testing import CliRunner

    from autodiscovery.cli import app
    from autodiscovery.store import in_wal_mode, reader_uri

    shipped = ROOT / "docs" / "gemm-sweep-h200" / "trial-seed100.db"
    db = tmp_path / "copy" / "run.db"
    db.parent.mkdir()
    shutil.copy(shipped, db)
    with closing(sqlite3.connect(db)) as conn:  # as the databases runs write are
        conn.execute("PRAGMA journal_mode=WAL")
    assert in_wal_mode(db) and not Path(f"{db}-wal").exists()
    assert reader_uri(db).endswith("?mode=ro&immutable=1")
    before = db.read_bytes()
    for command in (["runs"], ["show", "2"], ["lineage", "2"], ["report", "1"], ["report", "2", "--json"],
                    ["show", "2/0"], ["diff", "2/0", "2/1"]):
        res = CliRunner().invoke(app, ["--db", str(db), *command], env={"COLUMNS": "80"})
        assert res.exit_code == 0, (command, res.output)
        assert [p.name for p in db.parent.iterdir()] == ["run.db"], command
    assert db.read_bytes() == before

    writer = sqlite3.connect(db)  # a run has it open: its log is there, and a reader sees what it writes
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("UPDATE runs SET status = 'running' WHERE id = 2")
    writer.commit()
    assert Path(f"{db}-wal").exists() and reader_uri(db).endswith("?mode=ro")
    with Store(db, create=False, read_only=True).session() as s:
        assert s.get(Run, 2).status == "running"
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # a folder it may not write to
    Path(f"{db}-shm").unlink()
    assert reader_uri(db).endswith("?mode=ro&immutable=1")
    writer.close()

    rollback = tmp_path / "rollback.db"
    shutil.copy(shipped, rollback)
    with closing(sqlite3.connect(rollback)) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    assert not in_wal_mode(rollback) and reader_uri(rollback).endswith("?mode=ro")


def test_every_command_that_reads_works_in_a_read_only_folder(tmp_path):
    """A read-only mount of a folder holding a database in WAL mode and one of an older schema: every reading
    command answers, where opening with `mode=ro` alone failed ('unable to open database file'). It needs
    to mount a folder (root, and a system that lets it): where it cannot, it says so and is skipped."""
    import shutil
    from contextlib import closing

    from typer.testing import CliRunner

    from autodiscovery.cli import app

    source, mounted = tmp_path / "source", tmp_path / "mounted"
    source.mkdir()
    mounted.mkdir()
    shutil.copy(ROOT / "docs" / "gemm-sweep-h200" / "trial-seed100.db", source / "run.db")
    shutil.copy(ROOT / "tests" / "data" / "old_m002.db", source / "old.db")
    with closing(sqlite3.connect(source / "run.db")) as conn:  # WAL, as a run leaves it: the case that failed
        conn.execute("PRAGMA journal_mode=WAL")
    done = subprocess.run(["mount", "--bind", "-o", "ro", str(source), str(mounted)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a read-only folder here: {done.stderr.strip() or done.returncode}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(mounted)], capture_output=True)
        with pytest.raises(OSError):
            (mounted / "probe").write_text("x")
        for db, commands in ((mounted / "run.db", (["runs"], ["show", "2"], ["report", "1"], ["lineage", "3"])),
                             (mounted / "old.db", (["runs"], ["show", "1"]))):
            for command in commands:
                res = CliRunner().invoke(app, ["--db", str(db), *command], env={"COLUMNS": "80"})
                assert res.exit_code == 0, (db.name, command, res.output)
    finally:
        subprocess.run(["umount", "-l", str(mounted)], capture_output=True)  # lazily: a file still open does not keep it
