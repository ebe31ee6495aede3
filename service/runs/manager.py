"""The run manager: background tuning runs, a concurrency limit, cancel, restart recovery.

Runs live in the database, not in memory. ``submit`` answers a cache hit, or queues a run
(or returns the queued/running run of the same workload and device); ``force`` queues a
run despite a hit, and ``extend`` queues the workload's newest run again with more budget,
so it resumes its study (its trials count and are never measured twice). Worker threads, as
many as ``max_concurrent_runs``, claim queued runs with a conditional update, so several
processes sharing one PostgreSQL database never run the same run twice. A running run's
owner (``host:pid:token``) writes a heartbeat, several times a stale period; a run whose
owner is gone (a process of this host that is dead, or a run manager of this process that
stopped, or silent since ``stale_after_s``) is resumed (queued again: its trials count and
are never measured twice) or marked ``interrupted``, as ``on_restart`` says, at start and
then periodically.

A process never takes its own runs for gone: the runs it executes, or has claimed and is
about to, are its own until their execution ends. A decision on another's run is a
conditional update (the same owner, the same claim, still silent), so it changes nothing
once that run was heartbeated or claimed again; and a search whose run was taken over all
the same (a process paused past the stale period) stops at its next write, having written
nothing (each write holds the claim's lease: ``service.runs.context``).

A manager whose SQLite file is deleted or replaced (``Database.problem``, what ``/healthz``
reports) stops: it claims nothing more, and its runs stop without writing to the lost file.

A cancel ends the run at once (``repositories.request_cancel``: ``cancelled``, phase
``stopping``); its search stops at the next round (a cancel made through another process
is read at the next progress update) and stores its best (phase ``done``).

The lifecycle: ``start()`` once (recovery, then the threads), ``close()`` once. A run in
progress at ``close()`` stops at its next round and is left for the next start to resume.

Who does what: the manager owns the threads, the devices it serves and the lifecycle;
:class:`~service.runs.run_queue.RunQueue` answers the requests that queue runs (the cache,
the quotas, extend and resume); :class:`~service.runs.recovery.Recovery` takes over the
runs of gone owners; :class:`~service.runs.claimed.ClaimedRuns` executes each claimed run
and tracks it meanwhile, so that a cancel reaches the right one. Once a run is claimed,
:class:`~service.runs.execution.RunExecution` loads it and drives its search
(``service.runs.execution`` describes a GPU run); :class:`~service.runs.finish.RunFinish`
stores its winner, kernel, baseline and peers; ``service.runs.calibration`` refits the
device's cost model afterwards.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable

from scheduler_search.search import Progress
from service.core.config import Settings
from service.core.db import Database
from service.core.metrics import Metrics
from service.db import fleet, processes
from service.db import repositories as repo
from service.db.models import RunModel, RunStatus
from service.runs import fleet as fleet_runs
from service.runs.claimed import ClaimedRuns
from service.runs.context import RunContext, RunLease
from service.runs.devices import ResolvedDevice, available_devices, served_device_keys
from service.runs.executors import ExecutorRegistry
from service.runs.recovery import Recovery, mark_live, mark_stopped
from service.runs.run_queue import ReopenCheck, RunQueue, Submitted
from service.runs.tune import RangeTuneInput, TuneInput

logger = logging.getLogger(__name__)

_IDLE_POLL_S = 1.0
#: Heartbeats per stale period at least, whatever ``heartbeat_s`` says: one late or failed
#: heartbeat never makes a live run look stale.
_BEATS_PER_STALE_PERIOD = 3

__all__ = ["ReopenCheck", "RunManager", "Submitted"]


class RunManager:
    """Executes tuning runs in background threads (see the module docstring).

    Args:
        db: the database (sessions and Optuna storage).
        settings: concurrency, recovery policy, heartbeat.
        executors: the executor of each device.
        metrics: counters to update (optional).
        device_keys: the keys of the devices it measures (default: found at start, the
            simulated catalog and this host's GPUs); it claims only their runs.
    """

    def __init__(
        self,
        db: Database,
        settings: Settings,
        executors: ExecutorRegistry,
        metrics: Metrics | None = None,
        device_keys: frozenset[str] | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.executors = executors
        self.metrics = metrics
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._problem: str | None = None
        #: The keys of the devices this process measures, once started (None: not started).
        self.device_keys: frozenset[str] | None = None
        self._given_keys = device_keys
        self._context = RunContext(db, settings, executors, metrics, self.owner,
                                   shutdown=self._stop)
        self._claimed = ClaimedRuns(self._context, wake=self._wake.set)
        self._recovery = Recovery(db, settings, metrics, self.owner, self._claimed,
                                  wake=self._wake.set)
        self._queue = RunQueue(db, settings, metrics, owner_gone=self._recovery.owner_gone,
                               wake=self._wake.set)

    # ----- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Recover orphaned runs, register the devices this process serves (it claims only
        their runs), then start the worker, heartbeat and recovery threads."""
        mark_live(self.owner)
        self.recover()
        self._register_devices()
        loops = [(f"pipetune-run-{index}", self._worker_loop)
                 for index in range(self.settings.max_concurrent_runs)]
        loops += [("pipetune-heartbeat", self._heartbeat_loop),
                  ("pipetune-recovery", self._recovery_loop)]
        for name, loop in loops:
            thread = threading.Thread(target=loop, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        if self.settings.warm_executors:
            threading.Thread(target=self._warm_executors, name="pipetune-warm",
                             daemon=True).start()

    def _warm_executors(self) -> None:
        """Start the executors of the GPUs and fleet kinds this process serves now, not at
        their first run (a run that comes meanwhile waits for the same start)."""
        try:
            devices = self._served_gpus()
        except Exception as exc:  # a GPU that cannot be probed, the database away
            logger.warning("executors not warmed: %s", exc)
            return
        for device in devices:
            if self._stop.is_set():
                return
            try:
                self.executors.warm(device)
            except Exception as exc:  # a GPU that cannot start fails its runs later, loudly
                logger.warning("executor of %s not warmed: %s", device.name, exc)

    def _register_devices(self) -> None:
        """Record the keys this process measures: the given ones, else this host's devices
        and the fleet's that its Ray cluster offers now (nodes come and go)."""
        if self._given_keys:
            keys = frozenset(self._given_keys)
        else:
            with repo.session_scope(self.db.sessions) as session:
                registered = fleet.fleet_devices(session)
            try:
                offered = self._context.executors.fleet_keys(registered)
            except Exception as exc:  # the cluster unreachable: the local devices meanwhile
                logger.warning("fleet devices not served: %s", exc)
                offered = frozenset()
            keys = served_device_keys() | offered
        self.device_keys = keys
        with repo.session_scope(self.db.sessions) as session:
            processes.register(session, owner=self.owner, device_keys=keys)

    def _served_gpus(self) -> list[ResolvedDevice]:
        """The GPU devices (local and fleet) among the keys this process claims runs for."""
        keys = self.device_keys or frozenset()
        found = [d for d in available_devices() if d.kind == "cuda" and d.key in keys]
        with repo.session_scope(self.db.sessions) as session:
            registered = fleet.fleet_devices(session)
        return found + [fleet_runs.resolved(d) for d in registered if d.key in keys]

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the threads; runs in progress stop at their next round, left to resume."""
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout_s)
        self._threads.clear()
        mark_stopped(self.owner)
        if self.device_keys is not None and self.db.problem() is None:
            try:
                with repo.session_scope(self.db.sessions) as session:
                    processes.leave(session, owner=self.owner)
            except repo.StorageError:
                logger.warning("could not unregister %s; its heartbeat goes stale", self.owner)

    @property
    def active_runs(self) -> list[int]:
        return self._claimed.active

    @property
    def stopped_because(self) -> str | None:
        """Why the manager stopped by itself (its SQLite file deleted or replaced), or
        None: it runs, or was closed."""
        return self._problem

    def _stop_for(self, problem: str) -> None:
        """Stop claiming and executing: the database is no longer the one it started on.
        Runs in progress stop at their next round, writing nothing more."""
        if self._problem is None:
            logger.error("%s; this run manager stops (restart it on a usable database)",
                         problem)
        self._problem = problem
        self._stop.set()
        self._wake.set()

    # ----- requests ----------------------------------------------------------------------------
    def submit(self, tune: TuneInput, *, key_id: int | None = None,
               may_reopen: ReopenCheck | None = None) -> Submitted:
        """A cache hit, or the run (new, extended, or the queued/running one) for this
        request; a new run belongs to API key ``key_id``. ``may_reopen`` is called, in the
        transaction that would queue it again, on the finished run an ``extend`` would
        continue (it raises to refuse: another key's run).

        Raises:
            InvalidRequest: ``extend`` names a run whose outcome is still being stored.
            TooManyRequests: a new run would exceed the key's or the server's quota.
        """
        return self._queue.submit(tune, key_id=key_id, may_reopen=may_reopen)

    def submit_range(self, tune: RangeTuneInput, *, key_id: int | None = None,
                     may_reopen: ReopenCheck | None = None) -> Submitted:
        """A tuned range on the device covering the request's (``range_table``, and the
        run that tuned it), or the range run for it (new, extended, or the queued/running
        one of the same range workload); as :meth:`submit` otherwise.

        Raises:
            InvalidRequest: ``extend`` names a run whose outcome is still being stored.
            TooManyRequests: a new run would exceed the key's or the server's quota.
        """
        return self._queue.submit_range(tune, key_id=key_id, may_reopen=may_reopen)

    def resume(self, run_id: int, *, trials: int | None = None,
               seconds: float | None = None) -> RunModel:
        """Queue a failed, cancelled or interrupted run again: it continues from its
        stored trials (none measured again, the same study), with its budget as it was,
        or ``trials`` / ``seconds`` more than it has done if given. Its start count
        (``attempts``) begins again.

        Raises:
            NotFound: no such run.
            Conflict: the run cannot resume (its status, a process still storing
                its outcome, or another active run of its workload), naming why.
            TooManyRequests: its key's or the server's quota is reached.
        """
        return self._queue.resume(run_id, trials=trials, seconds=seconds)

    def get(self, run_id: int) -> RunModel | None:
        with repo.session_scope(self.db.sessions) as session:
            return repo.get_run(session, run_id=run_id)

    def cancel(self, run_id: int) -> RunModel | None:
        """Cancel a run now (a running one's search stops at its next round and stores
        its best); ``None`` if unknown."""
        with repo.session_scope(self.db.sessions) as session:
            before = repo.get_run(session, run_id=run_id)
            if before is None:
                return None
            was_active = not RunStatus(before.status).is_finished()
            run = repo.request_cancel(session, run_id=run_id)
            assert run is not None
            if was_active and run.status == RunStatus.CANCELLED.value and self.metrics:
                self.metrics.runs_finished.labels(RunStatus.CANCELLED.value).inc()
        self._claimed.cancel(run_id)
        return self.get(run_id)

    def run_inline(
        self, run_id: int, on_progress: Callable[[Progress], None] | None = None
    ) -> RunModel | None:
        """Claim and execute one queued run in the calling thread (``pipetune tune``)."""
        mark_live(self.owner)
        if run_id not in self.active_runs:
            with repo.session_scope(self.db.sessions) as session:
                run = repo.claim_run(session, run_id=run_id, owner=self.owner)
            if run is not None:
                self._claimed.execute(RunLease(run.id, run.attempts), on_progress)
        return self.get(run_id)

    def recover(self) -> list[int]:
        """Resume or interrupt runs whose owner is gone, the ids handled; end the
        ``stopping`` phase of cancelled runs whose owner is gone. Nothing is written once
        the database is not the one the manager started on."""
        return self._recovery.recover()

    # ----- threads -----------------------------------------------------------------------------
    def _worker_loop(self) -> None:
        while not self._stop.is_set():
            problem = self.db.problem()
            if problem is not None:
                self._stop_for(problem)
                return
            try:
                with repo.session_scope(self.db.sessions) as session:
                    run = repo.claim_next_queued(session, owner=self.owner,
                                                 device_keys=self.device_keys,
                                                 skip=self.active_runs)
            except repo.StorageError:
                logger.exception("could not claim a queued run")
                run = None
            if run is None:
                self._wake.wait(_IDLE_POLL_S)
                self._wake.clear()
                continue
            self._claimed.execute(RunLease(run.id, run.attempts))

    def _heartbeat_loop(self) -> None:
        """The heartbeat of the runs executing here, several times a stale period (a
        thread of its own: recovery's queries never delay it)."""
        every_s = min(self.settings.heartbeat_s,
                      self.settings.stale_after_s / _BEATS_PER_STALE_PERIOD)
        while not self._stop.wait(every_s):
            problem = self.db.problem()
            if problem is not None:
                self._stop_for(problem)
                return
            try:
                with repo.session_scope(self.db.sessions) as session:
                    repo.heartbeat(session, run_ids=self.active_runs, owner=self.owner)
                    processes.beat(session, owner=self.owner)
            except repo.StorageError:
                logger.exception("heartbeat failed")

    def _recovery_loop(self) -> None:
        """Recovery twice a stale period (and the fleet's devices, where it has some)."""
        while not self._stop.wait(self.settings.stale_after_s / 2):
            try:
                self.recover()
                if self._context.executors.ray_address is not None:
                    self._register_devices()
            except repo.StorageError:
                logger.exception("recovery failed")
