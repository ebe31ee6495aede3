"""Recovery of runs whose owner is gone, and how a process tells whether an owner is gone.

A running run's owner (``host:pid:token``) is gone when it is a process of this host that
is dead, a run manager of this process that stopped, or silent (no heartbeat) since
``stale_after_s``; its run is resumed (queued again: its trials count and are never
measured twice) or marked ``interrupted``, as ``on_restart`` says. A process never takes
its own runs for gone: the runs it executes, or has claimed and is about to, are its own
until their execution ends (:class:`~service.runs.claimed.ClaimedRuns`). A decision on
another's run is a conditional update (the same owner, the same claim, still silent), so
it changes nothing once that run was heartbeated or claimed again.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any, Literal

from service.core.config import Settings
from service.core.db import Database
from service.core.metrics import Metrics
from service.db import repositories as repo
from service.db.models import RunModel, RunStatus, as_utc
from service.runs.claimed import ClaimedRuns

logger = logging.getLogger(__name__)

#: The owners (``host:pid:token``) of this process's run managers that are started and
#: not closed: another run manager of this process never takes their runs for gone.
_LIVE_OWNERS: set[str] = set()
_LIVE_LOCK = threading.Lock()


def mark_live(owner: str) -> None:
    """Count ``owner``, a run manager of this process, among the live ones."""
    with _LIVE_LOCK:
        _LIVE_OWNERS.add(owner)


def mark_stopped(owner: str) -> None:
    """``owner``, a run manager of this process, stopped: its runs are gone with it."""
    with _LIVE_LOCK:
        _LIVE_OWNERS.discard(owner)


def process_state(owner: str) -> Literal["alive", "gone", "unknown"]:
    """What this host knows of the process of ``owner`` (``host:pid:token``): ``alive``
    (a started run manager of this process), ``gone`` (a process of this host that is
    dead, a run manager of this process that stopped or never started, or an owner that
    names no process), else ``unknown`` (another host, or a live pid, which may have been
    reused: only its heartbeat can tell)."""
    parts = owner.split(":")
    if len(parts) < 3:
        return "gone"
    host, pid_text = ":".join(parts[:-2]), parts[-2]
    if host != socket.gethostname():
        return "unknown"
    try:
        pid = int(pid_text)
    except ValueError:
        return "gone"
    if pid == os.getpid():
        with _LIVE_LOCK:
            return "alive" if owner in _LIVE_OWNERS else "gone"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "unknown"
    return "unknown"


class Recovery:
    """Resumes or interrupts the runs of gone owners, on behalf of one run manager.

    Args:
        db: the database.
        settings: ``stale_after_s`` and ``on_restart``.
        metrics: counters to update (optional).
        owner: the manager's ``host:pid:token``.
        claimed: the manager's claimed runs (its own runs are gone only once ended there).
        wake: wakes the manager's workers (a run queued again is theirs to claim).
    """

    def __init__(self, db: Database, settings: Settings, metrics: Metrics | None, owner: str,
                 claimed: ClaimedRuns, wake: Callable[[], None]) -> None:
        self._db = db
        self._settings = settings
        self._metrics = metrics
        self._owner = owner
        self._claimed = claimed
        self._wake = wake

    def recover(self) -> list[int]:
        """Resume or interrupt runs whose owner is gone, the ids handled; end the
        ``stopping`` phase of cancelled runs whose owner is gone. Nothing is written once
        the database is not the one the manager started on."""
        if self._db.problem() is not None:
            return []
        stale_before = repo.stale_before(self._settings.stale_after_s)
        ended_before = self._claimed.ended_claims()
        with repo.session_scope(self._db.sessions) as session:
            running = repo.running_runs(session)
            handled = [run.id for run in running if self._recover_one(session, run, stale_before)]
            stopping = repo.stopping_runs(session)
            for run in stopping:
                if self.owner_gone(run, stale_before):
                    logger.warning("run %d: cancelled, and its owner %s is gone before storing "
                                   "its outcome; its best so far stays", run.id, run.owner)
                    repo.finish_run(session, run_id=run.id, status=RunStatus.CANCELLED)
        self._claimed.forget_ended(ended_before, {
            run.id for run in [*running, *stopping]
            if run.owner == self._owner and run.id not in handled})
        if handled:
            self._wake()
        return handled

    def owner_gone(self, run: RunModel, stale_before: dt.datetime | None = None) -> bool:
        """Whether the process that owns ``run`` is gone. This manager: only once the
        execution of the run's current claim ended here (its end not recorded). Another
        manager of this process: once it stopped. A process of this host: once it is dead.
        Any other (or a pid that may have been reused): no heartbeat since
        ``stale_before``."""
        if run.owner is None:
            return True
        if run.owner == self._owner:
            return self._claimed.ended_here(run)
        state = process_state(run.owner)
        if state != "unknown":
            return state == "gone"
        if stale_before is None:
            stale_before = repo.stale_before(self._settings.stale_after_s)
        heartbeat = as_utc(run.heartbeat_at)
        return heartbeat is None or heartbeat < stale_before

    def _recover_one(self, session: Any, run: RunModel, stale_before: dt.datetime) -> bool:
        """Resume or interrupt ``run`` if its owner is gone, by a conditional update (the
        same owner and claim, still silent if silence decided); whether it was."""
        if not self.owner_gone(run, stale_before):
            return False
        silent = (stale_before if run.owner is not None
                  and process_state(run.owner) == "unknown" else None)
        claim = {"run_id": run.id, "owner": run.owner, "attempt": run.attempts,
                 "stale_before": silent}
        if self._settings.on_restart == "resume":
            if not repo.requeue_run(session, **claim):
                return False
            logger.warning("run %d: owner %s is gone; resuming it", run.id, run.owner)
            return True
        if not repo.interrupt_run(session, **claim, reason=(
                f"interrupted: the process running it ({run.owner}) stopped")):
            return False
        logger.warning("run %d: owner %s is gone; interrupted", run.id, run.owner)
        if self._metrics:
            self._metrics.runs_finished.labels(RunStatus.INTERRUPTED.value).inc()
        return True
