"""What a tune returns: a cached schedule (a cache hit) or a finished run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TuneResult:
    """The answer to a tune (``POST /v1/tune``'s TuneResponse): ``cached`` on a cache hit;
    ``run``, the run that found the schedule or will find it (its RunPublic JSON; finished
    when the tune waited; None for a cached schedule imported from another cache); and
    ``schedule``, the cached best schedule (SchedulePublic JSON; None until a run stores
    one, and for a run that ended without one).

    A range request's answer has ``range``, the tuned range's table (RangeTablePublic
    JSON: buckets, each with its kernel's hash and latencies; None while a run is still to
    tune it), and ``schedule`` None; in process, ``kernel`` is then its RangeArtifact
    JSON (``pipetune.load`` dispatches each call to its bucket's kernel)."""

    cached: bool
    schedule: dict[str, Any] | None = None
    run: dict[str, Any] | None = None
    #: The best kernel's KernelArtifact JSON, when the answer carries it (an in-process
    #: :func:`pipetune.tune`); from a server, ``Client.kernel(result.kernel_hash)``. For a
    #: range, the RangeArtifact JSON.
    kernel: dict[str, Any] | None = None
    #: A range request's tuned range (``GET /v1/ranges/{id}``'s JSON), or None.
    range: dict[str, Any] | None = None
    #: A pipeline's answer (``mamba2_ssd``; TuneResponse's ``pipeline`` JSON: its kernels'
    #: runs and schedules, the plan served), or None.
    pipeline: dict[str, Any] | None = None
    #: A pipeline's kernels' KernelArtifact JSON by role, when the answer carries them (an
    #: in-process :func:`pipetune.tune`).
    kernels: dict[str, dict[str, Any]] | None = None

    @property
    def run_id(self) -> int | None:
        """The run's id (``Client.events`` follows it), or None without a run."""
        return (self.run or {}).get("id")

    @property
    def range_id(self) -> int | None:
        """A range request's tuned range (``Client.range_artifact`` fetches its kernels),
        or None (an exact request, or a range run that stored no table)."""
        if self.range is not None:
            return self.range.get("id")
        return (self.run or {}).get("range_id")

    @property
    def kernel_hash(self) -> str | None:
        """The best kernel's hash (``Client.kernel`` fetches it), or None without one."""
        if self.schedule is not None:
            return self.schedule.get("kernel_hash")
        best = (self.run or {}).get("best") or {}
        return best.get("kernel_hash")

    @property
    def latency_us(self) -> float | None:
        """The best latency: the cached schedule's when there is one, else the run's
        (None for a range: each bucket has its own, in ``range["buckets"]``); for a
        pipeline, what the kernels of the plan served cost per call."""
        if self.pipeline is not None:
            return self.pipeline.get("latency_us")
        if self.schedule is not None:
            return self.schedule.get("latency_us")
        best = (self.run or {}).get("best") or {}
        return best.get("latency_us")

    @property
    def speedup_vs_baseline(self) -> float | None:
        """The vendor peer's latency over the best kernel's (> 1: faster than it)."""
        return (self.schedule or self.run or {}).get("speedup_vs_baseline")

    @property
    def timing_method(self) -> str | None:
        """How the GPU timed :attr:`latency_us` and the vendor peer's latency, so
        :attr:`speedup_vs_baseline`: ``"events"`` (per-launch CUDA events, the L2 flushed
        before each: long kernels) or ``"graph"`` (launches replayed from a CUDA graph over
        operand copies larger than the L2: short or memory-bound kernels). None for a
        simulated device's estimate, and for results stored before pipetune recorded it."""
        return (self.schedule or self.run or {}).get("timing_method")

    @property
    def status(self) -> str:
        """``cached``, or the run's status (``succeeded``, ``failed``, ``running`` ...); for
        a pipeline, the status of the first kernel's run without a schedule, or
        ``succeeded`` when every kernel has one."""
        if self.cached:
            return "cached"
        if self.pipeline is not None:
            for kernel in self.pipeline.get("kernels", []):
                if kernel.get("schedule") is None:
                    return str((kernel.get("run") or {}).get("status"))
            return "succeeded"
        return str((self.run or {}).get("status"))

    @classmethod
    def of_answer(cls, body: dict[str, Any]) -> TuneResult:
        """From ``POST /v1/tune``'s answer (the same shape for 200 and 202)."""
        return cls(cached=bool(body["cached"]), schedule=body.get("schedule"),
                   run=body.get("run"), range=body.get("range"),
                   pipeline=body.get("pipeline"))
