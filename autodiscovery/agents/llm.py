"""The LLM agent: reads the history, states a hypothesis, edits a kernel, learns from the verdicts.

Each proposal draws a parent and a few inspirations from the program database (`programs.py`) and is a
short conversation: the prompt (`prompting.py`), a reply with a hypothesis and edits, and, when the
edits do not apply or the result does not build, precise answers back to the model (a few turns at
most). A batch's proposals are requested side by side. Every request is logged to the run's llm_calls
table.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel

from autodiscovery import AutoDiscoveryError
from autodiscovery.agents import edits
from autodiscovery.agents.client import Call, LlmClient, LlmError, LlmModel, LlmSettings
from autodiscovery.agents.programs import Draw, Programs
from autodiscovery.agents.prompting import (
    PromptBuilder,
    environment,
    tokens,
    trim,
)
from autodiscovery.campaign import Campaign, validated
from autodiscovery.interfaces import AgentBase, History, Proposal
from autodiscovery.roles import Checking, Evaluating, declared
from autodiscovery.store import LlmCall, Store

TEMPERATURE_STEP = 0.2
"""A batch's repeated draw (same parent, same inspirations) is asked at a temperature this much higher."""


class LlmAgent(AgentBase):
    name = "llm"
    Settings = LlmSettings

    @classmethod
    def check(cls, settings: BaseModel) -> None:
        if not validated(settings, LlmSettings).models:
            raise ValueError("models: the llm agent needs at least one model (or --model NAME)")

    def __init__(self, campaign: Campaign) -> None:
        self.campaign = campaign
        self.settings = validated(campaign.agent.of(LlmAgent), LlmSettings)
        self.batch = self.settings.batch or 2
        self.overlap = self.settings.overlap
        self.env = environment()
        self.rng = random.Random(self.settings.seed)
        self.store: Store | None = None
        self.run_id: int | None = None
        self.harness: Evaluating | None = None
        """The run's harness, once `bind` gives it."""
        self.fingerprint: dict[str, Any] = {}
        self.client = LlmClient(self.settings, self._log)

    # ---- wiring ---------------------------------------------------------------------------------
    def bind(self, store: Store, run_id: int, harness: Evaluating, fingerprint: dict,
             devices: int | None = None) -> None:
        self.store, self.run_id, self.fingerprint = store, run_id, fingerprint
        self.harness = harness
        if self.settings.batch is None:  # one proposal per device, so a pool of GPUs is kept fed
            self.batch = max(2, devices or declared(harness).parallel)
        self.rng = random.Random(f"{self.settings.seed}:{run_id}")

    def preflight(self) -> None:
        self.client.preflight()

    def _log(self, call: Call) -> int | None:
        if self.store is None:
            return None
        with self.store.session() as s:
            row = LlmCall(run_id=self.run_id, **call.__dict__)
            s.add(row)
            s.flush()
            return row.id

    # ---- proposing ------------------------------------------------------------------------------
    def propose(self, history: History, n: int) -> list[Proposal]:
        """`n` proposals, each from its own draw of parent and inspirations, requested side by side."""
        s = self.settings
        draws = Programs.of(history, near=s.near_miss).draws(self.rng, n, s.inspirations, s.exploit)
        models = [self.pick() for _ in draws]
        concurrency = s.concurrency or self.batch
        if concurrency == 1 or n == 1:
            return [self._one(history, d, m) for d, m in zip(draws, models)]
        with ThreadPoolExecutor(max_workers=min(concurrency, n), thread_name_prefix="llm") as pool:
            return list(pool.map(lambda dm: self._one(history, *dm), zip(draws, models)))

    def _bound(self) -> Evaluating:
        if self.harness is None:
            raise AssertionError("the llm agent asked for its harness before its run bound it")  # a bug of ours
        return self.harness

    def pick(self) -> LlmModel:
        models = self.settings.models
        return self.rng.choices(models, weights=[m.weight for m in models])[0]

    def messages(self, history: History, draw: Draw, reserve: int = 0) -> list[dict]:
        """The opening request of a proposal, fitted (with `reserve` tokens to spare) to the context."""
        return messages(self.settings, self.fingerprint, self._bound(), history, draw, reserve)

    def _one(self, history: History, draw: Draw, model: LlmModel) -> Proposal:
        parent = draw.parent.record
        messages = self.messages(history, draw)
        heat = TEMPERATURE_STEP * draw.variant
        calls: list[int] = []

        def ask(extra: str) -> str:
            if extra:
                messages.append({"role": "user", "content": extra})
            self._fit(messages, history, draw)
            reply, ids = self.client.chat(model, messages, heat)
            calls.extend(ids)
            messages.append({"role": "assistant", "content": reply})
            return reply

        source, hypothesis, failure, rewritten = parent.source, "", "", False
        feedback = ""
        for _turn in range(self.settings.reflections + 1):
            parsed = edits.parse(ask(feedback))
            rewritten = rewritten or parsed.whole is not None
            hypothesis = parsed.hypothesis or hypothesis
            result = edits.apply(source, parsed)
            source = result.source  # blocks that applied stay applied
            if result.ok:
                failure = ""
                break
            failure = result.message
            feedback = self.env.get_template("reflect.j2").render(message=failure)
        proposer = f"llm:{model.name}"
        if failure:
            return Proposal(hypothesis or "(no hypothesis)", "", proposer, rejected=f"no usable edit: {failure}",
                            llm_calls=calls, parent_seq=parent.seq)
        for _turn in range(self.settings.repair_turns if self.harness is not None else 0):
            problem = self._build_problem(source)
            if not problem:
                break
            result = edits.apply(source, edits.parse(ask(self.env.get_template("repair.j2").render(log=problem))))
            if result.ok:
                source = result.source
        # An edit keeps the parent's family; a whole new kernel is a rewrite, whatever it was made from.
        return Proposal(hypothesis or "(no hypothesis stated)", source, proposer,
                        family="rewrite" if rewritten else parent.family, llm_calls=calls, parent_seq=parent.seq)

    def _fit(self, messages: list[dict], history: History, draw: Draw) -> None:
        """Keep a conversation inside the context: leave out its oldest reply-and-answer pairs (the first
        request and the last exchange stay), then shorten the first request to make room."""
        if self.settings.context_tokens is None:
            return
        room = self.settings.context_tokens - self.settings.max_tokens

        def size(ms: list[dict]) -> int:
            return sum(tokens(m["content"]) + 4 for m in ms)

        while size(messages) > room and len(messages) > 4:
            del messages[2:4]
        if size(messages) > room:
            messages[:2] = self.messages(history, draw, reserve=size(messages[2:]))

    def _build_problem(self, source: str) -> str:
        """What the model is told of its kernel before it is measured: why the harness refuses it, or the
        compiler's errors ('' where it builds). Only a refusal (an AutoDiscoveryError) is the candidate's; any
        other exception is a bug in the harness and goes up, never to the model as if the kernel caused it."""
        harness = self._bound()
        try:
            if isinstance(harness, Checking):
                harness.check(source)
        except AutoDiscoveryError as exc:  # a manifest or a source the harness refuses
            return str(exc)
        build = harness.build(source)
        return "" if build.ok else trim(build.log, 30)



def messages(settings: LlmSettings, fingerprint: dict, harness: Evaluating, history: History, draw: Draw,
             reserve: int = 0) -> list[dict]:
    """The system and user messages that open a proposal made from `draw`, the user message fitted to
    agent.llm.context_tokens with `reserve` tokens to spare."""
    builder = PromptBuilder(harness, fingerprint, settings.attempts_shown, settings.diff_lines)
    system = builder.system()
    room = None if settings.context_tokens is None else settings.context_tokens - settings.max_tokens - tokens(system)
    user = builder.fit(history, draw, room, reserve)
    if room is not None and tokens(user) + reserve > room:
        raise LlmError(f"the prompt needs about {tokens(user) + reserve} tokens with the rules and the kernel "
                       f"to change alone, more than agent.llm.context_tokens ({settings.context_tokens}) "
                       f"less max_tokens ({settings.max_tokens}) leaves")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
