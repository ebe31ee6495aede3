"""The one loop both searches measure in, and how a job that cannot be made fails.

A search (the exact driver's rounds, the range search's candidates at sizes) plans
batches of measurements; :class:`MeasuringLoop` asks it for the next batch until it has a
stop reason, hands each batch to the executor and gives the results back to the search to
record. With ``overlap`` a batch is measured in a background thread while the search plans
the next one, which the executor receives early (``prepare``: a GPU pool compiles it on
the CPU cores meanwhile), so the GPU never waits for the compiler or the sampler once the
pipeline is full.

A job that code generation cannot make is that measurement's failure (:class:`JobFailure`),
never the search's. Only what code generation raises for a schedule it cannot write counts
(:data:`JOB_ERRORS`: ``Unsupported``, ``ScheduleError``, ``SpecError`` are ValueErrors);
anything else is a bug and propagates.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from scheduler_search.search.executor import ExecutorLike, MeasurementLike
from scheduler_search.search.records import TrialRecord
from scheduler_search.search.stopping import StopReason

logger = logging.getLogger(__name__)

#: What making a job may raise for a schedule code generation cannot write.
JOB_ERRORS: tuple[type[Exception], ...] = (ValueError,)

K = TypeVar("K")


@dataclass(frozen=True)
class JobFailure:
    """Why a measurement's job could not be made (recorded as ``render_error``)."""

    error: str


def make_job(make: Callable[[], Any], name: str) -> Any:
    """``make()``, or the :class:`JobFailure` of a :data:`JOB_ERRORS` it raised."""
    try:
        return make()
    except JOB_ERRORS as exc:
        logger.warning("no job for %s: %s", name, exc)
        return JobFailure(f"codegen: {type(exc).__name__}: {exc}")


@dataclass
class Batch(Generic[K]):
    """Planned measurements: each entry's key (what the search knows it by) and its job,
    or the :class:`JobFailure` of making it."""

    entries: list[tuple[K, Any]] = field(default_factory=list)

    @property
    def jobs(self) -> list[Any]:
        return [job for _, job in self.entries if not isinstance(job, JobFailure)]

    def __len__(self) -> int:
        return len(self.entries)

    def results(self, measured: Sequence[MeasurementLike]
                ) -> list[tuple[K, MeasurementLike | JobFailure]]:
        """Each entry's key with its measurement (in the order of :attr:`jobs`) or its
        failure."""
        found = iter(measured)
        return [(key, job if isinstance(job, JobFailure) else next(found))
                for key, job in self.entries]


class MeasuredSearch(Protocol[K]):
    """What :class:`MeasuringLoop` asks of a search."""

    def stop_reason(self) -> StopReason | None:
        """Why to stop now (None: plan another batch)."""

    def next_batch(self) -> Batch[K]:
        """The next batch (it may be empty)."""

    def cancelled(self) -> bool:
        """Whether the caller asked to stop: a batch just planned is dropped unmeasured."""

    def drop(self, batch: Batch[K]) -> None:
        """Forget a planned batch that will not be measured."""

    def complete(self, batch: Batch[K],
                 results: list[tuple[K, MeasurementLike | JobFailure]]) -> list[TrialRecord]:
        """Record a measured batch; its records."""

    def end_round(self, records: list[TrialRecord]) -> None:
        """After each round: the records completed in it (none while the first overlapped
        batch is still measured)."""


_InFlight = tuple[Batch[Any], "Future[Sequence[MeasurementLike]]"]


class MeasuringLoop:
    """Measures a search's batches until it has a stop reason; a batch in flight is
    finished first. See the module docstring."""

    def __init__(self, executor: ExecutorLike, *, overlap: bool) -> None:
        self.executor = executor
        self.overlap = overlap

    def run(self, search: MeasuredSearch[Any]) -> StopReason:
        measurer = ThreadPoolExecutor(1, thread_name_prefix="pipetune-measure")
        inflight: _InFlight | None = None
        try:
            while (reason := search.stop_reason()) is None:
                batch = search.next_batch()
                if search.cancelled():  # cancelled while planning: measure nothing new
                    search.drop(batch)
                    continue
                if not self.overlap:
                    search.end_round(search.complete(batch, batch.results(self.measure(batch))))
                    continue
                if batch.jobs:
                    self.executor.prepare(batch.jobs)
                records = self._finish(search, inflight)
                inflight = (batch, measurer.submit(self.measure, batch)) if len(batch) else None
                search.end_round(records)
            if inflight is not None:
                search.end_round(self._finish(search, inflight))
        finally:
            measurer.shutdown(wait=True)
        return reason

    def measure(self, batch: Batch[Any]) -> Sequence[MeasurementLike]:
        """The executor's measurements of a batch's jobs."""
        jobs = batch.jobs
        return list(self.executor.measure(jobs)) if jobs else []

    @staticmethod
    def _finish(search: MeasuredSearch[Any], inflight: _InFlight | None) -> list[TrialRecord]:
        """Wait for the batch in flight and complete it; its records."""
        if inflight is None:
            return []
        batch, future = inflight
        return search.complete(batch, batch.results(future.result()))
