"""What the search needs of an executor and of its measurements.

The search imports no executor, GPU or database code: ``workers.Executor`` and
``workers.Measurement`` satisfy these protocols, and tests pass stand-ins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class MeasurementLike(Protocol):
    """What the driver reads of a measurement (``workers.Measurement`` has it)."""

    latency_us: float | None
    error: str
    simulated: bool

    @property
    def status(self) -> Any: ...

    def to_dict(self) -> dict[str, Any]: ...


class ExecutorLike(Protocol):
    """What the driver needs of an executor (``workers.Executor`` has it all).

    ``batch_size`` is how many candidates a round hands ``measure`` (the base class
    answers ``capacity()``); ``prepare`` receives the next batch while the current one is
    measured, when rounds overlap (the base class ignores it).
    """

    def capacity(self) -> int: ...

    def batch_size(self) -> int: ...

    def prepare(self, jobs: Sequence[Any]) -> None: ...

    def measure(self, jobs: Sequence[Any]) -> Sequence[MeasurementLike]: ...

    def retime_interleaved(
        self, jobs: Sequence[Any], rounds: int = 3
    ) -> Sequence[MeasurementLike]: ...


def status_of(measurement: MeasurementLike) -> str:
    """A measurement's status as text (an enum's value, or the status itself)."""
    return str(getattr(measurement.status, "value", measurement.status))


def ok_latency(measurement: MeasurementLike | None) -> float | None:
    """The latency of a successful measurement, else ``None``."""
    if measurement is None or status_of(measurement) != "ok":
        return None
    return measurement.latency_us
