"""A thin client for any OpenAI-compatible endpoint: retries with backoff, a preflight, every call logged."""

from __future__ import annotations

import functools
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast, overload

import openai
from pydantic import Field
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from autodiscovery import RunFailed
from autodiscovery.campaign import Strict

PING = "Reply with OK."
"""The preflight's request to each model."""
REASONING_MODELS = re.compile(r"^(openai/)?(gpt-5|o1|o3|o4)([-.:]|$)")
"""OpenAI models that refuse `max_tokens` and `temperature` (they take `max_completion_tokens`)."""
TRANSIENT = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError, openai.APIConnectionError)


class LlmParams(Strict):
    """How requests to one model are made; each field left out takes the default that works for the
    kind of model (OpenAI's reasoning models gpt-5, o1, o3, o4 take `max_completion_tokens` and no
    temperature; chat models, vLLM and Ollama take `max_tokens` and a temperature)."""

    token_limit: Literal["max_tokens", "max_completion_tokens"] | None = None
    """The name of the output-token limit the endpoint accepts for this model."""
    temperature: float | None = Field(None, ge=0, le=2)
    """Sampling temperature (none: agent.llm.temperature, not sent to reasoning models)."""
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    """For reasoning models; none: not sent."""
    extra_body: dict[str, Any] = {}
    """Further fields of the request body, e.g. Ollama's {"options": {"num_ctx": 32768}}."""


class LlmModel(Strict):
    name: str
    """The model's name at the endpoint."""
    weight: float = Field(1.0, gt=0)
    """Share of the proposals this model makes (models are drawn at random by weight)."""
    price_in: float | None = Field(None, ge=0)
    """Price per million input tokens, for cost accounting (none: cost not tracked)."""
    price_out: float | None = Field(None, ge=0)
    """Price per million output tokens."""
    params: LlmParams = LlmParams()
    """How requests to this model are made (token-limit name, temperature, reasoning effort, extra fields)."""


class LlmSettings(Strict):
    """`agent.llm`: the endpoint, its models and how they are asked."""

    base_url: str | None = None
    """An OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, LiteLLM); none: the client's default."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable that holds the key."""
    models: list[LlmModel] = []
    """One or more models; each proposal records which one made it."""
    batch: int | None = Field(None, ge=1, le=64)
    """Proposals requested per round; each draws its own parent and inspirations; none: 2, or one per
    device where the harness measures on more (`--gpus`, Ray)."""
    concurrency: int | None = Field(None, ge=1, le=64)
    """Requests in flight at once (the proposals of a batch are asked for side by side); none: the batch."""
    overlap: bool = True
    """Ask for the next batch while the current one is built and measured (its verdicts then reach the
    batch after next); false: every batch sees the verdicts of the one before."""
    inspirations: int = Field(2, ge=0, le=8)
    """Other kernels of the program database shown with each prompt, with their code and figures."""
    exploit: float = Field(0.5, ge=0, le=1)
    """Chance that a proposal starts from the incumbent; otherwise from another entry of the program
    database (a family's best, a near miss)."""
    near_miss: float = Field(0.03, ge=0, le=1)
    """Measured candidates within this fraction of the incumbent are kept as near misses to build on."""
    diff_lines: int = Field(40, ge=0)
    """Lines of each past attempt's diff shown in the prompt."""
    temperature: float = Field(0.7, ge=0, le=2)
    max_tokens: int = Field(8000, ge=64)
    """Most output tokens a reply may use."""
    context_tokens: int | None = Field(None, ge=256)
    """The model's context window: every request is fitted to it, less `max_tokens`, by leaving out the
    diffs of the oldest attempts, then the oldest attempts, the inspirations, the oldest lineage steps,
    and the oldest turns of a conversation; never the rules or the kernel to change (none: not fitted)."""
    timeout_s: float = Field(300.0, gt=0)
    """One request's time limit."""
    retries: int = Field(4, ge=0)
    """Retries with exponential backoff on 429, 5xx, timeouts and dropped connections."""
    backoff_s: float = Field(1.0, gt=0)
    """First backoff; it doubles with each retry, up to a minute."""
    reflections: int = Field(3, ge=0, le=10)
    """Replies per proposal that may be answered with a failed edit before giving up on it."""
    repair_turns: int = Field(1, ge=0, le=5)
    """Turns a candidate that does not compile gets to repair itself before it is recorded."""
    attempts_shown: int = Field(8, ge=0)
    """The most recent attempts (with verdicts) shown in each prompt."""
    seed: int = 0
    """Seed for drawing models by weight."""


class LlmError(RunFailed):
    pass


@dataclass
class Call:
    """One request as the store keeps it."""

    model: str
    prompt: str
    reply: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    latency_ms: float | None = None
    error: str | None = None


class LlmClient:
    def __init__(self, settings: LlmSettings, log: Callable[[Call], int | None] = lambda c: None) -> None:
        self.settings = settings
        self.log = log
        key = os.environ.get(settings.api_key_env)
        if not key and settings.base_url is None:
            raise LlmError(f"no API key: set {settings.api_key_env} (or agent.llm.api_key_env), "
                           "or give --base-url for a local endpoint")
        self.secret = key or ""
        """Never stored or shown: every text that is logged or raised has it replaced."""
        self.where = settings.base_url or "the OpenAI API"
        self.client = openai.OpenAI(base_url=settings.base_url, api_key=key or "unused",
                                    timeout=settings.timeout_s, max_retries=0)
        self.backoff_s = settings.backoff_s

    def options(self, model: LlmModel, max_tokens: int, heat: float = 0.0) -> dict:
        """The request fields for this model: its token-limit name, temperature (raised by `heat`, up to
        2) or reasoning effort, and any extra body fields, each from the model's `params` or the default
        for its kind."""
        p = model.params
        reasoning = bool(REASONING_MODELS.match(model.name))
        limit = p.token_limit or ("max_completion_tokens" if reasoning else "max_tokens")
        out: dict = {limit: max_tokens}
        temperature = p.temperature if p.temperature is not None else (None if reasoning else self.settings.temperature)
        if temperature is not None:
            out["temperature"] = round(min(2.0, temperature + heat), 3)
        if p.reasoning_effort is not None:
            out["reasoning_effort"] = p.reasoning_effort
        if p.extra_body:
            out["extra_body"] = dict(p.extra_body)
        return out

    def preflight(self) -> None:
        """Before the run starts: the endpoint is reached, the key accepted, every model served, and each
        model answers one tiny request made with the run's exact request fields. What a request retries
        (429, 5xx, timeouts, dropped connections) is retried here the same way; a refusal that no retry
        helps (a 400 naming a field, 401, 403, 404) stops the run at once. Either way, one line."""
        try:
            served = {m.id for m in self._reaching(self.client.models.list)}
        except openai.NotFoundError:  # no model listing here: the requests below say it
            served = set()
        missing = [m.name for m in self.settings.models if served and m.name not in served]
        if missing:
            raise LlmError(f"model(s) {', '.join(missing)} not served at {self.where} "
                           f"(it serves: {', '.join(sorted(served)[:10])})")
        for model in {m.name: m for m in self.settings.models}.values():
            try:
                self._reaching(functools.partial(self.client.chat.completions.create, model=model.name,
                                                 messages=[{"role": "user", "content": PING}], **self.options(model, 16)))
            except LlmError as exc:
                raise LlmError(f"{model.name}: {exc}") from None
            except openai.NotFoundError as exc:
                raise LlmError(f"{model.name} at {self.where} answered 404: {self._why(exc)}") from None

    def _retrying(self) -> Retrying:
        """The retry policy of every request: transient failures, backed off exponentially."""
        return Retrying(retry=retry_if_exception_type(TRANSIENT), reraise=True,
                        stop=stop_after_attempt(self.settings.retries + 1),
                        wait=wait_exponential(multiplier=self.backoff_s, max=60))

    def _reaching(self, request: Callable[[], Any]) -> Any:
        """Run one preflight request with the request path's retries, turning what still fails (an
        unreachable endpoint, a refused key, an error status) into a one-line LlmError."""
        attempts = f"after {self.settings.retries + 1} attempts"
        try:
            for attempt in self._retrying():
                with attempt:
                    return request()
        except openai.NotFoundError:
            raise
        except openai.APIConnectionError as exc:  # timeouts included
            raise LlmError(f"LLM endpoint {self.where} is unreachable ({attempts}): {self._why(exc)}") from None
        except (openai.AuthenticationError, openai.PermissionDeniedError):
            raise LlmError(f"LLM endpoint {self.where} rejected the key in {self.settings.api_key_env}") from None
        except (openai.RateLimitError, openai.InternalServerError) as exc:  # the transient answers, retried
            raise LlmError(f"LLM endpoint {self.where} answered {exc.status_code} {attempts}: "
                           f"{self._why(exc)}") from None
        except openai.APIStatusError as exc:
            raise LlmError(f"LLM endpoint {self.where} answered {exc.status_code}: {self._why(exc)}") from None
        raise AssertionError("unreachable")

    def chat(self, model: LlmModel, messages: list[dict], heat: float = 0.0) -> tuple[str, list[int]]:
        """The reply's text (never its reasoning), and the ids of the logged calls (one per attempt)."""
        ids: list[int] = []
        try:
            for attempt in self._retrying():
                with attempt:
                    return self._once(model, messages, ids, heat), ids
        except TRANSIENT as exc:
            raise LlmError(f"{model.name} at {self.where}: gave up after {self.settings.retries + 1} attempts: "
                           f"{self._why(exc)}") from None
        except openai.APIStatusError as exc:
            raise LlmError(f"{model.name} at {self.where} answered {exc.status_code}: {self._why(exc)}") from None
        raise AssertionError("unreachable")

    @overload
    def redact(self, text: str) -> str: ...

    @overload
    def redact(self, text: None) -> None: ...

    def redact(self, text: str | None) -> str | None:
        """`text` with the API key, wherever it appears, replaced by a mark."""
        if text and len(self.secret) >= 6:
            return text.replace(self.secret, "[redacted key]")
        return text

    def _why(self, exc: Exception) -> str:
        return _why(exc, self.redact)

    def _once(self, model: LlmModel, messages: list[dict], ids: list[int], heat: float = 0.0) -> str:
        call = Call(model=model.name, prompt=json.dumps(messages, ensure_ascii=False))
        start = time.perf_counter()
        try:
            resp = self.client.chat.completions.create(
                # cast: the SDK types each message as a union of TypedDicts; ours are plain dicts with their keys
                model=model.name, messages=cast(Any, messages), **self.options(model, self.settings.max_tokens, heat))
        except openai.APIError as exc:
            call.latency_ms = (time.perf_counter() - start) * 1000
            call.error = f"{type(exc).__name__}: {self._why(exc)}"
            call.prompt = self.redact(call.prompt)
            self._logged(call, ids)
            raise
        call.latency_ms = (time.perf_counter() - start) * 1000
        call.reply = (resp.choices[0].message.content or "") if resp.choices else ""
        if resp.usage is not None:
            call.input_tokens, call.output_tokens = resp.usage.prompt_tokens, resp.usage.completion_tokens
            if model.price_in is not None and model.price_out is not None:
                call.cost = (call.input_tokens * model.price_in + call.output_tokens * model.price_out) / 1e6
        call.prompt, call.reply = self.redact(call.prompt), self.redact(call.reply)
        self._logged(call, ids)
        return call.reply

    def _logged(self, call: Call, ids: list[int]) -> None:
        """The call written where the client logs (a run's database); its id kept where it was written."""
        if (call_id := self.log(call)) is not None:
            ids.append(call_id)


def _why(exc: Exception, redact: Callable[[str], str] = lambda text: text) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return " ".join(redact(str(text)).split())[:300]
