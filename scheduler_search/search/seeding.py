"""Seeds from the cost model: its best distinct structures, and tile orders of the best few.

The cost model scores many schedules alike when they differ only in what it does not
simulate finely (register split, wait order, a stage more or less), so its top N by
latency is mostly near-copies of a few structures. A search measures more per GPU second
by trying the best schedule of each of the top structures (tile shape, warp roles, split,
persistence, sEU mapping) first, then the tile orders of the best few, which the model
cannot tell apart at all. On an H200 (bench/results/gemm-2026-11-29.json) the fastest
kernel of every GEMM suite case was among the 16 best structures plus 6 tile orders of the
4 best: 40 candidates.

This walks the whole space (``ScheduleSpace.enumerate``: a few seconds for a GEMM), so the
service computes it in another process while the search starts (``seed_source``).
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from typing import Any

from scheduler_search.hardware.model import Device
from scheduler_search.ops import OperatorSpec
from scheduler_search.space import (
    Choices,
    Feasibility,
    Ranked,
    ScheduleSpace,
    finalist,
    rank_top,
    select_top,
)

#: Choices that are not part of a schedule's "structure" for diversity: tile order and
#: the fine knobs the cost model scores alike.
_FINE_KNOBS = ("wg_schedule", "producer_regs", "order")
#: Runs of tiles per ranking process (:func:`ranked_pool`).
SHARDS_PER_JOB = 4
#: Tile-order swizzles tried on the best structures (the bench's set).
RASTER_SWIZZLES = (4, 8, 16)


def structure_of(choices: Choices) -> tuple[tuple[str, Any], ...]:
    """The structural identity of a schedule: everything but tile order, stage counts and
    the fine knobs."""
    return tuple(
        (k, v)
        for k, v in sorted(choices.items())
        if not k.startswith(("raster_", "stages_")) and k not in _FINE_KNOBS
    )


def cluster_twins(space: ScheduleSpace, choices: Choices) -> list[Choices]:
    """``choices`` alone and in each cluster the space offers, those that are valid: the
    cost model credits a multicast tile as fetched once per cluster, an estimate the GPU
    settles (on an H200 pairs won about half of the GEMM suite's cases, 2026-12-02)."""
    knobs = {k.name: k for k in space.structural_knobs}
    if "cluster_size" not in knobs or not knobs["cluster_size"].applies(choices):
        return []
    alone = {k: v for k, v in choices.items() if k != "cluster_axis"} | {"cluster_size": 1}
    # A cluster's twins take whole tiles (stream-K over clusters is the search's to ask).
    whole = {k: v for k, v in alone.items() if k != "stream_k"}
    twins = [alone] + [whole | {"cluster_size": size, "cluster_axis": axis}
                       for size in knobs["cluster_size"].options if size > 1
                       for axis in knobs["cluster_axis"].options]
    return [t for t in twins if t != choices and space.build(t)[1].ok]


def stream_k_twins(space: ScheduleSpace, choices: Choices) -> list[Choices]:
    """``choices`` on a persistent grid with each stream-K share the space offers, those
    that are valid: the cost model's credit for an evened-out last wave, against the
    parts' round trip through L2, is an estimate the GPU settles."""
    knobs = {k.name: k for k in space.structural_knobs}
    if "stream_k" not in knobs:
        return []
    base = {**choices, "persistent": True}
    if not knobs["stream_k"].applies(base):
        return []
    twins = [base | {"stream_k": waves} for waves in knobs["stream_k"].options if waves]
    return [t for t in twins if t != choices and space.build(t)[1].ok]


def _ranking_space(spec: OperatorSpec, device: Device, calibration: Any,
                   feasible: Feasibility | None, fixed: Choices | None,
                   ) -> tuple[ScheduleSpace, Any]:
    """The space the cost model ranks in (the calibrated device's) and its timings."""
    if calibration is None or calibration.is_identity:
        return ScheduleSpace(spec, device, feasible, fixed), None
    calibrated = calibration.device(device)
    return ScheduleSpace(spec, calibrated, feasible, fixed), calibration.timings()


def _ranked_shard(spec: OperatorSpec, device: Device, pool: int, calibration: Any,
                  feasible: Feasibility | None, fixed: Choices | None,
                  shard: tuple[int, int]) -> tuple[int, list[tuple[float, int, Ranked]]]:
    """One shard of the space's tiles, walked and ranked (a process of its own): its
    candidates' count, and its ``pool`` best, each with the selection's latency and
    position (in the shard) and its best tile order of all."""
    candidates, _ = ScheduleSpace(spec, device, feasible, fixed).enumerate(shard=shard)
    space, timings = _ranking_space(spec, device, calibration, feasible, fixed)
    selected = select_top(space, candidates, pool, timings)
    return len(candidates), [(s.latency_us, s.index, finalist(space, s, timings))
                             for s in selected]


def ranked_pool(spec: OperatorSpec, device: Device, pool: int, *, calibration: Any = None,
                feasible: Feasibility | None = None, fixed: Choices | None = None,
                jobs: int = 1) -> list[Ranked]:
    """The cost model's ``pool`` best schedules of the whole space, best first.

    With ``jobs`` > 1 the space's tiles are walked and ranked by that many processes, in
    :data:`SHARDS_PER_JOB` runs of consecutive tiles each (tiles differ in how many of
    their points are valid, so fewer, longer runs would leave processes idle). Each run's
    exact best (:func:`~scheduler_search.space.select_top`: by latency, then position)
    holds every one of the space's best that lies in it, so their merge by latency and
    position in the whole walk is the ranking one process makes. On this project's 2-core
    machine an attention space of 15,356 structures took 34 s in one process.
    """
    if jobs <= 1:
        candidates, _ = ScheduleSpace(spec, device, feasible, fixed).enumerate()
        space, timings = _ranking_space(spec, device, calibration, feasible, fixed)
        return rank_top(space, candidates, pool, timings)
    count = jobs * SHARDS_PER_JOB
    shards = [(index, count) for index in range(count)]
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as workers:
        parts = list(workers.map(partial(_ranked_shard, spec, device, pool, calibration,
                                         feasible, fixed), shards))
    merged, offset = [], 0
    for walked, best in parts:
        merged += [(latency, offset + index, ranked) for latency, index, ranked in best]
        offset += walked
    merged.sort(key=lambda item: (item[0], item[1]))
    chosen = [ranked for _, _, ranked in merged[:pool]]
    return sorted(chosen, key=lambda r: (r.estimate.latency_us, r.sprogram.hash))


def cost_model_seeds(
    spec: OperatorSpec,
    device: Device,
    *,
    structures: int = 16,
    raster_structures: int = 4,
    pool: int = 400,
    calibration: Any = None,
    feasible: Feasibility | None = None,
    fixed: Choices | None = None,
    jobs: int = 1,
) -> list[Choices]:
    """Choices to measure first: the best schedule of each of the cost model's
    ``structures`` best structures (among its ``pool`` best schedules), then the
    ``raster_structures`` best alone and in clusters, then their other tile orders.

    Args:
        calibration: a ``cost_model.Calibration`` of the device, to rank with.
        feasible: what code generation can lower (``ScheduleSpace``'s check).
        fixed: knobs held: the seeds of that slice of the space (``ScheduleSpace``'s).
        jobs: processes that walk and rank the space (:func:`ranked_pool`).
    """
    ranked = ranked_pool(spec, device, pool, calibration=calibration, feasible=feasible,
                         fixed=fixed, jobs=jobs)
    if calibration is not None and not calibration.is_identity:
        device = calibration.device(device)
    space = ScheduleSpace(spec, device, feasible, fixed)
    chosen: list[Choices] = []
    seen: set[tuple] = set()
    for item in ranked:
        key = structure_of(item.sprogram.choices)
        if key in seen:
            continue
        seen.add(key)
        chosen.append(dict(item.sprogram.choices))
        if len(chosen) == structures:
            break
    seeds = [dict(c) for c in chosen]
    for choices in chosen[:raster_structures]:
        for twin in cluster_twins(space, choices) + stream_k_twins(space, choices):
            if twin not in seeds:
                seeds.append(twin)
    knobs = {k.name: k for k in space.order_knobs}
    majors = knobs["raster_major"].options if "raster_major" in knobs else ()
    swizzles = [s for s in RASTER_SWIZZLES if "raster_swizzle" in knobs
                and s in knobs["raster_swizzle"].options]
    for choices in chosen[:raster_structures]:
        for major in majors:
            for swizzle in swizzles:
                variant = {**choices, "raster_major": major, "raster_swizzle": swizzle}
                if variant not in seeds:
                    seeds.append(variant)
        # Causal grids: the heaviest tiles first across the grid (one order, whatever the
        # major axis and swizzle).
        if "raster_heaviest_first" in knobs and not choices.get("raster_heaviest_first"):
            seeds.append({**choices, "raster_heaviest_first": True})
    return seeds


__all__ = ["RASTER_SWIZZLES", "cluster_twins", "cost_model_seeds", "ranked_pool", "stream_k_twins",
           "structure_of"]
