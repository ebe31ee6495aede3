"""The Executor interface: where candidates are measured.

An Executor turns a batch of Jobs into Measurements. The search asks for batches as wide
as ``batch_size()`` (by default ``capacity()``, the number of candidates it can measure at
once: one per GPU for the local pool, whose batches are wider so that the CPU cores
compile a whole batch together), calls ``measure`` with them, and calls ``close`` once at
the end of its life (an Executor is also a context manager). Between those calls it owns
its devices: no other code should launch work on the GPUs an executor uses.

A search that overlaps its rounds calls ``prepare`` with the next batch before it asks for
the measurement of the current one; an implementation may start work that needs no GPU
(compiling) in the background then. ``prepare`` is a hint: ``measure`` must work on jobs
that were never prepared, and ``prepare`` may be called from another thread than
``measure`` while a ``measure`` call is running.

Implementations must guarantee:
  - ``measure`` returns exactly one Measurement per Job, in the order of the Jobs, and
    never raises for a bad kernel: a compile error, launch error, wrong result, timeout
    or crash is a status.
  - A Measurement that no GPU produced (a cost-model estimate) has ``simulated=True``.
  - ``measure`` may be called from one thread at a time; implementations serialise
    concurrent calls rather than interleave them.

Conveniences written once on the base (``measure_one``, ``retime_interleaved``) use only
``measure``, so a new backend implements ``capacity`` and ``measure`` (and ``close`` if it
holds resources; ``batch_size`` and ``prepare`` if it can use wider, overlapped batches).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from types import TracebackType

from workers.protocol import Job, Measurement


class Executor(ABC):
    """Measures batches of Jobs (see the module docstring for the contract)."""

    @abstractmethod
    def capacity(self) -> int:
        """How many candidates one ``measure`` call can work on at the same time."""

    @abstractmethod
    def measure(self, jobs: Sequence[Job]) -> list[Measurement]:
        """One Measurement per job, in order; a bad kernel is a status, never an exception."""

    def batch_size(self) -> int:
        """How many candidates a search should hand ``measure`` per round."""
        return self.capacity()

    def prepare(self, jobs: Sequence[Job]) -> None:
        """Start the GPU-free part of measuring ``jobs`` (compiling) in the background;
        the default does nothing. Never raises for a bad kernel."""
        return None

    def warm(self, jobs: Sequence[Job] = ()) -> None:
        """Start now what the first ``measure`` would otherwise start (worker processes,
        their CUDA contexts, compile pools) and wait for it, then measure ``jobs`` once,
        dropping the results: a GPU worker's first measurement also pays for CuPy's own
        kernels (inputs, the reference check), the vendor library's handle and a peer's
        PyTorch import. The default has nothing to start or warm."""
        return None

    def close(self) -> None:
        """Release workers and devices; the default holds nothing."""
        return None

    def __enter__(self) -> Executor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def measure_one(self, job: Job) -> Measurement:
        """Measure a single job."""
        return self.measure([job])[0]

    def retime_interleaved(self, jobs: Sequence[Job], rounds: int = 3) -> list[Measurement]:
        """Re-time finalists in interleaved rounds so that drift hits them all alike.

        Each round measures every job once, the order rotated by one each round (so no
        job is always first after an idle GPU). A job's result pools the samples of all
        rounds (median and spread recomputed); if any round failed, the first failure is
        returned for that job instead.
        """
        if rounds < 1:
            raise ValueError("rounds must be >= 1")
        count = len(jobs)
        per_job: list[list[Measurement]] = [[] for _ in range(count)]
        for round_index in range(rounds):
            order = [(i + round_index) % count for i in range(count)]
            for i, result in zip(order, self.measure([jobs[i] for i in order]), strict=True):
                per_job[i].append(result)
        return [_pool_rounds(results) for results in per_job]


def _pool_rounds(results: list[Measurement]) -> Measurement:
    for result in results:
        if not result.status.is_ok():
            return result
    samples = [s for result in results for s in result.samples_us]
    first = results[0]
    kept = {
        name: getattr(first, name)
        for name in (
            "rel_error",
            "error_bound",
            "compile_ms",
            "compile_cached",
            "registers",
            "spill_bytes",
            "smem_bytes",
            "log",
            "simulated",
            "device_index",
        )
    }
    timing_wall_ms = sum(r.timing_wall_ms or 0.0 for r in results)
    return Measurement.from_samples(samples, timing_wall_ms=timing_wall_ms, **kept)
