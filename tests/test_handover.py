"""`run --from RUN[/SEQ]`: a run that starts from any recorded candidate, its lineage linked across runs."""

from __future__ import annotations

import json

import pytest
from llm_server import ScriptedServer
from test_llm_agent import edit_to, llm, replay_harness
from typer.testing import CliRunner

from autodiscovery.cli import app
from autodiscovery.review import report
from autodiscovery.running import runner
from autodiscovery.store import Evaluation, Store

cli = CliRunner()


def test_search_hands_over_to_llm_and_llm_back_to_search(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    store, harness = Store(tmp_path / "h.db"), replay_harness()
    search = runner.run_campaign("hopper-gemm", ["budget.candidates=8", "stop.patience=50", "stop.target=10"], store,
                          harness=harness)
    climbed = report.lineage(store, search)
    best = climbed[-1]
    with store.session() as s:  # as `autodiscovery profile` stores one: the hand-over's prompt shows it
        s.add(Evaluation(candidate_id=best["id"], kind="profile", status="ok", metrics={"profile": {
            "candidate": {"time_us": 200.0, "tensor_pipe_pct": 70.0}, "baseline": {"time_us": 175.0}}}))
    with ScriptedServer([edit_to(2.0, "mark it"), edit_to(2.2, "mark it again")]) as server:
        handed = runner.run_campaign(None, llm(server, "budget.candidates=3", "stop.target=10", "agent.llm.batch=1",
                                        "agent.llm.overlap=false",
                                        "agent.llm.exploit=1"), store, harness=harness, from_=str(search))
        first_prompt = server.requests[0]["messages"][1]["content"]
    shown = report.show_run(store, handed)
    seed = shown["candidates"][0]
    assert seed["source"] == report.show_candidate(store, search, best["seq"])["source"]
    assert seed["proposer"] == f"from {search}/{best['seq']}" and seed["family"] == best["family"]
    assert seed["hypothesis"].startswith(f"Continues run {search} #{best['seq']} (")
    assert shown["config"]["origin"] == f"{search}/{best['seq']}" and shown["agent"] == "llm"
    assert shown["config"]["budget"]["candidates"] == 3 and shown["config"]["stop"]["patience"] == 50
    assert "## The kernel to change: #0, the incumbent" in first_prompt
    assert "| tensor pipe busy (%) | 70.0 | – |" in first_prompt  # the origin's profile: the same kernel
    chain = report.lineage(store, handed)
    assert [(r["run"], r["seq"]) for r in chain] == [(search, r["seq"]) for r in climbed] + [(handed, 0), (handed, 1), (handed, 2)]
    assert chain[-1]["proposer"] == "llm:scripted" and chain[-1]["score"] == pytest.approx(2.2)
    tree = report.tree(store, handed)
    assert tree[0]["seq"] == 0 and tree[0]["depth"] == 0 and len(tree) == 3  # the seed is this run's root

    back = runner.run_campaign(None, ["agent.kind=search", "budget.candidates=4"], store, harness=harness,
                        from_=f"{handed}/2")
    again = report.lineage(store, back)
    assert {r["run"] for r in again} == {search, handed, back}
    assert report.show_run(store, back)["candidates"][0]["proposer"] == f"from {handed}/2"
    out = cli.invoke(app, ["lineage", str(back), "--json", "--db", str(tmp_path / "h.db")])
    assert [r["run"] for r in json.loads(out.output)][0] == search


def test_bad_from_is_one_line(tmp_path, monkeypatch):
    db = str(tmp_path / "x.db")
    Store(db)
    for ref, words in (("9", "no run 9"), ("1/x", "is not RUN or RUN/SEQ"), ("a", "is not RUN or RUN/SEQ")):
        res = cli.invoke(app, ["run", "--from", ref, "--db", db, "--dry-run"])
        assert res.exit_code == 2 and words in res.output and len(res.output.strip().splitlines()) == 1
    res = cli.invoke(app, ["run", "--from", "1", "--resume", "1", "--db", db])
    assert res.exit_code == 2 and "give one of them" in res.output
