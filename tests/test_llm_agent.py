"""The LLM agent against a scripted OpenAI-compatible server on 127.0.0.1 (real HTTP, the real client)."""

from __future__ import annotations

import json

from conftest import needs_nvcc
from llm_server import ScriptedServer, fail, say, stall
from typer.testing import CliRunner

from autodiscovery.cli import app
from autodiscovery.store import LlmCall, Store

cli = CliRunner()
FAST = ["--set", "agent.llm.backoff_s=0.01", "--set", "agent.llm.timeout_s=1"]

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
                            "--quiet", *FAST, *extra], env={"OPENAI_API_KEY": "test-key"})


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
    assert "budget spent: 3600 LLM tokens" in res.output


def test_unreachable_endpoint_is_one_line(tmp_path):
    with ScriptedServer([]) as server:
        url = server.url
    res = cli.invoke(app, ["run", "--model", "m", "--base-url", url, "--dry-run", "--db", str(tmp_path / "x.db")],
                     env={"OPENAI_API_KEY": "k"})
    assert res.exit_code == 2 and "is unreachable" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_rejected_key_and_unknown_model(tmp_path):
    with ScriptedServer([], key="the-right-key") as server:
        res = cli.invoke(app, ["run", "--model", "scripted", "--base-url", server.url, "--dry-run",
                               "--db", str(tmp_path / "x.db")], env={"OPENAI_API_KEY": "a-wrong-key"})
        assert res.exit_code == 2 and "rejected the key in OPENAI_API_KEY" in res.output
        res = cli.invoke(app, ["run", "--model", "nope", "--base-url", server.url, "--dry-run",
                               "--db", str(tmp_path / "x.db")], env={"OPENAI_API_KEY": "the-right-key"})
        assert res.exit_code == 2 and "model(s) nope not served" in res.output


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
    from autodiscovery.llm import LlmClient

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
    from autodiscovery.llm import LlmClient, LlmError

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


def test_the_prompt_fits_the_context_by_leaving_out_the_oldest_history():
    from autodiscovery import campaign as campaigns
    from autodiscovery.agents import History, Record
    from autodiscovery.agents.llm import LlmAgent, tokens
    from autodiscovery.interfaces import HarnessBase
    from autodiscovery.llm import LlmError

    def agent(context: int | None) -> LlmAgent:
        c = campaigns.load("hopper-gemm", ["agent.kind=llm", "agent.llm.base_url=http://127.0.0.1:1/v1",
                                           "agent.llm.models=[{name: a}]", "agent.llm.max_tokens=1000",
                                           *([f"agent.llm.context_tokens={context}"] if context else [])])
        a = LlmAgent(c)

        class Facts(HarnessBase):
            def prompt_facts(self) -> dict:
                return {"tolerance": "0.0013"}
        a.harness = Facts()
        return a

    source = "extern \"C\" __global__ void gemm() {}\n" * 20
    records = [Record(seq=i, family="naive", knobs={}, status="reverted" if i else "kept", score=0.001 * (i + 1),
                      kept=i == 0, source_hash=str(i), source=source,
                      hypothesis=f"attempt number {i}: " + "a long explanation of the idea " * 20)
               for i in range(9)]
    history = History(records=records, incumbent=records[0])
    full = agent(None)._prompt(history, records[0])
    assert "attempt number 8" in full and "attempt number 1" in full
    a = agent(1000 + tokens(agent(None)._system()) + tokens(full) // 2)
    fitted = a._prompt(history, records[0])
    assert tokens(fitted) <= tokens(full) // 2
    assert "attempt number 8" in fitted and "attempt number 1:" not in fitted  # the newest stay
    assert source.strip() in fitted  # the incumbent's source is never left out
    try:
        agent(1000 + 300)._prompt(history, records[0])
    except LlmError as exc:
        assert "agent.llm.context_tokens" in str(exc) and "\n" not in str(exc)
    else:
        raise AssertionError("a context too small for the rules and the incumbent went through")


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
        res = cli.invoke(app, ["run", "--resume", "1", "--db", str(db), "--quiet", *FAST,
                               "--set", f"agent.llm.base_url={server.url}", "--set", "agent.llm.context_tokens=8192",
                               "--set", "agent.llm.max_tokens=2000"], env={"OPENAI_API_KEY": "test-key"})
        assert res.exit_code == 0, res.output
    shown = json.loads(cli.invoke(app, ["show", "1", "--json", "--db", str(db)]).output)
    assert shown["status"] == "finished" and len(shown["candidates"]) > before


PROMPT_SNAPSHOT = """## Hardware
NVIDIA H100/H200: 132 SMs, 50 MiB L2, up to 227 KB shared memory and 64K registers per SM,
bf16 tensor cores via wgmma (about 990 TFLOP/s dense at the datasheet clock), TMA, mbarriers, clusters.
cuBLAS does this problem at about 775 TFLOP/s on this GPU.

## The current best kernel (#0: 0.001× cuBLAS, 32 registers, 0 bytes spilled)

```cuda
__global__ void gemm() {}
```

## How it got here (the kept chain)

- #0 0.001× cuBLAS: idea 0

## The last attempts

- #1 [reverted, 0.002× cuBLAS, 32 regs, 0 B spilled] idea 1
- #2 [compile_error, 32 regs, 0 B spilled] idea 2
  error: x
- #3 [reverted, 0.004× cuBLAS, 32 regs, 0 B spilled] idea 3

Propose the next change to the current best kernel: one hypothesis, then the edit.
"""


def test_the_rendered_prompt_is_well_formed():
    """The whole text, as the model reads it: the fence on its own lines, one attempt a line, a failed
    attempt's log under it, sections apart."""
    from autodiscovery import campaign as campaigns
    from autodiscovery.agents import History, Record
    from autodiscovery.agents.llm import LlmAgent
    from autodiscovery.interfaces import HarnessBase

    c = campaigns.load("hopper-gemm", ["agent.kind=llm", "agent.llm.base_url=http://127.0.0.1:1/v1",
                                       "agent.llm.models=[{name: a}]"])
    agent = LlmAgent(c)

    class Facts(HarnessBase):
        def prompt_facts(self) -> dict:
            return {"tolerance": "0.0013"}
    agent.harness = Facts()
    records = [Record(seq=i, family="naive", knobs={}, status="reverted" if i else "kept", score=0.001 * (i + 1),
                      kept=i == 0, source_hash=str(i), source="__global__ void gemm() {}\n", hypothesis=f"idea {i}",
                      build={"registers": 32, "spill_stores": 0}, log="error: x" if i == 2 else "")
               for i in range(4)]
    records[2].score, records[2].status = None, "compile_error"
    assert agent._prompt(History(records=records, incumbent=records[0]), records[0]) == PROMPT_SNAPSHOT
