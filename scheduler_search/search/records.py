"""What a search hands back: one record per trial, progress snapshots, the result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler_search.search.executor import MeasurementLike, status_of
from scheduler_search.search.stopping import StopReason
from scheduler_search.space import Choices

#: Trial status of a point rejected before measurement (``check_valid`` or planning), as
#: runs before invalid points were only counted stored them; read back when they resume.
INVALID = "invalid"
#: Trial status of a candidate whose job could not be made (code generation failed; not
#: the compiler's ``compile_error``).
CODEGEN_ERROR = "render_error"

# Where a trial came from (``TrialRecord.source``). The last three also name the
# proposal sources a preset composes (``SearchConfig.sources``).
SOURCE_WARM_START = "warm_start"
SOURCE_DESIGN = "design"
SOURCE_COST_MODEL = "cost_model"
SOURCE_SEARCH = "search"
SOURCE_LOCAL = "local"
SOURCE_MODEL = "model"
#: Sources measured before what the sampler proposes, in this order.
PRIORITY_SOURCES = (SOURCE_WARM_START, SOURCE_DESIGN, SOURCE_COST_MODEL)


@dataclass
class TrialRecord:
    """One trial as the service stores it: a measured candidate or a rejected point."""

    number: int
    choices: Choices
    status: str
    source: str = SOURCE_SEARCH
    schedule_hash: str | None = None
    latency_us: float | None = None
    predicted_us: float | None = None
    error: str = ""
    simulated: bool = False
    measurement: dict[str, Any] | None = None
    schedule: dict[str, Any] | None = field(default=None, repr=False)
    elapsed_s: float | None = None  # search time when its measurement came back

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.latency_us is not None

    @classmethod
    def measured(cls, result: MeasurementLike, **common: Any) -> TrialRecord:
        """The record of a measurement: its status, its latency where it ran (``ok``), its
        error and the measurement itself; ``common`` the candidate's fields."""
        status = status_of(result)
        ok = status == "ok" and result.latency_us is not None
        return cls(
            status=status,
            latency_us=float(result.latency_us) if ok else None,  # type: ignore[arg-type]
            error=result.error,
            simulated=bool(result.simulated),
            measurement=result.to_dict(),
            **common,
        )


@dataclass(frozen=True)
class Progress:
    """A snapshot for progress bars and event streams."""

    phase: str  # "search", "retime" or "done"
    trials_done: int
    trials_budget: int
    invalid: int
    best_latency_us: float | None
    best_schedule_hash: str | None
    elapsed_s: float
    reference_latency_us: float | None = None


def _ignore(*_: object) -> None:
    return None


def _never() -> bool:
    return False


@dataclass(frozen=True)
class SearchCallbacks:
    """What a search (exact or range) tells its caller, and asks it, while it runs.

    Args:
        on_trials: called with each batch's measured records (an invalid point is never
            a trial: it is only counted).
        on_progress: called after each batch and phase change.
        should_stop: polled between batches; true ends the search as cancelled.
    """

    on_trials: Callable[[list[TrialRecord]], None] = _ignore
    on_progress: Callable[[Progress], None] = _ignore
    should_stop: Callable[[], bool] = _never


@dataclass
class SearchResult:
    """The outcome: the winner after re-timing, the finalists, why the search stopped.

    ``reference`` is the ``reference_job``'s measurement from the final re-timing (or
    from the start, if the re-timing had no finalist); ``peers`` the ``peer_jobs``'
    measurements from the final re-timing, by name (failed ones included, as the executor
    returned them; empty if the re-timing had no finalist); ``curve`` the best-so-far
    steps as (search seconds, latency) pairs, one per improvement.
    """

    best: TrialRecord | None
    finalists: list[TrialRecord]
    trials_done: int
    invalid: int
    stop_reason: StopReason
    elapsed_s: float
    reference: MeasurementLike | None = None
    curve: list[tuple[float, float]] = field(default_factory=list)
    peers: dict[str, MeasurementLike] = field(default_factory=dict)
