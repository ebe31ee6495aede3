"""The processes that execute runs and the devices each serves (device affinity).

A run manager that executes runs registers the keys of the devices it can measure (its
simulated devices and its GPUs' fingerprint keys) when it starts, beats with its run
heartbeat and leaves when it closes; a row whose heartbeat is older than the staleness
bound belongs to a process that died. The API reads the live rows to say why a queued
run waits (no live process serves its device).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from service.db.models import ProcessModel, utcnow


def register(session: Session, *, owner: str, device_keys: Iterable[str]) -> None:
    """Record (or refresh) ``owner`` as serving ``device_keys``."""
    row = session.get(ProcessModel, owner)
    keys = sorted(set(device_keys))
    if row is None:
        session.add(ProcessModel(owner=owner, device_keys=keys))
    else:
        row.device_keys, row.heartbeat_at = keys, utcnow()


def beat(session: Session, *, owner: str) -> None:
    session.execute(
        update(ProcessModel).where(ProcessModel.owner == owner).values(heartbeat_at=utcnow())
    )


def leave(session: Session, *, owner: str) -> None:
    session.execute(delete(ProcessModel).where(ProcessModel.owner == owner))


def served_keys(session: Session, *, stale_after_s: float) -> set[str]:
    """The device keys some live process (a heartbeat in the last ``stale_after_s``)
    serves."""
    alive_after = utcnow() - dt.timedelta(seconds=stale_after_s)
    rows = session.scalars(
        select(ProcessModel.device_keys).where(ProcessModel.heartbeat_at >= alive_after)
    )
    return {key for keys in rows for key in keys}
