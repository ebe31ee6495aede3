"""Riding out a brief database fault: a run's writes are retried with exponential backoff
(``tenacity``), and a run whose search still failed on the database is queued again
until its start count reaches ``Settings.max_run_attempts``.

Eight tries waiting 0.25, 0.5, 1, 2, 4, 8, 8 s (the defaults) span about 24 s: a
PostgreSQL restart or a failover, not an outage.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import InterfaceError, OperationalError
from tenacity import (
    Retrying,
    before_sleep_log,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from service.core.config import Settings
from service.db.repositories import StorageError

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: The first wait; each next one doubles, up to ``Settings.db_retry_max_wait_s``.
FIRST_WAIT_S = 0.25


def with_retries(settings: Settings, write: Callable[[], T]) -> T:
    """``write()``, tried again on a :class:`StorageError` as the settings say; the last
    error propagates."""
    retrying = Retrying(
        retry=retry_if_exception_type(StorageError),
        stop=stop_after_attempt(settings.db_retry_attempts),
        wait=wait_exponential(multiplier=FIRST_WAIT_S, max=settings.db_retry_max_wait_s),
        before_sleep=before_sleep_log(logger, logging.WARNING),
        reraise=True,
    )
    return retrying(write)


def database_fault(exc: BaseException) -> BaseException | None:
    """The database error behind ``exc`` (pipetune's own writes raise
    :class:`StorageError`; Optuna's storage lets SQLAlchemy's connection errors through,
    sometimes wrapped), or ``None`` if the database is not to blame."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, (StorageError, OperationalError, InterfaceError)):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
