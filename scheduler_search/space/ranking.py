"""Rank a space by the cost model without simulating all of it.

Every valid candidate gets the cost model's cheap lower bound; candidates are simulated
in order of that bound, and the walk stops once the bound of the next one cannot beat
the current top N (branch and bound: the result is the exact top N of the cost model,
ties going to the earlier candidate, so shards of a space ranked apart merge into the
whole space's: ``scheduler_search.search.seeding.ranked_pool``). The tile order over the
grid (raster knobs) is first chosen per tile shape by DRAM traffic (:func:`select_top`),
then searched exhaustively for the finalists (:func:`finalize`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, replace

from scheduler_search.cost_model import Estimate, TimingModel, estimate, lower_bound_us
from scheduler_search.cost_model.grid import dram_bytes
from scheduler_search.hardware.model import Device
from scheduler_search.ops import OperatorSpec
from scheduler_search.space.space import Candidate, ScheduleSpace
from scheduler_search.sprogram import Raster, SProgram


@dataclass(frozen=True)
class Ranked:
    """A schedule with its cost-model estimate."""

    sprogram: SProgram
    estimate: Estimate


def _least_traffic_raster(
    spec: OperatorSpec, device: Device, tile: tuple, rasters: tuple[Raster, ...]
) -> Raster:
    graph = spec.graph(dict(tile))
    return min(
        rasters,
        key=lambda r: (dram_bytes(spec, graph, r, device.sm_count, device.l2_bytes), r.swizzle),
    )


def _rasters(space: ScheduleSpace) -> list[dict]:
    return list(space.order_choices())


@dataclass(frozen=True)
class Selected:
    """A candidate among the ``top`` by the estimate with its tile's least-traffic order:
    that latency and its position among the ranked candidates (ties go to the earlier)."""

    latency_us: float
    index: int
    candidate: Candidate


def select_top(
    space: ScheduleSpace,
    candidates: list[Candidate],
    top: int,
    timings: TimingModel | None = None,
    on_bound: Callable[[int, int], None] | None = None,
) -> list[Selected]:
    """The ``top`` candidates by (estimated latency, position), each estimated with the
    tile order of least DRAM traffic for its tile, best first: every candidate gets the
    cost model's cheap lower bound, and they are simulated in order of it until the next
    bound is above the ``top``-th latency (branch and bound: the exact top, ties included).

    ``on_bound(done, total)`` is called as the candidates' lower bounds are computed
    (the long part of a large space: a command's progress bar).
    """
    if top <= 0 or not candidates:
        return []
    spec: OperatorSpec = space.spec
    device: Device = space.device
    order_of = {_raster(o): o for o in _rasters(space)}
    rasters = tuple(order_of)
    bounded: list[tuple[float, int, Candidate, Raster]] = []
    raster_of_tile: dict[tuple, Raster] = {}
    for index, candidate in enumerate(candidates):
        tile = tuple(sorted(candidate.decisions.tile.items()))
        if tile not in raster_of_tile:
            raster_of_tile[tile] = _least_traffic_raster(spec, device, tile, rasters)
        raster = raster_of_tile[tile]
        bound = lower_bound_us(replace(candidate.decisions, raster=raster), spec, device, timings)
        bounded.append((bound, index, candidate, raster))
        if on_bound is not None and index % 256 == 0:
            on_bound(index, len(candidates))
    if on_bound is not None:
        on_bound(len(candidates), len(candidates))
    bounded.sort(key=lambda item: (item[0], item[1]))

    best: list[tuple[float, int, Candidate]] = []  # max-heap on (latency, index)
    for bound, index, candidate, raster in bounded:
        if len(best) == top and bound > -best[0][0]:
            break
        sprogram = space.with_order(candidate, order_of[raster])
        item = (-estimate(sprogram, spec, device, timings).latency_us, -index, candidate)
        if len(best) < top:
            heapq.heappush(best, item)
        elif item > best[0]:
            heapq.heapreplace(best, item)
    return sorted((Selected(-neg_latency, -neg_index, candidate)
                   for neg_latency, neg_index, candidate in best),
                  key=lambda s: (s.latency_us, s.index))


def finalize(space: ScheduleSpace, selected: list[Selected],
             timings: TimingModel | None = None) -> list[Ranked]:
    """Each selected candidate with its best tile order of all (the estimates the
    selection left to one order a tile), best first (ties by schedule hash)."""
    finalists = [finalist(space, chosen, timings) for chosen in selected]
    finalists.sort(key=lambda r: (r.estimate.latency_us, r.sprogram.hash))
    return finalists


def finalist(space: ScheduleSpace, chosen: Selected,
             timings: TimingModel | None = None) -> Ranked:
    """``chosen`` with the tile order of all that the cost model estimates fastest."""
    options = [space.with_order(chosen.candidate, order) for order in _rasters(space)]
    scored = [(estimate(p, space.spec, space.device, timings), p) for p in options]
    result, sprogram = min(scored, key=lambda pair: pair[0].latency_us)
    return Ranked(sprogram, result)


def rank_top(
    space: ScheduleSpace,
    candidates: list[Candidate],
    top: int,
    timings: TimingModel | None = None,
    on_bound: Callable[[int, int], None] | None = None,
) -> list[Ranked]:
    """The ``top`` schedules of ``candidates`` by estimated latency, best first
    (:func:`select_top`, then :func:`finalize`)."""
    return finalize(space, select_top(space, candidates, top, timings, on_bound), timings)


def _raster(order: dict) -> Raster:
    """The tile order the order knobs' choices ``order`` name."""
    return Raster(order.get("raster_major", ""), order.get("raster_swizzle", 1),
                  order.get("raster_heaviest_first", False), order.get("raster_stagger", False))
