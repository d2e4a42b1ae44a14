"""One of two processes writing one database at once (tests/test_store.py): a run of 24 candidates with
the replaying harness. Prints the run id."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

from replay import ReplayHarness  # noqa: E402

from autodiscovery import campaign as campaigns  # noqa: E402
from autodiscovery.agents.search import SearchAgent  # noqa: E402
from autodiscovery.running.driver import Driver  # noqa: E402
from autodiscovery.store import Store  # noqa: E402

url, seed = sys.argv[1], int(sys.argv[2])
campaign = campaigns.load("hopper-gemm", ["budget.candidates=24", "stop.patience=100", "stop.target=5",
                                          f"agent.search.seed={seed}", "agent.search.batch=2"])
agent = SearchAgent(campaign)
harness = ReplayHarness(agent.space, delay_s=0.01)
print(Driver(campaign, Store(url), harness, agent, workers=2).new_run({"gpu": "Replayed NVIDIA H100"}))
