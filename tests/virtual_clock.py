"""Simulated time for the threaded scheduler: what a test says takes time (a build, a request for
proposals, a measurement) advances a virtual clock, and the code's own work costs none, whatever the
machine's load.

Every piece of work is an activity: the test's thread, and each task submitted to an executor. An
activity runs, sleeps on the clock until a virtual time, is blocked (on a future, a condition, an
executor's shutdown), or waits in an executor's queue. The clock moves to the next wake-up only when no
activity can run: none running, and no queued task with a worker free to take it. Every wait that
can end is credited back to running by the activity that ends it (a task that completes the future
waited on, a notify), before the waiter runs, so the clock never moves while the scheduler has work
in hand. Times, durations and the database's timestamps (`utcnow`) are the clock's: a busy share
measured on it depends on the scheduling alone.

    with VirtualClock.installed(monkeypatch) as clock:
        ...  # clock.sleep(s) where the test's stand-ins take time, clock.time() to read it
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

QUEUED, RUNNING, SLEEPING, BLOCKED = "queued", "running", "sleeping", "blocked"
EPOCH = datetime(2026, 1, 1)


class Activity:
    def __init__(self, state: str, pool: VirtualExecutor | None = None) -> None:
        self.state, self.pool = state, pool
        self.wake = 0.0
        self.on: set[object] = set()
        """What a blocked activity waits for: futures, a condition."""


class VirtualClock:
    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.now = 0.0
        self.closed = False
        self.local = threading.local()
        main = Activity(RUNNING)
        self.local.activity = main
        self.activities: set[Activity] = {main}
        self._advancer = threading.Thread(target=self._advance, name="virtual-clock", daemon=True)
        self._advancer.start()

    # ---- what the test's stand-ins use -------------------------------------------------------
    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        a = self._current()
        with self.cv:
            if self.closed or a is None:
                return
            a.state, a.wake = SLEEPING, self.now + seconds
            self.cv.notify_all()
            self.cv.wait_for(lambda: a.state != SLEEPING)

    # ---- the clock ---------------------------------------------------------------------------
    def _current(self) -> Activity | None:
        return getattr(self.local, "activity", None)

    def _quiet(self) -> bool:
        if any(a.state == RUNNING for a in self.activities):
            return False
        for pool in {a.pool for a in self.activities if a.pool is not None}:
            mine = [a for a in self.activities if a.pool is pool]
            queued = sum(a.state == QUEUED for a in mine)
            if min(queued, pool.workers - (len(mine) - queued)) > 0:
                return False
        return any(a.state == SLEEPING for a in self.activities)

    def _advance(self) -> None:
        with self.cv:
            while True:
                self.cv.wait_for(lambda: self.closed or self._quiet())
                if self.closed:
                    return
                sleeping = [a for a in self.activities if a.state == SLEEPING]
                self.now = max(self.now, min(a.wake for a in sleeping))
                for a in sleeping:
                    if a.wake <= self.now:
                        a.state = RUNNING
                self.cv.notify_all()

    def close(self) -> None:
        """Every sleeper woken, every later sleep returning at once (threads left behind end)."""
        with self.cv:
            self.closed = True
            for a in self.activities:
                if a.state == SLEEPING:
                    a.state = RUNNING
            self.cv.notify_all()

    @contextlib.contextmanager
    def blocked(self, on: Iterable[object]) -> Iterator[None]:
        """The current activity blocked on `on` (futures, a condition) until a credit or the wait's end."""
        a = self._current()
        if a is None:
            yield
            return
        with self.cv:
            a.state, a.on = BLOCKED, set(on)
            self.cv.notify_all()
        try:
            yield
        finally:
            with self.cv:
                a.state, a.on = RUNNING, set()
                self.cv.notify_all()

    def credit(self, what: object) -> None:
        """Those blocked on `what` run again (called by whoever ends their wait, before it does)."""
        with self.cv:
            for a in self.activities:
                if a.state == BLOCKED and what in a.on:
                    a.state, a.on = RUNNING, set()
            self.cv.notify_all()

    def _finished(self, task: Activity, future: Future) -> None:
        with self.cv:
            for a in self.activities:
                if a.state == BLOCKED and future in a.on:
                    a.state, a.on = RUNNING, set()
            self.activities.discard(task)
            self.cv.notify_all()

    # ---- installed where the scheduler waits ----------------------------------------------------
    @classmethod
    @contextlib.contextmanager
    def installed(cls, monkeypatch: Any) -> Iterator[VirtualClock]:
        """The clock for the code under test: its executors, its waits on futures and on the devices'
        condition, and the database's timestamps."""
        from autodiscovery.running import driver, lifecycle, schedule
        from autodiscovery.store import models

        clock = cls()
        real_result, real_wait = Future.result, concurrent.futures.wait

        def result(self: Future, timeout: float | None = None) -> Any:
            if self.done():
                return real_result(self, timeout)
            with clock.blocked([self]):
                return real_result(self, timeout)

        def wait(fs: Iterable[Future], timeout: float | None = None,
                 return_when: str = concurrent.futures.ALL_COMPLETED) -> Any:
            fs = list(fs)
            with clock.blocked(fs):
                return real_wait(fs, timeout, return_when)

        class Executor(VirtualExecutor):
            def __init__(self, max_workers: int | None = None, thread_name_prefix: str = "") -> None:
                super().__init__(clock, max_workers, thread_name_prefix)

        class Condition(threading.Condition):
            def wait(self, timeout: float | None = None) -> bool:
                with clock.blocked([self]):
                    return super().wait(timeout)

            def notify_all(self) -> None:
                clock.credit(self)
                super().notify_all()

        class Devices(lifecycle.Devices):
            def __init__(self, parallel: int) -> None:
                super().__init__(parallel)
                self.changed = Condition()

        class Datetime(datetime):
            @classmethod
            def now(cls, tz: Any = None) -> Any:
                return (EPOCH + timedelta(seconds=clock.now)).replace(tzinfo=tz)

        monkeypatch.setattr(Future, "result", result)
        monkeypatch.setattr(schedule, "wait", wait)
        monkeypatch.setattr(schedule, "ThreadPoolExecutor", Executor)
        monkeypatch.setattr(driver, "ThreadPoolExecutor", Executor)
        monkeypatch.setattr(driver, "Devices", Devices)
        monkeypatch.setattr(models, "datetime", Datetime)
        try:
            yield clock
        finally:
            clock.close()


class VirtualExecutor(ThreadPoolExecutor):
    """A thread pool whose tasks are the clock's activities: queued until a worker takes them, done once
    their future's waiters are credited."""

    def __init__(self, clock: VirtualClock, max_workers: int | None = None, thread_name_prefix: str = "") -> None:
        super().__init__(max_workers, thread_name_prefix)
        self.clock, self.workers = clock, self._max_workers

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        clock = self.clock
        task = Activity(QUEUED, self)
        with clock.cv:
            clock.activities.add(task)
            clock.cv.notify_all()

        def run() -> Any:
            with clock.cv:
                task.state = RUNNING
                clock.cv.notify_all()
            clock.local.activity = task
            try:
                return fn(*args, **kwargs)
            finally:
                clock.local.activity = None

        future = super().submit(run)
        future.add_done_callback(lambda f: clock._finished(task, f))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self.clock.blocked(["shutdown"]) if wait else contextlib.nullcontext():
            super().shutdown(wait, cancel_futures=cancel_futures)
