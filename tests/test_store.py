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
