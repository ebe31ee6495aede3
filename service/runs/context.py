"""What every run of one manager shares, handed from the manager to each run's execution,
and the lease by which one execution holds its run.

:class:`~service.runs.manager.RunManager` builds one :class:`RunContext`;
:class:`~service.runs.claimed.ClaimedRuns`, :class:`~service.runs.execution.RunExecution`
and :mod:`service.runs.finish` read it rather than reaching back into the manager. Each
claim gives a :class:`RunLease`; every write of the run's execution begins with
:meth:`RunContext.hold`, so a run queued again and taken over elsewhere (its heartbeat
went stale) is never written by the search that lost it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sqlalchemy.orm import Session

from service.core.config import Settings
from service.core.db import Database
from service.core.metrics import Metrics
from service.db import repositories as repo
from service.runs.executors import ExecutorRegistry


@dataclass(frozen=True)
class RunLease:
    """One claim of a run: which run, and which of its starts (``attempts`` after the
    claim). Its writes are valid while the run is still this start of this owner's.

    Attributes:
        run_id: the run.
        attempt: the claim's number (``RunModel.attempts`` as the claim set it).
    """

    run_id: int
    attempt: int


@dataclass(frozen=True)
class RunContext:
    """The services a run uses and the manager's shutdown signal.

    Attributes:
        db: sessions and the Optuna storage.
        settings: batch size, warm start, cost-model seeds, calibration.
        executors: the executor of each device.
        metrics: counters to update, or ``None``.
        owner: the manager's ``host:pid:token``; a run's writes are made as this owner,
            so a run another process has taken over is left alone.
        shutdown: set by ``RunManager.close()``: a run stops at its next round and is left
            ``running`` without an owner, for the next start to resume.
    """

    db: Database
    settings: Settings
    executors: ExecutorRegistry
    metrics: Metrics | None
    owner: str
    shutdown: threading.Event

    def hold(self, session: Session, lease: RunLease) -> None:
        """Begin a write of the leased run in ``session``: the database is still the one
        the manager started on (a deleted or replaced SQLite file is not written) and the
        run still this claim's (its heartbeat written meanwhile).

        Raises:
            LeaseLost: either is no longer so; nothing of the run is written.
        """
        problem = self.db.problem()
        if problem is not None:
            raise repo.LeaseLost(f"run {lease.run_id} is not written: {problem}")
        repo.hold_run(session, run_id=lease.run_id, owner=self.owner, attempt=lease.attempt)
