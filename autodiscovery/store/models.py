"""The run database: runs, candidates, builds, evaluations, decisions, llm_calls.

The schema itself is created by the named migrations in `migrations.py`; these models map it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, String, Text, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

from autodiscovery.status import (  # noqa: F401  (named here too: the store's users import them from it)
    CandidateStatus,
    EvalKind,
    EvalStatus,
    RunStatus,
    Verdict,
)


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


def database_of(session: Session) -> str:
    """The database a session reads, as messages name it: a SQLite file by its path, any other by its URL
    without the password."""
    url = session.get_bind().engine.url
    if url.get_backend_name() == "sqlite":
        return (url.database or ":memory:").removeprefix("file:").split("?")[0]
    return url.render_as_string(hide_password=True)


R = TypeVar("R", bound="Base")
BIGGEST = 2**63 - 1
"""The largest integer a database column holds: no id or sequence number past it was ever recorded."""


def storable(*numbers: int) -> bool:
    """Whether numbers a user gave (a run id, a candidate's number) could be recorded ones: a lookup of one
    past BIGGEST finds nothing, where the database driver would raise."""
    return all(-BIGGEST <= n <= BIGGEST for n in numbers)


def row(session: Session, model: type[R], key: Any) -> R:
    """A row the caller wrote, or was handed by id from one it wrote: a missing one is a bug of ours, said
    as such (never an attribute error on None further on)."""
    found = session.get(model, key)
    if found is None:
        raise LookupError(f"{model.__name__} {key} is not in the database")
    return found


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign: Mapped[str] = mapped_column(String(200))
    agent: Mapped[str] = mapped_column(String(100))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    fingerprint: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[str] = mapped_column(String(20), default=RunStatus.running.value)
    stop_reason: Mapped[str | None] = mapped_column(Text, default=None)
    best_candidate_id: Mapped[int | None] = mapped_column(ForeignKey("candidates.id"), default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    elapsed_s: Mapped[float] = mapped_column(Float, default=0.0)
    owner: Mapped[str | None] = mapped_column(String(300), default=None)
    """The process driving the run (host:pid:start), or None: the lease that keeps two drivers apart."""
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"), default=None)
    """The suite this run tunes one problem of (None: a run of its own)."""

    candidates: Mapped[list[Candidate]] = relationship(
        back_populates="run", foreign_keys="Candidate.run_id", order_by="Candidate.seq"
    )
    best: Mapped[Candidate | None] = relationship(foreign_keys=[best_candidate_id], post_update=True)

    @classmethod
    def find(cls, session: Session, run_id: int) -> Run | None:
        return session.get(cls, run_id) if storable(run_id) else None


class Build(Base):
    __tablename__ = "builds"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cache_key: Mapped[str] = mapped_column(String(64), unique=True)
    ok: Mapped[bool] = mapped_column(default=False)
    registers: Mapped[int | None] = mapped_column(Integer, default=None)
    smem_static: Mapped[int | None] = mapped_column(Integer, default=None)
    spill_stores: Mapped[int | None] = mapped_column(Integer, default=None)
    spill_loads: Mapped[int | None] = mapped_column(Integer, default=None)
    stack: Mapped[int | None] = mapped_column(Integer, default=None)
    facts: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """What the harness learnt of the artifact beyond the compiler's report, by its own names."""
    compiler: Mapped[str] = mapped_column(Text, default="")
    flags: Mapped[list[str]] = mapped_column(JSON, default=list)
    log: Mapped[str] = mapped_column(Text, default="")
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    @classmethod
    def by_key(cls, session: Session, key: str) -> Build | None:
        return session.scalar(select(cls).where(cls.cache_key == key))

    @classmethod
    def record(cls, session: Session, facts: dict) -> Build:
        """The row of this build (by cache key), created on first sight."""
        row = cls.by_key(session, facts["cache_key"])
        if row is None:
            row = cls(**facts)
            session.add(row)
            session.flush()
        return row


class Candidate(Base):
    __tablename__ = "candidates"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("candidates.id"), default=None)
    """The candidate this one was made from (edited, its knobs moved)."""
    incumbent_id: Mapped[int | None] = mapped_column(ForeignKey("candidates.id"), default=None)
    """The run's best when this one was proposed."""
    hypothesis: Mapped[str] = mapped_column(Text, default="")
    proposer: Mapped[str] = mapped_column(String(200), default="")
    family: Mapped[str | None] = mapped_column(String(100), default=None)
    knobs: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    source: Mapped[str] = mapped_column(Text)
    source_hash: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[str] = mapped_column(String(20), default=CandidateStatus.proposed.value)
    build_id: Mapped[int | None] = mapped_column(ForeignKey("builds.id"), default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    run: Mapped[Run] = relationship(back_populates="candidates", foreign_keys=[run_id])
    parent: Mapped[Candidate | None] = relationship(remote_side=[id], foreign_keys=[parent_id])
    build: Mapped[Build | None] = relationship()
    evaluations: Mapped[list[Evaluation]] = relationship(
        back_populates="candidate", order_by="Evaluation.id", foreign_keys="Evaluation.candidate_id"
    )
    decision: Mapped[Decision | None] = relationship(
        back_populates="candidate", foreign_keys="Decision.candidate_id", uselist=False
    )

    @classmethod
    def by_seq(cls, session: Session, run_id: int, seq: int) -> Candidate | None:
        if not storable(run_id, seq):
            return None
        return session.scalar(select(cls).where(cls.run_id == run_id, cls.seq == seq))

    @property
    def measurement(self) -> Evaluation | None:
        """The candidate's own gate-and-benchmark evaluation (a finished one)."""
        return next((e for e in self.evaluations if e.kind == EvalKind.benchmark
                     and e.status not in (EvalStatus.running, EvalStatus.interrupted)), None)


class Evaluation(Base):
    __tablename__ = "evaluations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id"), index=True)
    kind: Mapped[str] = mapped_column(String(20), default="benchmark")  # check | benchmark | head_to_head | ladder
    against_id: Mapped[int | None] = mapped_column(ForeignKey("candidates.id"), default=None)
    status: Mapped[str] = mapped_column(String(20))
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    log: Mapped[str] = mapped_column(Text, default="")
    device: Mapped[str] = mapped_column(String(200), default="")
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    candidate: Mapped[Candidate] = relationship(back_populates="evaluations", foreign_keys=[candidate_id])


class Decision(Base):
    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id"), unique=True)
    incumbent_id: Mapped[int | None] = mapped_column(ForeignKey("candidates.id"), default=None)
    verdict: Mapped[str] = mapped_column(String(10))  # keep | revert
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    candidate: Mapped[Candidate] = relationship(back_populates="decision", foreign_keys=[candidate_id])


class LlmCall(Base):
    __tablename__ = "llm_calls"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    candidate_id: Mapped[int | None] = mapped_column(ForeignKey("candidates.id"), default=None)
    model: Mapped[str] = mapped_column(String(200))
    prompt: Mapped[str] = mapped_column(Text, default="")
    reply: Mapped[str] = mapped_column(Text, default="")
    input_tokens: Mapped[int | None] = mapped_column(Integer, default=None)
    output_tokens: Mapped[int | None] = mapped_column(Integer, default=None)
    cost: Mapped[float | None] = mapped_column(Float, default=None)
    latency_ms: Mapped[float | None] = mapped_column(Float, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
