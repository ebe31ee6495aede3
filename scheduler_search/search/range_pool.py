"""A range run's pool of candidates: the hand-written designs and their stream-K
variants, then the cost model's best distinct structures at anchor sizes across the range,
each planned at the range's high end with its run-time dimensions and kept if code
generation can lower it (see :mod:`scheduler_search.search.range_search`, step 2)."""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from scheduler_search.hardware.model import Device
from scheduler_search.ops import OperatorSpec, RangeSpec
from scheduler_search.search.proposals.cost_model import _RandomTrial
from scheduler_search.search.proposals.neighbours import neighbours
from scheduler_search.search.range_cut import anchor_sizes
from scheduler_search.search.records import SOURCE_COST_MODEL, SOURCE_DESIGN
from scheduler_search.search.seeding import stream_k_twins, structure_of
from scheduler_search.space import Choices, Feasibility, ScheduleSpace, rank_top
from scheduler_search.sprogram import SProgram

if TYPE_CHECKING:
    from scheduler_search.search.range_search import RangeConfig

logger = logging.getLogger(__name__)

#: ``estimator(sprogram, spec)``: the predicted latency of ``sprogram`` on ``spec``.
Estimator = Callable[[SProgram, OperatorSpec], float]


@dataclass(frozen=True)
class RangeCandidate:
    """A schedule of the pool: planned at the range's high end with ``runtime_dims``;
    ``anchor`` is the size it was ranked at (None: a hand-written design), with its
    prediction there."""

    index: int
    sprogram: SProgram
    source: str
    anchor: int | None = None
    predicted_us: float | None = None

    @property
    def choices(self) -> Choices:
        return self.sprogram.choices


class RangePool:
    """Plans the pool of a range search over ``range_spec`` on ``device``; ``invalid``
    counts the schedules refused on the way (not valid at the high end, or not lowered
    with the run-time dimensions ``dims``).

    Args:
        config: the search's knobs (``anchors``, ``samples_per_anchor``, ``climb_rounds``,
            ``climb_top``, ``exhaustive``, ``seed``).
        fixed: knobs held in every space.
        designs: hand-written designs' choices, offered first (with their stream-K twins
            where they name no share).
        feasible: the code generator's check (None: every valid schedule).
        estimator: predicted latency, ranking each anchor's schedules.
    """

    def __init__(self, range_spec: RangeSpec, device: Device, config: RangeConfig,
                 dims: tuple[str, ...], fixed: Choices, designs: list[Choices],
                 feasible: Feasibility | None, estimator: Estimator) -> None:
        self.range_spec, self.device, self.config = range_spec, device, config
        self.dims, self.fixed, self.designs = dims, fixed, designs
        self.feasible, self.estimator = feasible, estimator
        self.invalid = 0

    def plan(self, count: int) -> list[RangeCandidate]:
        """Up to ``count`` candidates: the designs and the stream-K variants of those that
        do not name their share, then the anchors' best in turns, each planned at the high
        end with the run-time dimension and kept if feasible (the rest counted in
        ``invalid``)."""
        high = self.range_spec.at(self.range_spec.axis.high)
        high_space = ScheduleSpace(self.range_spec.exact(high), self.device, None, self.fixed)
        pool: list[RangeCandidate] = []
        seen: set[str] = set()

        def offer(choices: Choices, source: str, anchor: int | None,
                  predicted: float | None) -> bool:
            """Add ``choices`` to the pool; whether they were added."""
            if len(pool) >= count:
                return False
            sprogram = self._runtime_candidate(high_space, choices)
            if sprogram is None or sprogram.hash in seen:
                return False
            seen.add(sprogram.hash)
            pool.append(RangeCandidate(len(pool), sprogram, source, anchor, predicted))
            return True

        for design in self.designs:
            # A design that names its stream-K share is taken as it is.
            twins = [] if "stream_k" in design else self._stream_k_variants(high_space, design)
            for choices in [{**design, **self.fixed}, *twins]:
                offer(choices, SOURCE_DESIGN, None, None)
        # Each anchor is ranked when the pool first takes from it (seconds per anchor):
        # the order is the same however wide the pool, so a wider one starts with it.
        ranked = [self._ranked_lazily(size)
                  for size in anchor_sizes(self.range_spec.axis, self.config.anchors)]
        # A turn goes on until its anchor adds a candidate: a schedule valid at a small
        # anchor may not be at the high end (stream-K's shares depend on the tile count).
        while len(pool) < count and ranked:
            for queue in list(ranked):
                for anchor, predicted, choices in queue:
                    if offer(choices, SOURCE_COST_MODEL, anchor, predicted):
                        break
                else:
                    ranked.remove(queue)
                if len(pool) >= count:
                    break
        return pool

    def _ranked_lazily(self, size: int) -> Iterator[tuple[int, float, Choices]]:
        yield from self._rank_anchor(size)

    def _stream_k_variants(self, space: ScheduleSpace, design: Choices) -> list[Choices]:
        try:
            return stream_k_twins(space, {**design, **self.fixed})
        except ValueError as exc:  # a design this space cannot hold
            logger.debug("no stream-K variants of a design: %s", exc)
            return []

    def _runtime_candidate(self, space: ScheduleSpace, choices: Choices) -> SProgram | None:
        """``choices`` planned at the high end with the run-time dimensions, or None (not
        valid there, or refused by the feasibility check: counted)."""
        try:
            sprogram, validity = space.build(choices)
        except ValueError:
            self.invalid += 1
            return None
        if not validity.ok:
            self.invalid += 1
            return None
        runtime = replace(sprogram, runtime_dims=self.dims)
        if self.feasible is not None and self.feasible(runtime):
            self.invalid += 1
            return None
        return runtime

    def _rank_anchor(self, size: int) -> list[tuple[int, float, Choices]]:
        """The best schedule of each distinct structure at ``size`` by prediction, best
        first: ``(size, predicted_us, choices)``."""
        spec = self.range_spec.exact(self.range_spec.at(size))
        feasible = _RuntimeCheck(self.feasible, self.dims) if self.feasible else None
        space = ScheduleSpace(spec, self.device, feasible, self.fixed)
        scored: dict[str, tuple[float, SProgram]] = {}

        def score(sprogram: SProgram) -> None:
            if sprogram.hash in scored:
                return
            try:
                predicted = float(self.estimator(sprogram, spec))
            except ValueError as exc:
                logger.debug("no prediction of %s: %s", sprogram.hash[:12], exc)
                return
            if math.isfinite(predicted):
                scored[sprogram.hash] = (predicted, sprogram)

        if self.config.exhaustive:
            candidates, _ = space.enumerate()
            for item in rank_top(space, candidates, self.config.samples_per_anchor):
                score(item.sprogram)
        else:
            rng = random.Random(f"pipetune-range:{self.config.seed}:{size}")
            for sample in self._samples(space, rng):
                score(sample)
            for _ in range(self.config.climb_rounds):
                best = sorted(scored.values(), key=lambda item: item[0])
                for _, sprogram in best[: self.config.climb_top]:
                    for choices in neighbours(space, sprogram.choices):
                        built = _valid(space, choices)
                        if built is not None:
                            score(built)
        ranked: list[tuple[int, float, Choices]] = []
        structures: set[tuple] = set()
        for predicted, sprogram in sorted(scored.values(), key=lambda i: (i[0], i[1].hash)):
            structure = structure_of(sprogram.choices)
            if structure not in structures:
                structures.add(structure)
                ranked.append((size, predicted, dict(sprogram.choices)))
        return ranked

    def _samples(self, space: ScheduleSpace, rng: random.Random) -> Iterator[SProgram]:
        """Up to ``samples_per_anchor`` random valid schedules (at most 20 draws each)."""
        trial = _RandomTrial(rng)
        found = 0
        for _ in range(20 * self.config.samples_per_anchor):
            if found >= self.config.samples_per_anchor:
                return
            built = _valid(space, space.suggest(trial))
            if built is not None:
                found += 1
                yield built


@dataclass(frozen=True)
class _RuntimeCheck:
    """A feasibility check asked of each schedule as it would be with ``dims`` taken at
    run time (an anchor's space holds only schedules that can become candidates); the
    check's ``tile_problem`` passed through."""

    feasible: Feasibility
    dims: tuple[str, ...]

    def __call__(self, sprogram: SProgram) -> str | None:
        return self.feasible(replace(sprogram, runtime_dims=self.dims))

    def tile_problem(self, spec: OperatorSpec, tile: dict[str, int]) -> str | None:
        screen = getattr(self.feasible, "tile_problem", None)
        return screen(spec, tile) if screen is not None else None


def _valid(space: ScheduleSpace, choices: Choices) -> SProgram | None:
    """The sProgram of ``choices`` if it is valid (and feasible) in ``space``."""
    try:
        sprogram, validity = space.build(choices)
    except ValueError:
        return None
    return sprogram if validity.ok else None


__all__ = ["Estimator", "RangeCandidate", "RangePool"]
