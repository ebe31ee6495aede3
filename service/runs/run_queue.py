"""The requests that queue runs: a tune (exact or range) answered from the cache or by a
run, and a run resumed.

``submit`` answers a cache hit, or queues a run (or returns the queued/running run of the
same workload and device); ``force`` queues a run despite a hit, and ``extend`` queues the
workload's newest run again with more budget, so it resumes its study (its trials count
and are never measured twice). A run the request would add is admitted first (the quotas:
``service.runs.admission``), in the transaction that queues it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from service.core.config import Settings
from service.core.db import Database
from service.core.metrics import Metrics
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
)
from service.errors import Conflict, InvalidRequest, NotFound
from service.runs.admission import admit, admit_unless_joining
from service.runs.devices import ResolvedDevice
from service.runs.ranges import RangeServed, fixed_key, fixed_params, range_workload, serve_exact
from service.runs.tune import RangeTuneInput, TuneInput

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


class RunQueue:
    """Answers tune and resume requests from the cache or by queuing a run.

    Args:
        db: the database.
        settings: the quotas.
        metrics: counters to update (optional).
        owner_gone: whether a run's owner is gone (a finished run is queued again only
            once its process no longer stores what it found).
        wake: wakes the run manager's workers (a run was queued).
    """

    def __init__(self, db: Database, settings: Settings, metrics: Metrics | None,
                 owner_gone: Callable[[RunModel], bool], wake: Callable[[], None]) -> None:
        self._db = db
        self._settings = settings
        self._metrics = metrics
        self._owner_gone = owner_gone
        self._wake = wake

    def submit(self, tune: TuneInput, *, key_id: int | None = None,
               may_reopen: ReopenCheck | None = None) -> Submitted:
        """As :meth:`RunManager.submit <service.runs.manager.RunManager.submit>`."""
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

        return self._enqueue(tune, spec.workload_key(), spec.op, spec.params(),
                             RunKind.EXACT.value, key_id, may_reopen, found=stored_since)

    def _cache_hit(self, tune: TuneInput) -> Submitted | None:
        """The cached schedule of ``tune``'s workload and device, read without a write
        transaction (the common answer under load; on SQLite a write transaction waits
        for the running searches' writes), else the tuned range on the device that holds
        the size (the bucket's kernel bound to it), or None."""
        with repo.session_scope(self._db.read_sessions) as session:
            cached = repo.find_cached(session, workload_key=tune.spec.workload_key(),
                                      device_key=tune.device.key)
            if cached is not None:
                return self._hit(session, cached)
        served = serve_exact(self._db, tune.spec, tune.device.key)
        if served is None:
            return None
        self._count_tune("cache_hit")
        return Submitted(served=served,
                         run=_stored_run(self._db.read_sessions, served.table.run_id))

    def submit_range(self, tune: RangeTuneInput, *, key_id: int | None = None,
                     may_reopen: ReopenCheck | None = None) -> Submitted:
        """As :meth:`RunManager.submit_range
        <service.runs.manager.RunManager.submit_range>`."""
        range_spec, device = tune.range_spec, tune.device
        if not (tune.force or tune.extend):
            size_range = range_spec.ranges[tune.dim]
            with repo.session_scope(self._db.read_sessions) as session:
                table = ranges_repo.find_covering(
                    session, op=range_spec.op,
                    fixed_key=fixed_key(range_spec.op, fixed_params(range_spec)),
                    dim=tune.dim, low=size_range.low, high=size_range.high,
                    device_key=device.key)
            if table is not None:
                self._count_tune("cache_hit")
                return Submitted(range_table=table,
                                 run=_stored_run(self._db.read_sessions, table.run_id))
        key, params = range_workload(range_spec)
        return self._enqueue(tune, key, range_spec.op, params, RunKind.RANGE.value, key_id,
                             may_reopen)

    def _enqueue(self, tune: TuneInput | RangeTuneInput, workload_key: str, op: str,
                 params: dict[str, Any], kind: str, key_id: int | None,
                 may_reopen: ReopenCheck | None,
                 found: Callable[[Any, WorkloadModel, DeviceModel], Submitted | None]
                 | None = None) -> Submitted:
        """The run of ``kind`` for ``tune``'s workload (by ``workload_key``) on its device:
        a new one, the active one it joins, or (``extend``) the newest one queued again;
        one path for exact and range requests. ``found``, asked in the same transaction
        before anything is queued, may answer instead (a result stored meanwhile)."""
        with repo.session_scope(self._db.sessions) as session:
            workload_row = repo.get_or_create_workload(session, key=workload_key, op=op,
                                                       params=params)
            device_row = _device_row(session, tune.device)
            if found is not None and (answer := found(session, workload_row,
                                                      device_row)) is not None:
                return answer
            admit_unless_joining(session, self._settings, workload_row, device_row,
                                 key_id=key_id)
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
            self._wake()
        return Submitted(run=_stored_run(self._db.sessions, run.id), created=created)

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
        """As :meth:`RunManager.resume <service.runs.manager.RunManager.resume>`."""
        with repo.session_scope(self._db.sessions) as session:
            run = repo.get_run(session, run_id=run_id)
            if run is None:
                raise NotFound(f"run {run_id} not found")
            if run.status not in RESUMABLE:
                raise Conflict([{"loc": ("run_id",), "type": "conflict",
                                       "msg": f"run {run_id} is {run.status}; only a failed, "
                                       "cancelled or interrupted run resumes (extend a "
                                       "succeeded one with POST /v1/tune)"}], where="path")
            # The admission lock before the run's row lock, in the order extend takes them.
            admit(session, self._settings, key_id=run.key_id)
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
        self._wake()
        resumed = _stored_run(self._db.sessions, run_id)
        assert resumed is not None
        return resumed

    def _count_tune(self, outcome: str) -> None:
        if self._metrics:
            self._metrics.tune_requests.labels(outcome).inc()


def _stored_run(sessions: sessionmaker[Session], run_id: int | None) -> RunModel | None:
    """The run ``run_id`` read in a session of ``sessions`` (None: no run)."""
    if run_id is None:
        return None
    with repo.session_scope(sessions) as session:
        return repo.get_run(session, run_id=run_id)


def _device_row(session: Any, device: ResolvedDevice) -> Any:
    return repo.get_or_create_device(
        session,
        key=device.key,
        name=device.name,
        kind=device.kind,
        simulated=device.simulated,
        identity=device.identity,
    )
