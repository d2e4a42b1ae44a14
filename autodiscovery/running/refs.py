"""Recorded runs as the commands name and open them: `RUN` or `RUN/SEQ`, and a run's campaign (with any
`--set` overrides), fingerprint and harness, read back from the store in one place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from autodiscovery import AutoDiscoveryError, registry
from autodiscovery.campaign import DEFAULT_HARNESS, Campaign, apply_override, validate
from autodiscovery.store import Candidate, Run, Store
from autodiscovery.store.models import database_of

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from autodiscovery.roles import Kind


class RefError(AutoDiscoveryError):
    pass


@dataclass(frozen=True)
class Ref:
    """A recorded run, or one of its candidates."""

    run: int
    seq: int | None = None

    def __str__(self) -> str:
        return f"{self.run}" if self.seq is None else f"{self.run}/{self.seq}"


def parse(text: str, what: str = "", seq: str = "optional") -> Ref:
    """`RUN` or `RUN/SEQ`; `seq` is 'optional', 'required' (RUN/SEQ only) or 'none' (RUN only). An
    error names `what` asked for it (an option, a command)."""
    run, slash, number = str(text).strip().partition("/")
    ok = run.isdigit() and (number.isdigit() if slash else True)
    forms = {"optional": "RUN or RUN/SEQ (e.g. 3 or 3/7)", "required": "RUN/SEQ (e.g. 3/7)", "none": "RUN (e.g. 3)"}
    if not ok or (seq == "required" and not slash) or (seq == "none" and slash):
        prefix = f"{what} " if what else ""
        raise RefError(f"{prefix}'{text}' is not {forms[seq]}")
    return Ref(int(run), int(number) if slash else None)


def candidate_at(s: Session, at: Ref, said: str) -> Candidate:
    """The candidate `at` names (`RUN/SEQ`, or `RUN` for its best) in an open session; a RefError that
    begins with `said` (the command and what it was given) where the run has no such candidate or no best
    yet, or where there is no such run."""
    run = s.get(Run, at.run)
    if run is None:
        raise RefError(f"{said}: no run {at.run} in {database_of(s)}")
    cand = Candidate.by_seq(s, run.id, at.seq) if at.seq is not None else run.best
    if cand is None:
        raise RefError(f"{said}: run {at.run} has {f'no candidate #{at.seq}' if at.seq is not None else 'no best yet'}")
    return cand


@dataclass
class PastRun:
    """A run as it was recorded: its config (overrides applied), campaign, fingerprint, harness class."""

    run_id: int
    config: dict
    fingerprint: dict
    campaign: Campaign
    harness: Kind


def open_run(store: Store, run_id: int, overrides: list[str] | tuple[str, ...] = ()) -> PastRun:
    """Run `run_id` of this database, its campaign validated with `overrides` on top (they are named in
    any error they cause)."""
    with store.session() as s:
        run = Run.find(s, run_id)
        if run is None:
            raise RefError(f"no run {run_id} in {database_of(s)}")
        config, fingerprint = dict(run.config), dict(run.fingerprint)
    for assignment in overrides:
        apply_override(config, assignment)
    campaign = validate(config, f"run {run_id} config", overrides)
    harness = registry.harness_for({**config, "harness": config.get("harness") or {"name": DEFAULT_HARNESS}})
    return PastRun(run_id, config, fingerprint, campaign, harness)
