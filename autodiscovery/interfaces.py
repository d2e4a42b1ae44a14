"""The two interfaces the loop talks to, and the narrow views of a harness its other parts use; what
passes through them is in `records.py` (named here too).

An `Agent` proposes candidates; a `Harness` builds, checks and measures them and says what the number
means (its `Objective`). The loop uses these methods and nothing else. Optional hooks have defaults in
`AgentBase` and `HarnessBase`, so an implementation states only what it does differently; an optional
capability is declared there too, with the default that says "not here", and callers ask it, never probe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from autodiscovery.campaign import Campaign, HarnessSettings, ProblemBase
from autodiscovery.objective import VIEWS, Chart, Column, Objective, Section, columns  # noqa: F401
from autodiscovery.records import Entry, History, Outcome, Proposal, Record  # noqa: F401

if TYPE_CHECKING:
    from pathlib import Path

    from autodiscovery.store import Store
    from autodiscovery.toolkit.build import BuildReport


@runtime_checkable
class Agent(Protocol):
    name: str
    batch: int
    """Proposals a round."""
    exhausted_reason: str
    """The stop reason when `propose` returns nothing."""
    overlap: bool
    """Whether proposals may be asked for while earlier candidates are still measured (`ahead`)."""
    speculate: bool
    """Whether proposals cost nothing but time (no request, no state): then they may also be asked for
    only to start their builds, before the verdicts they depend on are in."""

    def ahead(self, history: History) -> bool:
        """Whether the next proposals may be asked for now, with the verdicts of the last candidates not yet
        known (`history` shows them as proposed): True only where they do not depend on those verdicts."""

    def propose(self, history: History, n: int) -> list[Proposal]:
        """Up to `n` new proposals given everything tried so far; [] when it has nothing left."""

    def seed_proposal(self, campaign: Campaign) -> Proposal:
        """The campaign's seed as a proposal."""

    def opening(self, campaign: Campaign, history: History) -> list[Proposal]:
        """A new run's first candidates (`history` holds none yet): the seed, or where the agent starts
        instead."""

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
    overlap: bool = False
    """Whether proposals may be asked for while earlier candidates are still measured (off: each round is
    proposed once every candidate before it is decided)."""
    speculate: bool = False
    """Whether proposals cost nothing but time (no request to pay for, no state kept): they may then be
    asked for speculatively, only to start their builds."""
    Settings: ClassVar[type[BaseModel]] = NoSettings
    """The pydantic model of the agent's section of the campaign's `agent:` (`agent.<section>`)."""
    section: ClassVar[str | None] = None
    """The name of that section (None: the agent's `name`)."""

    def __init__(self, campaign: Campaign | None = None) -> None:
        """An agent is made from its campaign (`registry.agent(kind)(campaign)`); the base keeps nothing."""

    @classmethod
    def check(cls, settings: BaseModel) -> None:
        """Raise ValueError('field: why') when these settings cannot work for this agent as the one that
        proposes (a section may be valid for a run of another agent)."""

    def seed_proposal(self, campaign: Campaign) -> Proposal:
        return Proposal(hypothesis="The seed: the starting point every change is measured from.",
                        source=campaign.seed_path().read_text(), proposer="seed",
                        family=campaign.seed_path().name.split(".")[0])

    def opening(self, campaign: Campaign, history: History) -> list[Proposal]:
        return [self.seed_proposal(campaign)]

    def bind(self, store: Store, run_id: int, harness: Harness, fingerprint: dict) -> None:
        pass

    def preflight(self) -> None:
        pass

    def propose(self, history: History, n: int) -> list[Proposal]:
        raise NotImplementedError(f"the {self.name} agent proposes nothing")

    def ahead(self, history: History) -> bool:
        """By default: `overlap` (an agent whose proposals depend on its history says more precisely)."""
        return self.overlap


@runtime_checkable
class Harness(Protocol):
    name: str
    objective: ClassVar[Objective]
    columns: ClassVar[tuple[Column, ...]]
    """The figures it shows beside the objective (`Column`)."""
    @property
    def parallel(self) -> int:
        """Evaluations at once (simulations, or one per GPU of a pool); 1 measures one at a time (a GPU)."""

    build_workers: int
    """Builds at once (0: one per CPU core)."""
    needs_gpu: bool
    """Whether an evaluation needs a GPU of its own (a Ray task then asks for one)."""

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

    @property
    def sanitizes(self) -> bool:
        """Whether `sanitize` checks anything (a keep then holds a device for it)."""

    def fit(self, source: str, knobs: dict | None = None) -> Fit | None:
        """How a configuration fits the problem, before anything is built (the search agent orders its
        moves by it); None where the harness has no model (`HarnessBase`'s). It reads the manifest: a
        search gives it the source rendered up to the end of its manifest (`Space.head`)."""

    def sanitize(self, source: str, build: BuildReport) -> Outcome | None:
        """The candidate under a memory and race checker, before it is kept: `ok` lets the keep stand,
        any other status blocks it (the log says which check and where); None: not checked here."""


class Briefing(Protocol):
    """What the LLM agent's prompts ask of a harness (`agents/prompting.py`): the task in words, the
    machine, a profile as the model reads it, a build's facts beyond the compiler's, the figures shown
    beside the objective."""

    objective: ClassVar[Objective]
    columns: ClassVar[tuple[Column, ...]]

    def brief(self, fingerprint: dict) -> str: ...

    def hardware(self, fingerprint: dict, history: History) -> str: ...

    def prompt_profile(self, seq: int, profile: dict) -> str: ...

    def build_notes(self, facts: dict) -> list[str]: ...


class Fitting(Protocol):
    """What the search agent's ordering of moves asks of a harness (`agents/shape_order.py`)."""

    def fit(self, source: str, knobs: dict | None = None) -> Fit | None: ...


class Showing(Protocol):
    """What the views of a recorded run ask of a harness's class (`review/`, `serve/`): the figures beside
    the objective, the report's tables and charts, a stored profile as a table, what `replay` compares."""

    name: str
    objective: ClassVar[Objective]
    columns: ClassVar[tuple[Column, ...]]

    @staticmethod
    def summary_data(store: Store, run_id: int) -> dict | None: ...

    @staticmethod
    def summary(run_id: int, data: dict) -> list[Section]: ...

    @staticmethod
    def charts(data: dict) -> list[Chart]: ...

    @staticmethod
    def profile_section(label: str, profile: dict) -> Section | None: ...

    @classmethod
    def identity(cls, fingerprint: dict) -> dict: ...


class HarnessBase:
    """Defaults for the optional hooks of `Harness`: how its numbers are shown (columns, report sections,
    charts, prompts), what `doctor` checks, what a resumed run may change."""

    name = "harness"
    objective: ClassVar[Objective]
    """What its number means (every harness declares one)."""
    needs_gpu = False
    """Whether an evaluation needs a GPU of its own (a Ray task then asks for one)."""
    profiles: ClassVar[bool] = False
    """Whether `profile` runs a profiler (`autodiscovery profile`); `HarnessBase`'s has none."""
    build_workers = 0
    Settings: ClassVar[type[HarnessSettings]]
    """The pydantic model of the campaign's `harness:` section (with its `name`)."""
    Problem: ClassVar[type[ProblemBase]] = ProblemBase
    """The pydantic model of the campaign's `problem:` section (`ProblemBase`: the harness takes none)."""
    library: ClassVar[bool] = False
    """Whether `export_library` writes the best kernels of runs as a library a program can call
    (`export --library`)."""
    columns: ClassVar[tuple[Column, ...]] = ()
    """The figures it adds beside the objective (`Column`), each in the views it names."""
    resumable: ClassVar[tuple[str, ...]] = ("timeout_s", "build_workers", "cache_dir")
    """Fields of its settings a resumed run may change (what the measurements mean stays)."""
    toolchain: ClassVar[tuple[str, ...]] = ()
    """Keys of its fingerprint a resumed run must find unchanged (compiler, driver, libraries,
    simulator), unless it is told to go on with another (`--allow-new-toolchain`)."""
    space: ClassVar[str | None] = None
    """The search space the search agent walks where a campaign names none (`agent.search.space`); None:
    a campaign of this harness names its own."""
    for_baseline: ClassVar[str | None] = None
    """The `harness.baseline` a subclass stands for, where the baseline a campaign chooses changes what the
    objective is (`× best Lt` rather than `× cuBLAS`): making the harness from such a campaign, or reading a
    run recorded with it (`for_config`, `registry.harness_for`), gives that subclass. None: the harness's own
    objective."""

    def __init__(self, campaign: Campaign | None = None) -> None:
        """A harness is made from its campaign (`registry.make_harness(campaign)`); the base keeps nothing."""

    @property
    def parallel(self) -> int:
        """Evaluations at once: one by default (a harness may say more, as a property or a class attribute)."""
        return 1

    @property
    def sanitizes(self) -> bool:
        """Whether `sanitize` checks anything: a harness with a checker says so from its settings."""
        return False

    def check_notes(self) -> list[tuple[str, bool]]:
        """What the last `check` compared the candidate with beside its plan, as lines for `autodiscovery
        check`: (line, whether it was checked); a line not checked says why and where it will be."""
        return []

    @classmethod
    def for_config(cls, config: dict) -> type[HarnessBase]:
        """The harness class as a recorded run's configuration makes it: the subclass that stands for its
        `harness.baseline` (`for_baseline`), else itself."""
        wanted = (config.get("harness") or {}).get("baseline")
        return next((sub for sub in cls.__subclasses__() if sub.for_baseline is not None and sub.for_baseline == wanted), cls)

    @classmethod
    def identity(cls, fingerprint: dict) -> dict:
        """The facts of a fingerprint that say where and with what a measurement was made, as `replay`
        compares them (the device under `gpu`, and the toolchain)."""
        return {k: fingerprint[k] for k in ("gpu", *cls.toolchain) if k in fingerprint}

    def adopt(self, fingerprint: dict) -> None:
        pass

    # The members every harness writes (`Harness`), declared here so that a HarnessBase is a Harness to read.
    def preflight(self, need_gpu: bool = True) -> dict:
        raise NotImplementedError(f"the {self.name} harness has no preflight")

    def check(self, source: str) -> Any:
        raise NotImplementedError(f"the {self.name} harness has no check")

    def build(self, source: str) -> BuildReport:
        raise NotImplementedError(f"the {self.name} harness has no build")

    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        raise NotImplementedError(f"the {self.name} harness has no evaluate")

    def head_to_head(self, challenger: tuple[str, BuildReport], incumbent: tuple[str, BuildReport]) -> Outcome:
        raise NotImplementedError(f"the {self.name} harness has no head_to_head")

    def sanitize(self, source: str, build: BuildReport) -> Outcome | None:
        """None: this harness has no memory or race checker to run before a keep."""
        return None

    def profile(self, source: str, build: BuildReport) -> Outcome:
        """The candidate under the harness's profiler, metrics["profile"] holding what it found; only where
        `profiles` is True."""
        raise NotImplementedError(f"the {self.name} harness has no profiler")

    def replay(self, items: list[tuple[str, BuildReport]]) -> list[Outcome] | None:
        """Built candidates measured again together (`autodiscovery replay`: a lineage, in one evaluation
        process or side by side), an Outcome each, in order. None: each is measured alone, as `evaluate`
        measures it, one after another."""
        return None

    @classmethod
    def export_library(cls, items: list[dict], folder: Path) -> dict:
        """The best kernels of recorded runs (an item each: its run, label, campaign, fingerprint, source,
        knobs and figures) written into `folder` as a library, and its dispatch table as data; only a
        harness whose `library` is set writes one."""
        raise NotImplementedError(f"the {cls.name} harness does not write libraries")

    @classmethod
    def manifest(cls, source: str) -> Manifest | None:
        """A candidate's launch manifest as this harness reads it, before any problem's sizes are applied;
        an AutoDiscoveryError (one line) where the source has none this harness can read. None: the
        harness reads no manifest (a whole program)."""
        return None

    def entries(self, plan: Any) -> list[Entry]:
        """The kernels a candidate's plan (what `check` returned) launches, in order, each with the bytes of
        the arguments it passes: what `autodiscovery check` compares with the built cubin. []: nothing to
        compare (a whole program)."""
        return []

    @staticmethod
    def summary_data(store: Store, run_id: int) -> dict | None:
        """What the harness adds to a run's report, as data (`report --json`), or None."""
        return None

    @staticmethod
    def summary(run_id: int, data: dict) -> list[Section]:
        """`summary_data` as tables, printed after `run` and in `report` and written into the HTML report."""
        return []

    @staticmethod
    def charts(data: dict) -> list[Chart]:
        """Charts for the HTML report, drawn from its data (`autodiscovery.review.html.collect`: the run,
        every candidate, the lineage, the best's measurement, `summary_data`); the helpers in
        `autodiscovery.review.charts` draw in the report's style."""
        return []

    @staticmethod
    def doctor(campaign: Campaign) -> list[tuple[str, str | None, str, bool]]:
        """(what, where it was found or None, what to do if missing, whether this campaign needs it) for
        `autodiscovery doctor`: what `run` would find missing, so that the two agree."""
        return []

    @staticmethod
    def build_notes(facts: dict) -> list[str]:
        """What a build's facts say beyond registers, shared memory, spills and stack, in words (prompts)."""
        return []

    @staticmethod
    def profile_section(label: str, profile: dict) -> Section | None:
        """A stored profile (`autodiscovery profile`) as a table, for `profile` and `show RUN/SEQ`."""
        return None

    def brief(self, fingerprint: dict) -> str:
        """What an LLM agent is told the task is: the problem, the rules a candidate keeps, how it is
        checked and measured (the system prompt, before the reply format)."""
        return (f"You are a GPU kernel engineer. Each turn you state one hypothesis and make one change to "
                f"the kernel that tests it; the harness checks it and measures {self.objective.name} "
                f"({'higher' if self.objective.higher_is_better else 'lower'} is better), and the change is kept "
                "only if it is correct and better than the best kernel so far.")

    def hardware(self, fingerprint: dict, history: History) -> str:
        """What an LLM agent is told of the machine and the baseline (a section of its request)."""
        return ""

    def prompt_profile(self, seq: int, profile: dict) -> str:
        """A stored profile as an LLM agent reads it ('' when there is none)."""
        return ""

    def fit(self, source: str, knobs: dict | None = None) -> Fit | None:
        """How a configuration of a search space fits the campaign's problem, before anything is built (a
        `Fit`): the search agent starts a family where the fit is best. None: the harness has no model.
        `source` may end with the manifest (`Space.head`): a fit reads the manifest only."""
        return None


class Manifest(Protocol):
    """A candidate's launch manifest as its harness reads it (`HarnessBase.manifest`): what the loop and
    `autodiscovery check` read of it; the rest is the harness's own."""

    requires: list[str]
    """Conditions on the problem's sizes the kernel states it needs (`K % 64 == 0`)."""


class Fit(Protocol):
    """A harness's model of how one configuration fits the campaign's problem (`HarnessBase.fit`)."""

    @property
    def estimate(self) -> float:
        """A modelled cost, lower is better, comparable between configurations at one problem."""

    @property
    def tie_break(self) -> Any:
        """How to order configurations whose estimates are equal, by what the model leaves out (lower first;
        0 where it has nothing to add)."""

    @property
    def l2_gb(self) -> float:
        """The bytes of operands the configuration moves that the estimate does not count (for a GEMM, what
        its tiles read from L2, in GB; 0 where the model has none): of moves the estimate cannot tell apart,
        those that move markedly fewer go first."""

    def as_dict(self) -> dict:
        """What it states of itself, by name (numbers, flags, short lists): recorded beside a measurement,
        and what the search's cost model reads of it (`agents/costmodel.py`)."""

    def describe(self) -> str:
        """The fit in words: its tiles, the waves they run in, the work of the busiest unit."""
