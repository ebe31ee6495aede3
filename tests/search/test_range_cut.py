"""The cut of a range run's measurements: estimates between samples come only from a
candidate's measurements where it was in the running."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from scheduler_search.ops.ranges import SizeRange
from scheduler_search.search.range_cut import RangeCut


@dataclass(frozen=True)
class Knobs:
    max_buckets: int = 8
    tolerance: float = 0.01
    size_tolerance: float = 0.05
    estimated_sizes: int = 0


@dataclass(frozen=True)
class Fake:
    """A candidate: its measurements and the cost model's predictions by size (or
    ``wave_us`` a wave of ``tile``-row tiles, four tiles a wave: steps at every fourth
    tile)."""

    name: str
    measured: dict[int, float]
    predicted: dict[int, float] = field(default_factory=dict)
    tile: int = 0
    wave_us: float = 0.0

    @property
    def sprogram(self) -> SimpleNamespace:
        return SimpleNamespace(tile={"m": self.tile} if self.tile else {})

    def predict(self, size: int) -> float:
        if self.tile:
            tiles = math.ceil(size / self.tile)
            return self.wave_us * math.ceil(tiles / 4)
        # Unlisted sizes: linear in the size (what the estimates between samples scale by).
        return self.predicted.get(size, float(size))


def _cut(candidates: list[Fake], sizes: list[int], estimated_sizes: int) -> RangeCut:
    def predict(candidate: Fake, size: int) -> float:
        return candidate.predict(size)

    return RangeCut(SizeRange(sizes[0], sizes[-1]), "m", Knobs(estimated_sizes=estimated_sizes),
                    lambda c, s: c.measured.get(s), lambda c, s: s in c.measured, predict)


@pytest.mark.parametrize("estimated_sizes", [0, 8])
def test_a_candidate_out_of_the_running_is_not_served_on_its_estimate(
        estimated_sizes: int) -> None:
    """The small-size winner is 1.6x the best at the samples either side of a size the
    refining rounds measured for its rivals alone; a predicted ratio that makes it the
    fastest there (the cost model misjudging it) must not win it that size."""
    small = Fake("small", {100: 10.0, 1000: 48.0, 4000: 190.0},
                 predicted={1000: 100.0, 2000: 40.0, 4000: 400.0})
    large = Fake("large", {100: 14.0, 1000: 30.0, 2000: 60.0, 4000: 120.0})
    sizes = [100, 1000, 2000, 4000]
    table, kept = _cut([small, large], sizes, estimated_sizes).cut([small, large], sizes)

    assert table is not None and kept == sizes
    served = {s: [small, large][b.choice].name for s in sizes for b in table.buckets
              if b.low <= s <= b.high}
    assert served == {100: "small", 1000: "large", 2000: "large", 4000: "large"}


def test_a_contender_is_still_estimated_where_it_was_not_measured() -> None:
    """Within the slack at its nearest measurement, a candidate's estimate stands: the
    cut serves a refined size with it when the estimate is the best there."""
    first = Fake("first", {100: 10.0, 1000: 31.0, 4000: 125.0},
                 predicted={1000: 100.0, 2000: 150.0, 4000: 400.0})
    second = Fake("second", {100: 12.0, 1000: 30.0, 2000: 60.0, 4000: 120.0})
    sizes = [100, 1000, 2000, 4000]
    table, _ = _cut([first, second], sizes, 0).cut([first, second], sizes)

    assert table is not None
    at_2000 = next(b for b in table.buckets if b.low <= 2000 <= b.high)
    # 31 x 150 / 100 = 46.5 us estimated, against 60 measured for the other.
    assert [first, second][at_2000.choice].name == "first"


def test_a_bucket_ends_at_its_kernels_step_in_the_next_bucket() -> None:
    """A kernel holds the range in one wave up to m = 2400 (four 600-row tiles) and in
    two past it; the other kernel takes the same time everywhere. Between samples at
    2000 and 4000 the log-spaced estimates put the boundary at the geometric middle of
    2000 and 2520, below the step, and serve m = 2300 with the slower kernel; the step
    the first kernel takes inside the next bucket is looked at, and its bucket ends there."""
    waves = Fake("waves", {1000: 10.0, 2000: 10.0, 4000: 20.0}, tile=600, wave_us=10.0)
    flat = Fake("flat", {1000: 12.0, 2000: 12.0, 4000: 12.0}, predicted={
        s: 12.0 for s in range(1000, 4001)})
    sizes = [1000, 2000, 4000]
    table, _ = _cut([waves, flat], sizes, 4).cut([waves, flat], sizes)

    assert table is not None
    served = {m: [waves, flat][b.choice].name for m in (2300, 2400, 2401, 2500)
              for b in table.buckets if b.low <= m <= b.high}
    assert served == {2300: "waves", 2400: "waves", 2401: "flat", 2500: "flat"}


def _scanned(cut: RangeCut, candidate: object, steps: range) -> set[int]:
    """Every step's jump, found one step at a time (what the halving must agree with)."""
    found: set[int] = set()
    for step in steps:
        before, after = cut.predict(candidate, step), cut.predict(candidate, step + 1)
        if before and after and after >= 1.1 * before:
            found |= {step, step + 1}
    return found


def test_steps_are_found_by_halving_runs_that_grow_past_a_jump() -> None:
    """A 16-row tile over m up to 8192 (512 steps; a wave of 132 tiles, and time that also
    grows with m): halving the runs whose predicted time grows by a jump or more finds
    the steps a step-by-step scan finds, with a small part of its predictions; where the
    prediction falls inside a run, the run is scanned step by step and its jump found."""
    calls: list[int] = []

    def smooth_waves(size: int) -> float:
        calls.append(size)
        return 10.0 * math.ceil(math.ceil(size / 16) / 132) + 0.001 * size

    candidate = SimpleNamespace(sprogram=SimpleNamespace(tile={"m": 16}))
    cut = RangeCut(SizeRange(1, 8192), "m", Knobs(estimated_sizes=8), lambda c, s: None,
                   lambda c, s: False, lambda c, s: smooth_waves(s))
    steps = range(16, 8192, 16)
    found = cut._steps_in(candidate, steps)
    halving_calls = len(calls)
    assert found == _scanned(cut, candidate, steps) == {2112, 2113, 4224, 4225, 6336, 6337}
    assert halving_calls < (len(calls) - halving_calls) / 4  # the scan predicted twice a step

    def dip(size: int) -> float:  # faster past 3000, then a step at 4000 back above
        return 5.0 if 3000 < size <= 4000 else 8.0 if size <= 3000 else 9.0

    falling = RangeCut(SizeRange(1, 8192), "m", Knobs(estimated_sizes=8), lambda c, s: None,
                       lambda c, s: False, lambda c, s: dip(s))
    assert falling._steps_in(candidate, steps) == {4000, 4001}
