"""Whether a new run may be queued: the key's quota of active runs and the server's bound
on queued runs (checked only when a request would add a run, not when it joins one).

The check holds under concurrent requests because :func:`admit` takes the admission lock
(``keys.lock_admission``) before it counts, and the caller queues the run in the same
transaction: the next request's count waits for that commit and sees the run (issue 42:
counting without a lock let 30 concurrent requests of one key queue 29 runs against a
bound of 5 on PostgreSQL)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from service.core.config import Settings
from service.db import keys as keys_repo
from service.db.models import DeviceModel, RunModel, WorkloadModel
from service.errors import TooManyRequests

#: What a 429 for a full queue suggests: runs take seconds to minutes, so a retry sooner
#: would most likely be refused again.
QUEUE_RETRY_AFTER_S = 30.0


def admit(session: Session, settings: Settings, *, key_id: int | None) -> None:
    """Raise :class:`TooManyRequests` if one more run would exceed a quota. Call it in
    the transaction that then queues the run: the admission lock it takes is held until
    that transaction ends.

    Raises:
        TooManyRequests: the key has ``key_max_active_runs`` queued or running runs, or
            the server has ``max_queued_runs`` queued.
    """
    keys_repo.lock_admission(session)
    if key_id is not None:
        active = keys_repo.count_active_runs(session, key_id=key_id)
        if active >= settings.key_max_active_runs:
            raise TooManyRequests(
                f"this API key has {active} queued or running runs, its quota; cancel one "
                "or wait for one to finish", retry_after_s=QUEUE_RETRY_AFTER_S,
                field="key_max_active_runs")
    queued = keys_repo.count_queued_runs(session)
    if queued >= settings.max_queued_runs:
        raise TooManyRequests(
            f"the server's queue is full ({queued} runs queued); try again later",
            retry_after_s=QUEUE_RETRY_AFTER_S, field="max_queued_runs")


def admit_unless_joining(session: Session, settings: Settings, workload: WorkloadModel,
                         device: DeviceModel, *, key_id: int | None) -> None:
    """:func:`admit` a new run unless one of (workload, device) is active, which the
    request joins. The admission lock comes first, so that a request racing another for
    the same workload sees the run that one queued and joins it rather than being counted
    against the quota.

    Raises:
        TooManyRequests: as :func:`admit`, for a run the request would add.
    """
    keys_repo.lock_admission(session)
    if RunModel.find_active(session, workload.id, device.id) is None:
        admit(session, settings, key_id=key_id)
