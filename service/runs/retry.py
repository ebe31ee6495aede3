"""Riding out a brief database fault: a run's writes, pipetune's own and those of its
Optuna study alike, are retried with exponential backoff (``tenacity``), and a run whose
search still failed on the database is queued again, to start after a wait that doubles
with each start, until its start count reaches ``Settings.max_run_attempts``.

Eight tries waiting 0.25, 0.5, 1, 2, 4, 8, 8 s (the defaults) span about 24 s: a
PostgreSQL restart or a failover, not an outage. The restarts then wait 8 s, 16 s, ...
(``db_retry_max_wait_s`` doubled per start), so the starts are not spent within seconds
while the database is still away.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import optuna
from sqlalchemy.exc import InterfaceError, OperationalError
from tenacity import (
    Retrying,
    before_sleep_log,
    retry_base,
    retry_if_exception,
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
#: What :func:`with_retries` tries again by default: pipetune's own writes' errors.
_OWN_WRITES = retry_if_exception_type(StorageError)
#: The longest a run queued again after a database fault waits before its next start.
MAX_RESTART_DELAY_S = 300.0


def with_retries(settings: Settings, write: Callable[[], T],
                 retry: retry_base = _OWN_WRITES) -> T:
    """``write()``, tried again as the settings say while it fails as ``retry`` says
    (default: a :class:`StorageError`, pipetune's own writes); the last error
    propagates."""
    retrying = Retrying(
        retry=retry,
        stop=stop_after_attempt(settings.db_retry_attempts),
        wait=wait_exponential(multiplier=FIRST_WAIT_S, max=settings.db_retry_max_wait_s),
        before_sleep=before_sleep_log(logger, logging.WARNING),
        reraise=True,
    )
    return retrying(write)


def restart_delay_s(settings: Settings, starts: int) -> float:
    """How long a run that failed on the database in its ``starts``-th start waits before
    the next: ``db_retry_max_wait_s``, doubled for each earlier start (at most
    :data:`MAX_RESTART_DELAY_S`)."""
    return min(settings.db_retry_max_wait_s * 2.0 ** max(starts - 1, 0), MAX_RESTART_DELAY_S)


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


class RetryingStorage(optuna.storages.BaseStorage):
    """An Optuna storage whose every call is retried through a brief database fault, as
    pipetune's own writes are (:func:`with_retries`); a run's study is mirrored through
    one.

    Each call of Optuna's RDB storage is one transaction, rolled back when it fails, so
    trying it again repeats nothing (a commit whose acknowledgement was lost may add a
    trial twice; a resumed run's study is reconciled with pipetune's trials by count,
    never by deletion). Errors that are not the database's (a duplicated study name, a
    finished trial) propagate at once.

    Args:
        storage: the storage that does the work (``Database.optuna_storage()``).
        settings: the retry policy.
    """

    def __init__(self, storage: optuna.storages.BaseStorage, settings: Settings) -> None:
        self.storage = storage
        self.settings = settings

    def retried(self, call: Callable[[], T]) -> T:
        return with_retries(self.settings, call,
                            retry_if_exception(lambda exc: database_fault(exc) is not None))


def _delegate(name: str) -> Callable[..., Any]:
    """``RetryingStorage.<name>``: the wrapped storage's method, retried."""

    def call(self: RetryingStorage, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self.storage, name)
        return self.retried(lambda: method(*args, **kwargs))

    call.__name__ = call.__qualname__ = name
    return call


# Every public method of BaseStorage is delegated, the conveniences too: the RDB storage
# answers them with one query where the base class would read every trial.
for _name in dir(optuna.storages.BaseStorage):
    if not _name.startswith("_") and callable(getattr(optuna.storages.BaseStorage, _name)):
        setattr(RetryingStorage, _name, _delegate(_name))
abc.update_abstractmethods(RetryingStorage)
