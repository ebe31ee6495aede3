"""The cut of a range run's measurements into buckets, with estimates between them.

A range run measures its candidates at a few dozen sizes; between them a kernel's time
jumps where its tiles spill into another wave, which a cut over the measured sizes alone
cannot see (a table cut at m = 213 and 512 once served m = 260 and 522 at half of
cuBLAS's speed with the kernel best at both samples). :class:`RangeCut` therefore cuts
over a denser grid:

1. **Contenders**: the candidates within :data:`CONTENDER_SLACK` of the best at some
   measured size (:func:`near_best`); the others could not win a bucket and get no
   estimates (each one plans and predicts a kernel).
2. **Estimates**: at ``estimated_sizes`` log-spaced sizes (and sizes a refining round
   measured for other candidates), a contender's time is its nearest measurement scaled
   by the cost model's ratio between the two sizes.
3. **Cut**: :func:`~scheduler_search.search.buckets.partition` over the grid.
4. **Steps**: each bucket's kernel is asked where inside the bucket or its neighbours
   its predicted time jumps by :data:`JUMP` from one size to the next (``k * tile`` to
   ``k * tile + 1``);
   those sizes join the grid and the range is cut again, until the buckets hold no step
   the cut has not looked at (at most :data:`JUMP_ROUNDS` times).

The measurements and predictions come from the search (callables), so the cut can be
redone offline from stored measurements.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Protocol

from scheduler_search.ops.ranges import SizeRange
from scheduler_search.search.buckets import BucketTable, partition
from scheduler_search.sprogram import SProgram

logger = logging.getLogger(__name__)

#: A candidate this much slower than the best at every sampled size wins no bucket: its
#: time between the samples is not estimated.
CONTENDER_SLACK = 1.25

#: A kernel whose predicted time grows by this factor from one size to the next has its
#: tiles spill into another wave there; the cut is redone with such steps added to its
#: sizes until its buckets hold no step it has not seen (at most ``JUMP_ROUNDS`` times).
#: At 1.2 the step of a 3200-row weight's 128 x 256 tiles from five waves to six
#: (predicted 1.196x at m = 6401) went unseen, and m = 6493 ran at 0.85 of cuBLAS's
#: speed (H200, 2026-12-04); steps between later waves are smaller still.
#: A cut that stopped after two rounds once let a 208-wide m tile (four tiles a wave)
#: serve m = 833..839 in a second wave at 0.54 of cuBLAS: its bucket had ended below 832
#: when its steps were looked for, and grew past it in the last cut.
JUMP = 1.1
JUMP_ROUNDS = 8
#: Runs of at most this many steps are looked at step by step rather than halved.
STEPS_SCANNED = 4


class Candidate(Protocol):
    """What the cut reads of a candidate (the search's ``RangeCandidate``)."""

    @property
    def sprogram(self) -> SProgram: ...


class CutKnobs(Protocol):
    """The knobs of the cut (the search's ``RangeConfig`` has them)."""

    @property
    def max_buckets(self) -> int: ...

    @property
    def tolerance(self) -> float: ...

    @property
    def size_tolerance(self) -> float: ...

    @property
    def estimated_sizes(self) -> int: ...


#: ``latency(candidate, size)``: a measured latency, or an estimate, or None.
Latency = Callable[[Candidate, int], "float | None"]


def anchor_sizes(size_range: SizeRange, count: int) -> list[int]:
    """``count`` sizes spread evenly in log space over the range, both ends included
    (listed sizes: the nearest listed), distinct and sorted."""
    low, high = size_range.low, size_range.high
    if count <= 1 or low == high:
        return sorted({high} if count <= 1 else {low, high})
    found = set()
    for i in range(count):
        size = math.exp(math.log(low) + (math.log(high) - math.log(low)) * i / (count - 1))
        if size_range.listed is not None:
            found.add(min(size_range.listed,
                          key=lambda s: (abs(math.log(s) - math.log(size)), s)))
        else:
            found.add(min(high, max(low, round(size))))
    return sorted(found)


def near_best(rows: Sequence[Sequence[float | None]]) -> list[set[int]]:
    """For each column (size), the indices of the rows (candidates) within
    :data:`CONTENDER_SLACK` of the column's best; empty where no row has a value."""
    found: list[set[int]] = []
    for column in range(len(rows[0]) if rows else 0):
        timed = [(row[column], index) for index, row in enumerate(rows)
                 if row[column] is not None]
        best = min((us for us, _ in timed), default=None)
        found.append(set() if best is None else
                     {index for us, index in timed if us <= CONTENDER_SLACK * best})
    return found


def scaled_estimate(size: int, measured: dict[int, float],
                    predict: Callable[[int], float | None]) -> float | None:
    """A latency at ``size`` from the nearest measured size (in log; the smaller on a tie),
    scaled by the cost model's ratio ``predict(size) / predict(nearest)``; None where
    either prediction is missing."""
    near = min(measured, key=lambda s: (abs(math.log(s / size)), s))
    here, there = predict(size), predict(near)
    if here is None or there is None or there <= 0:
        return None
    return measured[near] * here / there


def _best_at(sizes: Sequence[int], rows: Sequence[Sequence[float | None]]
             ) -> dict[int, float]:
    """The least measured latency at each size some row has one for."""
    found: dict[int, float] = {}
    for position, size in enumerate(sizes):
        timed = [row[position] for row in rows if row[position] is not None]
        if timed:
            found[size] = min(timed)
    return found


class RangeCut:
    """Cuts ``size_range`` of the primary dimension ``dim`` (see the module docstring).

    Args:
        size_range: the range's ends.
        dim: the dimension a candidate's tile is looked up by (its steps).
        config: ``max_buckets``, ``tolerance``, ``size_tolerance`` and
            ``estimated_sizes``.
        latency: a candidate's measured latency at a size (None: not measured, or
            failed).
        attempted: whether a candidate was measured at a size (successfully or not).
        predict: the cost model's latency of a candidate at a size (None: none).
    """

    def __init__(self, size_range: SizeRange, dim: str, config: CutKnobs,
                 latency: Latency, attempted: Callable[[Candidate, int], bool],
                 predict: Latency) -> None:
        self.size_range, self.dim, self.config = size_range, dim, config
        self.latency, self.attempted, self.predict = latency, attempted, predict
        #: The least measured latency at each size of the cut in progress.
        self._best_at: dict[int, float] = {}

    def cut(self, candidates: list[Candidate], sizes: list[int]
            ) -> tuple[BucketTable | None, list[int]]:
        """The bucket table over the sizes some candidate ran at (None: none did), and
        those sizes."""
        measured_rows = [[self.latency(c, s) for s in sizes] for c in candidates]
        contenders = set().union(*near_best(measured_rows))
        self._best_at = _best_at(sizes, measured_rows)
        rows = [self._filled(c, sizes) if position in contenders else measured_rows[position]
                for position, c in enumerate(candidates)]
        measured = [i for i, _ in enumerate(sizes) if any(row[i] is not None for row in rows)]
        if not measured:
            return None, []
        if len(measured) < len(sizes):
            logger.warning("range search: no candidate ran at %s; buckets cut over the rest",
                           [sizes[i] for i in range(len(sizes)) if i not in measured])
        kept_sizes = [sizes[i] for i in measured]
        kept_rows = [[row[i] for i in measured] for row in rows]
        steps: set[int] = set()
        # Without estimates between samples there is nowhere to put a step's sizes.
        rounds = JUMP_ROUNDS if self.config.estimated_sizes > 0 else 0
        for round_ in range(1 + rounds):
            grid, kept = self._with_estimates(candidates, kept_sizes, kept_rows, steps)
            table = partition(grid, kept, low=self.size_range.low, high=self.size_range.high,
                              max_buckets=self.config.max_buckets,
                              tolerance=self.config.tolerance,
                              size_tolerance=self.config.size_tolerance)
            found = self.jumps(table, candidates) - steps if rounds else set()
            if not found:
                break
            if round_ == rounds:
                logger.warning("range search: the cut still spans kernel steps at %s after "
                               "%d rounds", sorted(found), rounds)
            steps |= found
        return table, kept_sizes

    def jumps(self, table: BucketTable, candidates: list[Candidate]) -> set[int]:
        """Sizes on both sides of each step inside a bucket or its neighbours where the
        cost model has the bucket's kernel's time jump by ``JUMP`` or more: one more tile
        along the range's dimension (``k * tile``, ``k * tile + 1``) that spills into
        another wave. Estimates on a log-spaced grid step over them (a 104-wide m tile
        served m = 442 in a second wave at 0.56 of cuBLAS, its bucket cut at 448 between
        samples at 411 and 512); and a step in the next bucket is where this kernel's
        bucket should end (a 192 x 192 tile that holds a 1920-row weight in one wave up
        to m = 2496 had its bucket end at 2358, between estimates, and m = 2484 ran at
        0.82 of cuBLAS's speed in another kernel's two waves, H200 2026-12-04)."""
        found: set[int] = set()
        buckets = table.buckets
        for index, bucket in enumerate(buckets):
            candidate = candidates[bucket.choice]
            tile = candidate.sprogram.tile.get(self.dim)
            if not tile:
                continue
            low = buckets[index - 1].low if index > 0 else bucket.low
            high = buckets[index + 1].high if index + 1 < len(buckets) else bucket.high
            found |= self._steps_in(candidate, range(-(-low // tile) * tile, high, tile))
        return found

    def _steps_in(self, candidate: Candidate, steps: range) -> set[int]:
        """The sizes either side of each of ``steps`` (sizes ``k * tile``) where the
        candidate's predicted time jumps by ``JUMP`` to the next size.

        A kernel's predicted time does not fall as the size grows, so a run of steps over
        which it grows by less than ``JUMP`` from the first size to one past the last holds
        no such jump: only runs that grow more are halved, and the predictions are a few
        per jump and halving rather than two per step (a 16-row m tile has 512 steps up
        to 8192, 4,000 predictions a cut; each plans and estimates a kernel). A run whose
        prediction falls, or is missing at an end, is looked at step by step."""
        if not steps:
            return set()
        first, last = self.predict(candidate, steps[0]), self.predict(candidate, steps[-1] + 1)
        if first and last and first <= last < JUMP * first:
            return set()
        if len(steps) <= STEPS_SCANNED or not (first and last and first <= last):
            found: set[int] = set()
            for step in steps:
                before, after = self.predict(candidate, step), self.predict(candidate, step + 1)
                if before and after and after >= JUMP * before:
                    found |= {step, step + 1}
            return found
        half = len(steps) // 2
        return self._steps_in(candidate, steps[:half]) | self._steps_in(candidate, steps[half:])

    def _filled(self, candidate: Candidate, sizes: list[int]) -> list[float | None]:
        """``candidate``'s latencies at ``sizes``: measured, else (a size the refining
        rounds left to the contenders) estimated from its nearest measurement; None where
        it failed or has no measurement to scale."""
        measured = {s: us for s in sizes if (us := self.latency(candidate, s)) is not None}
        return [measured[s] if s in measured
                else None if self.attempted(candidate, s) or not measured
                else self._scaled(candidate, s, measured) for s in sizes]

    def _with_estimates(self, candidates: list[Candidate], sizes: list[int],
                        rows: list[list[float | None]],
                        steps: frozenset[int] | set[int] = frozenset(),
                        ) -> tuple[list[int], list[list[float | None]]]:
        """The sampled ``sizes`` and ``config.estimated_sizes`` more between them, with
        each contender's latencies there (:meth:`_scaled`); the others' only at the
        sampled sizes. A grid size no candidate has a latency for is left out. ``steps``
        are more sizes to estimate at (either side of a kernel's step into another wave:
        :meth:`jumps`)."""
        extra = (set(anchor_sizes(self.size_range, self.config.estimated_sizes)) | steps) \
            - set(sizes)
        if self.config.estimated_sizes <= 0 or not extra:
            return sizes, rows
        grid = sorted(set(sizes) | extra)
        contenders = set().union(*near_best(rows))
        table = []
        for position, (candidate, row) in enumerate(zip(candidates, rows, strict=True)):
            measured = {s: us for s, us in zip(sizes, row, strict=True) if us is not None}
            table.append([measured.get(s) if s in sizes or position not in contenders
                          else self._scaled(candidate, s, measured) for s in grid])
        kept = [i for i, s in enumerate(grid)
                if s in sizes or any(r[i] is not None for r in table)]
        return [grid[i] for i in kept], [[r[i] for i in kept] for r in table]

    def _scaled(self, candidate: Candidate, size: int,
                measured: dict[int, float]) -> float | None:
        """``candidate``'s latency at ``size`` from its nearest measurement, scaled by the
        estimator's ratio; None where the estimator has no prediction, or where the
        candidate is out of the running near ``size`` (:meth:`_in_the_running`)."""
        if not self._in_the_running(size, measured):
            return None
        return scaled_estimate(size, measured, lambda s: self.predict(candidate, s))

    def _in_the_running(self, size: int, measured: dict[int, float]) -> bool:
        """Whether the candidate is within :data:`CONTENDER_SLACK` of the best at the
        nearest size below or above ``size`` where it has a time and some candidate was
        measured: the refining rounds measure such contenders between two sizes and
        no others, so an estimate of any other is a wrong predicted ratio away from
        winning where its rivals were measured and it was not (a swapped tile over 64
        weight rows, 1.46x and 1.61x the best at m = 8685 and 16384 of a 1920 x 1088
        weight, was served at m = 9778..12609 on its estimate and ran m = 10090 at 0.61
        of cuBLAS's speed, H200 2026-12-04)."""
        timed = [s for s in self._best_at if s in measured]
        below = max((s for s in timed if s <= size), default=None)
        above = min((s for s in timed if s >= size), default=None)
        sides = [s for s in (below, above) if s is not None]
        return not sides or any(measured[s] <= CONTENDER_SLACK * self._best_at[s]
                                for s in sides)


__all__ = ["CONTENDER_SLACK", "JUMP", "JUMP_ROUNDS", "RangeCut", "anchor_sizes", "near_best",
           "scaled_estimate"]
