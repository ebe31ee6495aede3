"""The runs one manager has claimed: each executed in the claiming thread, tracked meanwhile
(so that a cancel reaches it and the heartbeat covers it), and the claims whose execution
ended here remembered, for recovery.

A claimed run's execution ends one of four ways: its search stores its outcome
(:class:`~service.runs.execution.RunExecution`, :class:`~service.runs.finish.RunFinish`);
its lease is lost (another process took it over; nothing more is written here); its
search fails on the database after its writes' retries (queued again, or failed once it
has used ``max_run_attempts`` starts: ``service.runs.retry``); or any other exception
fails it.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable

from scheduler_search.search import Progress
from service.db import repositories as repo
from service.db.models import RunKind, RunModel, RunStatus, utcnow
from service.runs.context import RunContext, RunLease
from service.runs.execution import RunExecution
from service.runs.finish import record_end
from service.runs.range_execution import RangeExecution
from service.runs.retry import database_fault, restart_delay_s, with_retries

logger = logging.getLogger(__name__)


class ClaimedRuns:
    """Executes the runs a manager claims and knows which of them it executes now.

    Args:
        context: what the runs' executions share (the manager's owner among it).
        wake: wakes the manager's workers (a run queued again is theirs to claim).
    """

    def __init__(self, context: RunContext, wake: Callable[[], None]) -> None:
        self._context = context
        self._wake = wake
        self._lock = threading.Lock()
        self._active: dict[int, threading.Event] = {}  # run id -> its cancel request
        #: Run id -> the claim whose execution ended here without recording the run's end
        #: (the database was away): the one kind of own run recovery takes for gone.
        self._ended: dict[int, int] = {}

    @property
    def active(self) -> list[int]:
        """The ids of the runs executing here now."""
        with self._lock:
            return list(self._active)

    def cancel(self, run_id: int) -> None:
        """Ask the run's search, if it executes here, to stop at its next round."""
        with self._lock:
            if run_id in self._active:
                self._active[run_id].set()

    def ended_here(self, run: RunModel) -> bool:
        """Whether the execution of ``run``'s current claim ended here."""
        with self._lock:
            return self._ended.get(run.id) == run.attempts

    def ended_claims(self) -> dict[int, int]:
        """The claims whose execution ended here (run id -> attempt), as they are now."""
        with self._lock:
            return dict(self._ended)

    def forget_ended(self, ended_before: dict[int, int], still_ours: set[int]) -> None:
        """Drop the ended claims recovery no longer needs (their run is no longer ours)."""
        with self._lock:
            for run_id, attempt in ended_before.items():
                if run_id not in still_ours and self._ended.get(run_id) == attempt:
                    del self._ended[run_id]

    def execute(
        self, lease: RunLease, on_progress: Callable[[Progress], None] | None = None
    ) -> None:
        """Execute a claimed run, tracked as active meanwhile; an exception fails it, a
        lost lease leaves it to whoever holds it now."""
        run_id, cancel, metrics = lease.run_id, threading.Event(), self._context.metrics
        with self._lock:
            self._active[run_id] = cancel
        if metrics:
            metrics.runs_active.inc()
        try:
            with repo.session_scope(self._context.db.sessions) as session:
                run = repo.get_run(session, run_id=run_id)
                range_run = run is not None and run.kind == RunKind.RANGE.value
            execution = RangeExecution if range_run else RunExecution
            execution.load(self._context, lease, cancel=cancel,
                           on_progress=on_progress).execute()
        except repo.LeaseLost as exc:
            logger.warning("run %d stops here: %s", run_id, exc)
        except Exception as exc:
            fault = database_fault(exc)
            if fault is not None:
                self._after_database_fault(lease, fault)
            else:
                logger.exception("run %d failed", run_id)
                record_end(self._context, lease, RunStatus.FAILED,
                           error=f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._active.pop(run_id, None)
                self._ended[run_id] = lease.attempt
            if metrics:
                metrics.runs_active.dec()

    def _after_database_fault(self, lease: RunLease, fault: BaseException) -> None:
        """A run whose search failed on the database after its writes' retries: queued
        again (resumed from its stored trials, after :func:`restart_delay_s`) below
        ``max_run_attempts`` starts, else failed, saying so. If even that cannot be
        written, the run is left to recovery (this manager's own, once the database is
        back; its heartbeat stops, so another's once stale)."""
        run_id, settings = lease.run_id, self._context.settings
        cause = f"{type(fault).__name__}: {str(fault).splitlines()[0] if str(fault) else ''}"
        cap = settings.max_run_attempts
        delay = dt.timedelta(seconds=restart_delay_s(settings, lease.attempt))

        def requeue_or_fail() -> bool:
            with repo.session_scope(self._context.db.sessions) as session:
                self._context.hold(session, lease)
                if lease.attempt >= cap:
                    return False
                return repo.requeue_run(
                    session, run_id=run_id, owner=self._context.owner, attempt=lease.attempt,
                    not_before=utcnow() + delay, error=(
                        f"database unavailable during the search ({cause}); queued again "
                        f"to resume from its trials (start {lease.attempt + 1} of {cap})"))

        try:
            requeued = with_retries(settings, requeue_or_fail)
        except repo.StorageError:
            logger.exception("run %d: the database is still unavailable; left to recovery",
                             run_id)
            return
        except repo.LeaseLost as exc:
            logger.warning("run %d is not queued again here: %s", run_id, exc)
            return
        if requeued:
            logger.warning("run %d: database unavailable (%s); queued again", run_id, cause)
            self._wake()
            return
        logger.error("run %d: database unavailable (%s) in %d starts; failed", run_id, cause,
                     cap)
        record_end(self._context, lease, RunStatus.FAILED, error=(
            f"database unavailable during the search in each of {cap} starts "
            f"(max_run_attempts), last: {cause}; POST /v1/runs/{run_id}/resume continues it "
            "from its trials"))
