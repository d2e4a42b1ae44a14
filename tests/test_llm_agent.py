"""The LLM agent against a scripted OpenAI-compatible server on 127.0.0.1 (real HTTP, the real client)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import needs_nvcc
from llm_server import ScriptedServer, edit_lines, fail, say, stall
from typer.testing import CliRunner

from autodiscovery.cli import app
from autodiscovery.store import LlmCall, Store

cli = CliRunner()
FAST = ["--set", "agent.llm.backoff_s=0.01", "--set", "agent.llm.timeout_s=1"]
IN_ORDER = ["--set", "agent.llm.concurrency=1", "--set", "agent.llm.overlap=false"]
"""For tests whose script is answered in the order the requests are made."""

UNROLL = """Hypothesis: unrolling the k loop by four lets the compiler overlap the loads of consecutive steps.

<<<<<<< SEARCH
  for (int k = 0; k < K; ++k) {
=======
  #pragma unroll 4
  for (int k = 0; k < K; ++k) {
>>>>>>> REPLACE
"""
WRONG_SEARCH = """Hypothesis: hoist the row offset out of the loop.

<<<<<<< SEARCH
  for (int kk = 0; kk < K; kk += 1) {
=======
  for (int k = 0; k < K; k += 1) {
>>>>>>> REPLACE
"""
BREAKS = """Hypothesis: start the accumulator from a named constant.

<<<<<<< SEARCH
  float acc = 0.0f;
=======
  float acc = undefined_value;
>>>>>>> REPLACE
"""
REPAIR = """The constant does not exist; use a literal.

<<<<<<< SEARCH
  float acc = undefined_value;
=======
  float acc = 0.0f;  // fp32 accumulator
>>>>>>> REPLACE
"""


def run(server: ScriptedServer, db, *extra):
    return cli.invoke(app, ["run", "--model", "scripted", "--base-url", server.url, "--dry-run", "--db", str(db),
                            "--quiet", *FAST, *IN_ORDER, *extra], env={"OPENAI_API_KEY": "test-key"})


@needs_nvcc
def test_scripted_session_edits_reflects_retries_and_repairs(tmp_path):
    script = [
        fail(429, "slow down"), say("I think we should use tensor cores."),  # 429, then a reply with no edit
        say(WRONG_SEARCH), say(UNROLL),                                       # a block that does not match, then a good one
        fail(500, "upstream broke"), stall(2.0), say(BREAKS),                 # 500 and a timeout, retried
        say(REPAIR),                                                          # the build failed: one repair turn
    ]
    db = tmp_path / "llm.db"
    with ScriptedServer(script) as server:
        res = run(server, db, "--set", "budget.candidates=3", "--set", f"harness.cache_dir={tmp_path / 'cache'}")
        requests = server.requests
    assert res.exit_code == 0, res.output
    assert "dry run" in res.output and "3 candidates built" in res.output

    shown = json.loads(cli.invoke(app, ["show", "1", "--json", "--db", str(db)]).output)
    cands = shown["candidates"]
    assert [c["status"] for c in cands] == ["built", "built", "built"]
    assert cands[1]["proposer"] == "llm:scripted" and "#pragma unroll 4" in cands[1]["source"]
    assert cands[1]["hypothesis"].startswith("unrolling the k loop by four")
    assert "fp32 accumulator" in cands[2]["source"] and "undefined_value" not in cands[2]["source"]

    calls = shown["llm_calls"]
    assert len(calls) == 8 and all(c["model"] == "scripted" for c in calls)
    errors = [c["error"] for c in calls]
    assert errors[0].startswith("RateLimitError") and errors[4].startswith("InternalServerError")
    assert errors[5].startswith("APITimeoutError")
    assert all(e is None for i, e in enumerate(errors) if i not in (0, 4, 5))
    ok = [c for c in calls if c["error"] is None]
    assert all(c["input_tokens"] == 1000 and c["output_tokens"] == 200 and c["latency_ms"] > 0 for c in ok)
    with Store(db).session() as s:
        linked = {c.candidate_id for c in s.query(LlmCall)}
    assert linked == {cands[1]["id"], cands[2]["id"]}
    (table,) = shown["llm_summary"]  # what `show` draws: calls, failures by kind, recoveries
    assert table["calls"] == 8 and table["ok"] == 5 and table["recovered"] == 3 and table["proposals"] == 2
    assert table["errors"] == {"RateLimitError": 1, "InternalServerError": 1, "APITimeoutError": 1}
    assert table["input_tokens"] == 5000 and table["output_tokens"] == 1000

    # What the model was told back: no usable edit, the block that failed with the nearest lines, the
    # compile error with its repair request. The prompt carried the task, the seed and its manifest.
    first = requests[0]["messages"]
    assert first[0]["role"] == "system" and "@manifest" in first[0]["content"]
    assert "C = A · Bᵀ" in first[0]["content"] and "extern \"C\" __global__" in first[1]["content"]
    assert "no usable edit" in requests[2]["messages"][-1]["content"]
    told = requests[3]["messages"][-1]["content"]
    assert "SEARCH block 1 does not match" in told and "for (int k = 0; k < K; ++k) {" in told
    repair = requests[7]["messages"][-1]["content"]
    assert "does not build" in repair and "undefined_value" in repair


@needs_nvcc
def test_no_usable_edit_is_never_skipped_silently(tmp_path):
    db = tmp_path / "bad.db"
    with ScriptedServer([say("Let us think about it.")] * 6) as server:
        res = run(server, db, "--set", "budget.candidates=5", "--set", "agent.llm.batch=1", "--set", "agent.llm.reflections=1",
                  "--set", f"harness.cache_dir={tmp_path / 'cache'}")
    assert res.exit_code == 0, res.output
    shown = json.loads(cli.invoke(app, ["show", "1", "--json", "--db", str(db)]).output)
    rejected = [c for c in shown["candidates"] if c["status"] == "rejected"]
    assert len(rejected) == 3 and "no usable candidate in 3 rounds" in json.dumps(shown["stop_reason"])
    one = cli.invoke(app, ["show", f"1/{rejected[0]['seq']}", "--json", "--db", str(db)])
    assert "no usable edit" in json.loads(one.output)["evaluations"][0]["log"]
    assert len(shown["llm_calls"]) == 6


@needs_nvcc
def test_token_budget_stops_the_run(tmp_path):
    db = tmp_path / "tokens.db"
    script = [say(UNROLL), say(BREAKS), say(REPAIR)]
    with ScriptedServer(script) as server:
        res = run(server, db, "--set", "budget.tokens=1500", "--set", "agent.llm.batch=1",
                  "--set", f"harness.cache_dir={tmp_path / 'cache'}")
    assert res.exit_code == 0, res.output
    # 1200 tokens a call: the run stops once the calls made pass the budget (how many were asked for
    # ahead of the stop depends on the machine's pace)
    spent = re.search(r"budget spent: (\d+) LLM tokens", res.output)
    assert spent and int(spent.group(1)) >= 1500 and int(spent.group(1)) % 1200 == 0


def test_unreachable_endpoint_is_one_line(tmp_path):
    with ScriptedServer([]) as server:
        url = server.url
    res = cli.invoke(app, ["run", "--model", "m", "--base-url", url, "--dry-run", "--db", str(tmp_path / "x.db"),
                           *FAST], env={"OPENAI_API_KEY": "k"})
    assert res.exit_code == 2 and "is unreachable (after 5 attempts)" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_rejected_key_and_unknown_model(tmp_path):
    with ScriptedServer([], key="the-right-key") as server:
        res = cli.invoke(app, ["run", "--model", "scripted", "--base-url", server.url, "--dry-run",
                               "--db", str(tmp_path / "x.db")], env={"OPENAI_API_KEY": "a-wrong-key"})
        assert res.exit_code == 2 and "rejected the key in OPENAI_API_KEY" in res.output
        res = cli.invoke(app, ["run", "--model", "nope", "--base-url", server.url, "--dry-run",
                               "--db", str(tmp_path / "x.db")], env={"OPENAI_API_KEY": "the-right-key"})
        assert res.exit_code == 2 and "model(s) nope not served" in res.output


def preflight_with(ping_script: list[dict], retries: int = 4):
    """The preflight against a server that answers its pings with `ping_script` first: (error or None,
    the pings it sent)."""
    from autodiscovery import campaign as campaigns
    from autodiscovery.agents.client import LlmClient, LlmError

    with ScriptedServer([], ping_script=ping_script) as server:
        c = campaigns.load("hopper-gemm", ["agent.kind=llm", f"agent.llm.base_url={server.url}",
                                           "agent.llm.models=[{name: scripted}]", "agent.llm.backoff_s=0.01",
                                           f"agent.llm.retries={retries}"])
        try:
            LlmClient(c.agent.llm).preflight()
        except LlmError as exc:
            return str(exc), server.pings
        return None, server.pings


def test_the_preflight_retries_what_a_request_retries():
    """An endpoint that rate-limits or fails the first pings (429, 5xx) is retried with backoff, as every
    request is; only when the retries are spent does the run stop, in one line."""
    error, pings = preflight_with([fail(429, "slow down"), fail(503, "overloaded"), fail(429, "slow down")])
    assert error is None and len(pings) == 4
    error, pings = preflight_with([fail(429, "slow down")] * 3, retries=2)
    assert len(pings) == 3 and "\n" not in error
    assert "scripted" in error and "answered 429 after 3 attempts" in error and "slow down" in error


def test_the_preflight_stops_at_once_on_a_refusal_no_retry_helps():
    for status, said in ((400, "answered 400"), (401, "rejected the key"), (404, "answered 404")):
        error, pings = preflight_with([fail(status, "no such thing")])
        assert len(pings) == 1 and said in error and "\n" not in error


def test_models_are_drawn_by_weight():
    from autodiscovery import campaign as campaigns
    from autodiscovery.agents.llm import LlmAgent

    c = campaigns.load("hopper-gemm", ["agent.kind=llm", "agent.llm.base_url=http://127.0.0.1:1/v1",
                                       "agent.llm.models=[{name: a, weight: 3}, {name: b, weight: 1}]"])
    agent = LlmAgent(c)
    picks = [agent.pick().name for _ in range(400)]
    assert 0.65 < picks.count("a") / 400 < 0.85


def test_each_model_gets_the_request_fields_it_accepts():
    """OpenAI's reasoning models refuse `max_tokens` and `temperature` (HTTP 400, as the scripted server
    answers for them); the client sends them `max_completion_tokens` and no temperature, chat models
    `max_tokens` and the temperature, and a model's `params` override either and add body fields."""
    from autodiscovery import campaign as campaigns
    from autodiscovery.agents.client import LlmClient

    refuses = {"gpt-5-mini": {"max_tokens": "max_completion_tokens", "temperature": ""}}
    script = [say("first"), say("second"), say("third")]
    with ScriptedServer(script, models=("gpt-5-mini", "chat", "local"), refuses=refuses) as server:
        c = campaigns.load("hopper-gemm", [
            "agent.kind=llm", f"agent.llm.base_url={server.url}", "agent.llm.temperature=0.3",
            "agent.llm.models=[{name: gpt-5-mini, params: {reasoning_effort: low}}, {name: chat},"
            " {name: local, params: {token_limit: max_completion_tokens, temperature: 0.9,"
            " extra_body: {options: {num_ctx: 32768}}}}]"])
        client = LlmClient(c.agent.llm)
        client.preflight()
        replies = [client.chat(m, [{"role": "user", "content": "hi"}])[0] for m in c.agent.llm.models]
        assert replies == ["first", "second", "third"]
        reasoning, chat, local = server.requests
    assert reasoning["max_completion_tokens"] == c.agent.llm.max_tokens and "max_tokens" not in reasoning
    assert "temperature" not in reasoning and reasoning["reasoning_effort"] == "low"
    assert chat["max_tokens"] == c.agent.llm.max_tokens and chat["temperature"] == 0.3
    assert "max_completion_tokens" not in chat and "reasoning_effort" not in chat
    assert local["max_completion_tokens"] == c.agent.llm.max_tokens and local["temperature"] == 0.9
    assert local["options"] == {"num_ctx": 32768}


def test_a_refused_parameter_is_one_line_naming_model_and_parameter():
    from autodiscovery import campaign as campaigns
    from autodiscovery.agents.client import LlmClient, LlmError

    refuses = {"gpt-5-mini": {"max_tokens": "max_completion_tokens"}}
    with ScriptedServer([say("never")], models=("gpt-5-mini",), refuses=refuses) as server:
        c = campaigns.load("hopper-gemm", [
            "agent.kind=llm", f"agent.llm.base_url={server.url}",
            "agent.llm.models=[{name: gpt-5-mini, params: {token_limit: max_tokens}}]"])
        client = LlmClient(c.agent.llm)
        try:
            client.chat(c.agent.llm.models[0], [{"role": "user", "content": "hi"}])
        except LlmError as exc:
            text = str(exc)
        else:
            raise AssertionError("a refused parameter went through")
    assert "\n" not in text and "gpt-5-mini" in text and "400" in text and "'max_tokens'" in text


def test_the_llm_agent_has_its_own_batch():
    from autodiscovery import campaign as campaigns
    from autodiscovery.agents.llm import LlmAgent

    c = campaigns.load("hopper-gemm", ["agent.kind=llm", "agent.llm.base_url=http://127.0.0.1:1/v1",
                                       "agent.llm.models=[{name: a}]", "agent.llm.batch=3",
                                       "agent.search.batch=9"])
    assert LlmAgent(c).batch == 3


@needs_nvcc
def test_the_preflight_asks_each_model_with_the_runs_own_request_fields(tmp_path):
    """A model that refuses one of the run's request fields stops the run before any work, in one line
    naming the model and the field; with the fields it accepts, the same run starts."""
    refuses = {"gpt-5-mini": {"max_tokens": "max_completion_tokens", "temperature": ""}}
    with ScriptedServer([say(UNROLL)] * 3, models=("gpt-5-mini",), refuses=refuses) as server:
        forced = cli.invoke(app, [
            "run", "--base-url", server.url, "--dry-run", "--db", str(tmp_path / "a.db"), "--quiet", *FAST,
            "--set", "agent.kind=llm", "--set", "agent.llm.models=[{name: gpt-5-mini, params: {token_limit: max_tokens}}]",
            "--set", "budget.candidates=2"], env={"OPENAI_API_KEY": "test-key"})
        assert forced.exit_code == 2 and "gpt-5-mini" in forced.output and "'max_tokens'" in forced.output
        assert "Traceback" not in forced.output and server.requests == []
        ok = cli.invoke(app, ["run", "--model", "gpt-5-mini", "--base-url", server.url, "--dry-run", "--db",
                              str(tmp_path / "b.db"), "--quiet", *FAST, "--set", "budget.candidates=2",
                              "--set", "agent.llm.batch=1", "--set", f"harness.cache_dir={tmp_path / 'cache'}"],
                        env={"OPENAI_API_KEY": "test-key"})
        assert ok.exit_code == 0, ok.output
        assert server.pings[-1]["max_completion_tokens"] == 16 and "temperature" not in server.pings[-1]
        assert server.requests and all("max_tokens" not in r for r in server.requests)


@needs_nvcc
def test_a_refusal_mid_run_ends_it_failed_and_a_fixed_resume_goes_on(tmp_path):
    """A 400 that no retry helps (a context overflow) ends the run `failed` with the reason; what was
    recorded stays; `--resume --set agent.llm...` continues the same run."""
    db = tmp_path / "mid.db"
    overflow = "This model's maximum context length is 8192 tokens. However, you requested 12000 tokens."
    with ScriptedServer([say(UNROLL), fail(400, overflow)]) as server:
        res = run(server, db, "--set", "budget.candidates=4", "--set", "agent.llm.batch=1",
                  "--set", f"harness.cache_dir={tmp_path / 'cache'}")
        assert res.exit_code == 2 and "answered 400" in res.output and "Traceback" not in res.output
    shown = json.loads(cli.invoke(app, ["show", "1", "--json", "--db", str(db)]).output)
    assert shown["status"] == "failed" and "maximum context length" in shown["stop_reason"]
    before = len(shown["candidates"])
    assert before >= 2  # the seed and the first proposal are kept
    with ScriptedServer([say(UNROLL.replace("unroll 4", "unroll 2"))] * 4) as server:
        res = cli.invoke(app, ["run", "--resume", "1", "--db", str(db), "--quiet", *FAST, *IN_ORDER,
                               "--set", f"agent.llm.base_url={server.url}", "--set", "agent.llm.context_tokens=8192",
                               "--set", "agent.llm.max_tokens=2000"], env={"OPENAI_API_KEY": "test-key"})
        assert res.exit_code == 0, res.output
    shown = json.loads(cli.invoke(app, ["show", "1", "--json", "--db", str(db)]).output)
    assert shown["status"] == "finished" and len(shown["candidates"]) > before


# ---- a run measured by a harness that replays evaluations: verdicts, parents, side-by-side requests ----
def edit_to(score: float, note: str = "", delay: float = 0.0):
    """A scripted reply that edits whatever kernel the prompt asks to change: it gains (or changes) a
    first line the replaying harness scores at `score`."""
    def change(kernel: str) -> str:
        kept = [x for x in kernel.splitlines() if "// replay-score:" not in x]
        return "\n".join([f"// replay-score: {score}", *kept])
    return edit_lines(note or f"this change scores {score}.", change, delay)


def replay_harness(**kw):
    from replay import ReplayHarness

    from autodiscovery import campaign as campaigns
    from autodiscovery.agents.search import SearchAgent

    return ReplayHarness(SearchAgent(campaigns.load("hopper-gemm")).space, **kw)


def llm(server, *extra) -> list[str]:
    return ["agent.kind=llm", "agent.llm.models=[{name: scripted}]", f"agent.llm.base_url={server.url}",
            "agent.llm.backoff_s=0.01", "agent.llm.timeout_s=5", *extra]


def test_verdicts_flow_back_into_the_next_prompt(tmp_path, monkeypatch):
    from autodiscovery.review import report
    from autodiscovery.running import runner

    monkeypatch.setenv("OPENAI_API_KEY", "k")
    store = Store(tmp_path / "r.db")
    script = [edit_to(0.5), edit_to(0.45), edit_to(0.6)]
    with ScriptedServer(script) as server:
        run_id = runner.run_campaign("hopper-gemm", llm(server, "budget.candidates=4", "agent.llm.batch=1",
                                                 "agent.llm.exploit=1", "agent.llm.concurrency=1",
                                                 "agent.llm.overlap=false"), store, harness=replay_harness())
        prompts = [r["messages"][1]["content"] for r in server.requests]
    assert len(prompts) == 3
    # the second request knows the first was kept, by how much, and what it changed
    assert "- #1 naive, 0.500× cuBLAS" in prompts[1].split("## How the best")[1]
    assert re.search(r"- #1 kept, 0\.500× cuBLAS.*made from #0", prompts[1])
    assert "+// replay-score: 0.5\n" in prompts[1]
    assert "## The kernel to change: #1, the incumbent" in prompts[1]
    # the third, that the second was slower and why it was reverted
    attempt = prompts[2].split("- #2 ")[1].split("\n- #")[0]
    assert attempt.startswith("reverted, 0.450× cuBLAS") and "Verdict: 0.450× cuBLAS does not beat" in attempt
    assert "  -// replay-score: 0.5\n  +// replay-score: 0.45\n" in attempt
    rows = report.lineage(store, run_id)
    assert [r["seq"] for r in rows] == [0, 1, 3] and rows[-1]["score"] == pytest.approx(0.6)


def test_a_proposal_from_another_parent_is_decided_against_the_incumbent(tmp_path, monkeypatch):
    from autodiscovery.review import report
    from autodiscovery.running import runner

    monkeypatch.setenv("OPENAI_API_KEY", "k")
    store = Store(tmp_path / "p.db")
    script = [edit_to(0.5), edit_to(0.49), edit_to(0.7)]  # #2 a near miss of #1; #3 is then built on #2
    with ScriptedServer(script) as server:
        run_id = runner.run_campaign("hopper-gemm", llm(server, "budget.candidates=4", "agent.llm.batch=1",
                                                 "agent.llm.concurrency=1", "agent.llm.overlap=false",
                                                 "agent.llm.exploit=0", "agent.llm.inspirations=1"),
                              store, harness=replay_harness())
        third = server.requests[2]["messages"][1]["content"]
    shown = {c["seq"]: c for c in report.show_run(store, run_id)["candidates"]}
    assert shown[1]["status"] == "kept" and shown[2]["status"] == "reverted"
    # with exploit 0 the third draws a parent other than the incumbent #1: #0 or the near miss #2
    parent = shown[3]["parent_seq"]
    assert parent in (0, 2) and f"## The kernel to change: #{parent}, " in third
    assert "It is measured against the best kernel so far, #1" in third
    assert "### #1" not in third or parent != 1  # the incumbent may inspire; it is not the parent
    assert shown[3]["status"] == "kept" and report.lineage(store, run_id)[-1]["seq"] == 3
    with store.session() as s:
        from autodiscovery.store import Decision

        d = s.query(Decision).filter_by(candidate_id=shown[3]["id"]).one()
        assert d.incumbent_id == shown[1]["id"]  # decided against the incumbent, not against its parent


def test_a_batch_is_asked_side_by_side_while_the_previous_one_is_measured(tmp_path, monkeypatch):
    import time

    from autodiscovery.running import runner

    monkeypatch.setenv("OPENAI_API_KEY", "k")
    store = Store(tmp_path / "c.db")
    evaluations: list[float] = []
    harness = replay_harness(delay_s=0.4, hooks={"evaluate": lambda _n: evaluations.append(time.monotonic())})
    script = [edit_to(0.3 + 0.01 * i, delay=0.3) for i in range(12)]
    with ScriptedServer(script) as server:
        run_id = runner.run_campaign("hopper-gemm", llm(server, "budget.candidates=7", "agent.llm.batch=2",
                                                 "agent.llm.concurrency=2"), store, harness=harness)
        times = list(server.times)
    assert run_id == 1 and len(times) >= 6
    # the two requests of a batch are in flight together
    together = [(a, b) for i, a in enumerate(times) for b in times[i + 1:] if a[0] < b[1] and b[0] < a[1]]
    assert len(together) >= 3
    # and requests are in flight while candidates are being measured (0.4 s each)
    during = [t for t in times if any(t[0] < e + 0.4 and e < t[1] for e in evaluations)]
    assert len(during) >= 2
    shown = json.loads(cli.invoke(app, ["show", "1", "--json", "--db", str(tmp_path / "c.db")]).output)
    # every proposal that cost a request is recorded (also those asked for when the budget ran out)
    linked = sum(1 for c in shown["candidates"] if c["proposer"].startswith("llm:"))
    assert linked == len(times)


def test_reasoning_content_is_never_applied(tmp_path):
    db = tmp_path / "think.db"
    thinking = say("Hypothesis: unroll.\n\nNo edit after all.", reasoning=UNROLL)
    inline = say("<think>\n" + UNROLL + "\n</think>\nHypothesis: none.")
    with ScriptedServer([thinking, inline]) as server:
        res = run(server, db, "--set", "budget.candidates=3", "--set", "agent.llm.batch=1",
                  "--set", "agent.llm.reflections=0", "--set", f"harness.cache_dir={tmp_path / 'cache'}")
    assert res.exit_code == 0, res.output
    shown = json.loads(cli.invoke(app, ["show", "1", "--json", "--db", str(db)]).output)
    assert [c["status"] for c in shown["candidates"][1:]] == ["rejected", "rejected"]
    assert not any("#pragma unroll" in (c["source"] or "") for c in shown["candidates"])


def test_a_long_conversation_is_kept_inside_the_context(tmp_path):
    """Reflections grow the conversation; against an endpoint that refuses what does not fit its
    context, the oldest turns are left out and the first request shortened: no request is refused."""
    from autodiscovery.agents.prompting import tokens

    db = tmp_path / "ctx.db"
    rambling = WRONG_SEARCH + "\n" + "Some long reasoning about the kernel and its memory traffic. " * 120
    script = [say(rambling), say(rambling), say(rambling), say(UNROLL)]
    context = 6000
    with ScriptedServer(script, context=context) as server:
        res = run(server, db, "--set", "budget.candidates=2", "--set", "agent.llm.batch=1",
                  "--set", "agent.llm.reflections=3", "--set", "agent.llm.max_tokens=1500",
                  "--set", f"agent.llm.context_tokens={context}", "--set", f"harness.cache_dir={tmp_path / 'cache'}")
        requests = server.requests
    assert res.exit_code == 0, res.output
    sizes = [sum(tokens(m["content"]) + 4 for m in r["messages"]) + 1500 for r in requests]
    assert len(requests) == 4 and max(sizes) <= context
    assert len(requests[3]["messages"]) < 2 + 2 * 3  # turns were left out
    assert requests[3]["messages"][-1]["content"].startswith("Your edit could not be applied")
    shown = json.loads(cli.invoke(app, ["show", "1", "--json", "--db", str(db)]).output)
    assert "#pragma unroll 4" in shown["candidates"][1]["source"]


def test_a_refusal_is_told_to_the_model_and_a_bug_in_the_harness_is_not(monkeypatch, tmp_path):
    """What the model hears of its kernel before a build: the harness's refusal (an AutoDiscoveryError) in
    its words; any other exception from the harness's check is a bug of ours and goes up, never to the
    model as if its kernel were at fault."""
    from autodiscovery import campaign as campaigns
    from autodiscovery.agents.llm import LlmAgent
    from harnesses.hopper_gemm import HopperGemmHarness

    c = campaigns.load("hopper-gemm", ["agent.kind=llm", "agent.llm.base_url=http://127.0.0.1:1/v1",
                                       "agent.llm.models=[{name: a}]", f"harness.cache_dir={tmp_path}"])
    agent, harness = LlmAgent(c), HopperGemmHarness(c)
    agent.bind(None, 1, harness, {})
    assert agent._build_problem('#include "/etc/passwd"\n').startswith("a quoted #include is refused")

    def broken(source):
        raise KeyError("tile")

    monkeypatch.setattr(harness, "check", broken)
    with pytest.raises(KeyError):
        agent._build_problem("/* @manifest */")
