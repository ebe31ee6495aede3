"""Rank a space by the cost model without simulating all of it.

Every valid candidate gets the cost model's cheap lower bound; candidates are simulated
in order of that bound, and the walk stops once the bound of the next one cannot beat
the current top N (branch and bound: the result is the exact top N of the cost model).
The tile order over the grid (raster knobs) is first chosen per tile shape by DRAM
traffic, then searched exhaustively for the finalists.
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


def rank_top(
    space: ScheduleSpace,
    candidates: list[Candidate],
    top: int,
    timings: TimingModel | None = None,
    on_bound: Callable[[int, int], None] | None = None,
) -> list[Ranked]:
    """The ``top`` schedules of ``candidates`` by estimated latency, best first.

    ``on_bound(done, total)`` is called as the candidates' lower bounds are computed
    (the long part of a large space: a command's progress bar).
    """
    if top <= 0 or not candidates:
        return []
    spec: OperatorSpec = space.spec
    device: Device = space.device
    orders = _rasters(space)
    by_raster = {Raster(o.get("raster_major", ""), o.get("raster_swizzle", 1),
                        o.get("raster_heaviest_first", False)): o for o in orders}
    bounded: list[tuple[float, int, Candidate, dict]] = []
    raster_of_tile: dict[tuple, Raster] = {}
    for index, candidate in enumerate(candidates):
        tile = tuple(sorted(candidate.decisions.tile.items()))
        if tile not in raster_of_tile:
            raster_of_tile[tile] = _least_traffic_raster(spec, device, tile, tuple(by_raster))
        raster = raster_of_tile[tile]
        decided = replace(candidate.decisions, raster=raster)
        bound = lower_bound_us(decided, spec, device, timings)
        bounded.append((bound, index, candidate, by_raster[raster]))
        if on_bound is not None and index % 256 == 0:
            on_bound(index, len(candidates))
    if on_bound is not None:
        on_bound(len(candidates), len(candidates))
    bounded.sort(key=lambda item: (item[0], item[1]))

    best: list[tuple[float, int, SProgram, Estimate]] = []  # max-heap on latency
    for bound, index, candidate, order in bounded:
        if len(best) == top and bound >= -best[0][0]:
            break
        sprogram = space.with_order(candidate, order)
        result = estimate(sprogram, spec, device, timings)
        item = (-result.latency_us, -index, sprogram, result)
        if len(best) < top:
            heapq.heappush(best, item)
        elif result.latency_us < -best[0][0]:
            heapq.heapreplace(best, item)

    finalists = []
    for _, neg_index, _, _ in best:
        candidate = candidates[-neg_index]
        options = [space.with_order(candidate, order) for order in orders]
        scored = [(estimate(p, spec, device, timings), p) for p in options]
        result, sprogram = min(scored, key=lambda pair: pair[0].latency_us)
        finalists.append(Ranked(sprogram, result))
    finalists.sort(key=lambda r: (r.estimate.latency_us, r.sprogram.hash))
    return finalists
