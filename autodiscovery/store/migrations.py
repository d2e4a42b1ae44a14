"""Named, append-only schema migrations.

Each migration is a function of a Connection; `migrate` applies those not yet recorded in
`_migrations`, in order. Never edit one that has shipped: append a new one.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Connection,
    DateTime,
    Engine,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    inspect,
    select,
    text,
)

MIGRATIONS: list[tuple[str, Callable[[Connection], None]]] = []


def migration(fn: Callable[[Connection], None]) -> Callable[[Connection], None]:
    MIGRATIONS.append((fn.__name__, fn))
    return fn


def _ledger(conn: Connection) -> Table:
    meta = MetaData()
    table = Table(
        "_migrations", meta,
        Column("name", String(200), primary_key=True),
        Column("applied_at", DateTime, server_default=func.current_timestamp()),
    )
    meta.create_all(conn)
    return table


def applied(conn: Connection) -> list[str]:
    if not inspect(conn).has_table("_migrations"):
        return []
    return list(conn.scalars(select(_ledger(conn).c.name)))


def pending(conn: Connection) -> list[str]:
    done = set(applied(conn))
    return [name for name, _ in MIGRATIONS if name not in done]


def migrate(engine: Engine) -> list[str]:
    """Apply pending migrations, all in one transaction that holds the database's write lock, so two
    processes opening a new database at once apply each migration once; return the names applied now."""
    with engine.connect() as conn:
        todo = pending(conn)
        conn.rollback()
    if not todo:
        return []  # nothing to write: a read-only database opens too
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")  # pysqlite would otherwise run DDL outside a transaction
        elif engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(7207320)"))
        ledger = _ledger(conn)
        done = set(conn.scalars(select(ledger.c.name)))
        now = []
        for name, fn in MIGRATIONS:
            if name not in done:
                fn(conn)
                conn.execute(ledger.insert().values(name=name))
                now.append(name)
        conn.commit()
    return now


@migration
def m001_initial(conn: Connection) -> None:
    meta = MetaData()
    Table(
        "runs", meta,
        Column("id", Integer, primary_key=True),
        Column("campaign", String(200), nullable=False),
        Column("agent", String(100), nullable=False),
        Column("config", JSON, nullable=False),
        Column("fingerprint", JSON, nullable=False),
        Column("status", String(20), nullable=False),
        Column("stop_reason", Text),
        Column("best_candidate_id", Integer, ForeignKey("candidates.id", use_alter=True)),
        Column("created_at", DateTime, nullable=False),
        Column("updated_at", DateTime, nullable=False),
        Column("elapsed_s", Float, nullable=False),
    )
    Table(
        "builds", meta,
        Column("id", Integer, primary_key=True),
        Column("cache_key", String(64), nullable=False, unique=True),
        Column("ok", Boolean, nullable=False),
        Column("registers", Integer),
        Column("smem_static", Integer),
        Column("spill_stores", Integer),
        Column("spill_loads", Integer),
        Column("stack", Integer),
        Column("has_hgmma", Boolean),
        Column("compiler", Text, nullable=False),
        Column("flags", JSON, nullable=False),
        Column("log", Text, nullable=False),
        Column("seconds", Float, nullable=False),
        Column("created_at", DateTime, nullable=False),
    )
    Table(
        "candidates", meta,
        Column("id", Integer, primary_key=True),
        Column("run_id", Integer, ForeignKey("runs.id"), nullable=False, index=True),
        Column("seq", Integer, nullable=False),
        Column("parent_id", Integer, ForeignKey("candidates.id")),
        Column("hypothesis", Text, nullable=False),
        Column("proposer", String(200), nullable=False),
        Column("family", String(100)),
        Column("knobs", JSON, nullable=False),
        Column("source", Text, nullable=False),
        Column("source_hash", String(64), nullable=False, index=True),
        Column("status", String(20), nullable=False),
        Column("build_id", Integer, ForeignKey("builds.id")),
        Column("created_at", DateTime, nullable=False),
    )
    Table(
        "evaluations", meta,
        Column("id", Integer, primary_key=True),
        Column("candidate_id", Integer, ForeignKey("candidates.id"), nullable=False, index=True),
        Column("kind", String(20), nullable=False),
        Column("against_id", Integer, ForeignKey("candidates.id")),
        Column("status", String(20), nullable=False),
        Column("metrics", JSON, nullable=False),
        Column("log", Text, nullable=False),
        Column("device", String(200), nullable=False),
        Column("seconds", Float, nullable=False),
        Column("created_at", DateTime, nullable=False),
    )
    Table(
        "decisions", meta,
        Column("id", Integer, primary_key=True),
        Column("run_id", Integer, ForeignKey("runs.id"), nullable=False, index=True),
        Column("candidate_id", Integer, ForeignKey("candidates.id"), nullable=False, unique=True),
        Column("incumbent_id", Integer, ForeignKey("candidates.id")),
        Column("verdict", String(10), nullable=False),
        Column("reason", Text, nullable=False),
        Column("created_at", DateTime, nullable=False),
    )
    meta.create_all(conn)


@migration
def m002_llm_calls(conn: Connection) -> None:
    meta = MetaData()
    meta.reflect(conn, only=["runs", "candidates"])
    Table(
        "llm_calls", meta,
        Column("id", Integer, primary_key=True),
        Column("run_id", Integer, ForeignKey("runs.id"), nullable=False, index=True),
        Column("candidate_id", Integer, ForeignKey("candidates.id")),
        Column("model", String(200), nullable=False),
        Column("prompt", Text, nullable=False),
        Column("reply", Text, nullable=False),
        Column("input_tokens", Integer),
        Column("output_tokens", Integer),
        Column("cost", Float),
        Column("latency_ms", Float),
        Column("error", Text),
        Column("created_at", DateTime, nullable=False),
    )
    meta.create_all(conn)


@migration
def m003_run_lease_and_unique_seq(conn: Connection) -> None:
    """The lease that keeps two drivers of one run apart, and one candidate per (run, seq)."""
    columns = {c["name"] for c in inspect(conn).get_columns("runs")}
    if "owner" not in columns:
        conn.execute(text("ALTER TABLE runs ADD COLUMN owner VARCHAR(300)"))
    if "heartbeat_at" not in columns:
        conn.execute(text("ALTER TABLE runs ADD COLUMN heartbeat_at TIMESTAMP"))
    # Two resumes of one run at once could write the same seq twice: number such runs again by id.
    dup_runs = set(conn.scalars(text("SELECT run_id FROM candidates GROUP BY run_id, seq HAVING COUNT(*) > 1")))
    for run_id in sorted(dup_runs):
        ids = conn.scalars(text("SELECT id FROM candidates WHERE run_id = :r ORDER BY id"), {"r": run_id}).all()
        for seq, cid in enumerate(ids):
            conn.execute(text("UPDATE candidates SET seq = :s WHERE id = :i"), {"s": seq, "i": cid})
    conn.execute(text("CREATE UNIQUE INDEX uq_candidates_run_seq ON candidates (run_id, seq)"))


@migration
def m004_parent_and_incumbent(conn: Connection) -> None:
    """parent_id becomes the candidate a proposal was made from; the incumbent of the time gets its own
    column (what parent_id held until now), and refusals become evaluations of kind `check`."""
    conn.execute(text("ALTER TABLE candidates ADD COLUMN incumbent_id INTEGER REFERENCES candidates(id)"))
    conn.execute(text("UPDATE candidates SET incumbent_id = parent_id"))
    conn.execute(text("UPDATE evaluations SET kind = 'check' WHERE status = 'rejected' AND kind = 'benchmark'"))


STORE_BUILD_COLUMNS = {"id", "cache_key", "ok", "registers", "smem_static", "spill_stores", "spill_loads", "stack",
                       "compiler", "flags", "log", "seconds", "created_at", "facts"}
"""The columns of `builds` that are the store's own: the compiler's report and the build itself."""


@migration
def m005_build_facts(conn: Connection) -> None:
    """A harness's facts about a build live in one JSON column, under its own names: any column of
    `builds` that is not the store's own (one harness's fact, from before) moves into it, and goes."""
    conn.execute(text("ALTER TABLE builds ADD COLUMN facts JSON"))
    theirs = [c["name"] for c in inspect(conn).get_columns("builds") if c["name"] not in STORE_BUILD_COLUMNS]
    builds = Table("builds", MetaData(), autoload_with=conn)
    for row in conn.execute(select(builds.c.id, *(builds.c[name] for name in theirs))).mappings():
        facts = {name: row[name] for name in theirs if row[name] is not None}
        conn.execute(builds.update().where(builds.c.id == row["id"]).values(facts=facts))
    for name in theirs:
        conn.execute(text(f'ALTER TABLE builds DROP COLUMN "{name}"'))


@migration
def m006_suite_parent(conn: Connection) -> None:
    """A suite's runs (one per problem) point at the suite's own run."""
    conn.execute(text("ALTER TABLE runs ADD COLUMN parent_id INTEGER REFERENCES runs(id)"))
