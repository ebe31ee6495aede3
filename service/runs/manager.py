"""The run manager: background tuning runs, a concurrency limit, cancel, restart recovery.

Runs live in the database, not in memory. ``submit`` answers a cache hit, or queues a run
(or returns the queued/running run of the same workload and device). Worker threads, as
many as ``max_concurrent_runs``, claim queued runs with a conditional update, so several
processes sharing one PostgreSQL database never run the same run twice. A running run's
owner (``host:pid:token``) writes a heartbeat; a run whose owner is gone (its process is
dead on this host, or its heartbeat is older than ``stale_after_s``) is resumed (queued
again: its trials count and are never measured twice) or marked ``interrupted``, as
``on_restart`` says, at start and then periodically.

The lifecycle: ``start()`` once (recovery, then the threads), ``close()`` once. A run in
progress at ``close()`` stops at its next round and is left for the next start to resume.

A run on a GPU (``cuda:N``) measures generated kernels: each candidate sProgram is rendered
(``codegen.render``) into a KernelArtifact job for the device's ``LocalGpuPool``; rounds
overlap (the next batch compiles on the CPU cores while the GPU times the current one);
the hand-written designs and the cost model's best distinct structures go first (the
latter computed in another process meanwhile), then each batch mixes the sampler's asks,
neighbours of the best measured kernels and the cost model's picks (``proposals="mixed"``:
asking the sampler for every candidate costs seconds per round on a GEMM space); candidates
are ranked with the device's calibrated cost model when one is stored. The vendor baseline
(``cublas`` for a GEMM, ``sdpa_cudnn`` for attention, mamba_ssm's Triton kernels for Mamba2;
one that fails leaves the run without a baseline latency) is measured by the same worker with
the first batch and re-timed interleaved with the finalists, and so are an operator's
further peers (``PEERS``: FlashAttention-2 for attention), in the final re-timing only;
the winner's kernel is stored (``/v1/kernels/{hash}``) with its speed against the baseline,
the peers' latencies with the run (a peer that fails is left out); then the run's
measurements refine the device's calibration.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from scheduler_search.cost_model import Calibration, Sample, fit_calibration
from scheduler_search.ops import OperatorSpec, parse_spec
from scheduler_search.search import (
    GPU,
    INVALID,
    SIMULATED,
    Budget,
    CachedSchedule,
    Progress,
    SearchDriver,
    SearchResult,
    StopReason,
    TrialRecord,
    nearest,
)
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import DESIGNS
from scheduler_search.sprogram import SProgram
from service.core.config import Settings
from service.core.db import Database
from service.core.metrics import Metrics
from service.db import repositories as repo
from service.db import results as results_repo
from service.db.models import RunModel, RunStatus, ScheduleModel, as_utc
from service.runs.devices import ResolvedDevice, from_identity
from service.runs.executors import ExecutorRegistry
from service.runs.jobs import baseline_job, kernel_job
from service.runs.space import schedule_space
from service.runs.tune import TuneInput
from workers import Job

logger = logging.getLogger(__name__)

_IDLE_POLL_S = 1.0

#: Measurements a calibration fit looks at (spread over the run's latency range), and the
#: time it may take.
CALIBRATION_SAMPLES = 96
CALIBRATION_TIME_S = 5.0


class _Loaded(NamedTuple):
    """What a run's search starts from (``RunManager._load``)."""

    run: RunModel
    workload: Any
    device_row: Any
    history_rows: list[tuple[Any, ...]]
    cached: list[CachedSchedule]


@dataclass
class Submitted:
    """What ``submit`` did: a cache hit (``schedule``), or a run (new or shared)."""

    schedule: ScheduleModel | None = None
    run: RunModel | None = None
    created: bool = False


class RunManager:
    """Executes tuning runs in background threads (see the module docstring).

    Args:
        db: the database (sessions and Optuna storage).
        settings: concurrency, recovery policy, heartbeat.
        executors: the executor of each device.
        metrics: counters to update (optional).
    """

    def __init__(
        self,
        db: Database,
        settings: Settings,
        executors: ExecutorRegistry,
        metrics: Metrics | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.executors = executors
        self.metrics = metrics
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._active: dict[int, bool] = {}  # run id -> cancel requested
        self._lock = threading.Lock()

    # ----- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Recover orphaned runs, then start the worker and heartbeat threads."""
        self.recover()
        for index in range(self.settings.max_concurrent_runs):
            thread = threading.Thread(
                target=self._worker_loop, name=f"pipetune-run-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        beat = threading.Thread(target=self._heartbeat_loop, name="pipetune-heartbeat", daemon=True)
        beat.start()
        self._threads.append(beat)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the threads; runs in progress stop at their next round, left to resume."""
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout_s)
        self._threads.clear()

    @property
    def active_runs(self) -> list[int]:
        with self._lock:
            return list(self._active)

    # ----- requests ----------------------------------------------------------------------------
    def submit(self, tune: TuneInput) -> Submitted:
        """A cache hit, or the run (new, or the queued/running one) for this request."""
        spec, device = tune.spec, tune.device
        with repo.session_scope(self.db.sessions) as session:
            workload_row = repo.get_or_create_workload(
                session, key=spec.workload_key(), op=spec.op, params=spec.params()
            )
            device_row = _device_row(session, device)
            cached = repo.find_schedule(
                session, workload_id=workload_row.id, device_id=device_row.id
            )
            if cached is not None:
                self._count_tune("cache_hit")
                return Submitted(schedule=cached)
            run, created = repo.create_run(
                session,
                workload=workload_row,
                device=device_row,
                budget_trials=tune.trials,
                budget_seconds=tune.seconds,
                patience=tune.patience,
                seed=tune.seed,
            )
        self._count_tune("new_run" if created else "joined_run")
        if created:
            self._wake.set()
        return Submitted(run=self.get(run.id), created=created)

    def get(self, run_id: int) -> RunModel | None:
        with repo.session_scope(self.db.sessions) as session:
            return repo.get_run(session, run_id=run_id)

    def cancel(self, run_id: int) -> RunModel | None:
        """Cancel a queued run now, a running one at its next round; ``None`` if unknown."""
        with repo.session_scope(self.db.sessions) as session:
            run = repo.request_cancel(session, run_id=run_id)
            if run is None:
                return None
            if run.status == RunStatus.CANCELLED.value and self.metrics:
                self.metrics.runs_finished.labels(RunStatus.CANCELLED.value).inc()
        with self._lock:
            if run_id in self._active:
                self._active[run_id] = True
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
        """Resume or interrupt runs whose owner is gone; the ids handled."""
        handled = []
        stale_before = repo.stale_before(self.settings.stale_after_s)
        with repo.session_scope(self.db.sessions) as session:
            for run in repo.running_runs(session):
                if run.owner == self.owner:
                    continue
                heartbeat = as_utc(run.heartbeat_at)
                stale = heartbeat is None or heartbeat < stale_before
                if not (run.owner is None or _owner_dead(run.owner) or stale):
                    continue
                handled.append(run.id)
                if self.settings.on_restart == "resume":
                    logger.info("run %d: owner %s is gone; resuming it", run.id, run.owner)
                    repo.requeue_run(session, run_id=run.id)
                else:
                    logger.info("run %d: owner %s is gone; interrupted", run.id, run.owner)
                    repo.interrupt_run(
                        session,
                        run_id=run.id,
                        reason=f"interrupted: the process running it ({run.owner}) stopped",
                    )
                    if self.metrics:
                        self.metrics.runs_finished.labels(RunStatus.INTERRUPTED.value).inc()
        if handled:
            self._wake.set()
        return handled

    # ----- threads -----------------------------------------------------------------------------
    def _worker_loop(self) -> None:
        while not self._stop.is_set():
            try:
                with repo.session_scope(self.db.sessions) as session:
                    run = repo.claim_next_queued(session, owner=self.owner)
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
                if beats % recover_every == 0:
                    self.recover()
            except repo.StorageError:
                logger.exception("heartbeat failed")

    # ----- one run -----------------------------------------------------------------------------
    def _execute(
        self, run_id: int, on_progress: Callable[[Progress], None] | None = None
    ) -> None:
        with self._lock:
            self._active[run_id] = False
        if self.metrics:
            self.metrics.runs_active.inc()
        try:
            self._search(run_id, on_progress)
        except Exception as exc:
            logger.exception("run %d failed", run_id)
            self._finish(run_id, RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._active.pop(run_id, None)
            if self.metrics:
                self.metrics.runs_active.dec()

    def _load(self, run_id: int) -> _Loaded:
        """The run, its workload and device rows, its stored trials (resuming) and, for a
        fresh run, the cached schedules of other shapes to warm-start from."""
        with repo.session_scope(self.db.sessions) as session:
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
        return _Loaded(run, workload, device_row, history_rows, cached_plain)

    def _search(self, run_id: int, on_progress: Callable[[Progress], None] | None) -> None:
        run, workload, device_row, history_rows, cached_plain = self._load(run_id)
        spec = parse_spec(workload.op, workload.params)
        model = from_identity(device_row.kind, device_row.name, device_row.identity)
        device = ResolvedDevice(
            device_row.name, device_row.key, device_row.kind, device_row.simulated, model,
            device_row.identity,
        )
        gpu = not device.simulated
        space = schedule_space(spec, model)
        history = _history(space, history_rows)
        warm = [c.choices for c in nearest(spec.params(), cached_plain, self.settings.warm_start)]
        executor = self.executors.get(device)
        job_workload = {"op": spec.op, "params": spec.params()}
        calibration = self._calibration(device_row.id, spec.op) if gpu else None
        samples: list[TrialRecord] = []
        preset = GPU if gpu else SIMULATED
        baseline = spec.baseline if gpu else None
        peers = spec.peers if gpu else ()
        reported_baseline: list[float] = []

        def make_job(sprogram: SProgram) -> Job:
            if not gpu:
                return Job(workload=job_workload, schedule=sprogram.to_dict(), seed=run.seed)
            return kernel_job(sprogram, spec, model, job_workload, run.seed,
                              preset.search_timing)

        def make_final_job(sprogram: SProgram) -> Job:
            if not gpu:
                return make_job(sprogram)
            return kernel_job(sprogram, spec, model, job_workload, run.seed,
                              preset.final_timing)

        def on_trials(records: list[TrialRecord]) -> None:
            with repo.session_scope(self.db.sessions) as session:
                repo.add_trials(session, run_id=run_id, trials=[_trial_row(r) for r in records])
            samples.extend(r for r in records if r.ok and r.schedule is not None)
            if self.metrics:
                for record in records:
                    self.metrics.trials.labels(record.status, str(record.simulated)).inc()

        def progress(update: Progress) -> None:
            self._progress(run_id, update, simulated=device.simulated, baseline=baseline,
                           reported_baseline=reported_baseline, on_progress=on_progress)

        def should_stop() -> bool:
            with self._lock:
                return self._stop.is_set() or self._active.get(run_id, False)

        seeds = None
        if gpu and self.settings.cost_model_seeds and not history_rows:
            from service.runs.seeds import SeedProcess

            seeds = SeedProcess(spec, model, structures=self.settings.cost_model_seeds,
                                calibration=calibration)
        driver = SearchDriver(
            space,
            executor,
            make_job,
            budget=Budget(trials=run.budget_trials, seconds=run.budget_seconds,
                          patience=run.patience),
            config=preset.config(
                run.seed, (self.settings.gpu_batch_size or None) if gpu else None
            ),
            storage=self.db.optuna_storage(),
            study_name=run.study_name,
            warm_start=warm,
            designs=list(DESIGNS.get(spec.op, {}).values()) if gpu and not history_rows else (),
            seed_source=seeds.poll if seeds is not None else None,
            estimator=(
                (lambda sp: calibration.predict_us(sp, spec, model))
                if calibration is not None else None
            ),
            make_final_job=make_final_job,
            reference_job=(
                baseline_job(baseline, job_workload, run.seed) if baseline is not None else None
            ),
            peer_jobs={name: baseline_job(name, job_workload, run.seed) for name in peers},
            history=history,
            elapsed_before_s=run.elapsed_s,
            on_trials=on_trials,
            on_progress=progress,
            should_stop=should_stop,
        )
        try:
            result = driver.run()
        finally:
            if seeds is not None:
                seeds.close()
        self._finish_search(run_id, workload, device_row, spec, model, gpu, baseline, result,
                            samples, calibration)

    def _progress(
        self,
        run_id: int,
        update: Progress,
        *,
        simulated: bool,
        baseline: str | None,
        reported_baseline: list[float],
        on_progress: Callable[[Progress], None] | None,
    ) -> None:
        """Store a progress update (and the baseline's first timing, once); a cancel
        request found in the database reaches the driver through ``_active``."""
        with repo.session_scope(self.db.sessions) as session:
            cancel = repo.update_progress(
                session,
                run_id=run_id,
                owner=self.owner,
                phase=update.phase,
                trials_done=update.trials_done,
                invalid=update.invalid,
                best_latency_us=update.best_latency_us,
                best_schedule_hash=update.best_schedule_hash,
                best_simulated=simulated if update.best_latency_us is not None else None,
                elapsed_s=update.elapsed_s,
            )
            if (baseline is not None and update.reference_latency_us is not None
                    and not reported_baseline):
                reported_baseline.append(update.reference_latency_us)
                results_repo.set_run_baseline(
                    session, run_id=run_id, baseline=baseline,
                    latency_us=update.reference_latency_us,
                )
        with self._lock:
            if cancel and run_id in self._active:
                self._active[run_id] = True
        if on_progress is not None:
            on_progress(update)

    def _finish_search(
        self,
        run_id: int,
        workload: Any,
        device_row: Any,
        spec: OperatorSpec,
        model: Any,
        gpu: bool,
        baseline: str | None,
        result: SearchResult,
        samples: list[TrialRecord],
        calibration: Calibration | None,
    ) -> None:
        with self._lock:
            cancelled = self._active.get(run_id, False)
        if result.stop_reason is StopReason.CANCELLED and not cancelled:
            # Shutting down: leave the run "running" without an owner, to be resumed.
            with repo.session_scope(self.db.sessions) as session:
                repo.release_run(session, run_id=run_id, owner=self.owner)
            return
        best = result.best
        best_dict = None
        kernel_hash = None
        artifact = None
        if best is not None and best.schedule is not None and gpu:
            try:
                from codegen import render

                artifact = render(SProgram.from_dict(best.schedule), spec, model)
                kernel_hash = artifact.hash
            except Exception:
                logger.exception("run %d: could not render the winner", run_id)
        baseline_us = _baseline_latency(run_id, baseline, result.reference)
        if best is not None:
            best_dict = {
                "latency_us": best.latency_us,
                "schedule_hash": best.schedule_hash,
                "simulated": best.simulated,
                "kernel_hash": kernel_hash,
            }
        if cancelled:
            self._finish(run_id, RunStatus.CANCELLED, stop_reason=result.stop_reason.value,
                         best=best_dict, elapsed_s=result.elapsed_s)
            return
        if best is None or best.schedule is None:
            self._finish(
                run_id,
                RunStatus.FAILED,
                error=(
                    f"no candidate was measured successfully ({result.trials_done} measured, "
                    f"{result.invalid} invalid; stopped: {result.stop_reason.value})"
                ),
                stop_reason=result.stop_reason.value,
                elapsed_s=result.elapsed_s,
            )
            return
        with repo.session_scope(self.db.sessions) as session:
            if artifact is not None and kernel_hash is not None:
                results_repo.store_kernel(
                    session, kernel_hash=kernel_hash, schedule_hash=artifact.schedule_hash,
                    artifact=artifact.to_dict(),
                )
            repo.store_best_schedule(
                session,
                workload_id=workload.id,
                device_id=device_row.id,
                run_id=run_id,
                schedule_hash=best.schedule_hash,
                schedule=best.schedule,
                choices=best.choices,
                latency_us=best.latency_us,
                predicted_us=best.predicted_us,
                simulated=best.simulated,
                kernel_hash=kernel_hash,
            )
            if baseline is not None:
                results_repo.set_schedule_baseline(
                    session, workload_id=workload.id, device_id=device_row.id, run_id=run_id,
                    baseline=baseline, latency_us=baseline_us,
                )
                results_repo.set_run_baseline(
                    session, run_id=run_id, baseline=baseline, latency_us=baseline_us
                )
            if result.peers:
                results_repo.set_run_peers(
                    session, run_id=run_id, latencies_us=_peer_latencies(run_id, result.peers)
                )
            repo.finish_run(
                session,
                run_id=run_id,
                status=RunStatus.SUCCEEDED,
                stop_reason=result.stop_reason.value,
                best=best_dict,
                elapsed_s=result.elapsed_s,
            )
        if self.metrics:
            self.metrics.runs_finished.labels(RunStatus.SUCCEEDED.value).inc()
        if gpu and self.settings.calibrate:
            self._calibrate(device_row.id, spec, model, samples, calibration)

    # ----- the cost model's calibration --------------------------------------------------------
    def _calibration(self, device_id: int, op: str) -> Calibration | None:
        """The stored calibration of (device, op), if any and not the identity."""
        if not self.settings.calibrate:
            return None
        try:
            with repo.session_scope(self.db.sessions) as session:
                stored = results_repo.find_calibration(session, device_id=device_id, op=op)
        except repo.StorageError:
            logger.exception("could not read the calibration of device %d", device_id)
            return None
        if stored is None:
            return None
        calibration = Calibration.from_dict(stored)
        return None if calibration.is_identity else calibration

    def _calibrate(
        self,
        device_id: int,
        spec: OperatorSpec,
        model: Any,
        records: list[TrialRecord],
        prior: Calibration | None,
    ) -> Calibration | None:
        """Fit the cost model to this run's measurements, merge, store; the result."""
        records = _spread(sorted(records, key=lambda r: r.latency_us or 0.0),
                          CALIBRATION_SAMPLES)
        samples = []
        for record in records:
            try:
                samples.append(Sample(SProgram.from_dict(record.schedule or {}), spec,
                                      float(record.latency_us or 0.0)))
            except (KeyError, TypeError, ValueError):
                continue
        try:
            fitted = fit_calibration(samples, model, prior=prior,
                                     time_limit_s=CALIBRATION_TIME_S)
            if fitted is None:
                return None
            merged = prior.merged(fitted) if prior is not None else fitted
            with repo.session_scope(self.db.sessions) as session:
                results_repo.store_calibration(
                    session, device_id=device_id, op=spec.op, calibration=merged.to_dict()
                )
        except Exception:
            logger.exception("calibration of device %d failed", device_id)
            return None
        logger.info("device %d %s: cost model calibrated on %d samples (log RMSE %.3f -> %.3f)",
                    device_id, spec.op, fitted.samples, fitted.log_rmse_before or 0.0,
                    fitted.log_rmse_after or 0.0)
        return merged

    def _finish(self, run_id: int, status: RunStatus, **fields: Any) -> None:
        try:
            with repo.session_scope(self.db.sessions) as session:
                repo.finish_run(session, run_id=run_id, status=status, **fields)
        except repo.StorageError:
            logger.exception("could not record the end of run %d", run_id)
            return
        if self.metrics:
            self.metrics.runs_finished.labels(status.value).inc()

    def _count_tune(self, outcome: str) -> None:
        if self.metrics:
            self.metrics.tune_requests.labels(outcome).inc()


def _ok_latency(measurement: Any) -> float | None:
    """A measurement's latency if it succeeded with a usable one, else None."""
    status = str(getattr(measurement.status, "value", measurement.status))
    latency = measurement.latency_us
    if status != "ok" or latency is None or not math.isfinite(latency) or latency <= 0:
        return None
    return float(latency)


def _baseline_latency(run_id: int, baseline: str | None, reference: Any) -> float | None:
    """The primary baseline's latency, or None (it failed: logged)."""
    if baseline is None or reference is None:
        return None
    latency = _ok_latency(reference)
    if latency is None:
        logger.warning("run %d: baseline %s failed: %s", run_id, baseline, reference.error)
    return latency


def _peer_latencies(run_id: int, peers: Mapping[str, Any]) -> dict[str, float]:
    """The further peers' latencies by name; a failed peer is logged and left out (it
    never fails the run)."""
    found = {}
    for name, measurement in peers.items():
        try:
            latency = _ok_latency(measurement)
        except Exception:
            logger.exception("run %d: peer %s: unreadable measurement", run_id, name)
            continue
        if latency is None:
            logger.warning("run %d: peer %s failed: %s", run_id, name,
                           getattr(measurement, "error", "") or measurement.status)
        else:
            found[name] = latency
    return found


def _spread(records: list[TrialRecord], limit: int) -> list[TrialRecord]:
    """At most ``limit`` of ``records`` (sorted), evenly spaced over them."""
    if len(records) <= limit:
        return records
    step = len(records) / limit
    return [records[int(i * step)] for i in range(limit)]


def _device_row(session: Any, device: ResolvedDevice) -> Any:
    return repo.get_or_create_device(
        session,
        key=device.key,
        name=device.name,
        kind=device.kind,
        simulated=device.simulated,
        identity=device.identity,
    )


def _trial_row(record: TrialRecord) -> dict[str, Any]:
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
