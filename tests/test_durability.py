"""A run cut off anywhere (kill -9 included) resumes as the same run; faults cost nothing recorded.

The runs here are driven in child processes (tests/durable_child.py) that die with os._exit at a
chosen step, or are killed with SIGKILL from outside, and are then resumed to the end. The result must
be the run an uninterrupted process makes: the same candidates in the same order with the same
verdicts, each measured candidate decided once, the budget counted once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from replay import ReplayHarness
from sqlalchemy import select

from autodiscovery import AutoDiscoveryError
from autodiscovery import campaign as campaigns
from autodiscovery.agents.search import SearchAgent
from autodiscovery.running.driver import Driver, Stop
from autodiscovery.store import Candidate, Decision, Evaluation, Run, Store, StoreError

CHILD = Path(__file__).parent / "durable_child.py"
BUDGET = 12


def child(db: Path, step: str = "none", n: int = 0, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHILD), str(db), step, str(n), *overrides],
                          capture_output=True, text=True, timeout=120)


def walk(db: Path) -> list[tuple]:
    """What a run did, in order: (seq, family, knobs, status, verdict)."""
    store = Store(db)
    with store.session() as s:
        cands = list(s.scalars(select(Candidate).where(Candidate.run_id == 1).order_by(Candidate.seq)))
        return [(c.seq, c.family, json.dumps(c.knobs, sort_keys=True), c.status,
                 c.decision.verdict if c.decision else None) for c in cands]


def assert_whole(db: Path) -> None:
    """Every step finished exactly once, nothing left half done."""
    store = Store(db)
    with store.session() as s:
        run = s.get(Run, 1)
        assert run.status == "finished" and run.owner is None and run.elapsed_s > 0
        cands = run.candidates
        assert sum(c.status != "proposed" for c in cands) == BUDGET  # the budget, counted once
        evs = list(s.scalars(select(Evaluation)))
        assert not [e for e in evs if e.status == "running"]
        for c in cands:
            finished = [e for e in c.evaluations if e.kind == "benchmark" and e.status not in ("running", "interrupted")]
            assert len(finished) <= 1, f"#{c.seq} measured {len(finished)} times"
            if c.status in ("kept", "reverted", "compile_error", "incorrect", "timeout", "crashed"):
                assert c.decision is not None, f"#{c.seq} ({c.status}) was never decided"
            assert c.status != "measured"
        assert len(list(s.scalars(select(Decision)))) == sum(c.decision is not None for c in cands)
        assert run.best_candidate_id == max((c for c in cands if c.status == "kept"), key=lambda c: c.seq).id


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[tuple]:
    db = tmp_path_factory.mktemp("whole") / "whole.db"
    out = child(db)
    assert out.returncode == 0 and "finished" in out.stdout, out.stderr
    assert_whole(db)
    return walk(db)


@pytest.mark.parametrize("kills", [
    [("build", 4)],                             # while building a batch
    [("evaluate", 0)],                          # while the seed is measured
    [("evaluate", 5)],                          # in the middle of an evaluation
    [("head_to_head", 0)],                      # measured, not yet decided: in the head-to-head
    [("head_to_head", 2), ("evaluate", 1)],     # twice, in two places
    [("commit", 9)],                            # while writing
    [("committed", 14), ("commit", 30)],        # right after a write, then while writing
])
@pytest.mark.long
def test_a_run_cut_off_anywhere_resumes_as_the_same_run(tmp_path, uninterrupted, kills):
    db = tmp_path / "cut.db"
    for step, n in kills:
        out = child(db, step, n)
        assert out.returncode == 9 and "finished" not in out.stdout, (step, n, out.stderr[-2000:])
    if ("evaluate", 5) in kills:  # the cut-off evaluation is marked once the run resumes
        pass
    out = child(db)
    assert out.returncode == 0 and "finished" in out.stdout, out.stderr[-2000:]
    assert_whole(db)
    assert walk(db) == uninterrupted
    if any(step == "evaluate" for step, _ in kills):
        with Store(db).session() as s:
            assert s.scalars(select(Evaluation).where(Evaluation.status == "interrupted")).first() is not None


@pytest.mark.long
def test_sigkill_from_outside_three_times(tmp_path, uninterrupted):
    db = tmp_path / "killed.db"
    for wait in (0.9, 1.3, 1.7):
        proc = subprocess.Popen([sys.executable, str(CHILD), str(db), "slow", "0"], stdout=subprocess.PIPE, text=True)
        time.sleep(wait)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    out = child(db, "slow")
    assert out.returncode == 0, out.stderr[-2000:]
    assert_whole(db)
    assert walk(db) == uninterrupted


def test_time_already_spent_stays_spent(tmp_path):
    db = tmp_path / "time.db"
    out = child(db, "evaluate", 6, "harness.timeout_s=120")
    assert out.returncode == 9
    with Store(db).session() as s:
        spent = s.get(Run, 1).elapsed_s
    assert spent > 0  # written with every step, not only when the run closes
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=40", "stop.target=5", f"budget.minutes={spent / 60:.6f}"])
    agent = SearchAgent(campaign)
    harness = ReplayHarness(agent.space)
    Driver(campaign, Store(db), harness, agent).drive(1)
    with Store(db).session() as s:
        run = s.get(Run, 1)
        assert "minutes" in run.stop_reason and harness.evaluated == []


def make(campaign, store, **kw):
    agent = SearchAgent(campaign)
    harness = ReplayHarness(agent.space, **kw)
    return Driver(campaign, store, harness, agent, workers=2), harness


def test_minutes_stop_at_the_next_candidate_inside_a_batch(store):
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=40", "budget.minutes=0.01", "agent.search.batch=8"])
    loop, harness = make(campaign, store, delay_s=0.25)
    loop.new_run({})
    with store.session() as s:
        run = s.get(Run, 1)
        assert "minutes" in run.stop_reason
        assert run.elapsed_s < 0.6 + 0.5  # one candidate past the limit at most
        assert any(c.status == "proposed" for c in run.candidates)  # the rest of the batch waits


def test_a_stop_request_ends_the_run_between_two_candidates_and_resume_finishes_it(tmp_path, uninterrupted):
    db = tmp_path / "stop.db"
    store = Store(db)
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=12", "stop.patience=50", "stop.target=5",
                                              "agent.search.batch=3"])
    stop = Stop()
    loop, harness = make(campaign, store)
    harness.hooks["evaluate"] = lambda n: stop.request() if n == 4 else None
    loop.stop = stop
    loop.new_run({"gpu": "Replayed NVIDIA H100", "sms": 132})
    with store.session() as s:
        run = s.get(Run, 1)
        assert run.status == "interrupted" and "safe point" in run.stop_reason and run.owner is None
        assert not [c for c in run.candidates if c.status == "measured"]  # the candidate in hand was decided
    loop2, _ = make(campaign, store)
    loop2.drive(1)
    assert_whole(db)
    assert walk(db) == uninterrupted


def test_rejected_for_the_manifest_is_never_built_and_counts(store):
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=6", "stop.target=5"])
    loop, harness = make(campaign, store)
    from harnesses.hopper_gemm.manifest import ManifestError

    real_check = harness.check

    def check(source):
        if harness.identify(source)[0] == "tiled":
            raise ManifestError("manifest: smem 300000 bytes exceeds the 232448-byte limit")
        return real_check(source)
    harness.check = check
    loop.new_run({})
    with store.session() as s:
        cands = s.get(Run, 1).candidates
        tiled = [c for c in cands if c.family == "tiled"]
        assert tiled and all(c.status == "rejected" and c.build_id is None for c in tiled)
        assert not {c.source_hash for c in tiled} & set(harness.built)
        assert sum(c.status != "proposed" for c in cands) == 6


def test_a_lost_gpu_stops_the_run_and_resume_redoes_the_cut_off_candidate(tmp_path, uninterrupted):
    from harnesses.hopper_gemm import DeviceLost

    db = tmp_path / "lost.db"
    store = Store(db)
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=12", "stop.patience=50", "stop.target=5",
                                              "agent.search.batch=3"])
    loop, harness = make(campaign, store)

    def lost(n):
        if n == 3:
            raise DeviceLost("the GPU stopped answering after a crashed evaluation: CUDA_ERROR_NO_DEVICE")
    harness.hooks["evaluate"] = lost
    with pytest.raises(DeviceLost):
        loop.new_run({"gpu": "Replayed NVIDIA H100", "sms": 132})
    with store.session() as s:
        run = s.get(Run, 1)
        assert run.status == "interrupted" and run.owner is None
        assert s.scalars(select(Evaluation).where(Evaluation.status == "interrupted")).first() is not None
    make(campaign, store)[0].drive(1)
    assert_whole(db)
    assert walk(db) == uninterrupted


def test_two_drivers_of_one_run_are_refused(tmp_path):
    db = tmp_path / "two.db"
    # The second driver is made first: the child's run of 40 quick candidates may end before it otherwise.
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=40"])
    loop, harness = make(campaign, Store(db))
    proc = subprocess.Popen([sys.executable, str(CHILD), str(db), "slow", "0", "budget.candidates=40",
                             "stop.patience=100"], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            if db.exists():
                with Store(db).session() as s:
                    run = s.get(Run, 1)
                    if run is not None and run.owner:
                        break
            time.sleep(0.1)
        with pytest.raises(AutoDiscoveryError, match=f"run 1 is being driven by process {proc.pid}"):
            loop.drive(1)
        assert harness.evaluated == []
    finally:
        proc.kill()
        proc.wait()
    # once that process is gone (killed: its lease is stale), the run can be driven again
    loop, harness = make(campaigns.load("hopper-gemm", ["budget.candidates=14"]), Store(db))
    loop.drive(1)
    with Store(db).session() as s:
        assert s.get(Run, 1).status == "finished"


def test_children_die_with_their_parent_and_by_their_own_deadline(tmp_path):
    from autodiscovery.toolkit.proc import tethered

    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).parent.parent)!r})\n"
        "from autodiscovery.toolkit.proc import tethered\n"
        "p = subprocess.Popen(['sleep', '60'], preexec_fn=tethered(None), start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    grandchild = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    assert _gone(grandchild, within=5)
    p = subprocess.Popen(["sleep", "30"], preexec_fn=tethered(1))
    t0 = time.time()
    assert p.wait(timeout=10) == -signal.SIGALRM and time.time() - t0 < 5


def _gone(pid: int, within: float) -> bool:
    deadline = time.time() + within
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            if state == "Z":
                return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.05)
    return False


# ---- faults of the database --------------------------------------------------------------------------
def test_a_full_database_is_one_line_and_loses_nothing(tmp_path, uninterrupted):
    from sqlalchemy import event

    db = tmp_path / "full.db"
    store = Store(db)
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=12", "stop.patience=50", "stop.target=5",
                                              "agent.search.batch=3"])
    loop, harness = make(campaign, store)
    harness.delay_s = 0.0

    def fill_up(n):
        if n == 4:  # from now on the file may not grow
            store.engine.dispose()
            event.listen(store.engine, "connect", lambda c, _: c.execute(
                f"PRAGMA max_page_count={c.execute('PRAGMA page_count').fetchone()[0]}"))
    harness.hooks["evaluate"] = fill_up
    with pytest.raises(StoreError, match="full"):
        loop.new_run({"gpu": "Replayed NVIDIA H100", "sms": 132})
    fresh = Store(db)
    loop2, _ = make(campaign, fresh)
    loop2.drive(1)
    assert_whole(db)
    assert walk(db) == uninterrupted


def test_a_locked_database_is_one_line(tmp_path, monkeypatch):
    import sqlite3

    import autodiscovery.store as store_module

    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 1)
    db = tmp_path / "locked.db"
    store = Store(db)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    try:
        with pytest.raises(StoreError, match="locked"):
            with store.session() as s:
                s.add(Run(campaign="x", agent="search", config={}, fingerprint={}))
    finally:
        other.execute("ROLLBACK")
        other.close()
    with store.session() as s:
        assert s.scalars(select(Run)).first() is None


def test_a_read_only_database_reads_and_refuses_writes_in_one_line(tmp_path):
    db = tmp_path / "ro.db"
    with Store(db).session() as s:
        s.add(Run(campaign="x", agent="search", config={}, fingerprint={}))
    ro = Store(f"sqlite:///file:{db}?mode=ro&uri=true")
    with ro.session() as s:
        assert s.scalars(select(Run)).first().campaign == "x"
    with pytest.raises(StoreError, match="readonly database .the file or its folder is not writable"):
        with ro.session() as s:
            s.add(Run(campaign="y", agent="search", config={}, fingerprint={}))


# ---- what a resume may change -------------------------------------------------------------------------
@pytest.fixture
def interrupted(tmp_path):
    db = tmp_path / "r.db"
    assert child(db, "evaluate", 4).returncode == 9
    return db


@pytest.mark.parametrize("override, key", [
    ("problem.M=8192", "problem.M"), ("harness.tolerance=0.05", "harness.tolerance"),
    ("harness.nvcc_flags=[-O1]", "harness.nvcc_flags"), ("harness.baseline=best_lt", "harness.baseline"),
])
def test_resume_refuses_what_changes_the_measurements(interrupted, override, key):
    from autodiscovery.running import runner

    harness = ReplayHarness(SearchAgent(campaigns.load("hopper-gemm")).space)
    with pytest.raises(AutoDiscoveryError, match=f"run 1 was measured with {key} = "):
        runner.resume_run(1, [override], Store(interrupted), harness=harness)
    assert harness.evaluated == []


def test_resume_takes_a_new_budget_and_refuses_a_new_toolchain_unless_told(interrupted):
    from autodiscovery.running import runner

    harness = ReplayHarness(SearchAgent(campaigns.load("hopper-gemm")).space)
    with Store(interrupted).session() as s:
        s.get(Run, 1).fingerprint = {"gpu": "Replayed NVIDIA H100", "sms": 132, "nvcc": "nvcc 12.8.93"}
    with pytest.raises(AutoDiscoveryError, match="another toolchain \\(nvcc nvcc 12.8.93 → replay\\)"):
        runner.resume_run(1, ["budget.candidates=13"], Store(interrupted), harness=harness)
    runner.resume_run(1, ["budget.candidates=13"], Store(interrupted), harness=harness, allow_new_toolchain=True)
    with Store(interrupted).session() as s:
        run = s.get(Run, 1)
        assert run.status == "finished" and run.config["budget"]["candidates"] == 13
        assert run.fingerprint["nvcc"] == "nvcc 12.8.93"  # what it was measured with, and the change beside it
        assert run.fingerprint["toolchain_changes"][0]["nvcc"] == {"was": "nvcc 12.8.93", "now": "replay"}
