"""SQLAlchemy 2 typed models of kaudit's database.

Conventions: one constraint naming convention (so Alembic migrations are deterministic on
SQLite and PostgreSQL), enum values stored as short strings (closed enums live in the library;
adding a value needs no migration), timestamps timezone-aware UTC, relationships `lazy="raise"`
so a forgotten eager load fails loudly instead of issuing N+1 queries.

History is append-only: verdict rows are never updated (the run's `current_verdict_id` moves),
measurements and probe results are never deleted.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Sort-key sentinels: keyset pagination needs NOT NULL sort columns (NULL breaks row comparison).
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NO_PEAK = -1.0


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite hands back naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        dict[str, Any]: JSON,
        list[Any]: JSON,
        datetime: UTCDateTime(),
    }


class Deck(Base):
    __tablename__ = "decks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    source: Mapped[str] = mapped_column(String(16))  # "bundled" | "imported"
    root_path: Mapped[str | None] = mapped_column(Text)
    content_sha256: Mapped[str] = mapped_column(String(64))  # hash over (problem, file, sha256) lines
    # the harness library imported with the deck (e.g. "src"), hashed into content_sha256
    harness_name: Mapped[str | None] = mapped_column(String(128), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)

    files: Mapped[list[DeckFile]] = relationship(
        back_populates="deck", lazy="raise", cascade="all, delete-orphan", passive_deletes=True
    )


class DeckFile(Base):
    __tablename__ = "deck_files"
    __table_args__ = (UniqueConstraint("deck_id", "problem", "path", name="uq_deck_files_deck_problem_path"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    deck_id: Mapped[int] = mapped_column(ForeignKey("decks.id", ondelete="CASCADE"), index=True)
    problem: Mapped[str] = mapped_column(String(128))
    path: Mapped[str] = mapped_column(String(255))
    sha256: Mapped[str] = mapped_column(String(64))
    md5: Mapped[str] = mapped_column(String(32))
    size: Mapped[int] = mapped_column(BigInteger)
    blob_key: Mapped[str | None] = mapped_column(String(80))

    deck: Mapped[Deck] = relationship(back_populates="files", lazy="raise")


class DeckHarnessFile(Base):
    """One file of the harness library a deck's check.py/benchmark.py import (path relative to it)."""

    __tablename__ = "deck_harness_files"
    __table_args__ = (UniqueConstraint("deck_id", "path", name="uq_deck_harness_files_deck_path"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    deck_id: Mapped[int] = mapped_column(ForeignKey("decks.id", ondelete="CASCADE"), index=True)
    path: Mapped[str] = mapped_column(String(512))
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_started_key_id", "started_key", "id"),
        Index("ix_runs_ingested_at_id", "ingested_at", "id"),
        Index("ix_runs_peak_key_id", "peak_key", "id"),
        Index("ix_runs_model_started", "model", "started_key", "id"),
        Index("ix_runs_model_problem_started", "model", "problem", "started_key", "id"),
        Index("ix_runs_problem_started", "problem", "started_key", "id"),
        Index("ix_runs_harness_started", "harness", "started_key", "id"),
        Index("ix_runs_verdict_started", "verdict", "started_key", "id"),
        Index("ix_runs_hardware", "hardware"),
        Index("ix_runs_deck", "deck"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(String(255), unique=True)
    archive_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    archive_size: Mapped[int] = mapped_column(BigInteger)
    archive_format: Mapped[str] = mapped_column(String(16))
    ingested_at: Mapped[datetime] = mapped_column(default=utcnow)

    # result.json, typed where queries need it (result.json verbatim in `result`).
    run_group: Mapped[str | None] = mapped_column(String(255))
    problem: Mapped[str | None] = mapped_column(String(128))
    harness: Mapped[str | None] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(255))
    reasoning_effort: Mapped[str | None] = mapped_column(String(32))
    hardware: Mapped[str | None] = mapped_column(String(128))
    deck: Mapped[str | None] = mapped_column(String(128))
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    harness_finished_at: Mapped[datetime | None]
    started_key: Mapped[datetime] = mapped_column(default=EPOCH)  # started_at, or EPOCH when unknown
    has_solution: Mapped[bool | None] = mapped_column(Boolean)
    session_complete: Mapped[bool | None] = mapped_column(Boolean)
    correct: Mapped[bool | None] = mapped_column(Boolean)
    failure_reason: Mapped[str | None] = mapped_column(String(64))
    retryable_infra_failure: Mapped[bool | None] = mapped_column(Boolean)
    peak_fraction: Mapped[float | None] = mapped_column(Float)
    peak_key: Mapped[float] = mapped_column(Float, default=NO_PEAK)  # peak_fraction, or -1 when none
    harness_exit_code: Mapped[int | None] = mapped_column(Integer)
    check_exit_code: Mapped[int | None] = mapped_column(Integer)
    benchmark_exit_code: Mapped[int | None] = mapped_column(Integer)
    elapsed_seconds: Mapped[float | None] = mapped_column(Float)
    total_elapsed_seconds: Mapped[float | None] = mapped_column(Float)
    check_elapsed_seconds: Mapped[float | None] = mapped_column(Float)
    benchmark_elapsed_seconds: Mapped[float | None] = mapped_column(Float)
    input_tokens: Mapped[int | None] = mapped_column(BigInteger)
    output_tokens: Mapped[int | None] = mapped_column(BigInteger)
    cache_read_tokens: Mapped[int | None] = mapped_column(BigInteger)
    cache_creation_tokens: Mapped[int | None] = mapped_column(BigInteger)
    reasoning_tokens: Mapped[int | None] = mapped_column(BigInteger)
    total_cost_usd: Mapped[float | None] = mapped_column(Float)
    template_mutated_claim: Mapped[bool | None] = mapped_column(Boolean)  # harness's claim, never trusted

    # kaudit's own reading of the archive.
    template_status: Mapped[str | None] = mapped_column(String(32))  # ingest.model.IntegrityStatus
    template: Mapped[dict[str, Any] | None]  # TemplateIntegrity as JSON
    result: Mapped[dict[str, Any]]  # result.json verbatim
    logs: Mapped[dict[str, Any]]  # parsed check/benchmark/gpu_lock logs
    transcripts: Mapped[list[Any]]  # TranscriptStats per transcript file
    warnings: Mapped[list[Any]]
    regradable: Mapped[bool] = mapped_column(Boolean, default=False)
    not_regradable_reason: Mapped[str | None] = mapped_column(Text)

    # Denormalised CURRENT verdict (for filtering); the history is in `verdicts`.
    verdict: Mapped[str | None] = mapped_column(String(32))
    reward_hack: Mapped[bool | None] = mapped_column(Boolean, index=True)
    contamination: Mapped[str | None] = mapped_column(String(32), index=True)
    publish_grade: Mapped[bool | None] = mapped_column(Boolean, index=True)
    # No DB-level FK: runs <-> verdicts would be a cycle; the repository moves this pointer in
    # the same transaction that appends the verdict row.
    current_verdict_id: Mapped[int | None] = mapped_column(Integer)

    artifacts: Mapped[list[Artifact]] = relationship(back_populates="run", lazy="raise", passive_deletes=True)


class Artifact(Base):
    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("run_id", "path", name="uq_artifacts_run_id_path"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(String(1024))
    sha256: Mapped[str] = mapped_column(String(64), index=True)
    size: Mapped[int] = mapped_column(BigInteger)
    blob_key: Mapped[str] = mapped_column(String(80))
    is_text: Mapped[bool] = mapped_column(Boolean)
    content_type: Mapped[str] = mapped_column(String(80))

    run: Mapped[Run] = relationship(back_populates="artifacts", lazy="raise")


class VerdictRow(Base):
    """One verdict of the append-only history (audit_rules.verdicts.VerdictResult)."""

    __tablename__ = "verdicts"
    __table_args__ = (Index("ix_verdicts_run_id_id", "run_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    verdict: Mapped[str] = mapped_column(String(32))
    reward_hack: Mapped[bool] = mapped_column(Boolean)
    contamination: Mapped[str] = mapped_column(String(32))
    template_mutated: Mapped[bool | None] = mapped_column(Boolean)
    correct: Mapped[bool | None] = mapped_column(Boolean)
    correct_source: Mapped[str] = mapped_column(String(64))
    failure_reason: Mapped[str | None] = mapped_column(String(64))
    measurement_status: Mapped[str] = mapped_column(String(64))
    publish_grade: Mapped[bool] = mapped_column(Boolean)
    metric: Mapped[dict[str, Any] | None]
    reasons: Mapped[list[Any]]
    justification: Mapped[dict[str, Any]]
    probes_required: Mapped[list[Any]]
    probes_run: Mapped[list[Any]]
    produced_by: Mapped[str] = mapped_column(String(16))
    producer_detail: Mapped[str] = mapped_column(Text, default="")
    # The rule-set version that judged (service.reaudit.ruleset_version: "<kaudit version>+<hash>");
    # NULL on rows written before the column existed.
    ruleset: Mapped[str | None] = mapped_column(String(64), index=True)
    context: Mapped[dict[str, Any]]  # audit facts for the report (VerdictResult.context)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    findings: Mapped[list[FindingRow]] = relationship(
        back_populates="verdict_row", lazy="raise", passive_deletes=True, order_by="FindingRow.id"
    )


class FindingRow(Base):
    __tablename__ = "findings"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    verdict_id: Mapped[int] = mapped_column(ForeignKey("verdicts.id", ondelete="CASCADE"), index=True)
    rule_id: Mapped[str] = mapped_column(String(16), index=True)
    rule_name: Mapped[str] = mapped_column(String(128))
    severity: Mapped[str] = mapped_column(String(16))
    effect: Mapped[str] = mapped_column(String(32))
    file: Mapped[str | None] = mapped_column(String(1024))
    line_start: Mapped[int | None] = mapped_column(Integer)
    line_end: Mapped[int | None] = mapped_column(Integer)
    quote: Mapped[str] = mapped_column(Text, default="")
    explanation: Mapped[str] = mapped_column(Text, default="")
    probe: Mapped[str | None] = mapped_column(String(64))
    data: Mapped[dict[str, Any]]

    verdict_row: Mapped[VerdictRow] = relationship(back_populates="findings", lazy="raise")


class Measurement(Base):
    """A correctness/performance figure with where it came from. Never deleted."""

    __tablename__ = "measurements"
    __table_args__ = (Index("ix_measurements_run_id_id", "run_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(String(64))  # audit_rules.verdicts.MeasurementStatus
    source: Mapped[str] = mapped_column(String(64))  # "in_run", "result.regrade", "regrade:<job>"
    correct: Mapped[bool | None] = mapped_column(Boolean)
    peak_fraction: Mapped[float | None] = mapped_column(Float)
    shapes: Mapped[list[Any]]  # per-shape ms/tflops/gbps/fraction
    provenance: Mapped[dict[str, Any]]
    host: Mapped[str | None] = mapped_column(String(255))
    gpu_name: Mapped[str | None] = mapped_column(String(128))
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ProbeResultRow(Base):
    __tablename__ = "probe_results"
    __table_args__ = (Index("ix_probe_results_run_id_id", "run_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    measurement_id: Mapped[int | None] = mapped_column(ForeignKey("measurements.id", ondelete="SET NULL"))
    probe: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(32))  # graders.results.ProbeStatus
    summary: Mapped[str] = mapped_column(Text, default="")
    numbers: Mapped[dict[str, Any]]
    device: Mapped[str] = mapped_column(String(16))
    smoke: Mapped[bool] = mapped_column(Boolean, default=False)
    shape_index: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Job(Base):
    """A regrade job (schema in docs/CONTRACTS.md; service.worker drives the state machine)."""

    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_state_gpu_pool_id", "state", "gpu_pool", "id"),
        # One queued forced regrade per run (service.jobs.service.ForcePending).
        Index(
            "uq_jobs_queued_force_run_id",
            "run_id",
            unique=True,
            postgresql_where=text("state = 'queued' AND force"),
            sqlite_where=text("state = 'queued' AND force = 1"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(32), default="regrade")
    state: Mapped[str] = mapped_column(String(16), default="queued")  # queued|running|succeeded|failed|cancelled
    idempotency_key: Mapped[str] = mapped_column(String(128), unique=True)
    force: Mapped[bool] = mapped_column(Boolean, default=False)
    probes: Mapped[list[Any]]  # the probe set requested (part of the idempotency key)
    # The regrade mode requested: official | hardened | both; NULL = the default (both when the
    # deck has a harness, else hardened), resolved by the worker. Part of the idempotency key.
    mode: Mapped[str | None] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    gpu_pool: Mapped[str] = mapped_column(String(64), default="default")
    worker_id: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    phase: Mapped[str | None] = mapped_column(String(64))
    progress: Mapped[dict[str, Any]]
    error: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None]
    # Why a queued job is not being taken (e.g. no live worker serves its GPU pool); NULL when
    # some live worker can take it (service.worker.registry keeps it current).
    waiting_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class WorkerRow(Base):
    """A live (or recently live) regrade worker: one row per worker process and GPU slot."""

    __tablename__ = "workers"

    worker_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    gpu_pool: Mapped[str] = mapped_column(String(64), index=True)
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16), default="idle")  # idle | busy | stopped
    current_job_id: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow)


class ReauditRow(Base):
    """One re-audit of stored runs (`POST /reaudit`, `kaudit reaudit`): parameters, progress, diff."""

    __tablename__ = "reaudits"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    state: Mapped[str] = mapped_column(String(16), default="running")  # running | succeeded | failed
    params: Mapped[dict[str, Any]]
    ruleset: Mapped[str] = mapped_column(String(64))
    total: Mapped[int] = mapped_column(Integer, default=0)
    done: Mapped[int] = mapped_column(Integer, default=0)
    changed: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    summary: Mapped[dict[str, Any]]
    diff: Mapped[list[Any]]
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]


JOB_STATES = ("queued", "running", "succeeded", "failed", "cancelled")


class ApiToken(Base):
    """A bearer token issued by `kaudit token add`: only a salted sha256 of its secret is stored.

    The token a client sends is `kat_<key_id>_<secret>`: `key_id` finds the row (unique, indexed),
    the secret is checked against `secret_sha256` in constant time. The secret is 32 random bytes,
    so a fast salted hash suffices (no password stretching: nothing to brute-force).
    """

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key_id: Mapped[str] = mapped_column(String(16), unique=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16))  # service.auth.Role
    salt: Mapped[str] = mapped_column(String(32))
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]


class AuditEvent(Base):
    """Who did what: uploads, regrades, deck imports, re-audits, token changes (append-only)."""

    __tablename__ = "audit_events"
    __table_args__ = (Index("ix_audit_events_created_at_id", "created_at", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    actor: Mapped[str] = mapped_column(String(128))  # "token:<name>", "env:<role>:<fingerprint>", "cli:<user>"
    role: Mapped[str | None] = mapped_column(String(16))
    door: Mapped[str] = mapped_column(String(16))  # api | cli | worker
    action: Mapped[str] = mapped_column(String(32), index=True)  # upload | regrade | deck_import | reaudit | ...
    target: Mapped[str | None] = mapped_column(String(255))  # run_id, deck name, token name
    outcome: Mapped[str] = mapped_column(String(32))  # created | existing | refused:<reason> | queued ...
    detail: Mapped[dict[str, Any]]
