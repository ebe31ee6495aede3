"""Stamps: the rows an API answer is built from, read as plain values.

The API's most frequent answers (a cache-hit ``POST /v1/tune``, ``GET /v1/schedules``)
are built from ORM objects whose JSON columns hold whole sProgram documents: most of
their cost is the ORM session, the JSON and the response model, not the database. A
stamp reads the same rows' columns (without the sProgram JSON, which changes only with
``schedule_hash``) in one query compiled once per dialect and run on a pooled DBAPI
connection (about 20 us on SQLite, against 80 through SQLAlchemy's execution and 400
through the ORM); the values are the driver's own (text dates on SQLite), which is all
an equality test needs. An
answer remembered with its stamp (``service.api.answers``) is reused while the rows
still read the same, and rebuilt as soon as any of their columns differs. Nothing here
depends on clocks.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, bindparam, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql import Select

from service.db.models import DeviceModel, RunModel, ScheduleModel, WorkloadModel
from service.db.repositories import StorageError

#: The schedule columns an answer shows, without the sProgram JSON (``schedule`` and
#: ``choices`` change only together with ``schedule_hash``, which is in).
_SCHEDULE_COLUMNS = tuple(
    c for c in ScheduleModel.__table__.c if c.name not in ("schedule", "choices")
)

#: The cached schedule of a (workload, device) by their keys, with every column of the
#: run that found it (``RunPublic`` shows most of them).
_CACHE_HIT = (
    select(*_SCHEDULE_COLUMNS, *RunModel.__table__.c)
    .select_from(ScheduleModel)
    .join(WorkloadModel, ScheduleModel.workload_id == WorkloadModel.id)
    .join(DeviceModel, ScheduleModel.device_id == DeviceModel.id)
    .outerjoin(RunModel, ScheduleModel.run_id == RunModel.id)
    .where(WorkloadModel.key == bindparam("workload_key"),
           DeviceModel.key == bindparam("device_key"))
)

#: Every cached schedule (workloads and devices, which a list also shows, never change).
_SCHEDULES = select(*_SCHEDULE_COLUMNS).order_by(ScheduleModel.id)


def cache_hit_stamp(
    engine: Engine, *, workload_key: str, device_key: str
) -> tuple[Any, ...] | None:
    """The cache-hit answer's rows for a workload and device, or None without a cached
    schedule (then there is nothing to reuse)."""
    rows = _fetch(engine, _CACHE_HIT, {"workload_key": workload_key, "device_key": device_key})
    return tuple(rows[0]) if rows else None


def schedules_stamp(engine: Engine) -> tuple[tuple[Any, ...], ...]:
    """Every cached schedule's columns: a list of the cache is the same while this is."""
    return tuple(tuple(row) for row in _fetch(engine, _SCHEDULES, {}))


#: (dialect, statement) -> (SQL text, parameter names in order or None for named style).
_COMPILED: dict[tuple[str, int], tuple[str, tuple[str, ...] | None]] = {}


def _fetch(engine: Engine, statement: Select, params: dict[str, Any]) -> list[Any]:
    """Every row of ``statement`` with ``params``, on a pooled DBAPI connection (checked
    out as any other: pinged on PostgreSQL, reset on return)."""
    key = (engine.dialect.name, id(statement))
    if key not in _COMPILED:
        compiled = statement.compile(dialect=engine.dialect)
        names = tuple(compiled.positiontup or ()) if compiled.positional else None
        _COMPILED[key] = (str(compiled), names)
    sql, names = _COMPILED[key]
    arguments = tuple(params[n] for n in names) if names is not None else params
    dbapi_error = engine.dialect.loaded_dbapi.Error
    try:
        connection = engine.raw_connection()
    except (SQLAlchemyError, dbapi_error) as exc:  # the checkout, its ping or connect
        raise StorageError(f"database unavailable: {type(exc).__name__}") from exc
    # PostgreSQL: one SELECT needs no transaction (no BEGIN, no ROLLBACK round trip on
    # return); SQLite's connections are in autocommit already (``service.core.db``).
    autocommit = engine.dialect.name != "sqlite"
    try:
        if autocommit:
            connection.driver_connection.autocommit = True
        cursor = connection.cursor()
        try:
            cursor.execute(sql, arguments)
            return cursor.fetchall()
        finally:
            cursor.close()
    except dbapi_error as exc:
        connection.invalidate()  # not pooled again
        raise StorageError(f"database unavailable: {type(exc).__name__}") from exc
    finally:
        if autocommit and connection.is_valid:
            connection.driver_connection.autocommit = False
        connection.close()
