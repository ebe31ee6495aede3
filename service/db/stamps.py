"""Stamps: the rows an API answer is built from, read as plain values.

The API's most frequent answers (a cache-hit ``POST /v1/tune``, ``GET /v1/schedules``)
are built from ORM objects whose JSON columns hold whole sProgram documents: most of
their cost is the ORM session, the JSON and the response model, not the database. A
stamp reads the same rows' columns (without the sProgram JSON, which changes only with
``schedule_hash``) in one Core query on a bare connection, several times cheaper; an
answer remembered with its stamp (``service.api.answers``) is reused while the rows
still read the same, and rebuilt as soon as any of their columns differs. Nothing here
depends on clocks.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, bindparam, select

from service.db.models import DeviceModel, RunModel, ScheduleModel, WorkloadModel

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
    connection: Connection, *, workload_key: str, device_key: str
) -> tuple[Any, ...] | None:
    """The cache-hit answer's rows for a workload and device, or None without a cached
    schedule (then there is nothing to reuse)."""
    row = connection.execute(
        _CACHE_HIT, {"workload_key": workload_key, "device_key": device_key}
    ).one_or_none()
    return tuple(row) if row is not None else None


def schedules_stamp(connection: Connection) -> tuple[tuple[Any, ...], ...]:
    """Every cached schedule's columns: a list of the cache is the same while this is."""
    return tuple(tuple(row) for row in connection.execute(_SCHEDULES))
