"""Warm start: the best schedules of the nearest cached shapes seed a new search.

The service looks up the cached best schedules of the same operator on the same device
(``CachedSchedule``); :func:`nearest` orders them by the log-distance of their shapes to
the new workload, and :func:`fit_to_space` keeps of each schedule's choices only the values
that the new space offers, so the enqueued trial fixes what transfers and lets the sampler
pick the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from scheduler_search.space import Choices, ScheduleSpace

#: Distance added for each non-numeric parameter that differs (dtype, layout): a schedule
#: of another dtype still says something about tiles, less than one of the same dtype.
MISMATCH_PENALTY = 1.0


@dataclass(frozen=True)
class CachedSchedule:
    """A cached best schedule: the workload's params, the search choices, the latency."""

    params: dict[str, Any]
    choices: Choices
    latency_us: float


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def log_distance(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Euclidean distance of two parameter sets over log2 of their numeric values.

    Non-numeric values that differ add :data:`MISMATCH_PENALTY`; parameter sets with
    different keys are infinitely far apart.
    """
    if set(a) != set(b):
        return math.inf
    squared = 0.0
    for key, left in a.items():
        right = b[key]
        if _is_number(left) and _is_number(right):
            squared += (math.log2(left) - math.log2(right)) ** 2
        elif left != right:
            squared += MISMATCH_PENALTY**2
    return math.sqrt(squared)


def nearest(
    params: dict[str, Any], cached: Iterable[CachedSchedule], limit: int = 4
) -> list[CachedSchedule]:
    """The ``limit`` cached schedules nearest to ``params`` (ties: the faster first)."""
    scored = [(log_distance(params, c.params), c.latency_us, i, c) for i, c in enumerate(cached)]
    scored = [s for s in scored if math.isfinite(s[0])]
    scored.sort(key=lambda s: s[:3])
    return [s[3] for s in scored[:limit]]


def fit_to_space(space: ScheduleSpace, choices: Choices) -> Choices:
    """The subset of ``choices`` that ``space`` can fix, walked in define-by-run order."""
    fitted: Choices = {}
    walked: Choices = {}
    for knob in space.knobs:
        if not knob.applies(walked):
            continue
        value = choices.get(knob.name, knob.default)
        if value in knob.options:
            fitted[knob.name] = value
            walked[knob.name] = value
        else:
            walked[knob.name] = knob.options[0]  # stands in for the sampler's pick
    return fitted
