"""The co-design agent's phases and their report on CPU, driven by recorded simulations (no simulator):
the phase order, the model check, phase D's single changes, budgets and combined points, points that
launch the same work, and the report's tables and captions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from replay import AT_512, PHASES_512

from autodiscovery import campaign as campaigns
from harnesses.accelsim import report as accelsim_report
from harnesses.accelsim.agent import CodesignAgent
from harnesses.accelsim.arch import Architecture


def test_phases_driven_by_recorded_results(tmp_path):
    from replay import SimReplay, offline_agent

    from autodiscovery.review import report
    from autodiscovery.running.driver import Driver
    from autodiscovery.store import Store

    c = campaigns.load("edge-codesign", [*AT_512, "harness.parallel=2", PHASES_512])
    store = Store(tmp_path / "cd.db")
    harness = SimReplay()
    loop = Driver(c, store, harness, offline_agent(c, tmp_path), workers=2)
    run_id = loop.new_run({"gpu": "simulated"})
    shown = report.show_run(store, run_id)
    phases_seen = [cand["knobs"]["phase"] for cand in shown["candidates"] if cand["status"] != "rejected"]
    assert phases_seen[0] == "A" and phases_seen == sorted(phases_seen)  # A, then B ... E in order
    counts = {p: phases_seen.count(p) for p in "ABCDE"}
    # The stand-in's cycles are the model's prior with up to 30% of noise per configuration: the model
    # fitted on A and B does not rank them well enough to be trusted, so phase C simulates its 3 picks.
    assert counts["A"] == 1 and counts["B"] == 12 and counts["C"] == 3 and counts["D"] == 12
    picks = [x["knobs"] for x in shown["candidates"] if x["knobs"]["phase"] == "C"]
    assert all(not p["model"]["trusted"] for p in picks)
    assert len({json.dumps(p["kernel"], sort_keys=True) for p in picks}) == 3
    assert 2 <= counts["E"] <= 5  # the crosses, and the stock kernel on the best architecture
    d = [x for x in shown["candidates"] if x["knobs"]["phase"] == "D"]
    stock_arch = shown["candidates"][0]["knobs"]["arch"]
    singles = [x for x in d if x["knobs"].get("change")]
    assert singles == d[:7]  # one change at a time from stock first: 8 singles, one of them over budget
    for x in singles:
        changed = {k for k, v in x["knobs"]["arch"].items() if stock_arch[k] != v}
        assert len(changed) == 1 and x["knobs"]["change"].split("=")[0] in changed
    # Then the pairs among the three best changes that bought something (one value a knob), and all
    # three together: four points, each its singles' values at once.
    combined = [x for x in d if x["knobs"].get("changes")]
    assert d[7:11] == combined and [len(x["knobs"]["changes"]) for x in combined] == [2, 2, 2, 3]
    single = {x["knobs"]["change"]: x["score"] for x in singles}
    for x in combined:
        assert {f"{k}={v}" for k, v in x["knobs"]["arch"].items() if stock_arch[k] != v} == set(x["knobs"]["changes"])
        assert all(single[ch] is not None for ch in x["knobs"]["changes"])
    three = combined[3]["knobs"]["changes"]
    assert len({ch.split("=")[0] for ch in three}) == 3
    # Phase D keeps the best kernel of A-C and changes only the architecture; B only the kernel.
    cands = [x for x in shown["candidates"] if x["status"] != "rejected"]
    stock = cands[0]["knobs"]["arch"]
    assert all(x["knobs"]["arch"] == stock for x in cands if x["knobs"]["phase"] in "BC")
    d_kernels = {str(x["knobs"]["kernel"]) for x in cands if x["knobs"]["phase"] == "D"}
    assert len(d_kernels) == 1
    data = accelsim_report.phases(store, run_id)
    assert len(data["attribution"]) == 7 and all(a["reference"] for a in data["attribution"])
    pairs = data["combined"]["points"]
    assert len(pairs) == 4 and not data["combined"]["left_out"]
    for p in pairs:  # the sum of the singles' savings, and what the point does beyond it
        parts = [next(a for a in data["attribution"] if a["change"] == ch) for ch in p["changes"]]
        assert p["additive"] == p["reference"] + sum(a["cycles"] - p["reference"] for a in parts)
        assert p["interaction"] == pytest.approx((p["cycles"] - p["additive"]) / p["reference"])
    # Twice the tensor throughput (+11% area) is past the +10% budget: listed, not simulated, and no
    # point of the run is over budget.
    assert [o["change"] for o in data["over_budget"]] == ["tensor_initiation=8"]
    assert "over the budget" in data["over_budget"][0]["why"]
    assert all(p["area_pct"] <= 10 for p in data["pareto"]["points"])
    front = data["pareto"]["front"]
    assert front and all(a["area_pct"] < b["area_pct"] and a["cycles"] > b["cycles"] for a, b in zip(front, front[1:]))
    c = data["cross"]
    assert c is not None and c["predicted"] == round(c["kernel_only"] * c["arch_only"] / c["baseline"])
    rows = {r["phase"]: r for r in data["phases"]}
    assert set(rows) == set("ABCDE") and rows["A"]["change"] == 0
    assert min(r["cycles"] for r in rows.values()) < data["baseline_cycles"]
    m = data["model"]
    assert not m["trusted"] and m["loo_rank_correlation"] < 0.8 and m["simulations_saved"] == 0
    assert len(m["points"]) == 16 and sum(p["held_out"] == "phase-C pick" for p in m["points"]) == 3
    assert shown["status"] == "finished" and "all phases done" in shown["stop_reason"]


def test_report_prints_the_phase_table(tmp_path):
    from replay import SimReplay, offline_agent
    from typer.testing import CliRunner

    from autodiscovery.cli import app
    from autodiscovery.running.driver import Driver
    from autodiscovery.store import Store

    c = campaigns.load("edge-codesign", [*AT_512, "agent.codesign.phases={B: 3, C: 1, D: 2, E_kernels: 1, E_archs: 1}"])
    db = tmp_path / "r.db"
    Driver(c, Store(db), SimReplay(), offline_agent(c, tmp_path), workers=2).new_run({"gpu": "simulated"})
    res = CliRunner().invoke(app, ["report", "1", "--db", str(db)])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "co-design phases of run 1" in flat and "baseline" in flat and "architecture" in flat


def test_replaying_the_real_512_run_gives_its_phase_table(tmp_path):
    """Cycles recorded by a real GPGPU-Sim run of the campaign drive the phases again."""
    import json

    from replay import SimReplay, offline_agent

    from autodiscovery.review import report
    from autodiscovery.running.driver import Driver
    from autodiscovery.store import Store

    data = json.loads((Path(__file__).parent / "data" / "edge_512_run.json").read_text())
    recorded = {json.dumps({"kernel": r["kernel"], "arch": r["arch"]}, sort_keys=True): r["cycles"]
                for r in data["results"]}
    c = campaigns.load("edge-codesign", [*AT_512, "harness.parallel=2", PHASES_512])
    store = Store(tmp_path / "real.db")
    harness = SimReplay(recorded=recorded)
    Driver(c, store, harness, offline_agent(c, tmp_path), workers=2).new_run({"gpu": "simulated"})
    table = {r["phase"]: r["cycles"] for r in accelsim_report.phases(store, 1)["phases"]}
    # The baseline is the recorded one. (The recorded run's B, D and E were 28773, 26265 and 23977
    # cycles; TPE is now told the cycles of a point it draws again, as the search agent's is, so its
    # later draws differ from the recording's, and the model picks kernels the recording lacks.)
    assert table["A"] == 35422
    assert min(table["B"], table["D"], table["E"]) < table["A"]
    cands = report.show_run(store, 1)["candidates"]
    model = next(x["knobs"]["model"] for x in cands if x["knobs"]["phase"] == "C")
    assert model["n"] == 13 and model["ptx"] and model["loo_rank_correlation"] is not None
    replayed = [x for x in cands if json.dumps({"kernel": x["knobs"]["kernel"], "arch": x["knobs"]["arch"]},
                                               sort_keys=True) in recorded]
    assert len(replayed) >= 5 and all(x["score"] == recorded[json.dumps(
        {"kernel": x["knobs"]["kernel"], "arch": x["knobs"]["arch"]}, sort_keys=True)] for x in replayed)


def test_a_knob_that_changes_nothing_is_left_at_stock(tmp_path):
    """Phase D's single changes are compared with the best kernel on stock: a knob whose change leaves
    the cycles exactly where they were (inert at this shape) is held at stock for the rest of D."""
    from autodiscovery.interfaces import History, Objective, Record

    c = campaigns.load("edge-codesign", [*AT_512, "agent.codesign.phases={B: 0, C: 0, D: 14, E_kernels: 1, E_archs: 1}",
                                         "harness.arch.budget.area_pct=null"])
    agent = CodesignAgent(c)
    seed = agent.seed_proposal()
    kernel, stock = seed.knobs["kernel"], seed.knobs["arch"]

    def rec(seq, knobs, cycles):
        return Record(seq=seq, family="wmma", knobs=knobs, status="reverted", score=cycles, kept=False,
                      source_hash=str(seq))
    records = [rec(0, seed.knobs, 1000)]
    singles = agent.propose(History(records, records[0], Objective("cycles", False, ("cycles",))), 20)
    assert len(singles) == 8 and all(p.knobs["change"] for p in singles)
    for i, p in enumerate(singles, 1):  # dram latency buys nothing here; the rest do something
        records.append(rec(i, p.knobs, 1000 if p.knobs["change"].startswith("dram_latency") else 1000 - i))
    h = History(records, records[0], Objective("cycles", False, ("cycles",)))
    later = agent.propose(h, 6)
    assert later and all(p.knobs["phase"] == "D" and "change" not in p.knobs for p in later)
    assert all(p.knobs["arch"]["dram_latency"] == stock["dram_latency"] for p in later)
    assert any(p.knobs["arch"] != stock for p in later) and all(p.knobs["kernel"] == kernel for p in later)


def test_phase_d_stays_within_the_area_budget():
    """Every architecture phase D proposes fits `harness.arch.budget.area_pct`; a single change that
    does not is listed with its cost instead of being simulated."""
    from autodiscovery.interfaces import History, Objective, Record
    from harnesses.accelsim.costs import estimate

    c = campaigns.load("edge-codesign", [*AT_512, "agent.codesign.phases={B: 0, C: 0, D: 16, E_kernels: 1, E_archs: 1}",
                                         "harness.arch.budget.area_pct=5"])
    agent = CodesignAgent(c)
    seed = agent.seed_proposal()

    def rec(seq, knobs, cycles):
        return Record(seq=seq, family="wmma", knobs=knobs, status="reverted", score=cycles, kept=False,
                      source_hash=str(seq))
    records = [rec(0, seed.knobs, 1000)]
    obj = Objective("cycles", False, ("cycles",))
    singles = agent.propose(History(records, records[0], obj), 20)
    left_out = {o["change"]: o for o in singles[0].knobs["over_budget"]}
    # +5%: twice the registers (+9.9%), twice the tensor throughput (+11%) and DRAM latency 100 (+6.75%)
    # do not fit; GTO, 64 banks, tensor latency 16 and L2 ROP 120 do.
    assert set(left_out) == {"registers_per_sm=131072", "tensor_initiation=8", "dram_latency=100"}
    assert left_out["registers_per_sm=131072"]["area_pct"] == pytest.approx(9.9)
    assert {p.knobs["change"] for p in singles} >= {"scheduler=gto", "shmem_banks=64", "l2_rop_latency=120"}
    for i, p in enumerate(singles, 1):
        records.append(rec(i, p.knobs, 1000 - i))
    later = agent.propose(History(records, records[0], obj), 8)
    assert later and all("change" not in p.knobs for p in later)
    for p in [*singles, *later]:
        assert estimate(Architecture(**p.knobs["arch"]))["area_pct"] <= 5 and p.rejected is None


def test_a_power_budget_bounds_phase_d_and_the_report_draws_both_fronts(tmp_path):
    """With `harness.arch.budget.power_pct` set (and no area limit), every design phase D simulates fits
    the power budget, and the report's fronts are cycles against area and against power."""
    from replay import SimReplay, offline_agent

    from autodiscovery.running.driver import Driver
    from autodiscovery.store import Store
    from harnesses.accelsim.costs import estimate

    c = campaigns.load("edge-codesign", [*AT_512, "agent.codesign.phases={B: 2, C: 1, D: 8, E_kernels: 1, E_archs: 1}",
                                         "harness.arch.budget.area_pct=null", "harness.arch.budget.power_pct=4"])
    store = Store(tmp_path / "power.db")
    Driver(c, store, SimReplay(), offline_agent(c, tmp_path), workers=2).new_run({"gpu": "simulated"})
    data = accelsim_report.phases(store, 1)
    assert all(p["power_pct"] <= 4 for p in data["pareto"]["points"])
    # +9% power for DRAM latency 100, +13.2% for twice the registers: listed, not simulated.
    assert {"dram_latency=100", "registers_per_sm=131072"} <= {o["change"] for o in data["over_budget"]}
    assert all("power" in o["why"] for o in data["over_budget"])
    for cost in ("area", "power"):
        front = data["pareto"]["front" if cost == "area" else "power_front"]
        assert front and all(a[f"{cost}_pct"] <= b[f"{cost}_pct"] and a["cycles"] > b["cycles"]
                             for a, b in zip(front, front[1:]))
        assert all(p["power_pct"] == estimate(Architecture(**p["arch"]))["power_pct"] for p in front)
    from rich.console import Console

    console = Console(width=400, record=True, file=open(os.devnull, "w"))
    console.print(accelsim_report.phases_table(1, data))
    text = console.export_text()
    assert "cycles against area: the Pareto front (budget on area: none)" in text
    assert "cycles against power: the Pareto front (budget +4% power)" in text


def test_a_model_check_run_simulates_every_pick_and_stops(tmp_path):
    """`model_trust=1.01` with no phase D: a run that only checks the model on its picks (held-out
    points), ending after phase C."""
    from replay import SimReplay, offline_agent

    from autodiscovery.review import report
    from autodiscovery.running.driver import Driver
    from autodiscovery.store import Store

    c = campaigns.load("edge-codesign", [*AT_512, "agent.codesign.phases={B: 4, C: 4, D: 0, E_kernels: 1, E_archs: 1}",
                                         "agent.codesign.model_trust=1.01", "agent.codesign.shortlist=8"])
    store = Store(tmp_path / "check.db")
    Driver(c, store, SimReplay(), offline_agent(c, tmp_path), workers=2).new_run({"gpu": "simulated"})
    shown = report.show_run(store, 1)
    phases = [x["knobs"]["phase"] for x in shown["candidates"]]
    assert phases == ["A"] + ["B"] * 4 + ["C"] * 4 and shown["status"] == "finished"
    m = accelsim_report.phases(store, 1)["model"]
    assert not m["trusted"] and sum(p["held_out"] == "phase-C pick" for p in m["points"]) == 4


def test_phase_d_says_which_changes_its_budget_never_tried(tmp_path):
    """A phase-D budget smaller than its one-change-at-a-time list: the changes left out are listed in
    the attribution table as never simulated, not silently missing."""
    from autodiscovery.interfaces import History, Objective, Record

    c = campaigns.load("edge-codesign", [*AT_512, "agent.codesign.phases={B: 0, C: 0, D: 3, E_kernels: 1, E_archs: 1}"])
    agent = CodesignAgent(c)
    seed = agent.seed_proposal()
    records = [Record(seq=0, family="wmma", knobs=seed.knobs, status="kept", score=1000, kept=True, source_hash="0")]
    obj = Objective("cycles", False, ("cycles",))
    singles = agent.propose(History(records, records[0], obj), 8)
    every = [p.knobs["change"] for p in agent._ablation(seed.knobs["kernel"], dict(agent.arch.default))]
    assert len(every) > 3 and [p.knobs["change"] for p in singles] == every[:3]
    assert singles[0].knobs["not_tried"] == every[3:]

    rows = [{"phase": "D", "change": ch, "not_tried": p.knobs.get("not_tried")} for ch, p in zip(every, singles)]
    left = accelsim_report.not_tried(rows, 3)
    assert [o["change"] for o in left] == every[3:]
    assert all(o["why"] == "not simulated: phase D's budget (3 simulations) ran out first" for o in left)
    table = accelsim_report.phases_table(1, {"phases": [], "baseline_cycles": None, "attribution": [],
                                              "not_tried": left})
    attribution = next(s for s in table if s.id == "attribution")
    assert [r[1] for r in attribution.rows] == every[3:] and all(r[2] == "not simulated" for r in attribution.rows)


@pytest.mark.parametrize("both, phase, says", [
    (800, "E", "super-additive: the cross beats the sum of its parts by 11.1%"),
    (900, "D", "additive: the cross is the sum of its parts"),
    (950, "E", "not super-additive: the cross is +5.6% against the sum of its parts"),
])
def test_the_cross_caption_says_what_the_numbers_say(both, phase, says):
    base = {"kernel": {"k": 0}, "kernel_cycles": 1000}
    stock = {"a": 0}
    rows = [{"phase": "A", "kernel": {"k": 0}, "arch": stock, "kernel_cycles": 1000, "seq": 0},
            {"phase": "B", "kernel": {"k": 1}, "arch": stock, "kernel_cycles": 950, "seq": 1},
            {"phase": "D", "kernel": {"k": 1}, "arch": {"a": 1}, "kernel_cycles": both if phase == "D" else 990, "seq": 2},
            {"phase": "E", "kernel": {"k": 0}, "arch": {"a": 1}, "kernel_cycles": 950, "seq": 3},
            {"phase": "E", "kernel": {"k": 2}, "arch": {"a": 1}, "kernel_cycles": both if phase == "E" else 999, "seq": 4}]
    c = accelsim_report.cross(rows, base, stock)
    assert c["additive"] == 900 and c["both"] == both and c["phase"] == phase
    caption = accelsim_report.cross_caption(c)
    assert caption.startswith(says)
    assert ("phase D's own #2" in caption) == (phase == "D")


def test_kernels_that_launch_the_same_work_are_one_point():
    """At 512³ with 64×64 tiles there are 64 tiles: PERSISTENT 64, 128 and 256 launch one block a tile, as
    0 does; the agent proposes none of them once one was simulated (TPE is told the shared result)."""
    from autodiscovery.interfaces import History, Objective, Record

    c = campaigns.load("edge-codesign", [*AT_512, "agent.codesign.phases={B: 40, C: 0, D: 0, E_kernels: 1, E_archs: 1}"])
    agent = CodesignAgent(c)
    seed = agent.seed_proposal()
    kernel, stock = seed.knobs["kernel"], seed.knobs["arch"]
    assert (kernel["BLOCK_M"], kernel["BLOCK_N"], kernel["PERSISTENT"]) == (64, 64, 64)
    same = {agent.key(kernel | {"PERSISTENT": p}, stock) for p in (0, 64, 128, 256)}
    assert len(same) == 1 and agent.key(kernel | {"PERSISTENT": 32}, stock) not in same
    records = [Record(seq=0, family="wmma", knobs=seed.knobs, status="kept", score=1000, kept=True, source_hash="0")]
    moves = agent.propose(History(records, records[0], Objective("cycles", False, ("cycles",))), 40)
    assert len(moves) > 10
    keys = [agent.key(p.knobs["kernel"], p.knobs["arch"]) for p in moves if p.rejected is None]
    assert agent.key(kernel, stock) not in keys and len(keys) == len(set(keys))


def test_phase_d_pairs_the_best_changes_one_value_a_knob_within_the_budget():
    """The combined points come from the three best single changes, one value a knob (the better
    scheduler only); the pairs with the largest sum of savings first, then all three together, each
    only where the design fits the budget; what does not fit is named. Where fewer than three changes
    bought anything, those that cost least alone fill the places; a change with no effect never does."""
    from harnesses.accelsim.agent import combinations

    singles = [("scheduler", "gto", 900), ("scheduler", "two_level_active", 880), ("shmem_banks", 64, 850),
               ("l2_rop_latency", 120, 950), ("tensor_latency", 16, 990), ("dram_latency", 100, 1000),
               ("registers_per_sm", 131072, 1010)]
    points, over = combinations(singles, 1000, 3)
    assert points == [[("shmem_banks", 64), ("scheduler", "two_level_active")],
                      [("shmem_banks", 64), ("l2_rop_latency", 120)],
                      [("scheduler", "two_level_active"), ("l2_rop_latency", 120)],
                      [("shmem_banks", 64), ("scheduler", "two_level_active"), ("l2_rop_latency", 120)]]
    assert over == []
    no_banks_with_rop = lambda changes: {"shmem_banks", "l2_rop_latency"} - {k for k, _ in changes} != set()  # noqa: E731
    points, over = combinations(singles, 1000, 3, no_banks_with_rop)
    assert over == [[("shmem_banks", 64), ("l2_rop_latency", 120)]]
    assert [("shmem_banks", 64), ("l2_rop_latency", 120)] not in points and all(no_banks_with_rop(p) for p in points)
    assert len(points) == 2  # together, the third change does not fit: no point of three
    assert combinations(singles, 1000, 1) == ([], [])  # one change: nothing to pair
    assert combinations([("scheduler", "gto", 1000)], 1000, 3) == ([], [])  # no effect: never paired
    # One change bought something (the banks); the two that cost least alone join it, not the knob
    # with no effect (DRAM latency) nor the scheduler's worse value (two-level) nor the costliest.
    hurt = [("shmem_banks", 64, 850), ("scheduler", "gto", 1004), ("scheduler", "two_level_active", 1021),
            ("tensor_latency", 16, 1017), ("dram_latency", 100, 1000), ("l2_rop_latency", 120, 1090)]
    points, over = combinations(hurt, 1000, 3)
    assert points == [[("shmem_banks", 64), ("scheduler", "gto")],
                      [("shmem_banks", 64), ("tensor_latency", 16)],
                      [("scheduler", "gto"), ("tensor_latency", 16)],
                      [("shmem_banks", 64), ("scheduler", "gto"), ("tensor_latency", 16)]] and over == []


def test_the_report_sets_each_combined_point_against_the_sum_of_its_singles():
    stock = {"a": 0, "b": 0, "c": 0}
    kernel = {"k": 1}
    row = lambda seq, phase, arch, cycles, **kw: {  # noqa: E731
        "seq": seq, "phase": phase, "kernel": kernel, "arch": {**stock, **arch}, "cycles": cycles,
        "change": kw.get("change"), "changes": kw.get("changes"), "combined_left_out": kw.get("left"),
        "area_pct": 1.0, "power_pct": 1.0}
    rows = [row(0, "B", {}, 1000), row(1, "D", {"a": 1}, 900, change="a=1"), row(2, "D", {"b": 1}, 950, change="b=1"),
            row(3, "D", {"a": 1, "b": 1}, 800, changes=["a=1", "b=1"],
                left=[{"changes": ["a=1", "c=1"], "why": "area +12.0% over the budget of +10%"}])]
    data = accelsim_report.combined(rows, accelsim_report.attribution(rows, stock))
    (p,) = data["points"]
    assert (p["additive"], p["interaction"]) == (850, pytest.approx(-0.05))
    assert data["left_out"] == [{"changes": ["a=1", "c=1"], "why": "area +12.0% over the budget of +10%"}]
    table = accelsim_report.phases_table(1, {"phases": [], "baseline_cycles": None, "attribution": [],
                                              "combined": data})
    section = next(s for s in table if s.id == "combined")
    assert [r[1] for r in section.rows] == ["a=1 + b=1", "a=1 + c=1"]
    assert section.rows[0][5] == "-5.0%" and section.rows[1][2] == "not simulated: area +12.0% over the budget of +10%"


def test_a_budget_that_ends_the_campaign_early_names_the_phases_it_skipped(tmp_path):
    """A candidate budget that stops the campaign after phase B: the phase table has a row for each phase
    not reached, saying the run stopped first and why, and its caption speaks of no phase it does not show."""
    from replay import SimReplay, offline_agent

    from autodiscovery.review import report
    from autodiscovery.running.driver import Driver
    from autodiscovery.store import Store

    c = campaigns.load("edge-codesign", [*AT_512, "harness.parallel=2", PHASES_512, "budget.candidates=13"])
    store = Store(tmp_path / "cd.db")
    run_id = Driver(c, store, SimReplay(), offline_agent(c, tmp_path), workers=2).new_run({"gpu": "simulated"})
    data = accelsim_report.phases(store, run_id)
    assert [r["phase"] for r in data["phases"]] == ["A", "B"]
    assert [s["phase"] for s in data["skipped"]] == ["C", "D", "E"]
    stop = report.run_row(store, run_id)["stop_reason"]
    (table,) = [s for s in accelsim_report.phases_table(run_id, data) if s.id == "phases"]
    skipped = [r for r in table.rows if r[1] == "–"]
    assert [r[0] for r in skipped] == ["C model picks", "D architecture only", "E kernel × architecture"]
    assert all(r[3].startswith("not reached: the run stopped first (") for r in skipped), skipped
    assert "budget" in stop and stop in skipped[0][3]
    assert "E's best" not in table.caption and "phase D" not in table.caption


@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_report_tables_break_no_word_at_any_width(width):
    """`report` of the shipped 512³ run at 80, 100 and 160 columns: every word of every cell of the
    co-design tables is printed whole on one line (a table whose columns cannot fit without breaking a
    word is printed as a record a row), and no line is wider than the terminal."""
    from typer.testing import CliRunner

    from autodiscovery.cli import app
    from autodiscovery.review import report
    from autodiscovery.store import Store

    db = Path(__file__).parent.parent / "docs" / "codesign-512" / "run.db"
    sections, _ = report.sections(Store(db, create=False, read_only=True), 1)
    res = CliRunner().invoke(app, ["--db", str(db), "report", "1"], env={"COLUMNS": str(width)}, terminal_width=width)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    shown = [line for line in lines if not line.startswith("each step's hypothesis")]
    assert max(len(line) for line in shown) <= width
    words = {w for sec in sections for row in sec.rows for cell in row for w in str(cell).split() if len(w) > 3}
    broken = [w for w in words if not any(w in line for line in lines)]
    assert not broken, broken
