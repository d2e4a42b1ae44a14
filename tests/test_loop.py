"""The loop's keep/revert, stop rules and resume, driven by a harness that replays evaluations."""

from __future__ import annotations

import pytest
from replay import ReplayHarness, key, standin
from sqlalchemy import select

from autodiscovery import campaign as campaigns
from autodiscovery.agents.search import SearchAgent
from autodiscovery.review import report
from autodiscovery.running.driver import Driver
from autodiscovery.store import Candidate, Decision, Evaluation, Run


def make_loop(campaign, store, **harness_kw):
    agent = SearchAgent(campaign)
    harness = ReplayHarness(agent.space, **harness_kw)
    return Driver(campaign, store, harness, agent, workers=2), harness


def candidates(store, run_id):
    with store.session() as s:
        cands = list(s.scalars(select(Candidate).where(Candidate.run_id == run_id).order_by(Candidate.seq)))
        for c in cands:
            _ = c.decision, c.evaluations
        return cands


def test_climbs_the_ladder_and_keeps_only_improvements(campaign, store):
    loop, harness = make_loop(campaign, store)
    run_id = loop.new_run({"gpu": "Replayed NVIDIA H100"})
    cands = candidates(store, run_id)
    evaluated = [c for c in cands if c.status not in ("rejected", "proposed")]
    assert sum(c.status != "proposed" for c in cands) == 10  # the candidate budget: every proposal counts
    assert cands[0].proposer == "seed" and cands[0].status == "kept"
    chain = report.lineage(store, run_id)
    assert chain[0]["seq"] == 0
    assert [r["family"] for r in chain][:3] == ["naive", "tiled", "mma_sync"]
    scores = [r["score"] for r in chain]
    assert scores == sorted(scores) and len(set(scores)) == len(scores)  # strictly improving
    with store.session() as s:
        run = s.get(Run, run_id)
        assert run.status == "finished" and run.stop_reason.startswith("budget spent")
        best = max((c for c in run.candidates if c.status in ("kept", "reverted")),
                   key=lambda c: c.measurement.metrics["ratio"]["median"])
        assert run.best_candidate_id == best.id
        decisions = list(s.scalars(select(Decision).where(Decision.run_id == run_id)))
    assert len(decisions) == len(evaluated)
    # Every keep after the first went through a head-to-head with the incumbent, unless its own
    # measurement was at least stop.decisive times the incumbent's.
    factor = campaign.stop.decisive
    kept_after_seed = [d for d in decisions if d.verdict == "keep" and d.incumbent_id is not None]
    score = {c.id: c.measurement.metrics["ratio"]["median"] for c in cands if c.measurement is not None}
    decisive = [d for d in kept_after_seed if "no head-to-head needed" in d.reason]
    assert all(score[d.candidate_id] >= factor * score[d.incumbent_id] for d in decisive)
    assert all(score[d.candidate_id] < factor * score[d.incumbent_id] for d in kept_after_seed if d not in decisive)
    assert len(harness.head_to_heads) >= len(kept_after_seed) - len(decisive) and kept_after_seed


def test_a_keep_far_ahead_of_the_incumbent_needs_no_head_to_head(store, tmp_path):
    """The climb from the naive seed: a candidate measured at least stop.decisive times the incumbent is
    kept on its own measurement; with stop.decisive unset, the same climb confirms every keep head to head."""
    from autodiscovery.store import Store

    def climb(db, overrides):
        campaign = campaigns.load("hopper-gemm", ["budget.candidates=6", *overrides])
        loop, harness = make_loop(campaign, db)
        run_id = loop.new_run({"gpu": "Replayed NVIDIA H100"})
        with db.session() as s:
            kept = [d for d in s.scalars(select(Decision).where(Decision.run_id == run_id))
                    if d.verdict == "keep" and d.incumbent_id is not None]
        return [r["seq"] for r in report.lineage(db, run_id)], kept, harness.head_to_heads

    chain, kept, h2h = climb(store, [])
    plain_chain, plain_kept, plain_h2h = climb(Store(tmp_path / "plain.db"), ["stop.decisive=null"])
    assert chain == plain_chain  # the same decisions, fewer measurements
    assert any("no head-to-head needed" in d.reason for d in kept)
    assert len(h2h) < len(plain_h2h) == len(plain_kept)
    assert not any("no head-to-head needed" in d.reason for d in plain_kept)


def test_failures_are_recorded_and_the_run_goes_on(campaign, store):
    space = SearchAgent(campaign).space
    tiled = space.families["tiled"].default
    mma = space.families["mma_sync"].default
    recordings = {
        key("tiled", tiled): {"status": "compile_error", "log": "kernel.cu(12): error: identifier undefined"},
        key("mma_sync", mma): {"status": "incorrect", "log": "draw 0: relative error 0.9 exceeds tolerance 0.01"},
    }
    loop, _ = make_loop(campaign, store, recordings=recordings)
    run_id = loop.new_run({})
    by_knobs = {(c.family, str(sorted(c.knobs.items()))): c for c in candidates(store, run_id)}
    bad_build = by_knobs[("tiled", str(sorted(tiled.items())))]
    bad_gate = by_knobs[("mma_sync", str(sorted(mma.items())))]
    assert bad_build.status == "compile_error" and bad_gate.status == "incorrect"
    with store.session() as s:
        logs = {e.candidate_id: e.log for e in s.scalars(select(Evaluation))}
        assert "identifier undefined" in logs[bad_build.id]
        assert "relative error" in logs[bad_gate.id]
        assert s.get(Run, run_id).status == "finished"
    assert any(c.status == "kept" and c.seq > bad_gate.seq for c in candidates(store, run_id))


def test_a_worse_candidate_is_reverted_without_head_to_head(campaign, store):
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=2"])
    space = SearchAgent(campaign).space
    slow = {"status": "ok", "metrics": {"ratio": {"median": 0.001, "ci_low": 0.0009, "ci_high": 0.0011}}}
    loop, harness = make_loop(campaign, store, recordings={key("tiled", space.families["tiled"].default): slow})
    run_id = loop.new_run({})
    second = candidates(store, run_id)[1]
    assert second.status == "reverted" and "does not beat" in second.decision.reason
    assert harness.head_to_heads == []


def test_the_incumbent_is_the_bar_and_a_screened_candidate_is_reverted(campaign, store):
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=2"])
    space = SearchAgent(campaign).space
    screened = {"status": "ok", "metrics": {"ratio": {"median": 0.5, "ci_low": 0.4, "ci_high": 0.6},
                                            "screened": {"pairs": 10, "below": 0.9}}}
    loop, harness = make_loop(campaign, store, recordings={key("tiled", space.families["tiled"].default): screened})
    run_id = loop.new_run({})
    seed, second = candidates(store, run_id)
    assert harness.bars[0] == 1.0  # nothing to beat yet: the baseline is the bar (cuBLAS, 1×)
    assert harness.bars[1] == pytest.approx(seed.measurement.metrics["ratio"]["median"])
    assert second.status == "reverted" and "screened out after 10 pairs" in second.decision.reason
    assert harness.head_to_heads == []


@pytest.mark.parametrize(
    "overrides, reason",
    [
        (["stop.target=0.01"], "target reached"),
        (["stop.patience=2", "stop.target=50", "budget.candidates=40"], "patience"),
        (["budget.candidates=4"], "budget spent: 4 candidates"),
    ],
)
def test_stop_rules(store, overrides, reason):
    campaign = campaigns.load("hopper-gemm", overrides)
    loop, _ = make_loop(campaign, store)
    if "patience" in reason:  # after the ladder, nothing beats the best mma configuration
        loop.harness.recordings = {}
        best = 10.0
        mma = loop.agent.space.families["mma_sync"].default
        loop.harness.recordings[key("mma_sync", mma)] = {
            "status": "ok", "metrics": {"ratio": {"median": best, "ci_low": best, "ci_high": best}}}
    run_id = loop.new_run({})
    with store.session() as s:
        assert reason in s.get(Run, run_id).stop_reason


def test_resume_continues_with_nothing_lost_and_nothing_evaluated_twice(campaign, store):
    loop, harness = make_loop(campaign, store, interrupt_after=5)
    with pytest.raises(KeyboardInterrupt):
        loop.new_run({})
    run_id = 1
    before = candidates(store, run_id)
    with store.session() as s:
        assert s.get(Run, run_id).status == "interrupted"
    assert any(c.status == "proposed" for c in before)  # recorded, not yet evaluated
    done_before = {c.source_hash for c in before if c.status not in ("proposed", "rejected")}

    resumed, harness2 = make_loop(campaign, store)
    resumed.drive(run_id)
    after = candidates(store, run_id)
    assert [c.id for c in after[: len(before)]] == [c.id for c in before]  # nothing lost
    assert not done_before & set(harness2.evaluated)  # nothing evaluated twice
    assert len(harness.evaluated) + len(harness2.evaluated) == len(set(harness.evaluated + harness2.evaluated))
    assert sum(c.status != "proposed" for c in after) == 10
    with store.session() as s:
        assert s.get(Run, run_id).status == "finished"


def test_the_walk_is_reproducible(campaign, tmp_path):
    from autodiscovery.store import Store

    seqs = []
    for name in ("a", "b"):
        store = Store(tmp_path / f"{name}.db")
        loop, _ = make_loop(campaign, store)
        run_id = loop.new_run({})
        seqs.append([(c.family, c.knobs, c.status) for c in candidates(store, run_id)])
    assert seqs[0] == seqs[1]


def test_standin_scores_rank_families():
    assert standin("naive", {}) < standin("tiled", {"BM": 64}) < standin("mma_sync", {"BM": 128})


def test_live_display_renders_a_run(campaign, store):
    import io

    from rich.console import Console

    from autodiscovery.review.live import LiveDisplay

    out = io.StringIO()
    loop, _ = make_loop(campaign, store)
    loop.display = LiveDisplay(Console(file=out, width=160, force_terminal=False))
    loop.new_run({})
    text = out.getvalue()
    assert "best so far: #" in text and "× cuBLAS" in text and "stopped: budget spent" in text
    assert "mma_sync" in text and "kept" in text
    assert text.endswith("\n")  # not a terminal: what is printed next starts on a line of its own


def test_replaying_a_real_h200_run_takes_the_same_walk(store):
    """Evaluations recorded by `run --set budget.candidates=12` on an H200 drive the loop again."""
    from pathlib import Path

    from replay import load_recording

    device, recordings = load_recording(Path(__file__).parent / "data" / "h200_run.json")
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=12"])
    loop, harness = make_loop(campaign, store, recordings=recordings)
    run_id = loop.new_run(device)
    walked = [(c.family, c.knobs) for c in candidates(store, run_id) if c.status != "rejected"]
    recorded = [(r["family"], r["knobs"]) for r in recordings.values()]
    # The structural climb is the recorded one; the knob moves differ since the agent no longer spends
    # budget on configurations its constraints refuse (every proposal now counts).
    assert walked[:5] == recorded[:5]
    chain = report.lineage(store, run_id)
    assert [r["family"] for r in chain][:5] == ["naive", "tiled", "mma_sync", "wgmma_tma", "wgmma_ws"]
    assert chain[4]["score"] == pytest.approx(0.8842, abs=1e-3)


@pytest.mark.parametrize("overlap", [False, True])
def test_replaying_the_h100_default_run_past_cublas(store, overlap):
    """The shipped `run --campaign hopper-gemm` recorded on an H100 (every evaluation, screened ones
    included): the same campaign and seed climb the same way to rung 7 and keep its default at 1.009×
    cuBLAS; then neighbour moves tune it until patience ends the run. (Knobs added to a family since
    the recording read as the values that render the recorded kernel: their defaults.) The recording
    asked for each batch once every verdict was in; with knob moves asked ahead (`overlap`, the
    default), the structural climb is still the recorded one, step for step."""
    from pathlib import Path

    from replay import load_recording

    device, recorded_runs = load_recording(Path(__file__).parent / "data" / "h100_run.json")
    campaign = campaigns.load("hopper-gemm", [] if overlap else ["agent.search.overlap=false"])
    space = SearchAgent(campaign).space
    recordings = {}
    for r in recorded_runs.values():
        fam = space.families.get(r["family"])
        knobs = {**fam.default, **r["knobs"]} if fam is not None and fam.template else r["knobs"]
        recordings[key(r["family"], knobs)] = r | {"knobs": knobs}
    loop, harness = make_loop(campaign, store, recordings=recordings)
    run_id = loop.new_run(device)
    walked = [(c.family, c.knobs) for c in candidates(store, run_id) if c.status != "rejected"]
    recorded = [(r["family"], r["knobs"]) for r in recordings.values()]
    assert walked[:7] == recorded[:7]  # the structural climb, every step as recorded
    chain = report.lineage(store, run_id)
    assert [r["family"] for r in chain][:7] == ["naive", "tiled", "mma_sync", "wgmma_tma", "wgmma_ws",
                                                "wgmma_persistent", "wgmma_cluster"]
    assert chain[6]["score"] == pytest.approx(1.009, abs=1e-3)
    # Configurations the recording lacks get stand-in scores; a keep among them is a knob move of rung 7.
    assert all(r["family"] == "wgmma_cluster" and r["proposer"] == "search:knob" for r in chain[7:])
    screened = [c for c in candidates(store, run_id) if c.decision and "screened out" in c.decision.reason]
    assert all(c.measurement.metrics["pairs"] == 10 for c in screened)
    assert screened or overlap  # the recorded walk meets the recorded screenings
    with store.session() as s:
        assert s.get(Run, run_id).stop_reason.startswith("patience")


def test_the_search_uses_its_budget(store):
    """With the shipped budget and no target or patience in reach, the run ends by its budget: the agent
    does not give up while valid configurations it has not tried remain."""
    campaign = campaigns.load("hopper-gemm", ["stop.target=50", "stop.patience=1000"])
    loop, harness = make_loop(campaign, store)
    run_id = loop.new_run({})
    with store.session() as s:
        run = s.get(Run, run_id)
        assert run.stop_reason == f"budget spent: {campaign.budget.candidates} candidates"
        families = {c.family for c in run.candidates}
    assert {"wgmma_ws", "wgmma_tma", "wgmma_persistent", "wgmma_cluster"} <= families


def test_on_several_devices_a_batch_is_measured_side_by_side_and_decided_as_on_one(store, tmp_path):
    """With a harness of two devices and no proposals asked ahead, a batch climbing the ladder is measured
    side by side; the decisions, made in order against the incumbent of their turn, and so the lineage
    and every head-to-head, are those of one device."""
    import threading
    import time

    from autodiscovery.store import Store

    def walk(db, parallel: int):
        campaign = campaigns.load("hopper-gemm", ["budget.candidates=12", "stop.patience=50", "stop.target=5",
                                                  "agent.search.batch=4", "agent.search.overlap=false",
                                                  "stop.decisive=null"])  # every keep head to head
        loop, harness = make_loop(campaign, db)
        harness.parallel = parallel
        spans, lock = [], threading.Lock()
        inner = harness.evaluate

        def timed(*args):
            t = time.monotonic()
            time.sleep(0.05)
            out = inner(*args)
            with lock:
                spans.append((t, time.monotonic()))
            return out
        harness.evaluate = timed
        run_id = loop.new_run({"gpu": "Replayed NVIDIA H100"})
        return [r["seq"] for r in report.lineage(db, run_id)], harness, spans

    one, h1, alone = walk(store, 1)
    two, h2, spans = walk(Store(tmp_path / "two.db"), 2)
    assert one == two and len(one) >= 4
    assert h1.head_to_heads == h2.head_to_heads  # the same pairs, in the same order
    overlaps = [sum(1 for i, a in enumerate(ss) for b in ss[i + 1:] if a[0] < b[1] and b[0] < a[1])
                for ss in (alone, spans)]
    assert overlaps[0] == 0 and overlaps[1] >= 1


def test_on_several_devices_the_next_batch_is_proposed_and_built_while_one_is_measured(store):
    campaign = campaigns.load("hopper-gemm", ["budget.candidates=16", "stop.patience=50", "stop.target=5",
                                              "agent.search.batch=4"])
    loop, harness = make_loop(campaign, store, delay_s=0.1)
    harness.parallel = 2
    run_id = loop.new_run({"gpu": "Replayed NVIDIA H100"})
    cands = candidates(store, run_id)
    assert sum(c.status != "proposed" for c in cands) == 16
    finished = {c.seq: max(e.created_at for e in c.evaluations) for c in cands if c.evaluations}
    ahead = [c for c in cands if any(c.created_at < t for s, t in finished.items() if s < c.seq and s > 0)]
    assert ahead  # some candidates were proposed before earlier ones were done
    assert len({c.source_hash for c in cands}) == len(cands)  # and nothing proposed twice
    assert len(report.lineage(store, run_id)) >= 4


class BelowCublas(ReplayHarness):
    """Every kernel at half its stand-in score: the best stays below cuBLAS (at most 0.63×)."""

    def recorded(self, source: str) -> dict:
        rec = super().recorded(source)
        r = {k: v * 0.5 for k, v in rec["metrics"]["ratio"].items()}
        return rec | {"metrics": rec["metrics"] | {"ratio": r}}


@pytest.mark.parametrize("below, reason", [(None, "budget spent: 30 candidates"),
                                           (6, "patience: 6 candidates in a row without a keep (below cuBLAS)")])
def test_a_run_below_its_baseline_is_not_ended_by_the_patience_of_one_above_it(store, below, reason):
    overrides = ["stop.patience=3", "budget.candidates=30"] + ([f"stop.patience_below={below}"] if below else [])
    campaign = campaigns.load("hopper-gemm", overrides)
    agent = SearchAgent(campaign)
    loop = Driver(campaign, store, BelowCublas(agent.space), agent, workers=2)
    run_id = loop.new_run({})
    with store.session() as s:
        run = s.get(Run, run_id)
        assert run.stop_reason == reason
        assert 0 < run.best.measurement.metrics["ratio"]["median"] < 1.0
    streak = longest = 0
    for c in candidates(store, run_id):
        streak = 0 if c.status == "kept" else streak + (c.status != "rejected")
        longest = max(longest, streak)
    assert longest >= 6  # the patience of a run above its baseline would have ended this one
