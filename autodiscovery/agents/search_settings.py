"""`agent.search`: the settings of the built-in search agent (`search.py`), each with what it does."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from autodiscovery.campaign import Strict


class SearchSettings(Strict):
    """`agent.search`: the built-in search over a space of kernel families."""

    space: str | None = None
    """The search space: a folder holding families.yaml, by name (under search_spaces/, or beside the
    campaign file) or by path (relative to the campaign file's folder); none: the harness's own
    (hopper_gemm's), where it has one."""
    seed: int = 0
    """Random seed of the knob optimizer."""
    knob_patience: int = Field(6, ge=1)
    """Knob moves without a keep before another family worth tuning gets its turn (families take turns;
    the run ends by the loop's stop rules, or when every valid configuration was tried)."""
    batch: int | None = Field(None, ge=1, le=64)
    """Candidates proposed at once, built in parallel; none: 4, or one per device where the harness
    measures on more (`--gpus`, Ray)."""
    warm_start: int = Field(3, ge=0)
    """Configurations recorded at other problems to try first: the best of each of this many runs of the
    same space, harness and element types, on this GPU (or another of its compute capability, behind it),
    in the database, nearest problem first (0: none)."""
    overlap: bool | None = None
    """Propose and build knob moves while the last candidates are measured (they then miss those
    verdicts; a structural move always waits for the verdicts before it); none: on."""
    start: Literal["auto", "bottom", "top"] = "auto"
    """Where the run begins: `bottom`, the campaign's seed, then the climb up the ladder (the whole story);
    `top`, what the warm start offers, else the highest rungs fitted to the problem, highest first (the
    seed and the rungs below are measured only where those fail), so that a new problem gets a
    competitive kernel first; `auto`, `top` where the seed would take more than a twentieth of the run's
    minutes (its family's `tflops` over the problem's work, for the ten launches or so of its gate and
    first pairs: a naive kernel on a large problem), else `bottom`."""
    kernels: list[str] = []
    """Run databases to warm-start from besides the run's own (`warm_start`): file paths, or `shipped` for
    the databases shipped under the project's docs/; `!PATTERN` leaves out those whose path ends in what
    the glob matches (`!llama70b-*/*.db`; one that leaves out none is refused). Their kernels are re-checked
    and re-measured at this problem like any candidate, never trusted."""
    cost_model: bool = True
    """Learn a cost model from the benchmarks recorded in the databases the warm start reads (the run's
    own and `kernels`): where the harness's fit of the shape is wrong, by family, knobs, shape and GPU
    (`costmodel.py`). Every fit the search orders its moves by is corrected by it, and its two fastest
    picks among the configurations recorded there (the second of another tile) are tried after the warm start's."""
    own_records: bool = True
    """Warm-start from this campaign's own earlier runs found in the `kernels` databases too (false: a
    benchmark of the search on shapes it has not seen learns nothing from its own earlier results there;
    the run's own database is read either way)."""
