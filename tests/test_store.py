from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect, text

from autodiscovery.store import Base, Candidate, Run, Store
from autodiscovery.store.migrations import MIGRATIONS, applied


def test_migrations_from_a_blank_database(tmp_path):
    db = tmp_path / "blank.db"
    Store(db)
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        assert applied(conn) == [name for name, _ in MIGRATIONS]
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        insp = inspect(conn)
        # The migrated schema is exactly what the models map, table by table and column by column.
        for table in Base.metadata.tables.values():
            assert {c["name"] for c in insp.get_columns(table.name)} == {c.name for c in table.columns}, table.name


def test_reopening_applies_nothing_twice(tmp_path):
    db = tmp_path / "x.db"
    Store(db)
    Store(db)
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
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
    with store.session() as s:
        child = Candidate.by_seq(s, 1, 1)
        assert child.parent.seq == 0 and child.run.best.seq == 0


def test_any_sqlalchemy_url(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'sub' / 'url.db'}")
    with store.session() as s:
        s.add(Run(campaign="c", agent="a", config={}, fingerprint={}))
    assert (tmp_path / "sub" / "url.db").exists()


def _old_database(path) -> None:
    """A database as the first two migrations left it, with the duplicate seq two resumes could write."""
    from autodiscovery.store.migrations import _ledger, m001_initial, m002_llm_calls

    engine = create_engine(f"sqlite:///{path}")
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


def test_an_old_database_upgrades_in_place(tmp_path):
    db = tmp_path / "old.db"
    _old_database(db)
    store = Store(db)
    with store.session() as s:
        run = s.get(Run, 1)
        assert [c.seq for c in run.candidates] == [0, 1, 2, 3] and run.owner is None
    with pytest.raises(Exception, match="UNIQUE"):
        with store.session() as s:
            s.add(Candidate(run_id=1, seq=3, hypothesis="", proposer="", knobs={}, source="", source_hash="",
                            status="proposed"))


def test_a_failed_migration_leaves_nothing_half_done(tmp_path, monkeypatch):
    from autodiscovery.store import migrations

    db = tmp_path / "half.db"
    _old_database(db)

    def broken(conn):
        conn.execute(text("ALTER TABLE runs ADD COLUMN owner VARCHAR(300)"))
        raise RuntimeError("power cut")
    monkeypatch.setattr(migrations, "MIGRATIONS", [*MIGRATIONS[:2], ("m003_run_lease_and_unique_seq", broken)])
    with pytest.raises(RuntimeError):
        Store(db)
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        assert "owner" not in {c["name"] for c in inspect(conn).get_columns("runs")}  # rolled back
        assert applied(conn) == ["m001_initial", "m002_llm_calls"]
    monkeypatch.undo()
    Store(db)  # and it applies cleanly later


def test_two_processes_opening_a_new_database_at_once(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    db = tmp_path / "race.db"
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent.parent)!r})\n"
            f"from autodiscovery.store import Store; Store({str(db)!r}); print('ok')")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 and out.strip() == "ok" for p, (out, _) in zip(procs, outs)), outs
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        assert applied(conn) == [name for name, _ in MIGRATIONS]
