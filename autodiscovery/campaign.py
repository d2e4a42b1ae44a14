"""Campaigns: a YAML file validated by pydantic, plus `key.path=value` overrides."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError, field_validator, model_validator

from autodiscovery import ROOT, AutoDiscoveryError

SEARCH_SPACES = ROOT / "search_spaces"
SEEDS = ROOT / "seeds"


class CampaignError(AutoDiscoveryError):
    pass


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)


class Problem(Strict):
    """C = A·Bᵀ with A M×K, B N×K and C M×N, all row-major."""

    M: int = Field(4096, gt=0)
    """Rows of A and C."""
    N: int = Field(4096, gt=0)
    """Rows of B, columns of C."""
    K: int = Field(4096, gt=0)
    """The reduction dimension: columns of A and B."""
    dtype_in: Literal["bf16", "fp16"] = "bf16"
    """Element type of A and B."""
    accumulate: Literal["fp32"] = "fp32"
    """Accumulator type, also cuBLAS's compute type."""
    dtype_out: Literal["bf16", "fp32"] = "bf16"
    """Element type of C."""

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K


class SearchAgentSettings(Strict):
    space: str = "hopper_gemm"
    """Folder under search_spaces/ holding families.yaml."""
    seed: int = 0
    """Random seed of the knob optimizer."""
    knob_patience: int = Field(6, ge=1)
    """Knob moves without a keep before another family worth tuning gets its turn (families take turns;
    the run ends by the loop's stop rules, or when every valid configuration was tried)."""
    batch: int = Field(4, ge=1, le=64)
    """Candidates proposed at once, built in parallel."""
    overlap: bool | None = None
    """Propose and build the next batch while the current one is measured (it then sees the verdicts of
    the batch before); none: on when the harness measures several candidates at once (--gpus, Ray)."""


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


class LlmAgentSettings(Strict):
    base_url: str | None = None
    """An OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, LiteLLM); none: the client's default."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable that holds the key."""
    models: list[LlmModel] = []
    """One or more models; each proposal records which one made it."""
    batch: int = Field(2, ge=1, le=64)
    """Proposals requested per round; each draws its own parent and inspirations."""
    concurrency: int = Field(2, ge=1, le=64)
    """Requests in flight at once (the proposals of a batch are asked for side by side)."""
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


class CodesignPhases(Strict):
    B: int = Field(12, ge=0)
    """Kernel-only candidates, architecture frozen at stock."""
    C: int = Field(3, ge=0)
    """Kernels the analytical model ranks best that B did not simulate, simulated to check the model."""
    D: int = Field(12, ge=0)
    """Architecture-only candidates, the best kernel frozen: one change at a time from stock first
    (eight at the shipped knobs), then TPE over the knobs that changed anything."""
    E_kernels: int = Field(2, ge=1)
    """Phase E crosses this many best kernels of B and C ..."""
    E_archs: int = Field(2, ge=1)
    """... with this many best architectures of D."""


class CodesignAgentSettings(Strict):
    space: str = "edge_codesign"
    """Folder under search_spaces/ with the kernel family and the architecture knobs."""
    seed: int = 0
    phases: CodesignPhases = CodesignPhases()
    model_trust: float = Field(0.8, ge=-1, le=1.01)
    """Phase C trusts the model fitted on A and B when its leave-one-out rank correlation reaches this:
    then only its best pick is simulated and the other C - 1 simulations are saved (1.01: never)."""
    shortlist: int = Field(48, ge=1)
    """Phase C ranks every valid kernel on facts estimated from its knobs, then compiles this many of
    the best to rank them again on their own PTX (about a second of nvcc each)."""


class AgentSettings(Strict):
    kind: str = "search"
    """Which agent proposes candidates: search, llm, codesign, or any `module:Class`."""
    search: SearchAgentSettings = SearchAgentSettings()
    llm: LlmAgentSettings = LlmAgentSettings()
    codesign: CodesignAgentSettings = CodesignAgentSettings()

    @field_validator("kind")
    @classmethod
    def _known(cls, kind: str) -> str:
        from autodiscovery import registry

        registry.agent(kind)  # raises with the names there are
        return kind

    @model_validator(mode="after")
    def _llm_has_a_model(self) -> AgentSettings:
        if self.kind == "llm" and not self.llm.models:
            raise ValueError("agent.llm.models: the llm agent needs at least one model (or --model NAME)")
        return self


class ExecutorSettings(Strict):
    kind: Literal["local", "ray"] = "local"
    """Where evaluations run: child processes of this one (local), or Ray tasks (ray)."""
    address: str | None = None
    """For ray: the cluster ("auto", "ray://HOST:PORT"); none starts a local one on this machine."""
    build_on: Literal["driver", "workers"] = "driver"
    """For ray: builds on this machine (driver), or as Ray tasks of one CPU (workers)."""
    max_retries: int = Field(3, ge=0)
    """For ray: how often a task whose worker or node died is run again."""


class Budget(Strict):
    candidates: int = Field(60, ge=1)
    """Candidates processed: every proposal counts, those refused before compiling included."""
    minutes: float = Field(120.0, gt=0)
    """Wall-clock minutes for the run."""
    tokens: int | None = Field(None, ge=1)
    """LLM tokens (input + output) for the run; none: no limit."""
    cost: float | None = Field(None, gt=0)
    """LLM cost for the run, in the unit of the models' prices; none: no limit."""


class StopRules(Strict):
    target: float | None = Field(None, gt=0)
    """Stop once the incumbent reaches this, in the harness's objective (× cuBLAS at or above it;
    cycles at or below it); none: no target."""
    patience: int = Field(20, ge=1)
    """Stop after this many evaluated candidates in a row without a keep."""
    min_gain: float = Field(0.01, ge=0)
    """A challenger must beat the incumbent by more than this fraction, head to head."""


class Campaign(Strict):
    name: str
    """Campaign name, shown in `runs`."""
    description: str = ""
    problem: Problem = Problem()
    harness: SerializeAsAny[BaseModel]
    """Validated by the model of the harness it names (`harness.name`), which that harness owns."""
    seed: str = "hopper_gemm/naive.cu"
    """Starting kernel, relative to seeds/ (or an absolute path)."""
    origin: str | None = None
    """Set by `run --from RUN/SEQ`: the recorded candidate whose kernel is this run's seed instead."""
    agent: AgentSettings = AgentSettings()
    budget: Budget = Budget()
    stop: StopRules = StopRules()
    executor: ExecutorSettings = ExecutorSettings()

    def seed_path(self) -> Path:
        p = Path(self.seed)
        return p if p.is_absolute() else SEEDS / p


def available() -> list[Path]:
    """The campaign files that ship."""
    return sorted(SEARCH_SPACES.glob("*.yaml"))


def resolve_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise CampaignError(f"campaign file not found: {p}")
        return p
    p = SEARCH_SPACES / f"{name_or_path}.yaml"
    if not p.is_file():
        names = ", ".join(f.stem for f in available()) or "none"
        raise CampaignError(f"unknown campaign '{name_or_path}' (available: {names})")
    return p


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `a.b.c=value` override in place; the value is parsed as YAML."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise CampaignError(f"override '{assignment}' is not of the form key.path=value")
    parts = key.strip().split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise CampaignError(f"override '{assignment}': {'.'.join(parts[: i + 1])} is not a section")
    try:
        node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise CampaignError(f"--set {assignment}: the value is not valid YAML: {getattr(exc, 'problem', exc)}") from None


def blame(where: str, source: str, overrides: list[str] | tuple[str, ...] = ()) -> str:
    """Who set the field at `where`: the last `--set` that touched it, else the campaign's source."""
    for assignment in reversed(overrides):
        key = assignment.partition("=")[0].strip()
        if where == key or where.startswith(key + ".") or key.startswith(where + "."):
            return f"--set {assignment}"
    return source


def _error(exc: ValidationError, source: str, prefix: tuple = (), overrides=()) -> CampaignError:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in (*prefix, *err["loc"])) or "(top level)"
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    msg = err["msg"].removeprefix("Value error, ")
    return CampaignError(f"{blame(where, source, overrides)}: {where}: {msg}{more}")


def validate(data: dict[str, Any], source: str = "campaign", overrides: list[str] | tuple[str, ...] = ()) -> Campaign:
    """The campaign, its `harness:` section validated by the settings model of the harness it names; an
    error names the `--set` (of `overrides`) that gave the bad value, else `source`."""
    from autodiscovery import registry

    section = data.get("harness") or {}
    if not isinstance(section, dict):
        raise CampaignError(f"{blame('harness', source, overrides)}: harness: must be a mapping with a name")
    try:
        settings_model = registry.harness(section.get("name", "hopper_gemm")).Settings
    except AutoDiscoveryError as exc:
        raise CampaignError(f"{blame('harness.name', source, overrides)}: harness.name: {exc}") from None
    try:
        settings = settings_model.model_validate(section)
    except ValidationError as exc:
        raise _error(exc, source, ("harness",), overrides) from None
    try:
        return Campaign.model_validate({**data, "harness": settings})
    except ValidationError as exc:
        raise _error(exc, source, (), overrides) from None


def yaml_error(exc: yaml.YAMLError) -> str:
    """A YAML error as one line: the line where the construct that broke began (the parser notices on
    a later one), and the parser's reason."""
    mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
    problem = " ".join(filter(None, [getattr(exc, "problem", None), getattr(exc, "context", None)
                                     and f"({exc.context})"]))
    at = f"line {mark.line + 1}: " if mark else ""
    return f"{at}not valid YAML: {problem or exc}"


def load(name_or_path: str, overrides: list[str] | tuple[str, ...] = ()) -> Campaign:
    path = resolve_path(name_or_path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise CampaignError(f"{path.name}: {yaml_error(exc)}") from None
    if not isinstance(data, dict):
        raise CampaignError(f"{path.name}: the top level must be a mapping of sections")
    data = copy.deepcopy(data)
    for assignment in overrides:
        apply_override(data, assignment)
    campaign = validate(data, path.name, overrides)
    if not campaign.seed_path().is_file():
        raise CampaignError(f"{blame('seed', path.name, overrides)}: seed: file not found: {campaign.seed_path()}")
    return campaign
