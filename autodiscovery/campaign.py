"""Campaigns: a YAML file validated by pydantic, plus `key.path=value` overrides."""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError, field_validator, model_validator

from autodiscovery import ROOT, AutoDiscoveryError
from autodiscovery.yaml_lines import Source, key_lines, yaml_error

if TYPE_CHECKING:
    from autodiscovery.interfaces import AgentBase

SEARCH_SPACES = ROOT / "search_spaces"
SEEDS = ROOT / "seeds"


class CampaignError(AutoDiscoveryError):
    pass


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)


class ProblemBase(Strict):
    """The `problem:` section: each harness validates it with its own `Problem` model (a harness with no
    problem of its own takes none)."""

    def describe(self) -> str:
        """The problem in a few characters for titles ('4096×4096×4096'); '' says nothing."""
        return ""

    def names(self) -> dict[str, int]:
        """The problem's sizes by name: what a search space's constraints may use."""
        return {}

    def work(self) -> float | None:
        """The problem's arithmetic in floating-point operations, where it has a count (None: it has none)."""
        return None


class HarnessSettings(Strict):
    """The `harness:` section: each harness validates it with its own `Settings` model, a subclass of this
    one; `name` says which harness it is (a shipped one's name, or a `module:Class`)."""

    name: str


class AgentSettings(BaseModel):
    """The `agent:` section: which agent proposes (`kind`), and each agent's own settings in a section
    named after it (`search:`, `llm:`, `codesign:`, or the `section` of a `module:Class` agent),
    validated by that agent's `Settings` model. The named agent's section is there with its defaults
    when the campaign gives none."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)
    kind: str = "search"
    """Which agent proposes candidates: search, llm, codesign, or any `module:Class`."""

    def of(self, agent: type[AgentBase]) -> BaseModel:
        """The settings of `agent` (a class): its section, or its defaults where the campaign has none."""
        section = (self.model_extra or {}).get(section_of(agent))
        return section if section is not None else agent.Settings()


Model = TypeVar("Model", bound=BaseModel)


def validated(value: object, model: type[Model]) -> Model:
    """A section of a loaded campaign as the model that validated it (a harness's `Settings`, an agent's):
    what the loading checked, said to the type checker; a section of another model is a bug of ours."""
    if not isinstance(value, model):
        raise TypeError(f"a campaign section validated as {type(value).__name__}, not {model.__name__}")
    return value


def section_of(agent: type[AgentBase]) -> str:
    """The name of an agent's section under `agent:`."""
    return agent.section or agent.name


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
    """Stop once the incumbent reaches this, in the harness's objective (at or above it where higher is
    better, at or below it where lower is); none: no target."""
    patience: int = Field(20, ge=1)
    """Stop after this many evaluated candidates in a row without a keep."""
    patience_below: int | None = Field(None, ge=1)
    """The patience while the best is still below the baseline (the harness's reference: 1.0× cuBLAS, say):
    none, a run that has not matched its baseline goes on while its budget lasts. A harness without a
    reference (cycles) has the one patience."""
    min_gain: float = Field(0.01, ge=0)
    """A challenger must beat the incumbent by more than this fraction, head to head."""
    decisive: float | None = Field(2.0, gt=1)
    """A challenger whose own measurement is this many times better than the incumbent's (× the baseline
    at least doubled, say, or cycles at least halved) is kept without a head-to-head: what separates two
    processes' measurements is a few percent, so the pair could not go the other way (the first steps of a
    climb from a naive seed, a warm start's first candidate). None: every keep is confirmed head to head."""


class SuiteEntry(Strict):
    label: str = Field(min_length=1, max_length=60)
    """How the dispatch table names it (a layer and a token count: "qkv · 16")."""
    problem: dict[str, Any]
    """The fields of `problem` this entry sets (M, N and K, say); the rest are the campaign's."""


class Sweep(Strict):
    """Problems drawn at random from a stated distribution, tuned in turn as a suite: the benchmark of
    shapes no one chose. The same seed draws the same problems, on any machine."""

    seed: int = 0
    """Seed of the draw (Python's `random.Random`)."""
    count: int = Field(24, ge=1, le=1000)
    """Problems drawn."""
    sizes: dict[str, tuple[int, int]] = Field(min_length=1)
    """Each size drawn, with its range, both ends included (`M: [16, 16384]`): log-uniform, so every factor
    of two in the range is as likely as any other. Drawn in the order given, problem after problem."""
    multiple: int = Field(8, ge=1)
    """Every size drawn is a multiple of this: the draw is rounded to the nearest one within the range."""

    @field_validator("sizes")
    @classmethod
    def _ranges(cls, v: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        for name, (lo, hi) in v.items():
            if not 0 < lo <= hi:
                raise ValueError(f"{name}: [{lo}, {hi}] is not a range of positive sizes, the smaller first")
        return v

    def problems(self) -> list[dict[str, int]]:
        """The problems drawn: sizes by name, in the order drawn."""
        rng = random.Random(self.seed)
        out = []
        for _ in range(self.count):
            drawn = {}
            for name, (lo, hi) in self.sizes.items():
                first, last = -(-lo // self.multiple) * self.multiple, hi // self.multiple * self.multiple
                if first > last:
                    raise CampaignError(f"sweep.sizes.{name}: [{lo}, {hi}] holds no multiple of {self.multiple}")
                x = math.exp(math.log(lo) + rng.random() * (math.log(hi) - math.log(lo)))
                drawn[name] = min(last, max(first, round(x / self.multiple) * self.multiple))
            out.append(drawn)
        return out

    def entries(self) -> list[SuiteEntry]:
        """The problems drawn as a suite's entries, labelled by their number in the draw ("03"): the shape
        is beside it in every view of a problem."""
        width = len(str(self.count))
        return [SuiteEntry(label=f"{i + 1:0{width}d}", problem=p) for i, p in enumerate(self.problems())]


class Campaign(Strict):
    name: str
    """Campaign name, shown in `runs`."""
    description: str = ""
    problem: SerializeAsAny[ProblemBase] = ProblemBase()
    """Validated by the `Problem` model of the harness the campaign names, which that harness owns."""
    harness: SerializeAsAny[HarnessSettings]
    """Validated by the model of the harness it names (`harness.name`), which that harness owns."""
    seed: str = "hopper_gemm/naive.cu"
    """Starting kernel: a path relative to the campaign file's folder, else to the project's seeds/ (or an
    absolute path)."""
    origin: str | None = None
    """Set by `run --from RUN/SEQ`: the recorded candidate whose kernel is this run's seed instead."""
    agent: SerializeAsAny[AgentSettings] = AgentSettings()
    budget: Budget = Budget()
    stop: StopRules = StopRules()
    executor: ExecutorSettings = ExecutorSettings()
    suite: list[SuiteEntry] | None = None
    """Several problems tuned in turn, a run each (`budget` and `stop` are each one's), the suite's run
    recording the dispatch table: each problem's best kernel (none: the one `problem`)."""
    sweep: Sweep | None = None
    """A suite drawn at random (`suite` is then the problems drawn, and need not be given)."""

    @model_validator(mode="after")
    def _drawn(self) -> Campaign:
        if self.sweep is not None:
            drawn = self.sweep.entries()
            if self.suite is None:
                self.suite = drawn
            elif [e.problem for e in self.suite] != [e.problem for e in drawn]:  # labels as a run recorded them stand
                raise ValueError("suite: a sweep draws its suite; give one or the other")
        return self

    @field_validator("suite")
    @classmethod
    def _labels(cls, v: list[SuiteEntry] | None) -> list[SuiteEntry] | None:
        if v is not None:
            if not v:
                raise ValueError("a suite names at least one problem")
            seen = [e.label for e in v]
            if dup := next((x for x in seen if seen.count(x) > 1), None):
                raise ValueError(f"the label '{dup}' is given twice: each problem of a suite has its own")
        return v

    def entry(self, entry: SuiteEntry, source: str = "campaign") -> Campaign:
        """The campaign of one problem of the suite: the problem's fields set, no suite."""
        data = self.model_dump(mode="json") | {"suite": None, "sweep": None, "name": f"{self.name}/{entry.label}"}
        data["problem"] = {**data.get("problem", {}), **entry.problem}
        return validate(data, f"{source}: suite entry '{entry.label}'")

    def seed_path(self) -> Path:
        p = Path(self.seed)
        return p if p.is_absolute() else SEEDS / p


def available() -> list[Path]:
    """The campaign files that ship."""
    return sorted(SEARCH_SPACES.glob("*.yaml"))


PATHS: tuple[tuple[tuple[str, ...], Path, str], ...] = (
    (("problem", "file"), ROOT, "file"),
    (("seed",), SEEDS, "file"),
    (("agent", "search", "space"), SEARCH_SPACES, "search space"),
)
"""The fields of a campaign that name a file or a folder: where a relative one is looked for after the
campaign file's folder (the project's own place for it), and what it is (a file; a search space is a
folder holding families.yaml)."""


def _found(path: Path, kind: str) -> bool:
    return (path / "families.yaml").is_file() if kind == "search space" else path.is_file()


def locate(value: str, kind: str, project: Path, base: Path | None) -> tuple[str | None, list[Path]]:
    """Where a relative path of a campaign is: `base` (the campaign file's folder, or the current one for
    a `--set`) first, then `project`. Returns the value to keep (unchanged where it was found in the
    project, so that shipped campaigns record what they always did; else the absolute path) and every
    place looked, or (None, places) where it is in none."""
    p = Path(value).expanduser()
    if p.is_absolute():
        return (value if _found(p, kind) else None), [p]
    places = [*([base / p] if base is not None else []), project / p]
    for place in places:
        if _found(place, kind):
            same = place.resolve() == (project / p).resolve()
            return (value if same else str(place.resolve())), places
    return None, places


def _locate_paths(data: dict[str, Any], folder: Path | None, source: str, overrides: Sequence[str]) -> None:
    """Every path field of `data` (`PATHS`) made one that is found from anywhere, or a CampaignError naming
    every place it was looked for."""
    for keys, project, kind in PATHS:
        node: Any = data
        for key in keys[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        value = node.get(keys[-1]) if isinstance(node, dict) else None
        if not isinstance(value, str) or not value:
            continue
        where = ".".join(keys)
        by = blame(where, source, overrides)
        kept, places = locate(value, kind, project, Path.cwd() if by.startswith("--set") else folder)
        if kept is None:
            looked = ", ".join(str(p / "families.yaml" if kind == "search space" else p) for p in places)
            raise CampaignError(f"{by}: {where}: {kind} not found: {value} (looked for {looked})")
        node[keys[-1]] = kept


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


def blame(where: str, source: str, overrides: Sequence[str] = ()) -> str:
    """Who set the field at `where`: the last `--set` that touched it, else the campaign's source (at the
    key's line, where the source is a file)."""
    for assignment in reversed(overrides):
        key = assignment.partition("=")[0].strip()
        if where == key or where.startswith(key + ".") or key.startswith(where + "."):
            return f"--set {assignment}"
    return source.at(where) if isinstance(source, Source) else source


def _error(exc: ValidationError, source: str, prefix: tuple = (), overrides: Sequence[str] = ()) -> CampaignError:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in (*prefix, *err["loc"])) or "(top level)"
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    msg = err["msg"].removeprefix("Value error, ")
    return CampaignError(f"{blame(where, source, overrides)}: {where}: {msg}{more}")


DEFAULT_HARNESS = "hopper_gemm"
"""The harness of a campaign that names none."""
DEFAULT_CAMPAIGN = "hopper-gemm"
"""The campaign of the commands that name none."""


def _section(data: dict[str, Any], key: str, where: str, source: str, overrides: Sequence[str]) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CampaignError(f"{blame(where, source, overrides)}: {where}: must be a mapping")
    return value


def _model(model: type[BaseModel], value: dict, prefix: tuple, source: str, overrides: Sequence[str]) -> BaseModel:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise _error(exc, source, prefix, overrides) from None


def validate(data: dict[str, Any], source: str = "campaign", overrides: list[str] | tuple[str, ...] = ()) -> Campaign:
    """The campaign, with the sections its parts own validated by them: `harness:` and `problem:` by the
    harness it names, each section of `agent:` by the agent it is named after. An error names the
    `--set` (of `overrides`) that gave the bad value, else `source`."""
    from autodiscovery import registry
    from autodiscovery.roles import declared

    harness_data = _section(data, "harness", "harness", source, overrides)
    try:
        harness = registry.harness(harness_data.get("name", DEFAULT_HARNESS))
    except AutoDiscoveryError as exc:
        raise CampaignError(f"{blame('harness.name', source, overrides)}: harness.name: {exc}") from None
    own = declared(harness)
    if not (isinstance(own.Settings, type) and issubclass(own.Settings, HarnessSettings)):
        named = getattr(harness, "__name__", harness.name)  # the class, as its author wrote it
        raise CampaignError(f"{blame('harness.name', source, overrides)}: harness.name: {named}.Settings "
                            "must be a subclass of autodiscovery.campaign.HarnessSettings (which holds its name)")
    settings = _model(own.Settings, harness_data, ("harness",), source, overrides)
    problem = _model(own.Problem,
                     _section(data, "problem", "problem", source, overrides), ("problem",), source, overrides)
    agent = _agent(_section(data, "agent", "agent", source, overrides), source, overrides)
    try:
        return Campaign.model_validate({**data, "harness": settings, "problem": problem, "agent": agent})
    except ValidationError as exc:
        raise _error(exc, source, (), overrides) from None


def _agent(data: dict[str, Any], source: str, overrides: Sequence[str]) -> AgentSettings:
    """`agent:`: the agent `kind` names, and every section validated by the agent it is named after."""
    from autodiscovery import registry

    kind = data.get("kind", "search")
    try:
        named = registry.agent(str(kind))
    except AutoDiscoveryError as exc:
        raise CampaignError(f"{blame('agent.kind', source, overrides)}: agent.kind: {exc}") from None
    sections: dict[str, BaseModel] = {}
    for key, value in data.items():
        if key == "kind":
            continue
        where = f"agent.{key}"
        try:
            owner = named if key == section_of(named) else registry.agent_of_section(key)
        except AutoDiscoveryError as exc:
            raise CampaignError(f"{blame(where, source, overrides)}: {where}: {exc}") from None
        if not isinstance(value, dict):
            raise CampaignError(f"{blame(where, source, overrides)}: {where}: must be a mapping")
        sections[key] = _model(owner.Settings, value, ("agent", key), source, overrides)
    mine = section_of(named)
    sections.setdefault(mine, named.Settings())
    try:
        named.check(sections[mine])
    except ValueError as exc:
        field, _, why = str(exc).partition(": ")
        where = f"agent.{mine}.{field}" if why else f"agent.{mine}"
        raise CampaignError(f"{blame(where, source, overrides)}: {where}: {why or exc}") from None
    return AgentSettings(kind=str(kind), **sections)


def load(name_or_path: str, overrides: list[str] | tuple[str, ...] = ()) -> Campaign:
    path = resolve_path(name_or_path)
    text = path.read_text()
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise CampaignError(f"{path.name}: {yaml_error(exc)}") from None
    if not isinstance(data, dict):
        raise CampaignError(f"{path.name}: the top level must be a mapping of sections")
    source = Source(path.name, key_lines(text))
    data = copy.deepcopy(data)
    for assignment in overrides:
        apply_override(data, assignment)
    _locate_paths(data, path.resolve().parent, source, overrides)
    campaign = validate(data, source, overrides)
    for entry in campaign.suite or []:  # every problem of a suite is checked before anything runs
        campaign.entry(entry, path.name)
    if not campaign.seed_path().is_file():
        raise CampaignError(f"{blame('seed', source, overrides)}: seed: file not found: {campaign.seed_path()}")
    return campaign
