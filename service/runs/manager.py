"""The run manager: background tuning runs, a concurrency limit, cancel, restart recovery.

Runs live in the database, not in memory. ``submit`` answers a cache hit, or queues a run
(or returns the queued/running run of the same workload and device); ``force`` queues a
run despite a hit, and ``extend`` queues the workload's newest run again with more budget,
so it resumes its study (its trials count and are never measured twice). Worker threads, as
many as ``max_concurrent_runs``, claim queued runs with a conditional update, so several
processes sharing one PostgreSQL database never run the same run twice. A running run's
owner (``host:pid:token``) writes a heartbeat; a run whose owner is gone (its process is
dead on this host, or its heartbeat is older than ``stale_after_s``) is resumed (queued
again: its trials count and are never measured twice) or marked ``interrupted``, as
``on_restart`` says, at start and then periodically.

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

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scheduler_search.search import Progress
from service.core.config import Settings
from service.core.db import Database
from service.core.metrics import Metrics
from service.db import fleet, processes
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
)
from service.errors import Conflict, InvalidRequest, NotFound
from service.runs import fleet as fleet_runs
from service.runs.admission import admit
from service.runs.context import RunContext
from service.runs.devices import ResolvedDevice, available_devices, served_device_keys
from service.runs.execution import RunExecution
from service.runs.executors import ExecutorRegistry
from service.runs.finish import record_end
from service.runs.range_execution import RangeExecution
from service.runs.ranges import RangeServed, fixed_key, fixed_params, range_workload, serve_exact
from service.runs.retry import database_fault, with_retries
from service.runs.tune import RangeTuneInput, TuneInput

logger = logging.getLogger(__name__)

_IDLE_POLL_S = 1.0
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
        self._lock = threading.Lock()
        #: The keys of the devices this process measures, once started (None: not started).
        self.device_keys: frozenset[str] | None = None
        self._given_keys = device_keys
        self._context = RunContext(db, settings, executors, metrics, self.owner,
                                   shutdown=self._stop)

    # ----- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Recover orphaned runs, register the devices this process serves (it claims only
        their runs), then start the worker and heartbeat threads."""
        self.recover()
        self._register_devices()
        for index in range(self.settings.max_concurrent_runs):
            thread = threading.Thread(
                target=self._worker_loop, name=f"pipetune-run-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        beat = threading.Thread(target=self._heartbeat_loop, name="pipetune-heartbeat", daemon=True)
        beat.start()
        self._threads.append(beat)
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
        if self.device_keys is not None:
            try:
                with repo.session_scope(self.db.sessions) as session:
                    processes.leave(session, owner=self.owner)
            except repo.StorageError:
                logger.warning("could not unregister %s; its heartbeat goes stale", self.owner)

    @property
    def active_runs(self) -> list[int]:
        with self._lock:
            return list(self._active)

    # ----- requests ----------------------------------------------------------------------------
    def submit(self, tune: TuneInput, *, key_id: int | None = None) -> Submitted:
        """A cache hit, or the run (new, extended, or the queued/running one) for this
        request; a new run belongs to API key ``key_id``.

        Raises:
            InvalidRequest: ``extend`` names a run whose outcome is still being stored.
            TooManyRequests: a new run would exceed the key's or the server's quota.
        """
        spec, device = tune.spec, tune.device
        if not (tune.force or tune.extend) and (hit := self._cache_hit(tune)) is not None:
            return hit
        with repo.session_scope(self.db.sessions) as session:
            workload_row = repo.get_or_create_workload(
                session, key=spec.workload_key(), op=spec.op, params=spec.params()
            )
            device_row = _device_row(session, device)
            cached = repo.find_schedule(
                session, workload_id=workload_row.id, device_id=device_row.id
            )
            if cached is not None and not (tune.force or tune.extend):
                return self._hit(session, cached)  # stored since the read above
            if RunModel.find_active(session, workload_row.id, device_row.id) is None:
                admit(session, self.settings, key_id=key_id)
            if tune.extend:
                run, created = self._extend(session, workload_row, device_row, tune, key_id)
            else:
                run, created = repo.create_run(
                    session,
                    workload=workload_row,
                    device=device_row,
                    budget_trials=tune.trials,
                    budget_seconds=tune.seconds,
                    patience=tune.patience,
                    seed=tune.seed,
                    key_id=key_id,
                )
        self._count_tune("new_run" if created else "joined_run")
        if created:
            self._wake.set()
        return Submitted(run=self.get(run.id), created=created)

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

    def submit_range(self, tune: RangeTuneInput, *, key_id: int | None = None) -> Submitted:
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
        with repo.session_scope(self.db.sessions) as session:
            workload_row = repo.get_or_create_workload(session, key=key, op=range_spec.op,
                                                       params=params)
            device_row = _device_row(session, device)
            if RunModel.find_active(session, workload_row.id, device_row.id) is None:
                admit(session, self.settings, key_id=key_id)
            if tune.extend:
                run, created = self._extend(session, workload_row, device_row, tune, key_id,
                                            kind=RunKind.RANGE.value)
            else:
                run, created = repo.create_run(
                    session, workload=workload_row, device=device_row,
                    budget_trials=tune.trials, budget_seconds=tune.seconds,
                    patience=tune.patience, seed=tune.seed, key_id=key_id,
                    kind=RunKind.RANGE.value)
        self._count_tune("new_run" if created else "joined_run")
        if created:
            self._wake.set()
        return Submitted(run=self.get(run.id), created=created)

    def _hit(self, session: Any, cached: Any) -> Submitted:
        """A cache hit's answer: the schedule and the run that found it (if any)."""
        self._count_tune("cache_hit")
        found_by = (repo.get_run(session, run_id=cached.run_id)
                    if cached.run_id is not None else None)
        return Submitted(schedule=cached, run=found_by)

    def _extend(
        self, session: Any, workload: WorkloadModel, device: DeviceModel,
        tune: TuneInput | RangeTuneInput, key_id: int | None,
        kind: str = RunKind.EXACT.value,
    ) -> tuple[RunModel, bool]:
        """Queue the newest run of (workload, device) again with ``tune``'s budget on top
        of what it spent (a new run of ``kind`` if it has none; the active one if one is
        active)."""
        newest = repo.newest_run(session, workload_id=workload.id, device_id=device.id)
        if newest is None or not RunStatus(newest.status).is_finished():
            return repo.create_run(session, workload=workload, device=device,
                                   budget_trials=tune.trials, budget_seconds=tune.seconds,
                                   patience=tune.patience, seed=tune.seed, key_id=key_id,
                                   kind=kind)
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
            self._release_if_gone(session, run, field="run_id")
            admit(session, self.settings, key_id=run.key_id)
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
        with repo.session_scope(self.db.sessions) as session:
            run = repo.claim_run(session, run_id=run_id, owner=self.owner)
        if run is not None:
            self._execute(run.id, on_progress)
        return self.get(run_id)

    # ----- recovery ----------------------------------------------------------------------------
    def recover(self) -> list[int]:
        """Resume or interrupt runs whose owner is gone, the ids handled; end the
        ``stopping`` phase of cancelled runs whose owner is gone."""
        handled = []
        stale_before = repo.stale_before(self.settings.stale_after_s)
        with repo.session_scope(self.db.sessions) as session:
            executing = set(self.active_runs)
            for run in repo.running_runs(session):
                if run.owner == self.owner and run.id in executing:
                    continue
                if not self._owner_gone(run, stale_before):
                    continue
                handled.append(run.id)
                if self.settings.on_restart == "resume":
                    logger.warning("run %d: owner %s is gone; resuming it", run.id, run.owner)
                    repo.requeue_run(session, run_id=run.id)
                else:
                    logger.warning("run %d: owner %s is gone; interrupted", run.id, run.owner)
                    repo.interrupt_run(
                        session,
                        run_id=run.id,
                        reason=f"interrupted: the process running it ({run.owner}) stopped",
                    )
                    if self.metrics:
                        self.metrics.runs_finished.labels(RunStatus.INTERRUPTED.value).inc()
            for run in repo.stopping_runs(session):
                if run.owner != self.owner and self._owner_gone(run, stale_before):
                    logger.warning("run %d: cancelled, and its owner %s is gone before storing "
                                   "its outcome; its best so far stays", run.id, run.owner)
                    repo.finish_run(session, run_id=run.id, status=RunStatus.CANCELLED)
        if handled:
            self._wake.set()
        return handled

    def _owner_gone(self, run: RunModel, stale_before: Any = None) -> bool:
        """Whether the process that owns ``run`` is gone: dead on this host, or silent
        (no heartbeat) since ``stale_before``."""
        if stale_before is None:
            stale_before = repo.stale_before(self.settings.stale_after_s)
        heartbeat = as_utc(run.heartbeat_at)
        stale = heartbeat is None or heartbeat < stale_before
        return run.owner is None or _owner_dead(run.owner) or stale

    # ----- threads -----------------------------------------------------------------------------
    def _worker_loop(self) -> None:
        while not self._stop.is_set():
            try:
                with repo.session_scope(self.db.sessions) as session:
                    run = repo.claim_next_queued(session, owner=self.owner,
                                                 device_keys=self.device_keys)
            except repo.StorageError:
                logger.exception("could not claim a queued run")
                run = None
            if run is None:
                self._wake.wait(_IDLE_POLL_S)
                self._wake.clear()
                continue
            self._execute(run.id)

    def _heartbeat_loop(self) -> None:
        recover_every = max(1, int(self.settings.stale_after_s / 2 / self.settings.heartbeat_s))
        beats = 0
        while not self._stop.wait(self.settings.heartbeat_s):
            beats += 1
            try:
                with repo.session_scope(self.db.sessions) as session:
                    repo.heartbeat(session, run_ids=self.active_runs, owner=self.owner)
                    processes.beat(session, owner=self.owner)
                if beats % recover_every == 0:
                    self.recover()
                    if self._context.executors.ray_address is not None:
                        self._register_devices()
            except repo.StorageError:
                logger.exception("heartbeat failed")

    # ----- one run -----------------------------------------------------------------------------
    def _execute(
        self, run_id: int, on_progress: Callable[[Progress], None] | None = None
    ) -> None:
        """Execute a claimed run, tracked in ``_active`` meanwhile; an exception fails it."""
        cancel = threading.Event()
        with self._lock:
            self._active[run_id] = cancel
        if self.metrics:
            self.metrics.runs_active.inc()
        try:
            with repo.session_scope(self.db.sessions) as session:
                run = repo.get_run(session, run_id=run_id)
                range_run = run is not None and run.kind == RunKind.RANGE.value
            execution = RangeExecution if range_run else RunExecution
            execution.load(self._context, run_id, cancel=cancel,
                           on_progress=on_progress).execute()
        except Exception as exc:
            fault = database_fault(exc)
            if fault is not None:
                self._after_database_fault(run_id, fault)
            else:
                logger.exception("run %d failed", run_id)
                record_end(self._context, run_id, RunStatus.FAILED,
                           error=f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._active.pop(run_id, None)
            if self.metrics:
                self.metrics.runs_active.dec()

    def _after_database_fault(self, run_id: int, fault: BaseException) -> None:
        """A run whose search failed on the database after its writes' retries: queued
        again (resumed from its stored trials) below ``max_run_attempts`` starts, else
        failed, saying so. If even that cannot be written, the run is left to recovery
        (its heartbeat stops, so it is taken as orphaned once stale)."""
        cause = f"{type(fault).__name__}: {str(fault).splitlines()[0] if str(fault) else ''}"
        cap = self.settings.max_run_attempts

        def requeue_or_fail() -> bool:
            with repo.session_scope(self.db.sessions) as session:
                run = repo.get_run(session, run_id=run_id)
                if run is None or run.attempts >= cap:
                    return False
                repo.requeue_run(session, run_id=run_id, error=(
                    f"database unavailable during the search ({cause}); queued again to "
                    f"resume from its trials (start {run.attempts + 1} of {cap})"))
                return True

        try:
            requeued = with_retries(self.settings, requeue_or_fail)
        except repo.StorageError:
            logger.exception("run %d: the database is still unavailable; left to recovery",
                             run_id)
            return
        if requeued:
            logger.warning("run %d: database unavailable (%s); queued again", run_id, cause)
            self._wake.set()
            return
        logger.error("run %d: database unavailable (%s) in %d starts; failed", run_id, cause,
                     cap)
        record_end(self._context, run_id, RunStatus.FAILED, error=(
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


def _owner_dead(owner: str) -> bool:
    """Whether ``owner`` (``host:pid:token``) is a process of this host that is gone."""
    parts = owner.split(":")
    if len(parts) < 3:
        return True
    host, pid_text = ":".join(parts[:-2]), parts[-2]
    if host != socket.gethostname():
        return False  # another host: only its heartbeat can tell
    try:
        pid = int(pid_text)
    except ValueError:
        return True
    if pid == os.getpid():
        return True  # this process is new: the owner was an earlier one with our pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
