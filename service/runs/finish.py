"""How a run ends: what its search found is stored, or why it found nothing.

After the search, :meth:`RunFinish.store` decides, in this order:

- stopped by the manager's shutdown (not a cancel): the run is released, left ``running``
  without an owner for the next start to resume;
- no candidate measured successfully: ``failed`` (``cancelled`` if it was), saying how
  many were tried;
- otherwise ``succeeded``, or ``cancelled`` with its best kept all the same: the winner's
  schedule is offered to the cache of (workload, device) (which keeps the faster one),
  with its rendered kernel (``/v1/kernels/{hash}``), the vendor baseline's latency
  (``None`` if it failed) and the further peers' latencies (a peer that failed is left
  out, logged; neither ever fails the run). On a GPU the run and the cache entry also
  record how those latencies were timed (``timing_method``: CUDA events or a graph's
  replay, the workload's method), which a speedup is read with.

A cancel is recorded by ``repositories.request_cancel`` at once (the run is ``cancelled``
from then on, whichever process executes it); the outcome stored here completes it.

:func:`record_end` records any other end of a run (a failure raised during its execution).
Every write first holds the run's lease (``RunContext.hold``): a search whose run was
taken over elsewhere stores nothing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from scheduler_search.ops import OperatorSpec
from scheduler_search.search import SearchResult, StopReason, TrialRecord
from scheduler_search.search.presets import timing_method
from scheduler_search.sprogram import SProgram
from service.db import repositories as repo
from service.db import results as results_repo
from service.db.models import RunStatus
from service.runs.context import RunContext, RunLease

if TYPE_CHECKING:
    from codegen import KernelArtifact

logger = logging.getLogger(__name__)


class _Kernel(NamedTuple):
    """The winner's rendered kernel and its hash (its identity, computed once)."""

    artifact: KernelArtifact
    hash: str


def record_end(context: RunContext, lease: RunLease, status: RunStatus, **fields: Any) -> None:
    """Record the end of a leased run (``repositories.finish_run`` fields) and count it,
    unless a cancel had ended it already; a storage error or a lost lease is logged,
    since there is nothing else to tell."""
    try:
        with repo.session_scope(context.db.sessions) as session:
            context.hold(session, lease)
            ended_now = repo.finish_run(session, run_id=lease.run_id, status=status, **fields)
    except repo.StorageError:
        logger.exception("could not record the end of run %d", lease.run_id)
        return
    except repo.LeaseLost as exc:
        logger.warning("the end of run %d is not recorded: %s", lease.run_id, exc)
        return
    if ended_now and context.metrics:
        context.metrics.runs_finished.labels(status.value).inc()


@dataclass(frozen=True)
class RunFinish:
    """Stores the outcome of one run's search (see the module docstring).

    Attributes:
        context: the manager's shared services.
        lease: the run, as its execution holds it (each write checks it).
        workload_id, device_id: what the winner is cached for.
        spec, model: the operator and hardware model, to render the winner's kernel and
            name how the GPU timed it.
        baseline: the vendor baseline timed with the run, or ``None``.
    """

    context: RunContext
    lease: RunLease
    workload_id: int
    device_id: int
    spec: OperatorSpec
    model: Any
    baseline: str | None

    @property
    def run_id(self) -> int:
        return self.lease.run_id

    def store(self, result: SearchResult, *, cancelled: bool) -> bool:
        """Store the outcome of the search; whether the run succeeded. ``cancelled``: the
        run's cancel event was set (a cancel recorded in the database counts too)."""
        cancelled = cancelled or self._cancel_recorded()
        if result.stop_reason is StopReason.CANCELLED and not cancelled:
            with repo.session_scope(self.context.db.sessions) as session:
                self.context.hold(session, self.lease)
                repo.release_run(session, run_id=self.run_id, owner=self.context.owner)
            return False
        best = result.best
        end = RunStatus.CANCELLED if cancelled else RunStatus.SUCCEEDED
        if best is None or best.schedule is None:
            error = None if cancelled else (
                f"no candidate was measured successfully ({result.trials_done} measured, "
                f"{result.invalid} invalid; stopped: {result.stop_reason.value})"
            )
            record_end(self.context, self.lease,
                       RunStatus.CANCELLED if cancelled else RunStatus.FAILED, error=error,
                       stop_reason=result.stop_reason.value, best=_best_dict(best, None),
                       elapsed_s=result.elapsed_s)
            return False
        kernel = self._render(best)
        baseline_us = _baseline_latency(self.run_id, self.baseline, result.reference)
        self._store_winner(result, best, kernel, baseline_us, end)
        return end is RunStatus.SUCCEEDED

    def _cancel_recorded(self) -> bool:
        """Whether the run was cancelled in the database (say, by another process)."""
        with repo.session_scope(self.context.db.sessions) as session:
            return bool(repo.cancel_requested(session, run_ids=[self.run_id]))

    def _timing_method(self, best: TrialRecord) -> str | None:
        """How the GPU timed the winner, the baseline and the peers: the workload's method
        (``timing_method`` of the same spec and device that the run's jobs were made
        with); None for a simulated run's estimate."""
        return None if best.simulated else timing_method(self.spec, self.model)

    def _render(self, best: TrialRecord | None) -> _Kernel | None:
        """The winner's kernel, or ``None`` (no winner, no code generator for the operator,
        or the renderer failed: logged, the run still succeeds without a stored kernel).
        A simulated run's kernel is rendered but never ran: its schedule is marked
        ``simulated``, its latency a model estimate."""
        from codegen import has_renderer

        if best is None or best.schedule is None or not has_renderer(self.spec.op):
            return None
        try:
            from codegen import render

            artifact = render(SProgram.from_dict(best.schedule), self.spec, self.model)
            return _Kernel(artifact, artifact.hash)
        except Exception:
            logger.exception("run %d: could not render the winner", self.run_id)
            return None

    def _store_winner(
        self,
        result: SearchResult,
        best: TrialRecord,
        kernel: _Kernel | None,
        baseline_us: float | None,
        end: RunStatus,
    ) -> None:
        """Offer the winner (and its kernel) to the cache of (workload, device), store the
        baseline's and peers' latencies and how they were all timed, and end the run as
        ``end``, in one transaction."""
        method = self._timing_method(best)
        with repo.session_scope(self.context.db.sessions) as session:
            self.context.hold(session, self.lease)
            if kernel is not None:
                results_repo.store_kernel(
                    session, kernel_hash=kernel.hash,
                    schedule_hash=kernel.artifact.schedule_hash,
                    artifact=kernel.artifact.to_dict(),
                )
            repo.store_best_schedule(
                session,
                workload_id=self.workload_id,
                device_id=self.device_id,
                run_id=self.run_id,
                schedule_hash=best.schedule_hash,
                schedule=best.schedule,
                choices=best.choices,
                latency_us=best.latency_us,
                predicted_us=best.predicted_us,
                simulated=best.simulated,
                kernel_hash=kernel.hash if kernel is not None else None,
                timing_method=method,
            )
            if self.baseline is not None:
                results_repo.set_schedule_baseline(
                    session, workload_id=self.workload_id, device_id=self.device_id,
                    run_id=self.run_id, baseline=self.baseline, latency_us=baseline_us,
                )
            # Whatever the baseline: a GPU run's best was timed by ``method`` even without
            # a vendor peer (a simulated run's fields stay None).
            results_repo.set_run_baseline(
                session, run_id=self.run_id, baseline=self.baseline, latency_us=baseline_us,
                timing_method=method,
            )
            if result.peers:
                results_repo.set_run_peers(
                    session, run_id=self.run_id,
                    latencies_us=_peer_latencies(self.run_id, result.peers),
                )
            ended_now = repo.finish_run(
                session,
                run_id=self.run_id,
                status=end,
                stop_reason=result.stop_reason.value,
                best=_best_dict(best, kernel),
                elapsed_s=result.elapsed_s,
            )
        if ended_now and self.context.metrics:
            self.context.metrics.runs_finished.labels(end.value).inc()


def _best_dict(best: TrialRecord | None, kernel: _Kernel | None) -> dict[str, Any] | None:
    """The run's ``best`` columns from the winner's record, or None without one."""
    if best is None:
        return None
    return {
        "latency_us": best.latency_us,
        "schedule_hash": best.schedule_hash,
        "simulated": best.simulated,
        "kernel_hash": kernel.hash if kernel is not None else None,
    }


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
