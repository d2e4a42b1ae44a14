"""A harness as the core sees it: small roles, each a Protocol of the few members one part of the core
asks for. A harness plays the roles it implements and no others.

`Evaluating` is the one every harness plays: it is what the loop needs to build, measure and compare
candidates. Every other role is optional: a harness that plays no part in something (no prompts, no
memory checker, no doctor) leaves its members out, and the part of the core that would use them asks
`isinstance(harness, Role)` first and goes on without it. A role is played whole: a harness that has
some of a role's members but not all of them is refused when it is loaded (`incomplete`), naming what it
lacks. Roles marked "on the class" are asked of the harness's class, for the views of recorded runs make
no harness. What a harness declares of itself beside its roles (evaluations at once, its settings'
model, the figures it shows) is read through `declared`, with the defaults of what it leaves out.

What passes through the roles is in `autodiscovery/records.py` and `autodiscovery/objective.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from autodiscovery.campaign import Campaign, HarnessSettings, ProblemBase
from autodiscovery.objective import Chart, Column, Objective, Section
from autodiscovery.records import Entry, History, Outcome

if TYPE_CHECKING:
    from pathlib import Path

    from autodiscovery.store import Store
    from autodiscovery.toolkit.build import BuildReport


# ---- what the loop needs --------------------------------------------------------------------------------

@runtime_checkable
class Evaluating(Protocol):
    """What every harness is: the loop builds, measures and compares candidates through these and nothing
    else. A harness is made from its campaign (`registry.make_harness`: `Class(campaign)`)."""

    name: str
    objective: Objective
    """What its number means: the name, which way is better, where the score sits in the metrics."""

    def preflight(self, need_gpu: bool = True) -> dict:
        """The fingerprint of where the run happens; raise an AutoDiscoveryError naming what is missing."""
        ...

    def build(self, source: str) -> BuildReport:
        """The candidate built: the artifact, the compiler's log and facts (a failure is `ok` False)."""
        ...

    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        """Check and measure one candidate; a failure is an Outcome with its status, never an exception.

        `bar` is the score the candidate has to beat (the incumbent's): a harness may screen, stopping
        the measurement early when a short one shows the candidate clearly below it
        (metrics["screened"] then says after how much)."""
        ...

    def head_to_head(self, challenger: tuple[str, BuildReport], incumbent: tuple[str, BuildReport]) -> Outcome:
        """Both measured against each other: metrics['ratio'] above 1 means the challenger is better."""
        ...


@runtime_checkable
class Kind(Protocol):
    """A harness's class, as the views of recorded runs and the registry read it."""

    name: str
    objective: Objective

    def __call__(self, campaign: Campaign) -> Evaluating: ...


class Shown(Protocol):
    """A harness or its class, as the views read it: its name and objective (its columns, `declared`)."""

    name: str
    objective: Objective


# ---- optional roles, asked of a harness -----------------------------------------------------------------

@runtime_checkable
class Checking(Protocol):
    """Refuses, before a build, a candidate the problem cannot take (the loop records it `rejected`)."""

    def check(self, source: str) -> Any:
        """The candidate's launch plan at the campaign's problem; an AutoDiscoveryError with the reason
        where the problem cannot take it."""
        ...


@runtime_checkable
class Inspecting(Protocol):
    """What `autodiscovery check` compares beside the plan (`running/check.py`): the manifest as this
    harness reads it, the kernels the plan launches against the built cubin, and what else it compared."""

    @classmethod
    def manifest(cls, source: str) -> Manifest | None:
        """A candidate's launch manifest, before any problem's sizes are applied; an AutoDiscoveryError (one
        line) where the source has none this harness can read; None for a whole program."""
        ...

    def entries(self, plan: Any) -> list[Entry]:
        """The kernels a plan (what `check` returned) launches, in order, each with the bytes of the
        arguments it passes: what the built cubin must define."""
        ...

    def check_notes(self) -> list[tuple[str, bool]]:
        """What the last `check` compared beside the plan, as lines: (line, whether it was checked); a line
        not checked says why and where it will be."""
        ...


@runtime_checkable
class Sanitizing(Protocol):
    """A memory and race checker run on a candidate before it is kept."""

    @property
    def sanitizes(self) -> bool:
        """Whether `sanitize` checks anything with these settings (a keep then holds a device for it)."""
        ...

    def sanitize(self, source: str, build: BuildReport) -> Outcome | None:
        """The candidate under the checker: `ok` lets the keep stand, any other status blocks it (the log
        says which check and where); None: not checked."""
        ...


@runtime_checkable
class Resuming(Protocol):
    """Takes what a recorded run's fingerprint fixed, so that a resumed run measures as it did."""

    def adopt(self, fingerprint: dict) -> None:
        """Keep the recorded device facts and baseline (what the new preflight would choose again)."""
        ...


@runtime_checkable
class Fitting(Protocol):
    """A model of how a configuration fits the problem before anything is built: the search agent orders
    its moves by it (`agents/shape_order.py`)."""

    def fit(self, source: str, knobs: dict | None = None) -> Fit | None:
        """The configuration's `Fit` (None: this source is not one the model knows). It reads the manifest
        only: a search gives it the source rendered up to the end of its manifest (`Space.head`)."""
        ...


@runtime_checkable
class Briefing(Protocol):
    """What the LLM agent's prompts ask of a harness (`agents/prompting.py`)."""

    def brief(self, fingerprint: dict) -> str:
        """The task: the problem, the rules a candidate keeps, how it is checked and measured."""
        ...

    def hardware(self, fingerprint: dict, history: History) -> str:
        """The machine and the baseline, as a section of the request ('' where there is nothing to say)."""
        ...

    def build_notes(self, facts: dict) -> list[str]:
        """What a build's facts say beyond registers, shared memory, spills and stack, in words."""
        ...

    def prompt_profile(self, seq: int, profile: dict) -> str:
        """A stored profile as the model reads it ('' where the harness has no profiler)."""
        ...


@runtime_checkable
class Profiling(Protocol):
    """A profiler run on a candidate (`autodiscovery profile`)."""

    def profile(self, source: str, build: BuildReport) -> Outcome:
        """The candidate under the profiler, metrics["profile"] holding what it found."""
        ...


@runtime_checkable
class Replaying(Protocol):
    """Built candidates measured again together (`autodiscovery replay`), rather than one by one as
    `evaluate` measures them."""

    def replay(self, items: list[tuple[str, BuildReport]]) -> list[Outcome]:
        """An Outcome for each item, in order (a lineage, in one evaluation process or side by side)."""
        ...


# ---- optional roles, asked of a harness's class ---------------------------------------------------------

@runtime_checkable
class Choosing(Protocol):
    """The class a configuration makes, where a setting changes what the objective is (`× best Lt`
    rather than `× cuBLAS`): the registry makes that class (`registry.harness_for`)."""

    @classmethod
    def for_config(cls, config: dict) -> Kind: ...


@runtime_checkable
class Summarizing(Protocol):
    """A run's report tables (`report`, after `run`, the HTML report)."""

    @staticmethod
    def summary_data(store: Store, run_id: int) -> dict | None:
        """What the harness adds to a run's report, as data (`report --json`), or None."""
        ...

    @staticmethod
    def summary(run_id: int, data: dict) -> list[Section]:
        """`summary_data` as tables."""
        ...


@runtime_checkable
class Charting(Protocol):
    """Charts of the HTML report and `serve`, drawn from the report's data (`review.html.collect`) with
    the helpers of `review.charts`."""

    @staticmethod
    def charts(data: dict) -> list[Chart]: ...


@runtime_checkable
class ShowingProfiles(Protocol):
    """A stored profile as a table (`profile`, `show RUN/SEQ`, `serve`)."""

    @staticmethod
    def profile_section(label: str, profile: dict) -> Section | None: ...


@runtime_checkable
class Identifying(Protocol):
    """The facts of a fingerprint that say where and with what a measurement was made, as `replay`
    compares them, where they are more than the device and the `toolchain` (`identity`)."""

    @classmethod
    def identity(cls, fingerprint: dict) -> dict: ...


@runtime_checkable
class Doctoring(Protocol):
    """What `autodiscovery doctor` checks, as `run` would find it missing."""

    @staticmethod
    def doctor(campaign: Campaign) -> list[tuple[str, str | None, str, bool]]:
        """(what, where it was found or None, what to do if missing, whether this campaign needs it)."""
        ...


@runtime_checkable
class Exporting(Protocol):
    """The best kernels of recorded runs written as a library a program can call (`export --library`)."""

    @classmethod
    def export_library(cls, items: list[dict], folder: Path) -> dict:
        """Each item (its run, label, campaign, fingerprint, source, knobs and figures) written into
        `folder`, with the dispatch table as data."""
        ...


ROLES: dict[type, str] = {
    Evaluating: "what the loop needs", Checking: "refusing a candidate before its build",
    Inspecting: "what `check` compares", Sanitizing: "a memory checker before a keep",
    Resuming: "resuming a run", Fitting: "the search's model of a configuration",
    Briefing: "the LLM agent's prompts", Profiling: "`profile`", Replaying: "`replay`",
    Choosing: "the class a configuration makes", Summarizing: "the report's tables",
    Charting: "the report's charts", ShowingProfiles: "stored profiles as tables",
    Identifying: "what `replay` compares", Doctoring: "`doctor`", Exporting: "`export --library`",
}
"""Every role, with what it is for (as messages say it)."""


def members(role: type) -> list[str]:
    """A role's members, by name."""
    own = vars(role)
    return sorted(n for n in {*own.get("__annotations__", {}), *own} if not n.startswith("_"))


def played(harness: object) -> list[str]:
    """The roles a harness (or its class) plays whole, by name."""
    return [role.__name__ for role in ROLES if all(hasattr(harness, m) for m in members(role))]


def incomplete(cls: type) -> list[str]:
    """Roles a harness class plays only in part, each as 'Role (what it is for) lacks a, b'; and
    `Evaluating` whenever it lacks any of it."""
    out = []
    for role, purpose in ROLES.items():
        names = members(role)
        have = [m for m in names if hasattr(cls, m) or m in getattr(cls, "__annotations__", {})]
        if (role is Evaluating or have) and len(have) < len(names):
            out.append(f"{role.__name__} ({purpose}) lacks {', '.join(m for m in names if m not in have)}")
    return out


# ---- what a harness declares of itself ------------------------------------------------------------------

@dataclass(frozen=True)
class Declared:
    """What a harness declares of itself beside its roles, as class attributes (`parallel` may be a
    property), with the defaults of what it leaves out."""

    parallel: int = 1
    """Evaluations at once (simulations, or one per GPU of a pool); 1 measures one at a time."""
    build_workers: int = 0
    """Builds at once (0: one per CPU core)."""
    needs_gpu: bool = False
    """Whether an evaluation needs a GPU of its own (a Ray task then asks for one)."""
    columns: tuple[Column, ...] = ()
    """The figures it shows beside the objective, each in the views it names."""
    Settings: type[HarnessSettings] = HarnessSettings
    """The pydantic model of the campaign's `harness:` section (with its `name`)."""
    Problem: type[ProblemBase] = ProblemBase
    """The pydantic model of the campaign's `problem:` section (`ProblemBase`: the harness takes none)."""
    resumable: tuple[str, ...] = ("timeout_s", "build_workers", "cache_dir")
    """Fields of its settings a resumed run may change (what the measurements mean stays)."""
    toolchain: tuple[str, ...] = ()
    """Keys of its fingerprint a resumed run must find unchanged (compiler, driver, libraries, simulator),
    unless told to go on with another (`--allow-new-toolchain`)."""
    space: str | None = None
    """The search space the search agent walks where a campaign names none; None: a campaign of this
    harness names its own."""


def declared(harness: object) -> Declared:
    """What a harness, or its class, declares of itself (a property read on a class is left at its
    default: `parallel` is an instance's)."""
    given = {f.name: getattr(harness, f.name) for f in fields(Declared) if hasattr(harness, f.name)}
    return Declared(**{k: v for k, v in given.items() if not isinstance(v, property)})


def identity(harness: object, fingerprint: dict) -> dict:
    """What `replay` and a run's header compare of a fingerprint: the harness's `identity` where it is
    `Identifying`, else the device and the keys of its `toolchain`."""
    if isinstance(harness, Identifying):
        return harness.identity(fingerprint)
    return {k: fingerprint[k] for k in ("gpu", *declared(harness).toolchain) if k in fingerprint}


def generic_brief(objective: Objective) -> str:
    """The task in words where a harness does not brief an agent of its own (`Briefing`)."""
    return (f"You are a GPU kernel engineer. Each turn you state one hypothesis and make one change to the "
            f"kernel that tests it; the harness checks it and measures {objective.name} "
            f"({'higher' if objective.higher_is_better else 'lower'} is better), and the change is kept only "
            "if it is correct and better than the best kernel so far.")


# ---- what passes through them ---------------------------------------------------------------------------

class Manifest(Protocol):
    """A candidate's launch manifest as its harness reads it (`Inspecting.manifest`): what the loop and
    `autodiscovery check` read of it; the rest is the harness's own."""

    requires: list[str]
    """Conditions on the problem's sizes the kernel states it needs (`K % 64 == 0`)."""


class Fit(Protocol):
    """A harness's model of how one configuration fits the campaign's problem (`Fitting.fit`)."""

    @property
    def estimate(self) -> float:
        """A modelled cost, lower is better, comparable between configurations at one problem."""
        ...

    @property
    def tie_break(self) -> Any:
        """How to order configurations whose estimates are equal, by what the model leaves out (lower first;
        0 where it has nothing to add)."""
        ...

    @property
    def l2_gb(self) -> float:
        """The bytes of operands the configuration moves that the estimate does not count (for a GEMM, what
        its tiles read from L2, in GB; 0 where the model has none): of moves the estimate cannot tell apart,
        those that move markedly fewer go first."""
        ...

    def as_dict(self) -> dict:
        """What it states of itself, by name (numbers, flags, short lists): recorded beside a measurement,
        and what the search's cost model reads of it (`agents/costmodel.py`)."""
        ...

    def describe(self) -> str:
        """The fit in words: its tiles, the waves they run in, the work of the busiest unit."""
        ...
