"""SQLAlchemy 2 tables of the service: devices, workloads, runs, trials, schedules, kernels,
tuned ranges (bucket tables), and the cost model's calibrations per device.

Every table name starts with ``pipetune_`` because Optuna's RDB storage lives in the same
database and already owns ``trials`` and ``alembic_version`` (``optuna/storages/_rdb``).
``SCHEMA_VERSION`` is the Alembic head these models match (``migrations/versions``).

Timestamps are stored as UTC. SQLite has no time zones and hands back naive datetimes,
so readers go through :func:`as_utc`.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

SCHEMA_VERSION = "0010"
TABLE_PREFIX = "pipetune_"

#: JSON everywhere, JSONB on PostgreSQL.
JSONType = JSON().with_variant(JSONB(), "postgresql")
HASH_LENGTH = 64


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def as_utc(value: dt.datetime | None) -> dt.datetime | None:
    """A stored timestamp as an aware UTC datetime (SQLite returns naive ones)."""
    if value is None:
        return None
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


class RunStatus(enum.StrEnum):
    """Life of a tuning run.

    Attributes:
        QUEUED: accepted, waiting for a free run slot.
        RUNNING: its search is in progress (owned by one process, which heartbeats).
        SUCCEEDED: finished with a best schedule (stored in the schedules cache).
        FAILED: finished without one (every candidate invalid or failed), or crashed.
        CANCELLED: stopped on request, at once; its trials are kept and its best is
            offered to the cache as a succeeded run's is (phase ``stopping`` until the
            process running it has stored them, then ``done``).
        INTERRUPTED: its process died and it was not resumed; trials are kept.
    """

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    def is_finished(self) -> bool:
        return self not in (RunStatus.QUEUED, RunStatus.RUNNING)


ACTIVE_STATUSES = (RunStatus.QUEUED.value, RunStatus.RUNNING.value)


class Base(DeclarativeBase):
    """Declarative base of pipetune's tables (Optuna's have their own)."""


class DeviceModel(Base):
    """A device that runs were tuned for; ``key`` is its fingerprint (the cache key)."""

    __tablename__ = "pipetune_devices"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(HASH_LENGTH), unique=True)
    name: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16))  # "simulated" or "cuda"
    simulated: Mapped[bool] = mapped_column(Boolean)
    identity: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    @classmethod
    def find_by_key(cls, session: Session, key: str) -> DeviceModel | None:
        return session.scalars(select(cls).where(cls.key == key)).one_or_none()


class WorkloadModel(Base):
    """An operator and its params; ``key`` is the spec's canonical-JSON sha256."""

    __tablename__ = "pipetune_workloads"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(HASH_LENGTH), unique=True)
    op: Mapped[str] = mapped_column(String(64), index=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    @classmethod
    def find_by_key(cls, session: Session, key: str) -> WorkloadModel | None:
        return session.scalars(select(cls).where(cls.key == key)).one_or_none()


class RunKind(enum.StrEnum):
    """What a run looks for.

    Attributes:
        EXACT: the best schedule of one shape (cached in the schedules table).
        RANGE: a bucket table over a range of one dimension (``docs/dynamic.md``); its
            workload's params give the range, its result is a row of the range tables.
    """

    EXACT = "exact"
    RANGE = "range"


class RunModel(Base):
    """One tuning run of a workload on a device.

    At most one run per (workload, device) is queued or running: a partial unique index
    enforces it, so two API processes racing on the same request end up sharing a run.
    ``owner`` (host:pid:token) and ``heartbeat_at`` tell a live run from an orphan;
    ``attempts`` numbers its claims, and each write of a run checks that it is still the
    claim that executes it (``repositories.hold_run``).
    """

    __tablename__ = "pipetune_runs"
    __table_args__ = (
        Index(
            "uq_pipetune_runs_active",
            "workload_id",
            "device_id",
            unique=True,
            sqlite_where=text("status IN ('queued', 'running')"),
            postgresql_where=text("status IN ('queued', 'running')"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("pipetune_workloads.id"), index=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("pipetune_devices.id"), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True, default=RunStatus.QUEUED.value)
    kind: Mapped[str] = mapped_column(String(16), default=RunKind.EXACT.value,
                                      server_default=RunKind.EXACT.value)
    budget_trials: Mapped[int] = mapped_column(Integer)
    budget_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    patience: Mapped[int | None] = mapped_column(Integer, nullable=True)
    seed: Mapped[int] = mapped_column(Integer, default=0)
    study_name: Mapped[str] = mapped_column(String(128))
    trials_done: Mapped[int] = mapped_column(Integer, default=0)
    invalid: Mapped[int] = mapped_column(Integer, default=0)
    best_latency_us: Mapped[float | None] = mapped_column(Float, nullable=True)
    best_schedule_hash: Mapped[str | None] = mapped_column(String(HASH_LENGTH), nullable=True)
    best_kernel_hash: Mapped[str | None] = mapped_column(String(HASH_LENGTH), nullable=True)
    best_simulated: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    # The vendor peer (``cublas``) timed by the same worker, by the same method.
    baseline: Mapped[str | None] = mapped_column(String(32), nullable=True)
    baseline_latency_us: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Further peers re-timed with the finalists, by name ({"sdpa_flash": 1234.5}, latency in
    # us), stored when the run succeeds; only those timed successfully ({}: all failed).
    # None: no peer to time (not a GPU run, or an operator without further peers).
    peer_latencies_us: Mapped[dict[str, float] | None] = mapped_column(JSONType, nullable=True)
    # How the GPU timed the run's kernels and peers, chosen per workload
    # (``scheduler_search.search.presets.timing_method``): "events" (per-launch CUDA events,
    # the L2 flushed) or "graph" (a CUDA graph's replay over operand copies larger than the
    # L2). The two give different figures for one kernel, so the best latency, the peers'
    # and the speedups are read with it. None: a simulated run (or one from before 0010).
    timing_method: Mapped[str | None] = mapped_column(String(16), nullable=True)
    phase: Mapped[str] = mapped_column(String(16), default="queued")
    stop_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    owner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # A run queued again after a database fault starts no sooner than this (the wait
    # grows with its starts: ``service.runs.retry.restart_delay_s``); None: at once.
    not_before: Mapped[dt.datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    # The API key that created the run (None: made without a key, on loopback or by the
    # CLI). No foreign key: keys are revoked, never deleted, and adding one on SQLite
    # would make Alembic copy this table (and cascade-delete its trials).
    key_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    elapsed_s: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )

    workload: Mapped[WorkloadModel] = relationship(lazy="joined")
    device: Mapped[DeviceModel] = relationship(lazy="joined")

    @classmethod
    def find(cls, session: Session, run_id: int) -> RunModel | None:
        return session.get(cls, run_id)

    @classmethod
    def find_active(cls, session: Session, workload_id: int, device_id: int) -> RunModel | None:
        return session.scalars(
            select(cls).where(
                cls.workload_id == workload_id,
                cls.device_id == device_id,
                cls.status.in_(ACTIVE_STATUSES),
            )
        ).one_or_none()


class ProcessModel(Base):
    """A process that executes runs (``pipetune worker``, or ``serve`` keeping its
    searches), with the keys of the devices it can measure; its heartbeat says it lives."""

    __tablename__ = "pipetune_processes"

    owner: Mapped[str] = mapped_column(String(200), primary_key=True)
    device_keys: Mapped[list[str]] = mapped_column(JSONType)
    started_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    heartbeat_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class FleetDeviceModel(Base):
    """GPUs of one kind (fingerprint ``key``) that Ray node ``node`` offers to the fleet, as
    ``pipetune node start`` registered them; ``identity`` rebuilds the hardware model."""

    __tablename__ = "pipetune_fleet_devices"

    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    key: Mapped[str] = mapped_column(String(HASH_LENGTH), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    simulated: Mapped[bool] = mapped_column(Boolean)
    identity: Mapped[dict[str, Any]] = mapped_column(JSONType)
    gpus: Mapped[int] = mapped_column(Integer)
    registered_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ApiKeyModel(Base):
    """An API key: its public ``prefix`` finds the row, ``digest`` (HMAC-SHA256 of the
    secret under ``salt``) checks it; the secret itself is never stored.

    ``scopes`` is a list of ``read``, ``tune``, ``admin``; a revoked key keeps its row so
    that its runs still name it.
    """

    __tablename__ = "pipetune_api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    prefix: Mapped[str] = mapped_column(String(32), unique=True)
    salt: Mapped[str] = mapped_column(String(64))
    digest: Mapped[str] = mapped_column(String(HASH_LENGTH))
    scopes: Mapped[list[str]] = mapped_column(JSONType)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    @classmethod
    def find_by_prefix(cls, session: Session, prefix: str) -> ApiKeyModel | None:
        return session.scalars(select(cls).where(cls.prefix == prefix)).one_or_none()


class SessionModel(Base):
    """A dashboard login, made from an API key at ``/login``.

    The browser's cookie holds a random secret; the row keeps only its SHA-256 (``id``),
    so a copy of the table opens no session. ``csrf_token`` is what the session's pages
    send with each write. Deleting the row ends the session: logout, the key's
    revocation, or the first login after ``expires_at`` (which clears expired rows).
    """

    __tablename__ = "pipetune_sessions"

    id: Mapped[str] = mapped_column(String(HASH_LENGTH), primary_key=True)
    key_id: Mapped[int] = mapped_column(
        ForeignKey("pipetune_api_keys.id", ondelete="CASCADE"), index=True
    )
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), index=True)


class TrialModel(Base):
    """One trial of a run: a measured candidate, or a point rejected before measurement.

    ``number`` counts the run's trials in the order they were stored (0, 1, ...); it is
    not Optuna's trial number, which restarts when an interrupted run resumes.
    """

    __tablename__ = "pipetune_trials"
    __table_args__ = (UniqueConstraint("run_id", "number", name="uq_pipetune_trials_number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(
        ForeignKey("pipetune_runs.id", ondelete="CASCADE"), index=True
    )
    number: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    source: Mapped[str] = mapped_column(String(16))
    schedule_hash: Mapped[str | None] = mapped_column(
        String(HASH_LENGTH), nullable=True, index=True
    )
    choices: Mapped[dict[str, Any]] = mapped_column(JSONType)
    latency_us: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_us: Mapped[float | None] = mapped_column(Float, nullable=True)
    simulated: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    measurement: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ScheduleModel(Base):
    """The cache: the best schedule known for a (workload, device)."""

    __tablename__ = "pipetune_schedules"
    __table_args__ = (
        UniqueConstraint("workload_id", "device_id", name="uq_pipetune_schedules_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("pipetune_workloads.id"), index=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("pipetune_devices.id"), index=True)
    schedule_hash: Mapped[str] = mapped_column(String(HASH_LENGTH), index=True)
    schedule: Mapped[dict[str, Any]] = mapped_column(JSONType)
    choices: Mapped[dict[str, Any]] = mapped_column(JSONType)
    latency_us: Mapped[float] = mapped_column(Float)
    predicted_us: Mapped[float | None] = mapped_column(Float, nullable=True)
    simulated: Mapped[bool] = mapped_column(Boolean)
    run_id: Mapped[int | None] = mapped_column(
        ForeignKey("pipetune_runs.id", ondelete="SET NULL"), nullable=True
    )
    kernel_hash: Mapped[str | None] = mapped_column(String(HASH_LENGTH), nullable=True)
    # The vendor peer's latency, re-timed interleaved with this schedule's kernel.
    baseline: Mapped[str | None] = mapped_column(String(32), nullable=True)
    baseline_latency_us: Mapped[float | None] = mapped_column(Float, nullable=True)
    # How ``latency_us`` and the baseline's were timed on the GPU ("events" or "graph", as
    # on its run); replaced with the schedule. None: a simulated estimate (or from before
    # 0010).
    timing_method: Mapped[str | None] = mapped_column(String(16), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    workload: Mapped[WorkloadModel] = relationship(lazy="joined")
    device: Mapped[DeviceModel] = relationship(lazy="joined")

    @classmethod
    def find(cls, session: Session, workload_id: int, device_id: int) -> ScheduleModel | None:
        return session.scalars(
            select(cls).where(cls.workload_id == workload_id, cls.device_id == device_id)
        ).one_or_none()


class KernelModel(Base):
    """A generated kernel (KernelArtifact JSON and its source) by artifact hash."""

    __tablename__ = "pipetune_kernels"

    hash: Mapped[str] = mapped_column(String(HASH_LENGTH), primary_key=True)
    schedule_hash: Mapped[str] = mapped_column(String(HASH_LENGTH), index=True)
    artifact: Mapped[dict[str, Any]] = mapped_column(JSONType)
    source: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    @classmethod
    def find(cls, session: Session, kernel_hash: str) -> KernelModel | None:
        return session.get(cls, kernel_hash)


class RangeTableModel(Base):
    """A tuned range: contiguous buckets of dimension ``dim`` over ``low``..``high`` of a
    workload whose other parameters are ``fixed_key``'s, on a device, each bucket served
    by one kernel that takes the size at run time.

    ``params`` is the range workload as tuned (the fixed parameters as the operator spec
    writes them, the range as given); ``fixed_key`` the sha256 of the operator and the
    fixed parameters' canonical JSON, the lookup of exact sizes and of narrower ranges;
    ``size_from`` where a call's size is read (``["a", 0]``); ``sizes`` the sizes the
    run measured at. Each item of ``buckets`` has ``low``, ``high``, ``loss``,
    ``schedule_hash``, ``kernel_hash`` (null without code generation), ``choices``,
    ``schedule`` (the sProgram, planned at ``high``), ``latencies_us`` (its latency at
    each sampled size, keyed by the size as text), ``retimed_us`` (at the bucket's
    sizes by the final method, or null) and ``timing_methods`` (how the GPU timed each of
    those sizes, ``events`` or ``graph``, keyed alike; null on a simulated device and in
    tables from before it was recorded): the method is the exact workload's at each size,
    so one bucket's sizes may differ.
    """

    __tablename__ = "pipetune_range_tables"
    __table_args__ = (
        Index("ix_pipetune_range_tables_lookup", "op", "fixed_key", "dim", "device_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    op: Mapped[str] = mapped_column(String(64))
    fixed_key: Mapped[str] = mapped_column(String(HASH_LENGTH))
    dim: Mapped[str] = mapped_column(String(32))
    low: Mapped[int] = mapped_column(Integer)
    high: Mapped[int] = mapped_column(Integer)
    params: Mapped[dict[str, Any]] = mapped_column(JSONType)
    size_from: Mapped[list[Any]] = mapped_column(JSONType)
    sizes: Mapped[list[int]] = mapped_column(JSONType)
    buckets: Mapped[list[dict[str, Any]]] = mapped_column(JSONType)
    loss: Mapped[float | None] = mapped_column(Float, nullable=True)
    simulated: Mapped[bool] = mapped_column(Boolean)
    device_id: Mapped[int] = mapped_column(ForeignKey("pipetune_devices.id"), index=True)
    run_id: Mapped[int | None] = mapped_column(
        ForeignKey("pipetune_runs.id", ondelete="SET NULL"), nullable=True, index=True
    )
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    device: Mapped[DeviceModel] = relationship(lazy="joined")

    @classmethod
    def find(cls, session: Session, table_id: int) -> RangeTableModel | None:
        return session.get(cls, table_id)


class CalibrationModel(Base):
    """The cost model's calibration for one operator on one device, fitted from GPU runs
    (``scheduler_search.cost_model.Calibration.to_dict()``), merged after each run."""

    __tablename__ = "pipetune_calibrations"
    __table_args__ = (UniqueConstraint("device_id", "op", name="uq_pipetune_calibrations_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = mapped_column(
        ForeignKey("pipetune_devices.id", ondelete="CASCADE"), index=True
    )
    op: Mapped[str] = mapped_column(String(64))
    calibration: Mapped[dict[str, Any]] = mapped_column(JSONType)
    samples: Mapped[int] = mapped_column(Integer, default=0)
    runs: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    @classmethod
    def find(cls, session: Session, device_id: int, op: str) -> CalibrationModel | None:
        return session.scalars(
            select(cls).where(cls.device_id == device_id, cls.op == op)
        ).one_or_none()
