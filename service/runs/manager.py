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

Who does what once a run is claimed: :class:`~service.runs.execution.RunExecution` loads
it and drives its search (``service.runs.execution`` describes a GPU run);
:class:`~service.runs.finish.RunFinish` stores its winner, kernel, baseline and peers;
``service.runs.calibration`` refits the device's cost model afterwards. The manager only
tracks which runs it executes, so that a cancel reaches the right one.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from scheduler_search.search import Progress
from service.core.config import Settings
from service.core.db import Database
from service.core.metrics import Metrics
from service.db import fleet, processes
from service.db import keys as keys_repo
from service.db import ranges as ranges_repo
from service.db import repositories as repo
from service.db.models import (
    DeviceModel,
    RangeTableModel,
    RunKind,
    RunModel,
    RunStatus,
    ScheduleModel,
    WorkloadModel,
    as_utc,
    utcnow,
)
from service.errors import Conflict, InvalidRequest, NotFound
from service.runs import fleet as fleet_runs
from service.runs.admission import admit
from service.runs.context import RunContext, RunLease
from service.runs.devices import ResolvedDevice, available_devices, served_device_keys
from service.runs.execution import RunExecution
from service.runs.executors import ExecutorRegistry
from service.runs.finish import record_end
from service.runs.range_execution import RangeExecution
from service.runs.ranges import RangeServed, fixed_key, fixed_params, range_workload, serve_exact
from service.runs.retry import database_fault, restart_delay_s, with_retries
from service.runs.tune import RangeTuneInput, TuneInput

logger = logging.getLogger(__name__)

_IDLE_POLL_S = 1.0
#: Heartbeats per stale period at least, whatever ``heartbeat_s`` says: one late or failed
#: heartbeat never makes a live run look stale.
_BEATS_PER_STALE_PERIOD = 3
#: The owners (``host:pid:token``) of this process's run managers that are started and
#: not closed: another run manager of this process never takes their runs for gone.
_LIVE_OWNERS: set[str] = set()
_LIVE_LOCK = threading.Lock()
#: A check of the finished run an ``extend`` would queue again; it raises to refuse.
ReopenCheck = Callable[[RunModel], None]
#: What ``resume`` continues.
RESUMABLE = (RunStatus.FAILED.value, RunStatus.CANCELLED.value, RunStatus.INTERRUPTED.value)


@dataclass
class Submitted:
    """What ``submit`` did: a cache hit (``schedule``, and ``run``, the run that found
    it, if it is in this database), or a run (new, shared or extended). A range request's
    hit is ``range_table``; an exact size a tuned range serves is ``served``."""

    schedule: ScheduleModel | None = None
    run: RunModel | None = None
    created: bool = False
    range_table: RangeTableModel | None = None
    served: RangeServed | None = None

    @property
    def cached(self) -> bool:
        return (self.schedule is not None or self.range_table is not None
                or self.served is not None)


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
        self._active: dict[int, threading.Event] = {}  # run id -> its cancel request
        #: Run id -> the claim whose execution ended here without recording the run's end
        #: (the database was away): the one kind of own run recovery takes for gone.
        self._ended: dict[int, int] = {}
        self._lock = threading.Lock()
        self._problem: str | None = None
        #: The keys of the devices this process measures, once started (None: not started).
        self.device_keys: frozenset[str] | None = None
        self._given_keys = device_keys
        self._context = RunContext(db, settings, executors, metrics, self.owner,
                                   shutdown=self._stop)

    # ----- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Recover orphaned runs, register the devices this process serves (it claims only
        their runs), then start the worker, heartbeat and recovery threads."""
        self._live()
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
        with _LIVE_LOCK:
            _LIVE_OWNERS.discard(self.owner)
        if self.device_keys is not None and self.db.problem() is None:
            try:
                with repo.session_scope(self.db.sessions) as session:
                    processes.leave(session, owner=self.owner)
            except repo.StorageError:
                logger.warning("could not unregister %s; its heartbeat goes stale", self.owner)

    def _live(self) -> None:
        """Count this manager among the live ones of its process (until ``close``)."""
        with _LIVE_LOCK:
            _LIVE_OWNERS.add(self.owner)

    @property
    def active_runs(self) -> list[int]:
        with self._lock:
            return list(self._active)

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
        spec = tune.spec
        if not (tune.force or tune.extend) and (hit := self._cache_hit(tune)) is not None:
            return hit

        def stored_since(session: Any, workload: WorkloadModel,
                         device: DeviceModel) -> Submitted | None:
            """The schedule stored since the read above, in the queuing transaction."""
            if tune.force or tune.extend:
                return None
            cached = repo.find_schedule(session, workload_id=workload.id, device_id=device.id)
            return self._hit(session, cached) if cached is not None else None

        return self._queue(tune, spec.workload_key(), spec.op, spec.params(),
                           RunKind.EXACT.value, key_id, may_reopen, found=stored_since)

    def _cache_hit(self, tune: TuneInput) -> Submitted | None:
        """The cached schedule of ``tune``'s workload and device, read without a write
        transaction (the common answer under load; on SQLite a write transaction waits
        for the running searches' writes), else the tuned range on the device that holds
        the size (the bucket's kernel bound to it), or None."""
        with repo.session_scope(self.db.read_sessions) as session:
            cached = repo.find_cached(session, workload_key=tune.spec.workload_key(),
                                      device_key=tune.device.key)
            if cached is not None:
                return self._hit(session, cached)
        served = serve_exact(self.db, tune.spec, tune.device.key)
        if served is None:
            return None
        self._count_tune("cache_hit")
        return Submitted(served=served, run=self._found_by(served.table.run_id))

    def _found_by(self, run_id: int | None) -> RunModel | None:
        if run_id is None:
            return None
        with repo.session_scope(self.db.read_sessions) as session:
            return repo.get_run(session, run_id=run_id)

    def submit_range(self, tune: RangeTuneInput, *, key_id: int | None = None,
                     may_reopen: ReopenCheck | None = None) -> Submitted:
        """A tuned range on the device covering the request's (``range_table``, and the
        run that tuned it), or the range run for it (new, extended, or the queued/running
        one of the same range workload); as :meth:`submit` otherwise.

        Raises:
            InvalidRequest: ``extend`` names a run whose outcome is still being stored.
            TooManyRequests: a new run would exceed the key's or the server's quota.
        """
        range_spec, device = tune.range_spec, tune.device
        if not (tune.force or tune.extend):
            size_range = range_spec.ranges[tune.dim]
            with repo.session_scope(self.db.read_sessions) as session:
                table = ranges_repo.find_covering(
                    session, op=range_spec.op,
                    fixed_key=fixed_key(range_spec.op, fixed_params(range_spec)),
                    dim=tune.dim, low=size_range.low, high=size_range.high,
                    device_key=device.key)
            if table is not None:
                self._count_tune("cache_hit")
                return Submitted(range_table=table, run=self._found_by(table.run_id))
        key, params = range_workload(range_spec)
        return self._queue(tune, key, range_spec.op, params, RunKind.RANGE.value, key_id,
                           may_reopen)

    def _queue(self, tune: TuneInput | RangeTuneInput, workload_key: str, op: str,
               params: dict[str, Any], kind: str, key_id: int | None,
               may_reopen: ReopenCheck | None,
               found: Callable[[Any, WorkloadModel, DeviceModel], Submitted | None]
               | None = None) -> Submitted:
        """The run of ``kind`` for ``tune``'s workload (by ``workload_key``) on its device:
        a new one, the active one it joins, or (``extend``) the newest one queued again;
        one path for exact and range requests. ``found``, asked in the same transaction
        before anything is queued, may answer instead (a result stored meanwhile)."""
        with repo.session_scope(self.db.sessions) as session:
            workload_row = repo.get_or_create_workload(session, key=workload_key, op=op,
                                                       params=params)
            device_row = _device_row(session, tune.device)
            if found is not None and (answer := found(session, workload_row,
                                                      device_row)) is not None:
                return answer
            self._admit_unless_joining(session, workload_row, device_row, key_id)
            if tune.extend:
                run, created = self._extend(session, workload_row, device_row, tune, key_id,
                                            kind=kind, may_reopen=may_reopen)
            else:
                run, created = repo.create_run(
                    session, workload=workload_row, device=device_row,
                    budget_trials=tune.trials, budget_seconds=tune.seconds,
                    patience=tune.patience, seed=tune.seed, key_id=key_id, kind=kind)
        self._count_tune("new_run" if created else "joined_run")
        if created:
            self._wake.set()
        return Submitted(run=self.get(run.id), created=created)

    def _admit_unless_joining(self, session: Any, workload: WorkloadModel,
                              device: DeviceModel, key_id: int | None) -> None:
        """Admit a new run (the quotas) unless one of (workload, device) is active, which
        the request joins. The admission lock comes first, so that a request racing
        another for the same workload sees the run that one queued and joins it rather
        than being counted against the quota."""
        keys_repo.lock_admission(session)
        if RunModel.find_active(session, workload.id, device.id) is None:
            admit(session, self.settings, key_id=key_id)

    def _hit(self, session: Any, cached: Any) -> Submitted:
        """A cache hit's answer: the schedule and the run that found it (if any)."""
        self._count_tune("cache_hit")
        found_by = (repo.get_run(session, run_id=cached.run_id)
                    if cached.run_id is not None else None)
        return Submitted(schedule=cached, run=found_by)

    def _extend(
        self, session: Any, workload: WorkloadModel, device: DeviceModel,
        tune: TuneInput | RangeTuneInput, key_id: int | None,
        kind: str = RunKind.EXACT.value, may_reopen: ReopenCheck | None = None,
    ) -> tuple[RunModel, bool]:
        """Queue the newest run of (workload, device) again with ``tune``'s budget on top
        of what it spent (a new run of ``kind`` if it has none; the active one if one is
        active), if ``may_reopen`` lets it."""
        newest = repo.newest_run(session, workload_id=workload.id, device_id=device.id)
        if newest is None or not RunStatus(newest.status).is_finished():
            return repo.create_run(session, workload=workload, device=device,
                                   budget_trials=tune.trials, budget_seconds=tune.seconds,
                                   patience=tune.patience, seed=tune.seed, key_id=key_id,
                                   kind=kind)
        if may_reopen is not None:
            may_reopen(newest)
        self._release_if_gone(session, newest, field="extend")
        seconds = newest.elapsed_s + tune.seconds if tune.seconds is not None else None
        reopened = repo.reopen_run(session, run_id=newest.id,
                                   budget_trials=newest.trials_done + tune.trials,
                                   budget_seconds=seconds)
        active = RunModel.find_active(session, workload.id, device.id)
        if active is None:
            raise repo.StorageError(f"run {newest.id} could not be queued again; try again")
        return active, reopened

    def _release_if_gone(self, session: Any, run: RunModel, *, field: str) -> None:
        """Free a finished run from a process that is gone before it is queued again.

        Raises:
            InvalidRequest: its process is alive and still storing what it found.
        """
        if run.owner is None:
            return
        if not self._owner_gone(run):
            raise InvalidRequest([{
                "loc": (field,), "type": "conflict",
                "msg": f"run {run.id} was cancelled and is still storing what it found; "
                       "try again in a few seconds",
            }])
        repo.release_run(session, run_id=run.id, owner=run.owner)

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
        with repo.session_scope(self.db.sessions) as session:
            run = repo.get_run(session, run_id=run_id)
            if run is None:
                raise NotFound(f"run {run_id} not found")
            if run.status not in RESUMABLE:
                raise Conflict([{"loc": ("run_id",), "type": "conflict",
                                       "msg": f"run {run_id} is {run.status}; only a failed, "
                                       "cancelled or interrupted run resumes (extend a "
                                       "succeeded one with POST /v1/tune)"}], where="path")
            # The admission lock before the run's row lock, in the order extend takes them.
            admit(session, self.settings, key_id=run.key_id)
            self._release_if_gone(session, run, field="run_id")
            budget_trials = run.trials_done + trials if trials is not None else run.budget_trials
            budget_seconds = run.elapsed_s + seconds if seconds is not None else run.budget_seconds
            if not repo.reopen_run(session, run_id=run_id, budget_trials=budget_trials,
                                   budget_seconds=budget_seconds, reset_attempts=True):
                active = RunModel.find_active(session, run.workload_id, run.device_id)
                raise Conflict([{"loc": ("run_id",), "type": "conflict",
                                       "msg": f"run {active.id if active else '?'} of the same "
                                       "workload and device is active; wait for it or cancel "
                                       "it"}], where="path")
        self._wake.set()
        resumed = self.get(run_id)
        assert resumed is not None
        return resumed

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
        with self._lock:
            if run_id in self._active:
                self._active[run_id].set()
        return self.get(run_id)

    def run_inline(
        self, run_id: int, on_progress: Callable[[Progress], None] | None = None
    ) -> RunModel | None:
        """Claim and execute one queued run in the calling thread (``pipetune tune``)."""
        self._live()
        if run_id not in self.active_runs:
            with repo.session_scope(self.db.sessions) as session:
                run = repo.claim_run(session, run_id=run_id, owner=self.owner)
            if run is not None:
                self._execute(RunLease(run.id, run.attempts), on_progress)
        return self.get(run_id)

    # ----- recovery ----------------------------------------------------------------------------
    def recover(self) -> list[int]:
        """Resume or interrupt runs whose owner is gone, the ids handled; end the
        ``stopping`` phase of cancelled runs whose owner is gone. Nothing is written once
        the database is not the one the manager started on."""
        if self.db.problem() is not None:
            return []
        stale_before = repo.stale_before(self.settings.stale_after_s)
        with self._lock:
            ended_before = dict(self._ended)
        with repo.session_scope(self.db.sessions) as session:
            running = repo.running_runs(session)
            handled = [run.id for run in running if self._recover_one(session, run, stale_before)]
            stopping = repo.stopping_runs(session)
            for run in stopping:
                if self._owner_gone(run, stale_before):
                    logger.warning("run %d: cancelled, and its owner %s is gone before storing "
                                   "its outcome; its best so far stays", run.id, run.owner)
                    repo.finish_run(session, run_id=run.id, status=RunStatus.CANCELLED)
        self._forget_ended(ended_before, {run.id for run in [*running, *stopping]
                                          if run.owner == self.owner and run.id not in handled})
        if handled:
            self._wake.set()
        return handled

    def _recover_one(self, session: Any, run: RunModel, stale_before: dt.datetime) -> bool:
        """Resume or interrupt ``run`` if its owner is gone, by a conditional update (the
        same owner and claim, still silent if silence decided); whether it was."""
        if not self._owner_gone(run, stale_before):
            return False
        silent = (stale_before if run.owner is not None
                  and _process_state(run.owner) == "unknown" else None)
        claim = {"run_id": run.id, "owner": run.owner, "attempt": run.attempts,
                 "stale_before": silent}
        if self.settings.on_restart == "resume":
            if not repo.requeue_run(session, **claim):
                return False
            logger.warning("run %d: owner %s is gone; resuming it", run.id, run.owner)
            return True
        if not repo.interrupt_run(session, **claim, reason=(
                f"interrupted: the process running it ({run.owner}) stopped")):
            return False
        logger.warning("run %d: owner %s is gone; interrupted", run.id, run.owner)
        if self.metrics:
            self.metrics.runs_finished.labels(RunStatus.INTERRUPTED.value).inc()
        return True

    def _forget_ended(self, ended_before: dict[int, int], still_ours: set[int]) -> None:
        """Drop the ended claims recovery no longer needs (their run is no longer ours)."""
        with self._lock:
            for run_id, attempt in ended_before.items():
                if run_id not in still_ours and self._ended.get(run_id) == attempt:
                    del self._ended[run_id]

    def _owner_gone(self, run: RunModel, stale_before: dt.datetime | None = None) -> bool:
        """Whether the process that owns ``run`` is gone. This manager: only once the
        execution of the run's current claim ended here (its end not recorded). Another
        manager of this process: once it stopped. A process of this host: once it is dead.
        Any other (or a pid that may have been reused): no heartbeat since
        ``stale_before``."""
        if run.owner is None:
            return True
        if run.owner == self.owner:
            with self._lock:
                return self._ended.get(run.id) == run.attempts
        state = _process_state(run.owner)
        if state != "unknown":
            return state == "gone"
        if stale_before is None:
            stale_before = repo.stale_before(self.settings.stale_after_s)
        heartbeat = as_utc(run.heartbeat_at)
        return heartbeat is None or heartbeat < stale_before

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
            self._execute(RunLease(run.id, run.attempts))

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

    # ----- one run -----------------------------------------------------------------------------
    def _execute(
        self, lease: RunLease, on_progress: Callable[[Progress], None] | None = None
    ) -> None:
        """Execute a claimed run, tracked in ``_active`` meanwhile; an exception fails it,
        a lost lease leaves it to whoever holds it now."""
        run_id, cancel = lease.run_id, threading.Event()
        with self._lock:
            self._active[run_id] = cancel
        if self.metrics:
            self.metrics.runs_active.inc()
        try:
            with repo.session_scope(self.db.sessions) as session:
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
            if self.metrics:
                self.metrics.runs_active.dec()

    def _after_database_fault(self, lease: RunLease, fault: BaseException) -> None:
        """A run whose search failed on the database after its writes' retries: queued
        again (resumed from its stored trials, after :func:`restart_delay_s`) below
        ``max_run_attempts`` starts, else failed, saying so. If even that cannot be
        written, the run is left to recovery (this manager's own, once the database is
        back; its heartbeat stops, so another's once stale)."""
        run_id = lease.run_id
        cause = f"{type(fault).__name__}: {str(fault).splitlines()[0] if str(fault) else ''}"
        cap = self.settings.max_run_attempts
        delay = dt.timedelta(seconds=restart_delay_s(self.settings, lease.attempt))

        def requeue_or_fail() -> bool:
            with repo.session_scope(self.db.sessions) as session:
                self._context.hold(session, lease)
                if lease.attempt >= cap:
                    return False
                return repo.requeue_run(
                    session, run_id=run_id, owner=self.owner, attempt=lease.attempt,
                    not_before=utcnow() + delay, error=(
                        f"database unavailable during the search ({cause}); queued again "
                        f"to resume from its trials (start {lease.attempt + 1} of {cap})"))

        try:
            requeued = with_retries(self.settings, requeue_or_fail)
        except repo.StorageError:
            logger.exception("run %d: the database is still unavailable; left to recovery",
                             run_id)
            return
        except repo.LeaseLost as exc:
            logger.warning("run %d is not queued again here: %s", run_id, exc)
            return
        if requeued:
            logger.warning("run %d: database unavailable (%s); queued again", run_id, cause)
            self._wake.set()
            return
        logger.error("run %d: database unavailable (%s) in %d starts; failed", run_id, cause,
                     cap)
        record_end(self._context, lease, RunStatus.FAILED, error=(
            f"database unavailable during the search in each of {cap} starts "
            f"(max_run_attempts), last: {cause}; POST /v1/runs/{run_id}/resume continues it "
            "from its trials"))

    def _count_tune(self, outcome: str) -> None:
        if self.metrics:
            self.metrics.tune_requests.labels(outcome).inc()


def _device_row(session: Any, device: ResolvedDevice) -> Any:
    return repo.get_or_create_device(
        session,
        key=device.key,
        name=device.name,
        kind=device.kind,
        simulated=device.simulated,
        identity=device.identity,
    )


def _process_state(owner: str) -> Literal["alive", "gone", "unknown"]:
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
