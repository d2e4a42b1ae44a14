"""Every run records the code it ran (its fingerprint's `code`): the version, a digest of the source, and in
a git checkout the commit and whether the tree had uncommitted changes. `show --config` and the run's
header show it; `replay` says when the code differs; a resumed run records the code it went on with."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest
from test_toy_harness import campaign_file, cli

from autodiscovery import ROOT, __version__, provenance


@pytest.fixture
def toy_run(tmp_path) -> Path:
    db = tmp_path / "toy.db"
    res = cli("--db", db, "run", "--campaign", campaign_file(tmp_path), "--quiet")
    assert res.exit_code == 0, res.output
    return db


def recorded_code(db: Path, run_id: int = 1) -> dict:
    with closing(sqlite3.connect(db)) as conn:
        return json.loads(conn.execute("select fingerprint from runs where id = ?", (run_id,)).fetchone()[0])["code"]


def test_a_run_records_the_code_it_ran(toy_run):
    code = recorded_code(toy_run)
    assert code["version"] == __version__ and code["source"] == provenance.source_digest()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # a git checkout (CI's clone is one)
        assert code["commit"] == head.stdout.strip() and isinstance(code["dirty"], bool)
    shown = json.loads(cli("--db", toy_run, "show", "1", "--config").output)
    assert shown["fingerprint"]["code"] == code
    header = cli("--db", toy_run, "show", "1").output
    assert (f"code {code['commit'][:7]}" if code["commit"] else f"source {code['source'][:8]}") in header


def test_the_digest_is_the_same_for_the_same_code_and_changes_with_it(tmp_path, monkeypatch):
    """A copy of the project that is not a git checkout (a device's copy of the tree, an unpacked archive)
    records no commit, and the same source digest; one changed file changes it."""
    for folder in provenance.SOURCES:
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    provenance.source_digest.cache_clear()
    try:
        copy = provenance.code()
        assert copy["commit"] is None and copy["dirty"] is None
        provenance.source_digest.cache_clear()
        monkeypatch.setattr(provenance, "ROOT", ROOT)
        assert provenance.source_digest() == copy["source"]
        monkeypatch.setattr(provenance, "ROOT", tmp_path)
        with sorted((tmp_path / "seeds").rglob("*.cu"))[0].open("a") as f:
            f.write("\n// one more line\n")
        provenance.source_digest.cache_clear()
        assert provenance.source_digest() != copy["source"]
    finally:
        provenance.source_digest.cache_clear()


def test_the_code_in_words():
    code = {"version": "0.1.0", "source": "0123456789abcdef", "commit": "a" * 40, "dirty": True}
    assert provenance.short(code) == "code aaaaaaa+ (source 01234567)" and provenance.short(code | {"commit": None}) == "source 01234567"
    assert provenance.describe(code) == "autodiscovery 0.1.0 at aaaaaaa (uncommitted changes), source 01234567"
    assert provenance.describe(None) == "code not recorded" and provenance.short(None) is None
    assert provenance.differs(code, code | {"commit": "b" * 40}) is None  # the same source: the same code
    assert provenance.differs(code, code | {"source": "f" * 16}).startswith("the run was measured with autodiscovery")
    assert provenance.differs(None, code) is None


def _set_code(db: Path, code: dict) -> None:
    with closing(sqlite3.connect(db)) as conn, conn:
        fp = json.loads(conn.execute("select fingerprint from runs where id = 1").fetchone()[0])
        conn.execute("update runs set fingerprint = ? where id = 1", (json.dumps(fp | {"code": code}),))


def test_replay_says_when_the_code_differs(toy_run):
    same = json.loads(cli("--db", toy_run, "replay", "1", "--json").output)
    assert same["code"]["differs"] is None
    other = recorded_code(toy_run) | {"source": "0" * 16, "commit": "c" * 40}
    _set_code(toy_run, other)
    again = json.loads(cli("--db", toy_run, "replay", "1", "--json").output)
    assert again["code"]["recorded"] == other and "source 00000000" in again["code"]["differs"]
    out = " ".join(cli("--db", toy_run, "replay", "1").output.split())
    assert "other code than the recording: the run was measured with autodiscovery" in out and "at ccccccc" in out


def test_a_resumed_run_records_the_code_it_went_on_with(toy_run, tmp_path):
    other = recorded_code(toy_run) | {"source": "0" * 16}
    _set_code(toy_run, other)
    res = cli("--db", toy_run, "run", "--resume", "1", "--quiet", "--set", "budget.candidates=9")
    assert res.exit_code == 0, res.output
    with closing(sqlite3.connect(toy_run)) as conn:
        fp = json.loads(conn.execute("select fingerprint from runs where id = 1").fetchone()[0])
    assert fp["code"] == other  # what measured its first candidates stays
    (change,) = fp["code_changes"]
    assert change["source"] == provenance.source_digest() and change["at"]
