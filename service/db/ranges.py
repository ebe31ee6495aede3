"""Reads and writes of the tuned ranges (``pipetune_range_tables``): a range run's bucket
table stored, the table that covers a range or an exact size found, tables listed.

Functions take an open session (``repositories.session_scope``) and keyword arguments,
as ``service.db.repositories`` does.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db.models import DeviceModel, RangeTableModel
from service.db.repositories import MAX_DB_INT


def store_range_table(
    session: Session,
    *,
    op: str,
    fixed_key: str,
    dim: str,
    low: int,
    high: int,
    params: dict[str, Any],
    size_from: list[Any],
    sizes: list[int],
    buckets: list[dict[str, Any]],
    loss: float | None,
    simulated: bool,
    device_id: int,
    run_id: int | None,
) -> RangeTableModel:
    """A new range table (a range run's outcome; an older table of the same range stays,
    the newest covering one answers)."""
    row = RangeTableModel(op=op, fixed_key=fixed_key, dim=dim, low=low, high=high,
                          params=params, size_from=size_from, sizes=sizes, buckets=buckets,
                          loss=loss, simulated=simulated, device_id=device_id, run_id=run_id)
    session.add(row)
    session.flush()
    return row


def find_covering(
    session: Session, *, op: str, fixed_key: str, dim: str, low: int, high: int,
    device_key: str,
) -> RangeTableModel | None:
    """The newest table of ``op`` with these fixed parameters on the device whose range of
    ``dim`` holds ``low``..``high`` (an exact size: ``low == high``), or None."""
    return session.scalars(
        select(RangeTableModel)
        .join(DeviceModel, RangeTableModel.device_id == DeviceModel.id)
        .where(RangeTableModel.op == op, RangeTableModel.fixed_key == fixed_key,
               RangeTableModel.dim == dim, RangeTableModel.low <= low,
               RangeTableModel.high >= high, DeviceModel.key == device_key)
        .order_by(RangeTableModel.id.desc())
        .limit(1)
    ).first()


def find_range(
    session: Session, *, op: str, fixed_key: str, dim: str, low: int, high: int,
    device_id: int,
) -> RangeTableModel | None:
    """The newest table of exactly this range on the device (the one that answers it over
    older ones of the same range), or None; a cache import compares with it."""
    return session.scalars(
        select(RangeTableModel)
        .where(RangeTableModel.op == op, RangeTableModel.fixed_key == fixed_key,
               RangeTableModel.dim == dim, RangeTableModel.low == low,
               RangeTableModel.high == high, RangeTableModel.device_id == device_id)
        .order_by(RangeTableModel.id.desc())
        .limit(1)
    ).first()


def get_range_table(session: Session, *, table_id: int) -> RangeTableModel | None:
    return RangeTableModel.find(session, table_id) if 0 < table_id <= MAX_DB_INT else None


def range_table_of_run(session: Session, *, run_id: int) -> RangeTableModel | None:
    """The newest table a run stored (an extended run stores one per attempt)."""
    return session.scalars(
        select(RangeTableModel).where(RangeTableModel.run_id == run_id)
        .order_by(RangeTableModel.id.desc()).limit(1)
    ).first()


def list_range_tables(
    session: Session,
    *,
    op: str | None = None,
    device: str | None = None,
    run_id: int | None = None,
    limit: int = 100,
    offset: int = 0,
) -> tuple[list[RangeTableModel], int]:
    """Range tables, newest first, and how many match; ``device`` matches a device's name
    or key."""
    query = select(RangeTableModel)
    if op is not None:
        query = query.where(RangeTableModel.op == op)
    if device is not None:
        query = query.join(DeviceModel, RangeTableModel.device_id == DeviceModel.id).where(
            (DeviceModel.name == device) | (DeviceModel.key == device))
    if run_id is not None:
        query = query.where(RangeTableModel.run_id == run_id)
    count = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(RangeTableModel.id.desc()).limit(limit)
                           .offset(min(offset, MAX_DB_INT)))
    return list(rows.unique()), count


__all__ = [
    "find_covering",
    "find_range",
    "get_range_table",
    "list_range_tables",
    "range_table_of_run",
    "store_range_table",
]
