"""Helpers of the shape tests: the hopper-gemm harness at a shape, the search agent's first structural
moves there, and a recorded run to warm-start from."""

from __future__ import annotations

from autodiscovery import campaign as campaigns
from autodiscovery.agents.search import SearchAgent
from autodiscovery.interfaces import History, Record
from harnesses.hopper_gemm import HopperGemmHarness

GEMM = HopperGemmHarness.objective
SKINNY = (256, 4096, 14336)
WGMMA = ("wgmma_tma", "wgmma_ws", "wgmma_persistent", "wgmma_cluster")
MID = (2304, 8192, 6144)  # 4.4 waves of 128×256 tiles; 192×192 tiles give 3.91


def harness_at(M: int, N: int, K: int) -> tuple[HopperGemmHarness, campaigns.Campaign]:
    campaign = campaigns.load("hopper-gemm", [f"problem.M={M}", f"problem.N={N}", f"problem.K={K}"])
    return HopperGemmHarness(campaign), campaign


def structural(M: int, N: int, K: int, n: int = 6) -> list:
    """The first `n` structural moves from the seed, with the real harness's fit of the shape."""
    harness, campaign = harness_at(M, N, K)
    agent = SearchAgent(campaign)
    agent.bind(None, 1, harness, {})
    seed = Record(seq=0, family="naive", knobs={}, status="kept", score=0.001, kept=True, source_hash="s")
    return agent.propose(History([seed], seed, GEMM), n)


def record_run(store, shape: tuple[int, int, int], family: str, knobs: dict, ratio: float, gpu: str = "H100",
               dry: bool = False, cc: str | None = None, sets: tuple[str, ...] = (), name: str = "hopper-gemm") -> int:
    """A finished hopper-gemm run at `shape` whose best is (family, knobs), as the loop records one."""
    from autodiscovery.store.models import Candidate, Evaluation, Run

    campaign = campaigns.load("hopper-gemm", [f"problem.{k}={v}" for k, v in zip("MNK", shape)] + list(sets))
    with store.session() as s:
        run = Run(campaign=name, agent="search", config=campaign.model_dump(mode="json"),
                  fingerprint={"gpu": gpu, **({"cc": cc} if cc else {}),
                                                                **({"dry_run": True} if dry else {})}, status="finished")
        s.add(run)
        s.flush()
        best = Candidate(run_id=run.id, seq=1, family=family, knobs=knobs, source="// k", source_hash="h",
                         status="kept")
        s.add(best)
        s.flush()
        s.add(Evaluation(candidate_id=best.id, status="ok", metrics={"ratio": {"median": ratio}}))
        run.best_candidate_id = best.id
        return run.id
