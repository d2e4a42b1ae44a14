"""What a campaign file holds, as pydantic models: the harness's, problem's and agent's sections (each
validated by the part that owns it, `loading.py`), the budget, the stop rules, a suite and its sweep."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, field_validator, model_validator

from autodiscovery import ROOT, AutoDiscoveryError

if TYPE_CHECKING:
    from autodiscovery.interfaces import AgentBase

SEARCH_SPACES: Path = ROOT / "search_spaces"
SEEDS: Path = ROOT / "seeds"


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
        from autodiscovery.campaign.loading import validate

        return validate(data, f"{source}: suite entry '{entry.label}'")

    def seed_path(self) -> Path:
        p = Path(self.seed)
        return p if p.is_absolute() else SEEDS / p
