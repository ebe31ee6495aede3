"""Stand-ins for the search driver's collaborators: a tiny space, an executor that
records what it measured, plain measurements."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler_search.space import Knob


@dataclass
class FakeStatus:
    value: str


@dataclass
class FakeMeasurement:
    status: FakeStatus
    latency_us: float | None
    error: str = ""
    simulated: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "latency_us": self.latency_us}


@dataclass(frozen=True)
class FakeProgram:
    choices: tuple[tuple[str, Any], ...]

    @property
    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.choices).encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return dict(self.choices)


@dataclass(frozen=True)
class FakeValidity:
    ok: bool
    reason: str | None = None
    rejections: tuple[Any, ...] = ()


class TinySpace:
    """``a`` x ``b`` points; points with ``a + b > limit`` are invalid."""

    def __init__(self, size: int = 3, limit: int = 10**9) -> None:
        options = tuple(range(1, size + 1))
        self.knobs = [Knob("a", options), Knob("b", options)]
        self.limit = limit
        self.spec = None
        self.device = None

    def suggest(self, trial: Any) -> dict[str, Any]:
        return {k.name: trial.suggest_categorical(k.name, list(k.options)) for k in self.knobs}

    def build(self, choices: dict[str, Any]) -> tuple[FakeProgram, FakeValidity]:
        program = FakeProgram(tuple(sorted(choices.items())))
        if choices["a"] + choices["b"] > self.limit:
            return program, FakeValidity(False, "too_big")
        return program, FakeValidity(True)


def latency_of(program: Any) -> float:
    """A bowl with its minimum at a = b = 2 (for TinySpace programs)."""
    values = dict(program.choices) if isinstance(program, FakeProgram) else program.choices
    return 10.0 + (values["a"] - 2) ** 2 + (values["b"] - 2) ** 2


@dataclass
class RecordingExecutor:
    """Measures with ``latency`` and keeps every batch it was given."""

    width: int = 4
    latency: Callable[[Any], float] = latency_of
    fail: Callable[[Any], bool] = lambda program: False
    batches: list[list[Any]] = field(default_factory=list)
    retimed: list[list[Any]] = field(default_factory=list)

    def capacity(self) -> int:
        return self.width

    def batch_size(self) -> int:
        return self.width

    def prepare(self, jobs: Sequence[Any]) -> None:
        del jobs  # nothing to compile ahead

    def _one(self, program: Any) -> FakeMeasurement:
        if self.fail(program):
            return FakeMeasurement(FakeStatus("launch_error"), None, error="boom")
        return FakeMeasurement(FakeStatus("ok"), self.latency(program))

    def measure(self, jobs: Sequence[Any]) -> list[FakeMeasurement]:
        self.batches.append(list(jobs))
        return [self._one(job) for job in jobs]

    def retime_interleaved(self, jobs: Sequence[Any], rounds: int = 3) -> list[FakeMeasurement]:
        self.retimed.append(list(jobs))
        return [self._one(job) for job in jobs]

    @property
    def measured(self) -> list[Any]:
        return [job for batch in self.batches for job in batch]
