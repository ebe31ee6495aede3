"""When a search stops: trial budget, time budget, no improvement, exhaustion, cancel."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class StopReason(StrEnum):
    """Why a search ended.

    Attributes:
        TRIALS: the trial budget (measured candidates) is spent.
        SECONDS: the time budget is spent.
        NO_IMPROVEMENT: ``patience`` measured candidates in a row did not beat the best.
        EXHAUSTED: the sampler kept proposing invalid or already measured schedules.
        INDISTINGUISHABLE: rounds in a row measured only latencies already seen (a
            deterministic device, such as the simulated one, cannot tell the rest apart).
        CANCELLED: the caller asked the search to stop.
    """

    TRIALS = "trials"
    SECONDS = "seconds"
    NO_IMPROVEMENT = "no_improvement"
    EXHAUSTED = "exhausted"
    INDISTINGUISHABLE = "indistinguishable"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Budget:
    """How much a search may spend.

    Args:
        trials: candidates to measure (invalid points and duplicates do not count).
        seconds: wall-clock limit of the search loop (re-timing comes after it).
        patience: stop after this many measured candidates in a row without a new best
            (``None``: never).
    """

    trials: int = 64
    seconds: float | None = None
    patience: int | None = None

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise ValueError("trials must be >= 1")
        if self.seconds is not None and not (self.seconds > 0 and math.isfinite(self.seconds)):
            raise ValueError("seconds must be a positive number")
        if self.patience is not None and self.patience < 1:
            raise ValueError("patience must be >= 1")


class Stopper:
    """Tracks a search against its :class:`Budget`.

    ``elapsed_before_s`` is time a resumed search already spent before this process.
    """

    def __init__(
        self,
        budget: Budget,
        *,
        elapsed_before_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget = budget
        self._clock = clock
        self._started = clock() - elapsed_before_s

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._started

    def remaining_trials(self, trials_done: int) -> int:
        return max(0, self.budget.trials - trials_done)

    def reason(
        self, *, trials_done: int, since_improvement: int, cancelled: bool = False
    ) -> StopReason | None:
        """Why the search must stop now, or ``None`` to go on."""
        if cancelled:
            return StopReason.CANCELLED
        if trials_done >= self.budget.trials:
            return StopReason.TRIALS
        if self.budget.seconds is not None and self.elapsed_s >= self.budget.seconds:
            return StopReason.SECONDS
        if self.budget.patience is not None and since_improvement >= self.budget.patience:
            return StopReason.NO_IMPROVEMENT
        return None
