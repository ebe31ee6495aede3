"""One range run's execution: its stored state loaded, the range search driven, the bucket
table stored.

A range run (``RunModel.kind == "range"``) tunes a workload over one range axis: one
dimension, or several tied to it (self-attention's seq_q = seq_kv; ``docs/dynamic.md``).
The manager hands it here instead of to :class:`~service.runs.execution.RunExecution`;
the lifecycle is the same (claim, heartbeat, progress, cancel, resume, retries through a
brief database fault), the search is
:class:`~scheduler_search.search.range_search.RangeSearch`:

- ``make_jobs``: on a GPU, a candidate's kernel rendered once (``codegen.render`` of its
  run-time-size sProgram) and bound to each size (``KernelArtifact.at_sizes``, every tied
  dimension; the job's workload and tensors, which the worker's reference is computed
  from, are the exact spec's at that size): the worker compiles each source once; timed
  by the GPU preset's quick policy, the re-timing by its final one. On the simulated
  device, the candidate planned at each size for the cost model.
- each measurement is a trial (its size in its choices, under the primary dimension's
  name);
  a resumed or extended run measures none of its stored trials again.
- the outcome: each bucket's kernel rendered and stored in the kernels table, and the
  table stored (``pipetune_range_tables``), on a GPU with how each size was timed (the
  exact workload's ``timing_method`` there, as ``make_jobs`` timed it); the run
  ``succeeded`` (``cancelled`` with the table of what it measured, if any), or ``failed``
  when nothing ran.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler_search.cost_model import Calibration, shipped_calibration
from scheduler_search.ops import OperatorSpec, parse_range_spec
from scheduler_search.search import (
    GPU,
    INVALID,
    SIMULATED,
    Budget,
    Progress,
    SearchCallbacks,
    TrialRecord,
)
from scheduler_search.search.presets import timing_method
from scheduler_search.search.range_search import (
    RangeConfig,
    RangeResult,
    RangeSearch,
    plan_at,
)
from scheduler_search.space.designs import range_designs
from scheduler_search.sprogram import SProgram
from service.db import ranges as ranges_repo
from service.db import repositories as repo
from service.db import results as results_repo
from service.db.models import DeviceModel, RunModel, RunStatus, WorkloadModel
from service.runs.calibration import stored_calibration
from service.runs.context import RunContext, RunLease
from service.runs.devices import ResolvedDevice, from_identity
from service.runs.execution import _trial_row
from service.runs.finish import record_end
from service.runs.jobs import timing_config
from service.runs.ranges import fixed_key, fixed_params
from service.runs.retry import with_retries
from workers import Job

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredRangeRun:
    """What a range run starts from, read in one session."""

    run: RunModel
    workload: WorkloadModel
    device_row: DeviceModel
    history: list[TrialRecord]


class RangeExecution:
    """One claimed range run, from its stored state to its stored table (see the module
    docstring). Arguments as :class:`~service.runs.execution.RunExecution`'s."""

    def __init__(
        self,
        context: RunContext,
        lease: RunLease,
        stored: StoredRangeRun,
        *,
        cancel: threading.Event,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> None:
        self.context = context
        self.lease = lease
        self.run, self.workload, self.device_row = stored.run, stored.workload, stored.device_row
        self.range_spec = parse_range_spec(self.workload.op, self.workload.params)
        row = self.device_row
        self.model = from_identity(row.kind, row.name, row.identity)
        self.device = ResolvedDevice(row.name, row.key, row.kind, row.simulated, self.model,
                                     row.identity)
        self.gpu = not self.device.simulated
        self.history = stored.history
        self.executor = context.executors.get(self.device)
        self.calibration = self._calibration()
        self.preset = GPU if self.gpu else SIMULATED
        self.config = RangeConfig(
            seed=self.run.seed,
            batch_size=(context.settings.gpu_batch_size or None) if self.gpu else None,
            **context.settings.range_search,
        )
        self._cancel = cancel
        self._listener = on_progress
        self._kernels: dict[str, Any] = {}

    def _calibration(self) -> Calibration | None:
        """What ranks the candidates, as for an exact run."""
        if not self.gpu:
            return shipped_calibration(self.model.name, self.range_spec.op)
        if self.context.settings.calibrate:
            return stored_calibration(self.context.db, self.device_row.id, self.range_spec.op)
        return None

    @classmethod
    def load(
        cls,
        context: RunContext,
        lease: RunLease,
        *,
        cancel: threading.Event,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> RangeExecution:
        """The execution of a claimed range run, with its stored trials.

        Raises:
            LeaseLost: the run is no longer the lease's claim.
        """
        with repo.session_scope(context.db.sessions) as session:
            context.hold(session, lease)
            run = repo.get_run(session, run_id=lease.run_id)
            assert run is not None
            rows, _ = repo.list_trials(session, run_id=lease.run_id, limit=1_000_000)
            history = [TrialRecord(number=t.number, choices=dict(t.choices),
                                   status=t.status or INVALID, source=t.source,
                                   schedule_hash=t.schedule_hash, latency_us=t.latency_us,
                                   predicted_us=t.predicted_us, error=t.error or "",
                                   simulated=t.simulated) for t in rows]
            stored = StoredRangeRun(run, run.workload, run.device, history)
        return cls(context, lease, stored, cancel=cancel, on_progress=on_progress)

    def execute(self) -> None:
        """Search and store the outcome; an exception propagates (the run fails)."""
        run = self.run
        search = RangeSearch(
            self.range_spec,
            self.model,
            self.executor,
            self.make_jobs,
            budget=Budget(trials=run.budget_trials, seconds=run.budget_seconds),
            config=self.config,
            feasible=_feasibility(self.range_spec.op, self.model),
            estimator=self._estimator(),
            designs=range_designs(self.range_spec),
            history=self.history,
            elapsed_before_s=run.elapsed_s,
            callbacks=SearchCallbacks(self.on_trials, self.on_progress, self.should_stop),
        )
        result = search.run()
        RangeFinish(self.context, self.lease, self.device_row.id, self.range_spec, self.model,
                    self.device.simulated).store(result, cancelled=self._cancel.is_set())

    def _estimator(self) -> Callable[[SProgram, OperatorSpec], float] | None:
        calibration, model = self.calibration, self.model
        if calibration is None:
            return None
        return lambda sprogram, spec: calibration.predict_us(sprogram, spec, model)

    # ----- the search's callbacks ----------------------------------------------------------
    def make_jobs(self, sprogram: SProgram, sizes: Sequence[Mapping[str, int]],
                  final: bool) -> list[Job]:
        """A candidate's job at each size: on a GPU its kernel (rendered once) bound to
        the size, timed by the quick or (``final``) the final policy; on the simulated
        device the candidate planned at the size."""
        seed = self.run.seed
        if not self.gpu:
            return [Job(workload=self._workload(s), seed=seed,
                        schedule=plan_at(self.range_spec, self.model, sprogram, s).to_dict())
                    for s in sizes]
        policy = self.preset.final_timing if final else self.preset.search_timing
        assert policy is not None
        kernel = self._kernel(sprogram)
        jobs = []
        for s in sizes:
            spec = self.range_spec.exact(dict(s))
            jobs.append(Job(workload={"op": spec.op, "params": spec.params()},
                            artifact=kernel.at_sizes(dict(s)), seed=seed,
                            timing=timing_config(policy.for_workload(spec, self.model)),
                            deadline_s=policy.deadline_s,
                            tensors=tuple(spec.tensors())))
        return jobs

    def _kernel(self, sprogram: SProgram) -> Any:
        """The candidate's kernel, rendered once per run."""
        if sprogram.hash not in self._kernels:
            from codegen import render

            self._kernels[sprogram.hash] = render(sprogram, None, self.model)
        return self._kernels[sprogram.hash]

    def _workload(self, sizes: Mapping[str, int]) -> dict[str, Any]:
        return {"op": self.range_spec.op, "params": self.range_spec.exact(dict(sizes)).params()}

    def on_trials(self, records: list[TrialRecord]) -> None:
        """Store a batch's measurements as trials (tried again through a brief database
        fault)."""
        rows = [_trial_row(r) for r in records]

        def store() -> None:
            with repo.session_scope(self.context.db.sessions) as session:
                self.context.hold(session, self.lease)
                repo.add_trials(session, run_id=self.run.id, trials=rows)

        with_retries(self.context.settings, store)
        if self.context.metrics:
            for record in records:
                self.context.metrics.trials.labels(record.status, str(record.simulated)).inc()

    def on_progress(self, update: Progress) -> None:
        """Store progress; a cancel requested in the database stops the search."""

        def store() -> bool:
            with repo.session_scope(self.context.db.sessions) as session:
                self.context.hold(session, self.lease)
                return repo.update_progress(
                    session, run_id=self.run.id,
                    phase=update.phase, trials_done=update.trials_done,
                    invalid=update.invalid, best_latency_us=None, best_schedule_hash=None,
                    best_simulated=None, elapsed_s=update.elapsed_s)

        if with_retries(self.context.settings, store):
            self._cancel.set()
        if self._listener is not None:
            self._listener(update)

    def should_stop(self) -> bool:
        return self.context.shutdown.is_set() or self._cancel.is_set()


def _feasibility(op: str, model: Any) -> Any:
    from codegen import feasibility

    return feasibility(op, model)


@dataclass(frozen=True)
class RangeFinish:
    """Stores a range search's outcome: each bucket's kernel and the table, the run's end."""

    context: RunContext
    lease: RunLease
    device_id: int
    range_spec: Any
    model: Any
    simulated: bool

    @property
    def run_id(self) -> int:
        return self.lease.run_id

    def store(self, result: RangeResult, *, cancelled: bool) -> bool:
        """Store the outcome; whether the run succeeded. A search stopped by the manager's
        shutdown (not a cancel) is released for the next start to resume."""
        from scheduler_search.search import StopReason

        cancelled = cancelled or self._cancel_recorded()
        if result.stop_reason is StopReason.CANCELLED and not cancelled:
            with repo.session_scope(self.context.db.sessions) as session:
                self.context.hold(session, self.lease)
                repo.release_run(session, run_id=self.run_id, owner=self.context.owner)
            return False
        end = RunStatus.CANCELLED if cancelled else RunStatus.SUCCEEDED
        if not result.ok:
            error = None if cancelled else (
                f"no candidate was measured successfully at any size ({result.trials_done} "
                f"measured, {result.invalid} refused; stopped: {result.stop_reason.value})")
            record_end(self.context, self.lease,
                       RunStatus.CANCELLED if cancelled else RunStatus.FAILED, error=error,
                       stop_reason=result.stop_reason.value, elapsed_s=result.elapsed_s)
            return False
        kernels = {b.schedule_hash: self._render(b.sprogram) for b in result.buckets}
        fixed = fixed_params(self.range_spec)
        dim = result.dim
        params = {**fixed, **{name: self.range_spec.ranges[name].to_json()
                              for name in result.dims}}
        with repo.session_scope(self.context.db.sessions) as session:
            self.context.hold(session, self.lease)
            for kernel in kernels.values():
                if kernel is not None:
                    results_repo.store_kernel(session, kernel_hash=kernel.hash,
                                              schedule_hash=kernel.schedule_hash,
                                              artifact=kernel.to_dict())
            ranges_repo.store_range_table(
                session, op=self.range_spec.op, fixed_key=fixed_key(self.range_spec.op, fixed),
                dim=dim, low=result.low, high=result.high, params=params,
                size_from=list(result.size_from), sizes=list(result.sizes),
                buckets=[_bucket_json(b, kernels.get(b.schedule_hash), self._timing_methods(b))
                         for b in result.buckets],
                loss=result.loss, simulated=self.simulated, device_id=self.device_id,
                run_id=self.run_id)
            ended_now = repo.finish_run(session, run_id=self.run_id, status=end,
                                        stop_reason=result.stop_reason.value,
                                        elapsed_s=result.elapsed_s)
        if ended_now and self.context.metrics:
            self.context.metrics.runs_finished.labels(end.value).inc()
        return end is RunStatus.SUCCEEDED

    def _cancel_recorded(self) -> bool:
        with repo.session_scope(self.context.db.sessions) as session:
            return bool(repo.cancel_requested(session, run_ids=[self.run_id]))

    def _timing_methods(self, bucket: Any) -> dict[str, str] | None:
        """How the GPU timed the bucket's kernel at each size it has a latency at (keyed as
        its ``latencies_us``): the exact workload's method at the size, as ``make_jobs``
        chose it (and the re-timing's, which is the same); None on the simulated device."""
        if self.simulated:
            return None
        sizes = {*bucket.latencies_us, *(bucket.retimed_us or {})}
        spec = self.range_spec
        return {str(size): timing_method(spec.exact(spec.at(size)), self.model)
                for size in sorted(sizes)}

    def _render(self, sprogram: SProgram) -> Any:
        """A bucket's kernel, or None (no code generation for the operator, or the renderer
        failed: logged; the table keeps the schedule)."""
        from codegen import has_renderer, render

        if not has_renderer(sprogram.op):
            return None
        try:
            return render(sprogram, None, self.model)
        except Exception:
            logger.exception("run %d: could not render bucket schedule %s", self.run_id,
                             sprogram.hash[:12])
            return None


def _bucket_json(bucket: Any, kernel: Any, timing_methods: dict[str, str] | None
                 ) -> dict[str, Any]:
    """A bucket as the range table stores it (sizes as text keys: JSON objects')."""
    return {
        "low": bucket.low,
        "high": bucket.high,
        "loss": bucket.loss,
        "samples": list(bucket.samples),
        "schedule_hash": bucket.schedule_hash,
        "kernel_hash": kernel.hash if kernel is not None else None,
        "source": bucket.candidate.source,
        "choices": dict(bucket.sprogram.choices),
        "schedule": bucket.sprogram.to_dict(),
        "latencies_us": {str(s): us for s, us in sorted(bucket.latencies_us.items())},
        "retimed_us": ({str(s): us for s, us in sorted(bucket.retimed_us.items())}
                       if bucket.retimed_us is not None else None),
        "timing_methods": timing_methods,
    }


__all__ = ["RangeExecution", "RangeFinish", "StoredRangeRun"]
