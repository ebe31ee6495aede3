"""Re-timing by the final method: the leaders as the search goes, the finalists at its end.

The quick timing of the search ranks candidates but leaves a few percent of selection
noise (on an H200 it read 7-12% faster than the final method, unevenly), and a GPU drifts
over minutes. Each schedule that enters the few fastest is timed once more by the final
method as the search goes (:class:`LeaderRetiming`), so that one the quick timing later
ranks below noisier ones still reaches the end if the final method found it fast. At the
end the finalists (the quick timing's top few and the leaders fastest by the final
method) are timed again in interleaved rounds (``Executor.retime_interleaved``), in the
same call as the vendor baseline (the ``reference`` job) and any further peers, which
makes the winner and the comparison honest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler_search.search.executor import ExecutorLike, MeasurementLike, status_of
from scheduler_search.search.ledger import Ledger
from scheduler_search.search.measuring import JobFailure
from scheduler_search.search.measuring import make_job as make_job_or_failure
from scheduler_search.search.records import TrialRecord
from scheduler_search.sprogram import SProgram


@dataclass
class Baselines:
    """The jobs a search compares its kernels with, and their measurements.

    The ``reference`` and the ``peers`` are timed only in the final re-timing, in the same
    interleaved rounds as the finalists (they meet the GPU's drift as the finalists do).
    Not before: the vendor's library loads in the worker on its first call (PyTorch's
    import took 3.3-4.5 s on an H200, 2026-12-04), and a search round that carried the
    reference waited for it: the first decode tunes' second round came 6 s after the first.
    """

    reference_job: Any = None
    peer_jobs: Mapping[str, Any] = field(default_factory=dict)
    reference: MeasurementLike | None = None
    peers: dict[str, MeasurementLike] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.peer_jobs = dict(self.peer_jobs)


class FinalRetiming:
    """Re-times the ``top_k`` fastest measured schedules in ``rounds`` interleaved rounds,
    with the reference job, then the peer jobs, in the same call.

    Args:
        executor: runs ``retime_interleaved``.
        make_job: a finalist's job (the final timing policy).
        baselines: filled in with the baselines' re-timed measurements.
    """

    def __init__(
        self,
        executor: ExecutorLike,
        make_job: Callable[[SProgram], Any],
        baselines: Baselines,
        *,
        top_k: int,
        rounds: int,
    ) -> None:
        self.executor = executor
        self.make_job = make_job
        self.baselines = baselines
        self.top_k = top_k
        self.rounds = rounds

    def run(self, ledger: Ledger, on_start: Callable[[], None],
            leaders: Sequence[TrialRecord] = ()) -> list[TrialRecord]:
        """The finalists (the ``top_k`` fastest as measured, and ``leaders``) by re-timed
        latency, fastest first (a failed re-timing drops one); ``on_start`` is called
        once there is something to re-time."""
        top = self._finalist_jobs(ledger, leaders)
        if not top:
            return []
        on_start()
        jobs = [job for _, _, job in top]
        baselines = self.baselines
        if baselines.reference_job is not None:
            jobs.append(baselines.reference_job)
        jobs.extend(baselines.peer_jobs.values())
        results = list(self.executor.retime_interleaved(jobs, rounds=self.rounds))
        retimed = results[len(top):]
        if baselines.reference_job is not None:
            baselines.reference = retimed.pop(0)
        baselines.peers = dict(zip(baselines.peer_jobs, retimed, strict=True))
        finalists = []
        for (record, program, _), result in zip(top, results[: len(top)], strict=True):
            if status_of(result) == "ok" and result.latency_us is not None:
                finalists.append(TrialRecord(**{
                    **record.__dict__,
                    "latency_us": float(result.latency_us),
                    "measurement": result.to_dict(),
                    "schedule": record.schedule or program.to_dict(),
                }))
        finalists.sort(key=lambda r: r.latency_us or 0.0)
        return finalists

    def without_retiming(self, ledger: Ledger) -> list[TrialRecord]:
        """The ``top_k`` fastest records as measured, each with its schedule: what a
        cancelled search returns at once instead of re-timing."""
        finalists = []
        for record in ledger.fastest()[: self.top_k]:
            program = ledger.program(record)
            if program is not None:
                finalists.append(TrialRecord(**{
                    **record.__dict__, "schedule": record.schedule or program.to_dict(),
                }))
        return finalists

    def _finalist_jobs(self, ledger: Ledger, leaders: Sequence[TrialRecord] = ()
                       ) -> list[tuple[TrialRecord, SProgram, Any]]:
        """The ``top_k`` fastest records whose sProgram and final job can be made, then
        the ``leaders`` not among them."""
        top: list[tuple[TrialRecord, SProgram, Any]] = []
        for record in ledger.fastest():
            if len(top) == self.top_k:
                break
            top += _with_job(ledger, record, self.make_job)
        chosen = {record.schedule_hash for record, _, _ in top}
        for record in leaders:
            if record.schedule_hash not in chosen:
                chosen.add(record.schedule_hash)
                top += _with_job(ledger, record, self.make_job)
        return top


class LeaderRetiming:
    """Each schedule that enters the ``top`` fastest as measured is timed once more by
    the final method (the round's entrants in one call); :meth:`fastest` are those the
    final method found fastest so far, which join the final re-timing.

    Args:
        executor: runs ``retime_interleaved``.
        make_job: a leader's job (the final timing policy).
        top: how many of the fastest a schedule must be among to be re-timed (0: none).
    """

    def __init__(self, executor: ExecutorLike, make_job: Callable[[SProgram], Any], *,
                 top: int) -> None:
        self.executor = executor
        self.make_job = make_job
        self.top = top
        #: schedule hash -> (its latency by the final method, its record).
        self.confirmed: dict[str, tuple[float, TrialRecord]] = {}
        self._tried: set[str] = set()

    def after_round(self, ledger: Ledger) -> None:
        """Re-time the schedules that entered the ``top`` fastest since the last call."""
        entrants = [r for r in ledger.fastest()[: self.top] if r.schedule_hash not in self._tried]
        self._tried.update(r.schedule_hash for r in entrants)
        picks = [item for record in entrants for item in _with_job(ledger, record, self.make_job)]
        if not picks:
            return
        results = self.executor.retime_interleaved([job for _, _, job in picks], rounds=1)
        for (record, _, _), result in zip(picks, results, strict=True):
            if status_of(result) == "ok" and result.latency_us is not None:
                self.confirmed[record.schedule_hash] = (float(result.latency_us), record)

    def best(self) -> tuple[float, TrialRecord] | None:
        """The leader fastest by the final method and that latency (None before any)."""
        return min(self.confirmed.values(), key=lambda item: item[0], default=None)

    def fastest(self, count: int) -> list[TrialRecord]:
        """The ``count`` leaders fastest by the final method."""
        ranked = sorted(self.confirmed.values(), key=lambda item: item[0])
        return [record for _, record in ranked[:count]]


def _with_job(ledger: Ledger, record: TrialRecord, make_job: Callable[[SProgram], Any]
              ) -> list[tuple[TrialRecord, SProgram, Any]]:
    """``[(record, its sProgram, its job)]``, or ``[]`` where either cannot be made."""
    program = ledger.program(record)
    if program is None:
        return []
    job = make_job_or_failure(lambda: make_job(program), f"re-timing {record.schedule_hash}")
    return [] if isinstance(job, JobFailure) else [(record, program, job)]
