"""What a tune returns: a cached schedule (a cache hit) or a finished run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TuneResult:
    """The answer to a tune: ``schedule`` (the service's SchedulePublic JSON) on a cache
    hit, else ``run`` (its RunPublic JSON; finished when the tune waited) and, in process,
    the schedule it stored."""

    cached: bool
    schedule: dict[str, Any] | None = None
    run: dict[str, Any] | None = None
    #: The best kernel's KernelArtifact JSON, when the answer carries it (an in-process
    #: :func:`pipetune.tune`); from a server, ``Client.kernel(result.kernel_hash)``.
    kernel: dict[str, Any] | None = None

    @property
    def kernel_hash(self) -> str | None:
        """The best kernel's hash (``Client.kernel`` fetches it), or None without one."""
        if self.schedule is not None:
            return self.schedule.get("kernel_hash")
        best = (self.run or {}).get("best") or {}
        return best.get("kernel_hash")

    @property
    def latency_us(self) -> float | None:
        if self.schedule is not None:
            return self.schedule.get("latency_us")
        best = (self.run or {}).get("best") or {}
        return best.get("latency_us")

    @property
    def speedup_vs_baseline(self) -> float | None:
        """The vendor peer's latency over the best kernel's (> 1: faster than it)."""
        return (self.schedule or self.run or {}).get("speedup_vs_baseline")

    @property
    def status(self) -> str:
        """``cached``, or the run's status (``succeeded``, ``failed``, ``running`` ...)."""
        return "cached" if self.cached else str((self.run or {}).get("status"))

    @classmethod
    def of_answer(cls, status_code: int, body: dict[str, Any]) -> TuneResult:
        """From ``POST /v1/tune``'s answer: 200 is a cache hit, 202 a run."""
        if status_code == 200:
            return cls(cached=True, schedule=body)
        return cls(cached=False, run=body)
