"""The states runs, candidates and evaluations are recorded in, an evaluation's kinds and a decision's
verdicts: StrEnums whose values are what the database stores.

They live apart from the models (`store/models.py`, which names them too) so that a process that records
nothing, an evaluation child, can speak of them without importing SQLAlchemy.
"""

from __future__ import annotations

import enum


class RunStatus(enum.StrEnum):
    running = "running"
    finished = "finished"
    interrupted = "interrupted"
    failed = "failed"


class CandidateStatus(enum.StrEnum):
    proposed = "proposed"  # recorded, not yet evaluated
    rejected = "rejected"  # refused before compiling (constraint, manifest, shape)
    compile_error = "compile_error"
    incorrect = "incorrect"
    timeout = "timeout"
    crashed = "crashed"
    measured = "measured"  # passed the gate and was timed; awaiting its decision
    kept = "kept"
    reverted = "reverted"
    built = "built"  # dry runs: compiled, never measured


class EvalStatus(enum.StrEnum):
    running = "running"  # begun, not finished: a run that stops here redoes it on resume
    interrupted = "interrupted"  # cut off by the run stopping; done again
    ok = "ok"
    compile_error = "compile_error"
    incorrect = "incorrect"
    timeout = "timeout"
    crashed = "crashed"
    rejected = "rejected"


class EvalKind(enum.StrEnum):
    check = "check"  # a refusal before any build
    benchmark = "benchmark"  # the candidate's own measurement
    head_to_head = "head_to_head"  # against the incumbent, before a keep
    sanitize = "sanitize"  # under the memory and race checker, before a keep
    ladder = "ladder"  # the final measurement of a family's best (`ladder`)
    profile = "profile"  # the harness's profiler (`profile`)


class Verdict(enum.StrEnum):
    keep = "keep"
    revert = "revert"


class ToolStatus(enum.StrEnum):
    """What one of compute-sanitizer's tools made of a candidate (`toolkit/sanitize.py`)."""

    clean = "clean"  # ran to its end and found nothing in the candidate's kernels
    findings = "findings"  # found something (what it found before it ran out of time counts too)
    timeout = "timeout"  # ran out of time before it found anything
    failed = "failed"  # did not check: it or the child failed without a finding


class Sanitized(enum.StrEnum):
    """Whether a kept candidate ran under compute-sanitizer, and what that found (`export`); a sanitizer
    run that did not end either way is said by its evaluation's status (timeout, crashed)."""

    clean = "clean"
    findings = "findings"
    never = "never"  # kept where no sanitizer ran, or before the harness had one

