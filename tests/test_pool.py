"""A pool of devices kept busy: the loop on several stand-in GPUs whose evaluations and head-to-heads take
the times recorded on an H100 (tests/data/h100_run.db), scaled down. No GPU: the devices are a
semaphore, the measurements the replayed ones, and their times (with the builds' and the proposals')
pass on a virtual clock (`virtual_clock.py`): the scheduler's own work costs no time there, so the
shares measured depend on the scheduling alone, never on the machine's load."""

from __future__ import annotations

import dataclasses
import hashlib
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from replay import ReplayHarness
from sqlalchemy import select
from virtual_clock import VirtualClock

from autodiscovery import campaign as campaigns
from autodiscovery.agents.llm import LlmAgent
from autodiscovery.agents.search import SearchAgent
from autodiscovery.review import pool as pooling
from autodiscovery.running.driver import Driver
from autodiscovery.store import Candidate, Decision, Run, Store

RECORDED = Path(__file__).parent / "data" / "h100_run.db"
SCALE = 0.5
"""PastRun seconds to simulated seconds: evaluations of 1.2 to 3.7 s."""


def recorded_seconds(kind: str) -> list[float]:
    with sqlite3.connect(RECORDED) as db:
        return [r[0] for r in db.execute("select seconds from evaluations where kind = ? order by id", (kind,))]


class PooledReplay(ReplayHarness):
    """`parallel` devices, each holding one evaluation or head-to-head at a time for its recorded time
    (one of the recorded ones, picked by the kernel's hash), on the clock: a measurement that finds every
    device taken fails the run."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.bench, self.h2h = recorded_seconds("benchmark"), recorded_seconds("head_to_head")
        self.spans: list[tuple[float, float]] = []
        self.lock = threading.Lock()
        self.clock: VirtualClock | None = None
        self.set_devices(1)

    def set_devices(self, n: int) -> None:
        self.parallel, self.devices = n, threading.Semaphore(n)

    def _hold(self, seconds: float) -> float:
        assert self.clock is not None
        if not self.devices.acquire(blocking=False):
            raise AssertionError("a measurement started on a device in use: more at once than devices")
        try:
            t = self.clock.time()
            self.clock.sleep(seconds * SCALE)
            end = self.clock.time()
        finally:
            self.devices.release()
        with self.lock:
            self.spans.append((t, end))
        return end - t

    def evaluate(self, source, build, bar=None):
        held = self._hold(self.bench[int(hashlib.sha256(source.encode()).hexdigest()[:8], 16) % len(self.bench)])
        return dataclasses.replace(super().evaluate(source, build, bar), seconds=held)

    def head_to_head(self, challenger, incumbent):
        held = self._hold(self.h2h[int(challenger[1].cache_key[:8], 16) % len(self.h2h)])
        return dataclasses.replace(super().head_to_head(challenger, incumbent), seconds=held)

    def busy(self) -> tuple[float, int]:
        """Share of the devices' time spent measuring, from the first start to the last end; the most
        measurements at once."""
        start, end = min(s for s, _ in self.spans), max(e for _, e in self.spans)
        edges = sorted([(s, 1) for s, _ in self.spans] + [(e, -1) for _, e in self.spans])
        most = now = 0
        for _, step in edges:
            now += step
            most = max(most, now)
        return sum(e - s for s, e in self.spans) / (self.parallel * (end - start)), most


@pytest.fixture
def clock(monkeypatch):
    with VirtualClock.installed(monkeypatch) as clock:
        yield clock


def run_on(clock: VirtualClock, devices: int, db: Path, *settings: str):
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=40", "stop.patience=500", "stop.target=50",
                                              *settings])
    agent = SearchAgent(campaign)
    harness = PooledReplay(agent.space)
    harness.set_devices(devices)
    harness.clock = clock
    store = Store(db)
    run_id = Driver(campaign, store, harness, agent, workers=4).new_run({"gpu": "Replayed NVIDIA H100",
                                                                     "gpus": list(range(devices))})
    return store, run_id, harness, agent


def test_eight_devices_are_kept_busy_and_decisions_stay_in_order(tmp_path, clock):
    store, run_id, harness, agent = run_on(clock, 8, tmp_path / "eight.db")
    assert agent.batch == 8  # a batch is one candidate per device
    share, most = harness.busy()
    print(f"\n8 devices: busy {share:.1%}")
    assert most == 8 and share >= 0.8, (share, most)
    with store.session() as s:
        run = s.get(Run, run_id)
        assert run.status == "finished" and run.stop_reason == "budget spent: 40 candidates"
        cands = list(s.scalars(select(Candidate).where(Candidate.run_id == run_id).order_by(Candidate.seq)))
        assert sum(c.status != "proposed" for c in cands) == 40
        assert all(c.status in ("kept", "reverted", "rejected", "proposed") for c in cands)  # none left undecided
        decided = [d.candidate_id for d in s.scalars(select(Decision).where(Decision.run_id == run_id)
                                                     .order_by(Decision.id))]
        scores = [c.measurement.metrics["ratio"]["median"] for c in cands if c.status == "kept"]
    seq = {c.id: c.seq for c in cands}
    assert [seq[i] for i in decided] == sorted(seq[i] for i in decided)  # in proposal order
    assert len(scores) >= 4 and scores == sorted(scores)
    # `show` tells the same from the recorded timestamps alone.
    used = pooling.pool(store, run_id)
    assert used["devices"] == 8 and abs(used["busy"] - share) < 0.05, (used, share)
    assert used["busy"] + sum(used["idle"].values()) == pytest.approx(1.0, abs=0.02)
    assert pooling.pool_text(used).startswith("pool: 8 at once over ")


def test_a_stop_with_measurements_in_flight_decides_them_and_loses_nothing(tmp_path, clock):
    """The target is reached while other devices are still measuring: what they measure is recorded and
    decided, what had not started stays proposed (for a resume), nothing is measured twice."""
    store, run_id, harness, _ = run_on(clock, 8, tmp_path / "stop.db", "stop.target=0.5")
    with store.session() as s:
        run = s.get(Run, run_id)
        assert run.stop_reason.startswith("target reached")
        cands = list(s.scalars(select(Candidate).where(Candidate.run_id == run_id)))
        assert all(c.status != "measured" and c.status != "evaluating" for c in cands)
        assert all(c.decision is not None for c in cands if c.status in ("kept", "reverted"))
        measured = [c for c in cands if c.measurement is not None]
        assert len(harness.evaluated) == len(measured)


def test_the_batch_and_the_llm_requests_follow_the_pool():
    search = SearchAgent(campaigns.load("hopper-gemm"))
    pool = PooledReplay(search.space)
    pool.set_devices(8)
    search.bind(None, 1, pool, {})
    assert search.batch == 8 and search.overlap
    fixed = SearchAgent(campaigns.load("hopper-gemm", ["agent.search.batch=3"]))
    fixed.bind(None, 1, pool, {})
    assert fixed.batch == 3  # what the campaign says stands
    pool.set_devices(1)
    search.bind(None, 1, pool, {})
    assert search.batch == 4 and search.overlap  # one device too: knob moves are asked ahead
    off = SearchAgent(campaigns.load("hopper-gemm", ["agent.search.overlap=false"]))
    assert not off.overlap

    llm = LlmAgent(campaigns.load("hopper-gemm", ["agent.kind=llm", "agent.llm.base_url=http://127.0.0.1:1/v1",
                                                  "agent.llm.models=[{name: m}]"]))
    assert llm.batch == 2
    pool.set_devices(8)
    llm.bind(None, 1, pool, {})
    assert llm.batch == 8


def test_where_a_recorded_runs_time_went(tmp_path):
    """The H100 run the tests keep: one GPU, its time split between benchmarks, head-to-heads and idle,
    the shares adding up to the whole window."""
    import shutil

    db = tmp_path / "h100.db"
    shutil.copy(RECORDED, db)
    used = pooling.pool(Store(db), 1)
    assert used["devices"] == 1 and 0.5 < used["busy"] <= 1.0
    assert used["head_to_head"] > 0 and used["busy"] == pytest.approx(used["benchmark"] + used["head_to_head"],
                                                                      abs=1e-3)
    assert used["busy"] + sum(used["idle"].values()) == pytest.approx(1.0, abs=0.02)


BUILD_S, PROPOSE_S, SIM_SCALE = 0.5, 0.3, 0.5
"""The busy-share simulation: each build and each request for proposals takes this long beside the
measurements (recorded times × SIM_SCALE: 1.2 to 3.7 s), as nvcc and the agent do on a real run."""


class SlowBuilds(PooledReplay):
    """Each kernel's first build takes BUILD_S; a build again is the cache's (as nvcc's builds are)."""

    def build(self, source):
        with self.lock:
            first = source not in self.cached
            self.cached.add(source)
        if first:
            assert self.clock is not None
            self.clock.sleep(BUILD_S)
        return super().build(source)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.cached: set[str] = set()

    def _hold(self, seconds: float) -> float:
        return super()._hold(seconds * SIM_SCALE / SCALE)


class SlowAgent(SearchAgent):
    clock: VirtualClock

    def propose(self, history, n):
        self.clock.sleep(PROPOSE_S)
        return super().propose(history, n)


def simulate(clock: VirtualClock, devices: int, db: Path, candidates: int) -> tuple[float, float, Store, int]:
    """(busy share, simulated seconds, store, run) of a run on `devices` simulated devices."""
    campaign = campaigns.load("hopper-gemm", [f"budget.candidates={candidates}", "stop.patience=500",
                                              "stop.target=50"])
    agent = SlowAgent(campaign)
    agent.clock = clock
    harness = SlowBuilds(agent.space)
    harness.set_devices(devices)
    harness.clock = clock
    store = Store(db)
    t = clock.time()
    run_id = Driver(campaign, store, harness, agent, workers=4).new_run({"gpu": "Replayed NVIDIA H100",
                                                                     "gpus": list(range(devices))})
    return harness.busy()[0], clock.time() - t, store, run_id


@pytest.mark.parametrize("devices, candidates, floor", [(1, 24, 0.97), (2, 20, 0.95), (4, 28, 0.87), (8, 40, 0.8)])
def test_the_devices_are_busy_while_proposals_and_builds_take_time(tmp_path, clock, devices, candidates, floor):
    """Builds and proposals take time beside the measurements: on one device as on several, they run
    while the devices measure. One device is busy 97% of the run or more; several at least `floor`
    (the seed, measured alone, and the ladder's structural moves, each waiting for the verdicts it
    depends on, leave some devices waiting in a run this short)."""
    share, wall, store, run_id = simulate(clock, devices, tmp_path / "busy.db", candidates)
    print(f"\n{devices} device(s): busy {share:.1%} over {wall:.1f} simulated s")
    with store.session() as s:
        assert s.get(Run, run_id).stop_reason == f"budget spent: {candidates} candidates"
    used = pooling.pool(store, run_id)  # `show` tells the same from the recorded timestamps alone
    assert abs(used["busy"] - share) < 0.01, (used, share)
    # On the clock the loop's own work takes no time: what the devices waited for is the proposals and
    # builds the scheduler did not overlap with the measurements, and the verdicts a move waited for.
    assert share >= floor, (devices, share, used["idle"], wall)


def test_a_decisions_use_of_a_device_goes_before_the_measurements_waiting():
    """The head-to-head or sanitizer run a decision waits for takes the next device that frees, though
    measurements asked for one earlier; and no device is left unused while anything waits."""
    from autodiscovery.running.lifecycle import Devices

    devices, order = Devices(2), []
    held = [devices(), devices()]
    for h in held:
        h.__enter__()

    def use(name: str, first: bool) -> None:
        with devices(first=first):
            order.append(name)
            time.sleep(0.05)

    threads = [threading.Thread(target=use, args=(f"measure {i}", False)) for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    threads.append(threading.Thread(target=use, args=("head-to-head", True)))
    threads[-1].start()
    time.sleep(0.1)
    assert order == []
    held.pop().__exit__(None, None, None)
    deadline = time.monotonic() + 5
    while not order and time.monotonic() < deadline:
        time.sleep(0.001)
    assert order[:1] == ["head-to-head"]
    held.pop().__exit__(None, None, None)  # both devices free at once: a measurement takes the other
    for t in threads:
        t.join(timeout=5)
    assert not any(t.is_alive() for t in threads)
    assert order[0] == "head-to-head" and sorted(order[1:]) == ["measure 0", "measure 1", "measure 2"]
