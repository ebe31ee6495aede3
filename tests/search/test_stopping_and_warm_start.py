"""Budgets and stop reasons; warm-start distances, ordering and fitting to a space."""

from __future__ import annotations

import math

import pytest

from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.search import (
    Budget,
    CachedSchedule,
    Stopper,
    StopReason,
    fit_to_space,
    log_distance,
    nearest,
)
from scheduler_search.space import ScheduleSpace


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_budget_rejects_nonsense() -> None:
    for bad in ({"trials": 0}, {"seconds": 0}, {"seconds": math.inf}, {"patience": 0}):
        with pytest.raises(ValueError):
            Budget(**bad)


def test_stopper_reasons_in_order() -> None:
    clock = FakeClock()
    stopper = Stopper(Budget(trials=10, seconds=5.0, patience=3), clock=clock)
    assert stopper.reason(trials_done=0, since_improvement=0) is None
    cancelled = stopper.reason(trials_done=0, since_improvement=0, cancelled=True)
    assert cancelled is StopReason.CANCELLED
    assert stopper.reason(trials_done=10, since_improvement=0) is StopReason.TRIALS
    assert stopper.reason(trials_done=5, since_improvement=3) is StopReason.NO_IMPROVEMENT
    clock.now += 5.0
    assert stopper.reason(trials_done=5, since_improvement=0) is StopReason.SECONDS
    assert stopper.remaining_trials(7) == 3 and stopper.remaining_trials(12) == 0


def test_stopper_counts_time_spent_before_a_resume() -> None:
    clock = FakeClock()
    stopper = Stopper(Budget(trials=10, seconds=5.0), elapsed_before_s=4.5, clock=clock)
    assert stopper.elapsed_s == pytest.approx(4.5)
    clock.now += 0.5
    assert stopper.reason(trials_done=0, since_improvement=0) is StopReason.SECONDS


def test_log_distance() -> None:
    a = {"m": 4096, "n": 4096, "dtype": "float16"}
    assert log_distance(a, a) == 0
    assert log_distance(a, {**a, "m": 2048}) == pytest.approx(1.0)
    assert log_distance(a, {**a, "m": 1024, "n": 1024}) == pytest.approx(math.sqrt(8))
    assert log_distance(a, {**a, "dtype": "bfloat16"}) == pytest.approx(1.0)
    assert log_distance(a, {"m": 4096}) == math.inf


def test_nearest_orders_by_distance_then_latency() -> None:
    target = {"m": 4096, "n": 4096}
    cached = [
        CachedSchedule({"m": 1024, "n": 1024}, {"tile_m": 64}, 1.0),
        CachedSchedule({"m": 2048, "n": 4096}, {"tile_m": 128}, 9.0),
        CachedSchedule({"m": 8192, "n": 4096}, {"tile_m": 256}, 5.0),
        CachedSchedule({"k": 1}, {"tile_m": 192}, 0.1),  # another shape family: never
    ]
    picked = nearest(target, cached, limit=3)
    assert [c.choices["tile_m"] for c in picked] == [256, 128, 64]
    assert nearest(target, cached, limit=1)[0].latency_us == 5.0


def test_fit_to_space_keeps_only_what_the_space_offers() -> None:
    space = ScheduleSpace(
        parse_spec("gemm", {"m": 1024, "n": 1024, "k": 1024}), get_device("sim:h200")
    )
    fitted = fit_to_space(
        space, {"tile_m": 128, "tile_n": 999, "stages_ab": 3, "not_a_knob": 1}
    )
    assert fitted["tile_m"] == 128 and fitted["stages_ab"] == 3
    assert "tile_n" not in fitted and "not_a_knob" not in fitted
    # A knob that only applies after another choice is kept when that choice applies.
    fitted = fit_to_space(space, {"consumer_warpgroups": 2, "wg_schedule": "alternate"})
    assert fitted["wg_schedule"] == "alternate"
    fitted = fit_to_space(space, {"consumer_warpgroups": 1, "wg_schedule": "alternate"})
    assert "wg_schedule" not in fitted
