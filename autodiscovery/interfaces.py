"""The two interfaces the loop talks to, and what passes through them.

An `Agent` proposes candidates; a `Harness` builds, checks and measures them and says what the number
means (its `Objective`). The loop uses these methods and nothing else. Optional hooks have defaults in
`AgentBase` and `HarnessBase`, so an implementation states only what it does differently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from autodiscovery.campaign import Campaign
    from autodiscovery.store import Store
    from autodiscovery.toolkit.build import BuildReport


@dataclass(frozen=True)
class Objective:
    """What a harness's score is: its name and unit, which way is better, where it sits in the metrics."""

    name: str
    """Shown after a value: '× cuBLAS', 'cycles'."""
    higher_is_better: bool
    path: tuple[str, ...]
    """Where the score sits in an evaluation's metrics."""
    spec: str = ".3f"
    joiner: str = ""
    """Between the value and the name: '' gives '0.877× cuBLAS', ' ' gives '23977 cycles'."""

    def read(self, metrics: dict | None) -> float | None:
        value: Any = metrics or {}
        for key in self.path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def format(self, value: float | None) -> str:
        return "–" if value is None else f"{format(value, self.spec)}{self.joiner}{self.name}"

    def better(self, a: float, b: float, margin: float = 0.0) -> bool:
        """Whether `a` beats `b` by more than the fraction `margin`."""
        return a > b * (1 + margin) if self.higher_is_better else a < b * (1 - margin)

    def reached(self, value: float, target: float) -> bool:
        return value >= target if self.higher_is_better else value <= target

    def best(self, values: list[float]) -> float:
        return max(values) if self.higher_is_better else min(values)


@dataclass
class Section:
    """One table of what a harness adds to a report, as plain text cells: `report` prints it with Rich,
    the HTML report writes it as a table with this id, followed by the chart of that name if it drew one."""

    id: str
    title: str
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""
    chart: str = ""


@dataclass
class Outcome:
    """What a harness reports for one evaluation."""

    status: str  # ok | compile_error | incorrect | timeout | crashed | rejected
    metrics: dict = field(default_factory=dict)
    log: str = ""
    seconds: float = 0.0
    device: str = ""
    score: float | None = None
    """The objective's value, for an `ok` outcome (the harness sets it; stored as metrics['score'])."""


@dataclass
class Proposal:
    """One candidate: a hypothesis in words and the kernel it leads to."""

    hypothesis: str
    source: str
    proposer: str
    family: str | None = None
    knobs: dict[str, Any] = field(default_factory=dict)
    rejected: str | None = None
    """Why it was refused before compiling (a failed constraint), if it was."""
    llm_calls: list[int] = field(default_factory=list)
    """Ids of the logged LLM calls that led to it."""
    parent_seq: int | None = None
    """The candidate it was made from (its source edited, its knobs moved); None: the incumbent."""
    origin_id: int | None = None
    """A candidate of another run that this one continues (the seed of a run started with --from)."""


@dataclass
class Record:
    """What an agent sees of one earlier candidate."""

    seq: int
    family: str | None
    knobs: dict[str, Any]
    status: str
    score: float | None
    """The objective's value of its own measurement (None when it did not pass the gate)."""
    kept: bool
    source_hash: str
    hypothesis: str = ""
    log: str = ""
    source: str = ""
    proposer: str = ""
    build: dict[str, Any] = field(default_factory=dict)
    """What the store keeps of its build, where there was one: registers, smem_static, spill_stores,
    spill_loads, stack, and the harness's own facts."""
    tflops: float | None = None
    parent_seq: int | None = None
    """The candidate it was made from, in this run (None: the seed, or one from another run)."""
    verdict: str | None = None
    """keep or revert, once decided."""
    reason: str = ""
    """Why it was kept, reverted or refused, in words."""
    profile: dict[str, Any] = field(default_factory=dict)
    """Its latest Nsight Compute profile ({candidate, baseline, ...}), where `profile` stored one."""


@dataclass
class History:
    records: list[Record]
    incumbent: Record | None
    objective: Objective
    """What the scores mean and which way is better."""


@runtime_checkable
class Agent(Protocol):
    name: str
    batch: int
    """Proposals a round."""
    exhausted_reason: str
    """The stop reason when `propose` returns nothing."""

    def propose(self, history: History, n: int) -> list[Proposal]:
        """Up to `n` new proposals given everything tried so far; [] when it has nothing left."""

    def seed_proposal(self, campaign: Campaign) -> Proposal:
        """The run's first candidate, every later one is measured from it."""

    def bind(self, store: Store, run_id: int, harness: Harness, fingerprint: dict) -> None:
        """Called once the run exists, before the first proposal."""

    def preflight(self) -> None:
        """Raise an AutoDiscoveryError now if the agent cannot work (an endpoint that refuses, say)."""


class NoSettings(BaseModel):
    """The settings of an agent that has none."""

    model_config = ConfigDict(extra="forbid")


class AgentBase:
    """Defaults for the optional hooks of `Agent`."""

    name = "agent"
    batch: int = 1
    exhausted_reason = "search space exhausted: the agent has nothing left to propose"
    Settings: ClassVar[type[BaseModel]] = NoSettings
    """The pydantic model of the agent's section of the campaign's `agent:` (`agent.<section>`)."""
    section: ClassVar[str | None] = None
    """The name of that section (None: the agent's `name`)."""

    @classmethod
    def check(cls, settings: BaseModel) -> None:
        """Raise ValueError('field: why') when these settings cannot work for this agent as the one that
        proposes (a section may be valid for a run of another agent)."""

    def seed_proposal(self, campaign: Campaign) -> Proposal:
        return Proposal(hypothesis="The seed: the starting point every change is measured from.",
                        source=campaign.seed_path().read_text(), proposer="seed",
                        family=campaign.seed_path().name.split(".")[0])

    def bind(self, store: Store, run_id: int, harness: Harness, fingerprint: dict) -> None:
        pass

    def preflight(self) -> None:
        pass


@runtime_checkable
class Harness(Protocol):
    name: str
    objective: Objective
    parallel: int
    """Evaluations at once (simulations); 1 measures one at a time (a GPU)."""
    build_workers: int
    """Builds at once (0: one per CPU core)."""

    def preflight(self, need_gpu: bool = True) -> dict:
        """The fingerprint of where the run happens; raise an AutoDiscoveryError naming what is missing."""

    def adopt(self, fingerprint: dict) -> None:
        """Take what a recorded fingerprint fixed (a resumed run keeps its device facts and baseline)."""

    def check(self, source: str) -> Any:
        """Raise an AutoDiscoveryError, with the reason, for a candidate this problem cannot take."""

    def build(self, source: str) -> BuildReport: ...

    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        """Check and measure one candidate; a failure is an Outcome with its status, never an exception.

        `bar` is the score the candidate has to beat (the incumbent's): a harness may screen, stopping
        the measurement early when a short one shows the candidate clearly below it
        (metrics["screened"] then says after how much)."""

    def head_to_head(self, challenger: tuple[str, BuildReport], incumbent: tuple[str, BuildReport]) -> Outcome:
        """Both measured against each other: metrics['ratio'] above 1 means the challenger is better."""


class HarnessBase:
    """Defaults for the optional hooks of `Harness`, and the ones a harness's package adds to the CLI."""

    name = "harness"
    parallel = 1
    needs_gpu = False
    """Whether an evaluation needs a GPU of its own (a Ray task then asks for one)."""
    build_workers = 0
    Settings: ClassVar[type]
    """The pydantic model of the campaign's `harness:` section (with its `name`)."""

    def adopt(self, fingerprint: dict) -> None:
        pass

    @staticmethod
    def summary_data(store: Store, run_id: int) -> dict | None:
        """What the harness adds to a run's report, as data (`report --json`), or None."""
        return None

    @staticmethod
    def summary(run_id: int, data: dict) -> list[Section]:
        """`summary_data` as tables, printed after `run` and in `report` and written into the HTML report."""
        return []

    @staticmethod
    def doctor(campaign: Campaign) -> list[tuple[str, str | None, str, bool]]:
        """(what, where it was found or None, what to do if missing, whether this campaign needs it) for
        `autodiscovery doctor`: what `run` would find missing, so that the two agree."""
        return []

    def prompt_facts(self) -> dict:
        """Facts of the problem an LLM agent's prompt states (its correctness bar, say)."""
        return {}
