"""A run driven in its own process, to be cut off: `python durable_child.py DB STEP N [OVERRIDE ...]`.

STEP is where the process dies with os._exit (no clean-up at all, as under kill -9): at the N-th call of
the replay harness's `build`, `evaluate` or `head_to_head`, or at the N-th database commit (`commit`:
before it lands; `committed`: right after). STEP `none` runs to the end; `slow` makes every evaluation
take a while (for a real SIGKILL from outside). The run resumes if the database already holds run 1.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

from replay import ReplayHarness  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from autodiscovery import campaign as campaigns  # noqa: E402
from autodiscovery.agents.search import SearchAgent  # noqa: E402
from autodiscovery.running.driver import Driver  # noqa: E402
from autodiscovery.store import Run, Store  # noqa: E402

# Every keep confirmed head to head (stop.decisive off), so that a cut can land in one.
CAMPAIGN = ["budget.candidates=12", "stop.patience=50", "stop.target=5", "agent.search.batch=3", "stop.decisive=null"]


def die(count: int, at: int) -> None:
    if count == at:
        os._exit(9)


def main() -> None:
    db, step, n, *overrides = sys.argv[1:]
    n = int(n)
    campaign = campaigns.load("hopper-gemm", CAMPAIGN + overrides)
    agent = SearchAgent(campaign)
    harness = ReplayHarness(agent.space)
    if step in ("build", "evaluate", "head_to_head"):
        harness.hooks[step] = lambda count: die(count, n)
    elif step in ("commit", "committed"):
        commit, seen, lock = Session.commit, [0], threading.Lock()

        def counted_commit(self):
            with lock:  # commits come from several threads (devices, decisions, the loop)
                seen[0] += 1
                count = seen[0]
            if step == "commit":
                die(count, n)
            commit(self)
            if step == "committed":
                die(count, n)
        Session.commit = counted_commit
    elif step == "slow":
        harness.delay_s = 0.05
    store = Store(db)
    loop = Driver(campaign, store, harness, agent, workers=2)
    with store.session() as s:
        exists = Run.find(s, 1) is not None
    loop.drive(1) if exists else loop.new_run({"gpu": "Replayed NVIDIA H100", "sms": 132})
    print("finished")


if __name__ == "__main__":
    main()
