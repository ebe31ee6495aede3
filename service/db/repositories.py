"""Reads and writes of the service's tables, each a keyword-only function on a Session.

Every DB touch goes through :func:`session_scope` (in the style of Optuna's RDB storage):
it commits, rolls back on error, and turns SQLAlchemy errors into :class:`StorageError`
so that the API answers 503 instead of leaking a driver exception. Get-or-create
functions tolerate the uniqueness race between two processes inserting the same row.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import String, case, func, select, true, type_coerce, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from service.db.models import (
    ACTIVE_STATUSES,
    DeviceModel,
    KernelModel,
    RunModel,
    RunStatus,
    ScheduleModel,
    TrialModel,
    WorkloadModel,
    as_utc,
    utcnow,
)

logger = logging.getLogger(__name__)


#: The largest id, offset or number a query may carry: PostgreSQL's ``integer`` (larger
#: values fail in the driver; an offset past SQLite's 64 bits overflows). Lookups beyond
#: it find nothing.
MAX_DB_INT = 2**31 - 1


#: A run manager's identity, ``host:pid:token`` (with the parentheses around it): it
#: stays in ``owner`` and the logs, never in a stored reason or an answer.
_OWNER = re.compile(r"\s*\(?[^\s():]+:\d+:[0-9a-f]{8}\)?")


def redact_owner(text: str | None) -> str | None:
    """``text`` without the host name and process id of a run manager it names."""
    return _OWNER.sub("", text) if text else text


class StorageError(RuntimeError):
    """The database failed (unreachable, locked, schema out of date, ...)."""


@contextmanager
def session_scope(sessions: sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits on success, rolls back on error, maps DB errors."""
    session = sessions()
    try:
        yield session
        session.commit()
    except SQLAlchemyError as exc:
        session.rollback()
        first = exc.args[0] if exc.args else exc
        raise StorageError(f"database error: {type(exc).__name__}: {first}") from exc
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def _get_or_create(session: Session, model: type, key: str, **values: Any) -> Any:
    found = model.find_by_key(session, key)
    if found is not None:
        return found
    try:
        with session.begin_nested():
            row = model(key=key, **values)
            session.add(row)
        return row
    except IntegrityError:  # another process inserted the same key meanwhile
        found = model.find_by_key(session, key)
        if found is None:
            raise
        return found


# ----- devices and workloads ----------------------------------------------------------------
def get_or_create_device(
    session: Session, *, key: str, name: str, kind: str, simulated: bool, identity: dict[str, Any]
) -> DeviceModel:
    return _get_or_create(
        session, DeviceModel, key, name=name, kind=kind, simulated=simulated, identity=identity
    )


def get_or_create_workload(
    session: Session, *, key: str, op: str, params: dict[str, Any]
) -> WorkloadModel:
    return _get_or_create(session, WorkloadModel, key, op=op, params=params)


def list_devices(session: Session) -> list[DeviceModel]:
    return list(session.scalars(select(DeviceModel).order_by(DeviceModel.id)))


def find_device(session: Session, *, key: str) -> DeviceModel | None:
    return DeviceModel.find_by_key(session, key)


def find_workload(session: Session, *, key: str) -> WorkloadModel | None:
    return session.scalar(select(WorkloadModel).where(WorkloadModel.key == key))


# ----- runs -----------------------------------------------------------------------------------
def create_run(
    session: Session,
    *,
    workload: WorkloadModel,
    device: DeviceModel,
    budget_trials: int,
    budget_seconds: float | None,
    patience: int | None,
    seed: int,
    key_id: int | None = None,
    kind: str = "exact",
) -> tuple[RunModel, bool]:
    """A new queued run (made by API key ``key_id``; ``kind``: ``exact`` or ``range``),
    or the queued/running run of the same workload and device.

    Returns:
        The run and whether it was created.
    """
    active = RunModel.find_active(session, workload.id, device.id)
    if active is not None:
        return active, False
    try:
        with session.begin_nested():
            run = RunModel(
                workload_id=workload.id,
                device_id=device.id,
                status=RunStatus.QUEUED.value,
                budget_trials=budget_trials,
                budget_seconds=budget_seconds,
                patience=patience,
                seed=seed,
                study_name="pending",
                trials_done=0,
                invalid=0,
                phase="queued",
                cancel_requested=False,
                attempts=0,
                elapsed_s=0.0,
                key_id=key_id,
                kind=kind,
            )
            session.add(run)
            session.flush()
            run.study_name = f"pipetune-run-{run.id}"
        return run, True
    except IntegrityError:  # the partial unique index: someone else queued it first
        active = RunModel.find_active(session, workload.id, device.id)
        if active is None:
            raise
        return active, False


def get_run(session: Session, *, run_id: int) -> RunModel | None:
    return RunModel.find(session, run_id) if 0 < run_id <= MAX_DB_INT else None


def list_runs(
    session: Session,
    *,
    status: str | None = None,
    op: str | None = None,
    device: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> tuple[list[RunModel], int]:
    """Runs, newest first, and how many match; ``device`` matches a name or a key."""
    query = select(RunModel)
    if status is not None:
        query = query.where(RunModel.status == status)
    if op is not None:
        query = query.join(WorkloadModel).where(WorkloadModel.op == op)
    if device is not None:
        query = query.join(DeviceModel).where(
            (DeviceModel.name == device) | (DeviceModel.key == device)
        )
    count = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(RunModel.id.desc()).limit(limit)
                           .offset(min(offset, MAX_DB_INT)))
    return list(rows.unique()), count


def claim_run(session: Session, *, run_id: int, owner: str) -> RunModel | None:
    """Make a queued run ``owner``'s (a conditional update: one claimer wins), unless it
    waits for its ``not_before`` time. Each claim counts a start (``attempts``): the
    claim's number, which every later write of the run checks (:func:`hold_run`)."""
    now = utcnow()
    result = session.execute(
        update(RunModel)
        .where(RunModel.id == run_id, RunModel.status == RunStatus.QUEUED.value,
               _due(now))
        .values(
            status=RunStatus.RUNNING.value,
            phase="starting",
            owner=owner,
            heartbeat_at=now,
            started_at=func.coalesce(RunModel.started_at, now),
            attempts=RunModel.attempts + 1,
            not_before=None,
        )
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        return None
    return session.get(RunModel, run_id, populate_existing=True)


def _due(now: dt.datetime) -> Any:
    """A queued run that may start at ``now`` (it waits for no ``not_before``)."""
    return RunModel.not_before.is_(None) | (RunModel.not_before <= now)


def claim_next_queued(
    session: Session, *, owner: str, device_keys: Collection[str] | None = None,
    skip: Collection[int] = (),
) -> RunModel | None:
    """Take the oldest queued run that may start now for ``owner`` among those of
    ``device_keys`` (the devices ``owner`` can measure; None: any device), except the
    runs in ``skip`` (those ``owner`` still executes under an earlier claim)."""
    query = select(RunModel.id).where(RunModel.status == RunStatus.QUEUED.value,
                                      _due(utcnow()))
    if skip:
        query = query.where(RunModel.id.not_in(list(skip)))
    if device_keys is not None:
        query = query.join(DeviceModel, RunModel.device_id == DeviceModel.id).where(
            DeviceModel.key.in_(list(device_keys)))
    candidates = session.scalars(query.order_by(RunModel.id).limit(5)).all()
    for run_id in candidates:
        run = claim_run(session, run_id=run_id, owner=owner)
        if run is not None:
            return run
    return None


class LeaseLost(RuntimeError):
    """The run is no longer this claim's: queued again and perhaps claimed by another
    process, or its database is gone. Its execution stops without writing."""


def _claimed_by(owner: str | None, attempt: int) -> Any:
    """The run is still the claim number ``attempt`` of ``owner`` (None: released)."""
    held = RunModel.owner.is_(None) if owner is None else RunModel.owner == owner
    return held & (RunModel.attempts == attempt)


def hold_run(session: Session, *, run_id: int, owner: str, attempt: int) -> None:
    """Check that the run is still ``owner``'s claim number ``attempt`` and write its
    heartbeat, first in a transaction that writes for the run: the row stays locked
    (SQLite: the database) until the commit, so no requeue can come between.

    Raises:
        LeaseLost: the run was queued again (and perhaps claimed by another) meanwhile.
    """
    result = session.execute(
        update(RunModel)
        .where(RunModel.id == run_id, _claimed_by(owner, attempt))
        .values(heartbeat_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        raise LeaseLost(f"run {run_id} is no longer this process's start {attempt}: it "
                        "was queued again meanwhile (taken for orphaned) and may run elsewhere")


def update_progress(
    session: Session,
    *,
    run_id: int,
    phase: str,
    trials_done: int,
    invalid: int,
    best_latency_us: float | None,
    best_schedule_hash: str | None,
    best_simulated: bool | None,
    elapsed_s: float,
) -> bool:
    """Record progress, in a transaction that holds the run (:func:`hold_run`); the
    run's ``cancel_requested`` flag. A cancelled run's phase stays ``stopping`` until
    :func:`finish_run` stores its outcome."""
    session.execute(
        update(RunModel)
        .where(RunModel.id == run_id)
        .values(
            phase=case((RunModel.status == RunStatus.CANCELLED.value, "stopping"), else_=phase),
            trials_done=trials_done,
            invalid=invalid,
            best_latency_us=best_latency_us,
            best_schedule_hash=best_schedule_hash,
            best_simulated=best_simulated,
            elapsed_s=elapsed_s,
        )
        .execution_options(synchronize_session=False)
    )
    return bool(session.scalar(select(RunModel.cancel_requested).where(RunModel.id == run_id)))


def heartbeat(session: Session, *, run_ids: Sequence[int], owner: str) -> None:
    if run_ids:
        session.execute(
            update(RunModel)
            .where(RunModel.id.in_(list(run_ids)), RunModel.owner == owner)
            .values(heartbeat_at=utcnow())
            .execution_options(synchronize_session=False)
        )


def request_cancel(session: Session, *, run_id: int) -> RunModel | None:
    """Cancel a run at once: a queued one never starts; a running one is ``cancelled``
    now, in phase ``stopping`` while its owner stops its search at the next round and
    stores what it found (its owner stays set until then: :func:`finish_run` clears it
    and sets phase ``done``).

    Conditional updates, so a run that its owner finishes meanwhile keeps its status.
    """
    now = utcnow()
    queued = session.execute(
        update(RunModel)
        .where(RunModel.id == run_id, RunModel.status == RunStatus.QUEUED.value)
        .values(
            status=RunStatus.CANCELLED.value,
            phase="done",
            cancel_requested=True,
            finished_at=now,
        )
        .execution_options(synchronize_session=False)
    )
    if queued.rowcount != 1:
        session.execute(
            update(RunModel)
            .where(RunModel.id == run_id, RunModel.status == RunStatus.RUNNING.value)
            .values(
                status=RunStatus.CANCELLED.value,
                phase="stopping",
                stop_reason="cancelled",
                cancel_requested=True,
                finished_at=now,
            )
            .execution_options(synchronize_session=False)
        )
    return session.get(RunModel, run_id, populate_existing=True)


def cancel_requested(session: Session, *, run_ids: Sequence[int]) -> list[int]:
    """Which of ``run_ids`` have been cancelled (by any process sharing the database)."""
    if not run_ids:
        return []
    return list(session.scalars(
        select(RunModel.id).where(RunModel.id.in_(list(run_ids)), RunModel.cancel_requested)
    ))


def finish_run(
    session: Session,
    *,
    run_id: int,
    status: RunStatus,
    error: str | None = None,
    stop_reason: str | None = None,
    best: dict[str, Any] | None = None,
    elapsed_s: float | None = None,
) -> bool:
    """Record how a run ended; whether this call ended it (``False``: it had been
    cancelled already, and it stays ``cancelled`` with the outcome's best and time)."""
    run = session.get(RunModel, run_id)
    if run is None:
        return False
    ended_now = run.status != RunStatus.CANCELLED.value
    run.status = status.value if ended_now else RunStatus.CANCELLED.value
    run.phase = "done"
    run.error = error
    run.stop_reason = stop_reason if ended_now else "cancelled"
    run.finished_at = run.finished_at if not ended_now and run.finished_at else utcnow()
    run.owner = None
    if elapsed_s is not None:
        run.elapsed_s = elapsed_s
    if best is not None:
        run.best_latency_us = best["latency_us"]
        run.best_schedule_hash = best["schedule_hash"]
        run.best_simulated = best["simulated"]
        run.best_kernel_hash = best.get("kernel_hash")
    return ended_now


def newest_run(session: Session, *, workload_id: int, device_id: int) -> RunModel | None:
    """The newest run of a workload on a device, whatever its status."""
    return session.scalars(
        select(RunModel)
        .where(RunModel.workload_id == workload_id, RunModel.device_id == device_id)
        .order_by(RunModel.id.desc())
        .limit(1)
    ).first()


def reopen_run(
    session: Session,
    *,
    run_id: int,
    budget_trials: int,
    budget_seconds: float | None,
    reset_attempts: bool = False,
) -> bool:
    """Queue a finished run again with a larger budget (an extension: it resumes as an
    interrupted run does, its stored trials counted and never measured again); whether
    it was reopened (not if it is active, its owner is still storing its outcome, or
    another run of its workload on its device is active: the partial unique index).
    ``reset_attempts``: count its starts from zero again (a resume)."""
    attempts = {"attempts": 0} if reset_attempts else {}
    try:
        with session.begin_nested():
            result = session.execute(
                update(RunModel)
                .where(
                    RunModel.id == run_id,
                    RunModel.status.not_in(ACTIVE_STATUSES),
                    RunModel.owner.is_(None),
                )
                .values(
                    status=RunStatus.QUEUED.value,
                    phase="queued",
                    budget_trials=budget_trials,
                    budget_seconds=budget_seconds,
                    cancel_requested=False,
                    stop_reason=None,
                    error=None,
                    finished_at=None,
                    **attempts,
                )
                .execution_options(synchronize_session=False)
            )
    except IntegrityError:
        return False
    return result.rowcount == 1


def release_run(session: Session, *, run_id: int, owner: str) -> None:
    """Leave a running run for the next start to resume (a graceful shutdown)."""
    session.execute(
        update(RunModel)
        .where(RunModel.id == run_id, RunModel.owner == owner)
        .values(owner=None)
        .execution_options(synchronize_session=False)
    )


def running_runs(session: Session) -> list[RunModel]:
    return list(
        session.scalars(select(RunModel).where(RunModel.status == RunStatus.RUNNING.value))
    )


def stopping_runs(session: Session) -> list[RunModel]:
    """Cancelled runs whose owner has not yet stored their outcome (phase ``stopping``)."""
    return list(session.scalars(select(RunModel).where(
        RunModel.status == RunStatus.CANCELLED.value, RunModel.owner.is_not(None))))


def requeue_run(
    session: Session, *, run_id: int, owner: str | None, attempt: int,
    stale_before: dt.datetime | None = None, not_before: dt.datetime | None = None,
    error: str | None = None,
) -> bool:
    """Queue a running run again (to resume from its trials) if it is still ``owner``'s
    claim number ``attempt`` and, given ``stale_before``, still silent since then: a
    decision made on an earlier read changes nothing once the run was heartbeated or
    claimed again. It starts no sooner than ``not_before``; ``error`` says why, until it
    ends. Whether it was queued."""
    result = session.execute(
        update(RunModel)
        .where(RunModel.id == run_id, RunModel.status == RunStatus.RUNNING.value,
               _claimed_by(owner, attempt), _silent_since(stale_before))
        .values(status=RunStatus.QUEUED.value, phase="queued", owner=None, error=error,
                not_before=not_before)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


def _silent_since(stale_before: dt.datetime | None) -> Any:
    """No heartbeat since ``stale_before`` (None: no condition)."""
    if stale_before is None:
        return true()
    return RunModel.heartbeat_at.is_(None) | (RunModel.heartbeat_at < stale_before)


def interrupt_run(
    session: Session, *, run_id: int, owner: str | None, attempt: int, reason: str,
    stale_before: dt.datetime | None = None,
) -> bool:
    """End a running run ``interrupted``, on the conditions of :func:`requeue_run`;
    whether it was ended."""
    result = session.execute(
        update(RunModel)
        .where(RunModel.id == run_id, RunModel.status == RunStatus.RUNNING.value,
               _claimed_by(owner, attempt), _silent_since(stale_before))
        .values(
            status=RunStatus.INTERRUPTED.value,
            phase="done",
            owner=None,
            error=redact_owner(reason),
            finished_at=utcnow(),
        )
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


def count_runs_by_status(session: Session) -> dict[str, int]:
    rows = session.execute(select(RunModel.status, func.count()).group_by(RunModel.status))
    return {status: count for status, count in rows}


# ----- trials ---------------------------------------------------------------------------------
def add_trials(session: Session, *, run_id: int, trials: Sequence[dict[str, Any]]) -> None:
    """Append trials to a run, numbered after the ones it has."""
    if not trials:
        return
    start = session.scalar(
        select(func.coalesce(func.max(TrialModel.number) + 1, 0)).where(
            TrialModel.run_id == run_id
        )
    )
    now = utcnow()
    session.add_all(
        TrialModel(run_id=run_id, number=start + i, created_at=now, **values)
        for i, values in enumerate(trials)
    )


#: Orders of :func:`list_trials`: a column, ``-`` for descending. Trials without a
#: latency sort last either way; ties keep the trial order.
TRIAL_ORDERS = ("number", "-number", "latency_us", "-latency_us", "status", "-status")


def list_trials(
    session: Session,
    *,
    run_id: int,
    status: str | None = None,
    exclude_status: str | None = None,
    after: int | None = None,
    order: str = "number",
    limit: int = 1000,
    offset: int = 0,
) -> tuple[list[TrialModel], int]:
    """A page of a run's trials in ``order`` (one of :data:`TRIAL_ORDERS`; trials without
    a latency last, ties in trial order), and how many match: of ``status`` only, or of
    every status but ``exclude_status``."""
    if order not in TRIAL_ORDERS:
        raise ValueError(f"unknown trial order {order!r}; known: {', '.join(TRIAL_ORDERS)}")
    query = select(TrialModel).where(TrialModel.run_id == run_id)
    if status is not None:
        query = query.where(TrialModel.status == status)
    elif exclude_status is not None:
        query = query.where(TrialModel.status != exclude_status)
    if after is not None:
        query = query.where(TrialModel.number > after)
    count = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    column = getattr(TrialModel, order.lstrip("-"))
    keys: list[Any] = []
    if order.lstrip("-") == "latency_us":
        keys.append(TrialModel.latency_us.is_(None))  # NULLs last on every backend
    keys.append(column.desc() if order.startswith("-") else column.asc())
    if order.lstrip("-") != "number":
        keys.append(TrialModel.number)
    rows = session.scalars(query.order_by(*keys).limit(limit).offset(min(offset, MAX_DB_INT)))
    return list(rows), count


def trial_series(session: Session, *, run_id: int) -> list[Any]:
    """Every trial of a run as rows ``(number, status, latency_us, created_at)`` in
    order: the dashboard's convergence charts, without the JSON columns.

    ``created_at`` comes back unconverted (SQLite: the stored text; PostgreSQL: a
    datetime): parsing every timestamp of a long run costs more than the query, and the
    charts need only a sample of them (:func:`parse_timestamp`).
    """
    query = (
        select(
            TrialModel.number,
            TrialModel.status,
            TrialModel.latency_us,
            type_coerce(TrialModel.created_at, String),
        )
        .where(TrialModel.run_id == run_id)
        .order_by(TrialModel.number)
    )
    # Core rows through the session's connection: the ORM's per-row loading is not needed
    # for plain columns, and it costs more than the query on a long run.
    return list(session.connection().execute(query).all())


def parse_timestamp(value: Any) -> dt.datetime | None:
    """A raw ``created_at`` of :func:`trial_series` as an aware UTC datetime."""
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return as_utc(value)


def trial_choices(session: Session, *, run_id: int, schedule_hash: str) -> dict[str, Any] | None:
    """The search choices of the run's (first) trial of a schedule, or None."""
    return session.scalar(
        select(TrialModel.choices)
        .where(TrialModel.run_id == run_id, TrialModel.schedule_hash == schedule_hash)
        .order_by(TrialModel.number)
        .limit(1)
    )


def count_complete_trials(session: Session, *, run_id: int) -> int:
    """Trials of the run with a measured latency."""
    return session.scalar(
        select(func.count()).where(
            TrialModel.run_id == run_id, TrialModel.latency_us.is_not(None)
        )
    ) or 0


# ----- schedules and kernels --------------------------------------------------------------------
def find_cached(session: Session, *, workload_key: str, device_key: str) -> ScheduleModel | None:
    """The cached best schedule of a workload and device by their keys, in one query (a
    cache-hit tune is the API's most frequent answer)."""
    return session.scalars(
        select(ScheduleModel)
        .join(WorkloadModel, ScheduleModel.workload_id == WorkloadModel.id)
        .join(DeviceModel, ScheduleModel.device_id == DeviceModel.id)
        .where(WorkloadModel.key == workload_key, DeviceModel.key == device_key)
    ).one_or_none()


def find_schedule(session: Session, *, workload_id: int, device_id: int) -> ScheduleModel | None:
    return ScheduleModel.find(session, workload_id, device_id)


def store_best_schedule(
    session: Session,
    *,
    workload_id: int,
    device_id: int,
    run_id: int | None,
    schedule_hash: str,
    schedule: dict[str, Any],
    choices: dict[str, Any],
    latency_us: float,
    predicted_us: float | None,
    simulated: bool,
    kernel_hash: str | None = None,
    timing_method: str | None = None,
) -> ScheduleModel:
    """Keep the faster of the cached schedule and this one (a GPU timing beats a
    simulated one whatever the numbers); ``run_id`` None: an imported schedule.
    ``timing_method``: how the GPU timed ``latency_us`` (``"events"`` or ``"graph"``;
    None: a simulated estimate), kept with it."""
    current = ScheduleModel.find(session, workload_id, device_id)
    values = {
        "schedule_hash": schedule_hash,
        "schedule": schedule,
        "choices": choices,
        "latency_us": latency_us,
        "predicted_us": predicted_us,
        "simulated": simulated,
        "run_id": run_id,
        "kernel_hash": kernel_hash,
        "timing_method": timing_method,
        "updated_at": utcnow(),
    }
    if current is None:
        try:
            with session.begin_nested():
                row = ScheduleModel(workload_id=workload_id, device_id=device_id, **values)
                session.add(row)
            return row
        except IntegrityError:
            current = ScheduleModel.find(session, workload_id, device_id)
            if current is None:
                raise
    better = (current.simulated and not simulated) or (
        current.simulated == simulated and latency_us < current.latency_us
    )
    if better:
        for name, value in values.items():
            setattr(current, name, value)
    return current


def list_schedules(
    session: Session,
    *,
    op: str | None = None,
    device: str | None = None,
    workload_key: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[ScheduleModel]:
    """Cached schedules, newest first; ``device`` matches a device's name or key."""
    query = select(ScheduleModel).join(WorkloadModel).join(DeviceModel)
    if op is not None:
        query = query.where(WorkloadModel.op == op)
    if device is not None:
        query = query.where((DeviceModel.name == device) | (DeviceModel.key == device))
    if workload_key is not None:
        query = query.where(WorkloadModel.key == workload_key)
    rows = session.scalars(
        query.order_by(ScheduleModel.updated_at.desc(), ScheduleModel.id.desc())
        .limit(limit)
        .offset(min(offset, MAX_DB_INT))
    )
    return list(rows.unique())


def get_schedule(session: Session, *, schedule_id: int) -> ScheduleModel | None:
    return session.get(ScheduleModel, schedule_id) if 0 < schedule_id <= MAX_DB_INT else None


def schedule_of_run(
    session: Session, *, run_id: int, schedule_hash: str
) -> ScheduleModel | None:
    """The cache entry a run stored for ``schedule_hash``, if it is still the cached one."""
    return session.scalars(
        select(ScheduleModel)
        .where(ScheduleModel.run_id == run_id, ScheduleModel.schedule_hash == schedule_hash)
        .limit(1)
    ).first()


def schedule_summaries(
    session: Session, *, op: str | None = None, device: str | None = None
) -> list[Any]:
    """The cache without the sProgram JSON, newest first, as rows ``(id, op, params,
    device, device_key, simulated, schedule_hash, latency_us, predicted_us, kernel_hash,
    run_id, updated_at[, baseline, baseline_latency_us][, timing_method])``: what a list
    shows, cheap to read for every entry."""
    query = (
        select(
            ScheduleModel.id,
            WorkloadModel.op,
            WorkloadModel.params,
            DeviceModel.name.label("device"),
            DeviceModel.key.label("device_key"),
            ScheduleModel.simulated,
            ScheduleModel.schedule_hash,
            ScheduleModel.latency_us,
            ScheduleModel.predicted_us,
            ScheduleModel.kernel_hash,
            ScheduleModel.run_id,
            ScheduleModel.updated_at,
            # The vendor baseline and how it was timed, where the schema has them (the
            # GPU runs' migration, 0010).
            *[getattr(ScheduleModel, name)
              for name in ("baseline", "baseline_latency_us", "timing_method")
              if hasattr(ScheduleModel, name)],
        )
        .join(WorkloadModel, ScheduleModel.workload_id == WorkloadModel.id)
        .join(DeviceModel, ScheduleModel.device_id == DeviceModel.id)
    )
    if op is not None:
        query = query.where(WorkloadModel.op == op)
    if device is not None:
        query = query.where((DeviceModel.name == device) | (DeviceModel.key == device))
    return list(
        session.execute(query.order_by(ScheduleModel.updated_at.desc(), ScheduleModel.id.desc()))
    )


def schedules_for_warm_start(
    session: Session, *, op: str, device_id: int, exclude_workload_id: int | None = None
) -> list[ScheduleModel]:
    """Every cached schedule of ``op`` on the device (the caller ranks them by shape)."""
    query = (
        select(ScheduleModel)
        .join(WorkloadModel)
        .where(WorkloadModel.op == op, ScheduleModel.device_id == device_id)
    )
    if exclude_workload_id is not None:
        query = query.where(ScheduleModel.workload_id != exclude_workload_id)
    return list(session.scalars(query).unique())


def get_kernel(session: Session, *, kernel_hash: str) -> KernelModel | None:
    return KernelModel.find(session, kernel_hash)


def stale_before(seconds: float) -> dt.datetime:
    return utcnow() - dt.timedelta(seconds=seconds)


__all__ = [
    "ACTIVE_STATUSES",
    "TRIAL_ORDERS",
    "LeaseLost",
    "StorageError",
    "add_trials",
    "cancel_requested",
    "claim_next_queued",
    "claim_run",
    "count_complete_trials",
    "count_runs_by_status",
    "create_run",
    "find_device",
    "find_schedule",
    "finish_run",
    "get_kernel",
    "get_or_create_device",
    "get_or_create_workload",
    "get_run",
    "get_schedule",
    "heartbeat",
    "hold_run",
    "interrupt_run",
    "list_devices",
    "list_runs",
    "list_schedules",
    "list_trials",
    "newest_run",
    "parse_timestamp",
    "release_run",
    "reopen_run",
    "request_cancel",
    "requeue_run",
    "running_runs",
    "schedule_of_run",
    "schedule_summaries",
    "schedules_for_warm_start",
    "session_scope",
    "stale_before",
    "stopping_runs",
    "store_best_schedule",
    "trial_choices",
    "trial_series",
    "update_progress",
]
