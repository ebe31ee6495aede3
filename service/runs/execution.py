"""One run's execution: its stored state loaded, the search driven, the outcome stored.

A :class:`~service.runs.manager.RunManager` thread claims a run and calls
``RunExecution.load(...).execute()`` with the claim's lease (``service.runs.context``):
each write of the run first checks that the run is still this claim's.
:meth:`RunExecution.load` reads the run, its workload and device, its stored trials (a
resumed run: they count, and are never measured twice) or, for a fresh run, the cached
schedules of nearby shapes to warm-start from. The execution then holds what the search
needs as attributes, and hands the :class:`~scheduler_search.search.SearchDriver` its own
methods as callbacks:

- ``make_job`` / ``make_final_job``: a candidate's worker job, timed by the search preset's
  quick or final policy (``service.runs.jobs``);
- ``on_trials``: each round's trials stored (the good ones also kept for the calibration);
- ``on_progress``: progress stored; a cancel requested in the database is noticed here;
- the search's Optuna study is written through :class:`~service.runs.retry.RetryingStorage`,
  retried through a brief database fault as pipetune's own writes are;
- ``should_stop``: the manager's shutdown or a cancel, acted on at the next round.

On a GPU (``cuda:N``) the search preset is ``GPU``: each candidate sProgram is rendered
(``codegen.render``) into a KernelArtifact job for the device's ``LocalGpuPool``; rounds
overlap (the next batch compiles on the CPU cores while the GPU times the current one);
the hand-written designs and the cost model's best distinct structures go first (the
latter computed in another process meanwhile, ``service.runs.seeds``), then each batch
mixes the sampler's asks, neighbours of the best measured kernels and the cost model's
picks; candidates are ranked with the device's calibrated cost model when one is stored.
The operator's vendor baseline (``spec.run_baseline()``) and its further peers
(``spec.run_peers()``) are timed interleaved with the finalists, in the final re-timing
only (no search round waits for a vendor library to load). Without a GPU the preset is
``SIMULATED``: the cost model measures. The outcome is stored by
:class:`~service.runs.finish.RunFinish`; a GPU run's measurements then refine the device's
calibration (``service.runs.calibration``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scheduler_search.cost_model import Calibration, shipped_calibration
from scheduler_search.ops import parse_spec
from scheduler_search.search import (
    GPU,
    INVALID,
    SIMULATED,
    Budget,
    CachedSchedule,
    Progress,
    SearchCallbacks,
    SearchDriver,
    SearchResult,
    TrialRecord,
    nearest,
)
from scheduler_search.search.presets import timing_method
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import designs_for
from scheduler_search.sprogram import SProgram
from service.db import repositories as repo
from service.db import results as results_repo
from service.db.models import DeviceModel, RunModel, WorkloadModel
from service.runs.calibration import refit_calibration, stored_calibration
from service.runs.context import RunContext, RunLease
from service.runs.devices import ResolvedDevice, from_identity
from service.runs.finish import RunFinish
from service.runs.jobs import baseline_job, kernel_job
from service.runs.retry import RetryingStorage, with_retries
from service.runs.seeds import SeedProcess
from service.runs.space import schedule_space
from workers import Job


@dataclass(frozen=True)
class StoredRun:
    """What a run's search starts from, read in one session (:meth:`RunExecution.load`)."""

    run: RunModel
    workload: WorkloadModel
    device_row: DeviceModel
    history_rows: list[tuple[Any, ...]]
    cached: list[CachedSchedule]


class RunExecution:
    """One claimed run, from its stored state to its stored outcome (see the module
    docstring).

    Args:
        context: the manager's shared services and shutdown signal.
        lease: the claim the run is executed under.
        stored: the run as :meth:`load` read it.
        cancel: set when the run is cancelled (by the manager, or here when progress finds
            the request in the database); the search stops at its next round.
        on_progress: also told each progress update (``pipetune tune`` prints them).
    """

    def __init__(
        self,
        context: RunContext,
        lease: RunLease,
        stored: StoredRun,
        *,
        cancel: threading.Event,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> None:
        self.context = context
        self.lease = lease
        self.run, self.workload, self.device_row = stored.run, stored.workload, stored.device_row
        self.spec = parse_spec(self.workload.op, self.workload.params)
        row = self.device_row
        self.model = from_identity(row.kind, row.name, row.identity)
        self.device = ResolvedDevice(row.name, row.key, row.kind, row.simulated, self.model,
                                     row.identity)
        self.gpu = not self.device.simulated
        self.space = schedule_space(self.spec, self.model)
        self.history = _history(self.space, stored.history_rows)
        self.warm = [c.choices for c in nearest(self.spec.params(), stored.cached,
                                                context.settings.warm_start)]
        self.executor = context.executors.get(self.device)
        self.job_workload = {"op": self.spec.op, "params": self.spec.params()}
        self.calibration = self._calibration(context, row.id)
        self.preset = GPU if self.gpu else SIMULATED
        self.baseline = self.spec.run_baseline() if self.gpu else None
        self.peers = self.spec.run_peers() if self.gpu else ()
        #: How the run's kernels and peers are timed on a GPU (``timing_method``).
        self.timing_method = timing_method(self.spec, self.model)
        #: The run's good measurements with their sProgram: what the calibration refits on.
        self.measured: list[TrialRecord] = []
        self._baseline_reported = False
        self._cancel = cancel
        self._listener = on_progress

    def _calibration(self, context: RunContext, device_id: int) -> Calibration | None:
        """What ranks the candidates: a GPU's stored calibration (when calibrating), or on
        the simulated device the calibration it measures with (shipped, if any)."""
        if not self.gpu:
            return shipped_calibration(self.model.name, self.spec.op)
        if context.settings.calibrate:
            return stored_calibration(context.db, device_id, self.spec.op)
        return None

    @classmethod
    def load(
        cls,
        context: RunContext,
        lease: RunLease,
        *,
        cancel: threading.Event,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> RunExecution:
        """The execution of a claimed run: its rows and stored trials (resuming) or, for a
        fresh run, the cached schedules of other shapes to warm-start from.

        Raises:
            LeaseLost: the run is no longer the lease's claim.
        """
        run_id = lease.run_id
        with repo.session_scope(context.db.sessions) as session:
            context.hold(session, lease)
            run = repo.get_run(session, run_id=run_id)
            assert run is not None
            workload, device_row = run.workload, run.device
            trial_rows, _ = repo.list_trials(session, run_id=run_id, limit=1_000_000)
            history_rows = [
                (t.number, t.choices, t.status, t.source, t.schedule_hash, t.latency_us,
                 t.predicted_us, t.error, t.simulated)
                for t in trial_rows
            ]
            cached = (
                []
                if trial_rows
                else repo.schedules_for_warm_start(
                    session, op=workload.op, device_id=device_row.id,
                    exclude_workload_id=workload.id,
                )
            )
            cached_plain = [CachedSchedule(c.workload.params, c.choices, c.latency_us)
                            for c in cached]
        stored = StoredRun(run, workload, device_row, history_rows, cached_plain)
        return cls(context, lease, stored, cancel=cancel, on_progress=on_progress)

    @property
    def resuming(self) -> bool:
        """Whether the run has stored trials (then no designs or seeds go first again)."""
        return bool(self.history)

    def execute(self) -> None:
        """Search, store the outcome, and after a GPU run's success refit the calibration.
        An exception propagates: the manager records the run as failed."""
        seeds = self._seed_process()
        try:
            result = self._search(seeds)
        finally:
            if seeds is not None:
                seeds.close()
        finish = RunFinish(self.context, self.lease, self.workload.id, self.device_row.id,
                           self.spec, self.model, self.baseline)
        succeeded = finish.store(result, cancelled=self._cancel.is_set())
        if succeeded and self.gpu and self.context.settings.calibrate:
            refit_calibration(self.context.db, self.device_row.id, self.spec, self.model,
                              self.measured, self.calibration)

    def _seed_process(self) -> SeedProcess | None:
        """A fresh GPU run's cost-model seeds, started in another process (or ``None``)."""
        structures = self.context.settings.cost_model_seeds
        if not (self.gpu and structures and not self.resuming):
            return None
        return SeedProcess(self.spec, self.model, structures=structures,
                           calibration=self.calibration)

    def _search(self, seeds: SeedProcess | None) -> SearchResult:
        """Drive the search to its end, with this execution's methods as callbacks."""
        run, settings = self.run, self.context.settings
        calibration = self.calibration
        driver = SearchDriver(
            self.space,
            self.executor,
            make_job=self.make_job,
            budget=Budget(trials=run.budget_trials, seconds=run.budget_seconds,
                          patience=run.patience),
            config=self.preset.config(
                run.seed, (settings.gpu_batch_size or None) if self.gpu else None
            ),
            storage=RetryingStorage(self.context.db.optuna_storage(), settings),
            study_name=run.study_name,
            warm_start=self.warm,
            designs=(designs_for(self.spec, self.model.clusters_at_once(1))
                     if self.gpu and not self.resuming else ()),
            seed_source=seeds.poll if seeds is not None else None,
            estimator=(
                (lambda sp: calibration.predict_us(sp, self.spec, self.model))
                if calibration is not None else None
            ),
            make_final_job=self.make_final_job,
            reference_job=(
                baseline_job(self.baseline, self.job_workload, run.seed, self.timing_method)
                if self.baseline is not None else None
            ),
            peer_jobs={name: baseline_job(name, self.job_workload, run.seed, self.timing_method)
                       for name in self.peers},
            history=self.history,
            elapsed_before_s=run.elapsed_s,
            callbacks=SearchCallbacks(self.on_trials, self.on_progress, self.should_stop),
        )
        return driver.run()

    # ----- the driver's callbacks ----------------------------------------------------------
    def make_job(self, sprogram: SProgram) -> Job:
        """A candidate's job: its kernel, quickly timed, on a GPU; its sProgram, for the
        cost model to measure, on the simulated device."""
        if not self.gpu:
            return Job(workload=self.job_workload, schedule=sprogram.to_dict(),
                       seed=self.run.seed)
        return kernel_job(sprogram, self.spec, self.model, self.job_workload, self.run.seed,
                          self.preset.search_timing)

    def make_final_job(self, sprogram: SProgram) -> Job:
        """A finalist's job: on a GPU its kernel timed by the final (longer) policy."""
        if not self.gpu:
            return self.make_job(sprogram)
        return kernel_job(sprogram, self.spec, self.model, self.job_workload, self.run.seed,
                          self.preset.final_timing)

    def on_trials(self, records: list[TrialRecord]) -> None:
        """Store a round's trials (numbered after the stored ones; tried again through a
        brief database fault) and count them."""
        rows = [_trial_row(r) for r in records]

        def store() -> None:
            with repo.session_scope(self.context.db.sessions) as session:
                self.context.hold(session, self.lease)
                repo.add_trials(session, run_id=self.run.id, trials=rows)

        with_retries(self.context.settings, store)
        self.measured.extend(r for r in records if r.ok and r.schedule is not None)
        if self.context.metrics:
            for record in records:
                self.context.metrics.trials.labels(record.status, str(record.simulated)).inc()

    def on_progress(self, update: Progress) -> None:
        """Store a progress update (and the baseline's first timing, once; tried again
        through a brief database fault); a cancel requested in the database (say, by
        another process's ``DELETE``) stops the search at its next round."""
        cancel = with_retries(self.context.settings, lambda: self._store_progress(update))
        if cancel:
            self._cancel.set()
        if self._listener is not None:
            self._listener(update)

    def _store_progress(self, update: Progress) -> bool:
        """Write ``update``; whether the run's cancel was requested."""
        with repo.session_scope(self.context.db.sessions) as session:
            self.context.hold(session, self.lease)
            cancel = repo.update_progress(
                session,
                run_id=self.run.id,
                phase=update.phase,
                trials_done=update.trials_done,
                invalid=update.invalid,
                best_latency_us=update.best_latency_us,
                best_schedule_hash=update.best_schedule_hash,
                best_simulated=(
                    self.device.simulated if update.best_latency_us is not None else None
                ),
                elapsed_s=update.elapsed_s,
            )
            report_baseline = (self.baseline is not None and not self._baseline_reported
                               and update.reference_latency_us is not None)
            if report_baseline:
                results_repo.set_run_baseline(
                    session, run_id=self.run.id, baseline=self.baseline,
                    latency_us=update.reference_latency_us, timing_method=self.timing_method,
                )
        self._baseline_reported = self._baseline_reported or report_baseline
        return cancel

    def should_stop(self) -> bool:
        """Whether the search stops at this round: the manager is closing, or a cancel."""
        return self.context.shutdown.is_set() or self._cancel.is_set()


def _trial_row(record: TrialRecord) -> dict[str, Any]:
    """A driver record as the trial table's columns."""
    return {
        "status": record.status,
        "source": record.source,
        "schedule_hash": record.schedule_hash,
        "choices": record.choices,
        "latency_us": record.latency_us,
        "predicted_us": record.predicted_us,
        "simulated": record.simulated,
        "error": record.error or None,
        "measurement": record.measurement,
    }


def _history(space: ScheduleSpace, rows: list[tuple[Any, ...]]) -> list[TrialRecord]:
    """An interrupted run's stored trials as driver records; the sProgram of each good one
    is rebuilt from its choices (same space, same plan: same hash) for the final re-timing."""
    records = []
    for number, choices, status, source, digest, latency, predicted, error, simulated in rows:
        schedule = None
        if status == "ok" and digest is not None:
            try:
                sprogram, validity = space.build(choices)
                if validity.ok and sprogram.hash == digest:
                    schedule = sprogram.to_dict()
            except Exception:
                schedule = None
        records.append(
            TrialRecord(
                number=number,
                choices=choices,
                status=status if status else INVALID,
                source=source,
                schedule_hash=digest,
                latency_us=latency,
                predicted_us=predicted,
                error=error or "",
                simulated=simulated,
                schedule=schedule,
            )
        )
    return records
