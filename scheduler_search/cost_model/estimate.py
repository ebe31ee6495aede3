"""The cost model's entry point: an sProgram's estimated latency and per-unit timeline.

One block is simulated for a few loop iterations (``simulate_block``); its first
iteration, steady-state slope and epilogue extrapolate the time of a tile of any trip
count (causal tiles differ). Tiles are then spread over the SMs in raster order
(``grid.makespan``) and the DRAM traffic of that order bounds the kernel from below
(``grid.dram_bytes``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from scheduler_search.cost_model.grid import (
    dram_bytes,
    grid_dims,
    heavy_axis,
    makespan,
    persistent_block,
    tile_order,
)
from scheduler_search.cost_model.simulate import (
    BlockSimulation,
    TimelineEntry,
    instance_work,
    simulate_block,
)
from scheduler_search.cost_model.timings import AnalyticTimings, TimingModel
from scheduler_search.hardware.model import Device, UnitKind
from scheduler_search.ir import STaskGraph
from scheduler_search.ops import OperatorSpec
from scheduler_search.sprogram.schedule import Raster, SProgram
from scheduler_search.sprogram.stream_k import StreamKShare
from scheduler_search.sprogram.validate import stream_k_share

#: Loop iterations simulated per block before extrapolating.
SIM_ITERATIONS = 8
#: Beyond this many waves uneven tiles even out; dispatch is bounded, not replayed.
_EXACT_DISPATCH_MAX_WAVES = 16
#: Kernel launch as CUDA events see it (estimate).
LAUNCH_OVERHEAD_US = 2.0
#: Block launch, barrier initialisation, descriptor prefetch (estimate).
BLOCK_OVERHEAD_CYCLES = 800.0
#: L2 bytes a cycle one SM writes or reads stream-K's parts at (estimate: about a 132nd
#: of the H200's L2 bandwidth at its clock).
STREAM_K_PART_BYTES_PER_CYCLE = 48.0
#: Bytes a split-K cluster's first block reads a cycle from a peer's shared memory
#: (distributed shared memory; a lead, not yet a reading).
SPLIT_K_PART_BYTES_PER_CYCLE = 64.0


@dataclass
class Estimate:
    """What the cost model predicts for one sProgram.

    ``timeline`` is the simulated block (one tile per consumer owner, ``SIM_ITERATIONS``
    loop trips at most): the per-sEU picture of the pipeline.
    """

    latency_us: float
    compute_us: float
    dram_us: float
    tile_us: float
    tiles: int
    bound: str
    unit_utilisation: dict[str, float]
    timeline: list[TimelineEntry] = field(default_factory=list)

    def to_dict(self, with_timeline: bool = True) -> dict[str, Any]:
        data = asdict(self)
        if not with_timeline:
            data.pop("timeline")
        return data


def tile_trips(graph: STaskGraph, order: list[dict[str, int]]) -> list[int]:
    """Reduction trips of each tile in ``order``: fewer above the diagonal when causal."""
    full = graph.loop_trips()
    if not graph.causal_pairs:
        return [full] * len(order)
    row, red = graph.causal_pairs[0]
    row_step, red_step = graph.step(row), graph.step(red)
    red_extent = graph.extents[red]
    trips = []
    for coord in order:
        visible = min((coord[row] + 1) * row_step, red_extent)
        trips.append(max(1, -(-visible // red_step)))
    return trips


@dataclass(frozen=True)
class _TileTime:
    first: float
    slope: float
    epilogue: float

    def cold(self, trips: int) -> float:
        return self.first + (trips - 1) * self.slope + self.epilogue

    def warm(self, trips: int) -> float:
        """A persistent block's next tile: the pipeline fill hides under the epilogue."""
        return trips * self.slope + self.epilogue


def _tile_time(sim: BlockSimulation) -> _TileTime:
    n = sim.iterations
    ends = sim.iteration_end
    # First to last iteration: consumer warpgroups may drift apart within the ring's
    # slack, which a shorter window would mistake for a change of pace.
    slope = (ends[n - 1] - ends[0]) / (n - 1) if n >= 3 else 0.0
    # No sEU runs faster than its throughput, whatever a short window suggests.
    slope = max(slope, sim.loop_busy_per_iteration, 1.0)
    return _TileTime(first=ends[0], slope=slope, epilogue=sim.end - ends[n - 1])


@lru_cache(maxsize=4096)
def _ordered_trips(spec: OperatorSpec, tile: tuple, raster: Raster) -> tuple[int, ...]:
    graph = spec.graph(dict(tile))
    dims = grid_dims(graph)
    if not graph.causal_pairs:  # every tile loops alike: no order to walk
        return (graph.loop_trips(),) * math.prod(dims.values())
    return tuple(tile_trips(graph, list(tile_order(dims, raster, heavy_axis(graph)))))


@dataclass(frozen=True)
class _Blocks:
    """Loop trips per block in dispatch order, with their sum and maximum."""

    trips: tuple[int, ...]
    total: int
    longest: int
    tiles: int


@lru_cache(maxsize=4096)
def _blocks(spec: OperatorSpec, tile: tuple, raster: Raster, owners: int) -> _Blocks:
    """A pingpong block runs its ``owners`` tiles' main loops one after the other."""
    trips = _ordered_trips(spec, tile, raster)
    if min(trips) == max(trips):  # uniform tiles (no causal mask): no per-block walk
        per_block = (trips[0] * owners,) * -(-len(trips) // owners)
    else:
        per_block = tuple(max(trips[i : i + owners]) * owners
                          for i in range(0, len(trips), owners))
    return _Blocks(per_block, sum(per_block), max(per_block), len(trips))


def _global(
    sprogram: SProgram,
    spec: OperatorSpec,
    device: Device,
    graph: STaskGraph,
    tile_time: _TileTime,
    exact: bool = True,
) -> tuple[float, float, int, float]:
    """(compute_us, dram_us, tiles, mean tile_us) for the whole grid.

    With ``exact`` False, uneven (causal) tiles are bounded from below by their mean load
    per SM instead of being dispatched one by one.
    """
    tile = tuple(sorted(graph.tile.items()))
    owners = sprogram.owners
    slots = device.sm_count
    stats = _blocks(spec, tile, sprogram.raster, owners)
    groups, blocks, tiles = stats.trips, len(stats.trips), stats.tiles
    share = stream_k_share(sprogram, graph, device)
    if not graph.causal_pairs:
        cold = tile_time.cold(groups[0]) + BLOCK_OVERHEAD_CYCLES
        waves = -(-blocks // slots)
        if sprogram.split_k is not None:
            cycles = _split_k_cycles(sprogram, device, graph, tile_time, groups[0], tiles)
        elif share is not None and share.problem() is None:
            cycles = _stream_k_cycles(share, tile_time, graph)
        elif sprogram.persistent:
            cycles = cold + (waves - 1) * tile_time.warm(groups[0])
        else:
            cycles = waves * cold
        mean_cold = cold
    elif not exact or blocks > _EXACT_DISPATCH_MAX_WAVES * slots:
        # Tile times are affine in trips: sums and maxima need no per-tile list.
        total, longest = stats.total, stats.longest
        per_block = BLOCK_OVERHEAD_CYCLES if not sprogram.persistent else 0.0
        if sprogram.persistent:
            load = total * tile_time.slope + blocks * tile_time.epilogue
            peak = tile_time.warm(longest)
        else:
            load = (
                blocks * (tile_time.cold(1) - tile_time.slope + per_block) + total * tile_time.slope
            )
            peak = tile_time.cold(longest) + per_block
        cycles = max(load / slots, peak)
        mean_cold = load / blocks
    else:
        colds = [tile_time.cold(t) + BLOCK_OVERHEAD_CYCLES for t in groups]
        mean_cold = sum(colds) / blocks
        if sprogram.persistent:
            per_sm = colds[:slots]
            for i in range(slots, blocks):
                per_sm[persistent_block(i, slots)] += tile_time.warm(groups[i])
            cycles = max(per_sm)
        else:
            cycles = makespan(colds, slots, persistent=False)
    cycles_per_us = device.clock_mhz
    moved = dram_bytes(spec, graph, sprogram.raster, slots, device.l2_bytes)
    dram_us = moved / (device.mem_bandwidth_gbps * 1e3)
    return cycles / cycles_per_us, dram_us, tiles, mean_cold / cycles_per_us


def _stream_k_cycles(share: StreamKShare, tile_time: _TileTime, graph: STaskGraph) -> float:
    """A stream-K block: its whole tiles, then an equal share of the last tiles' trips,
    one pipeline fill in all; its shared tiles' parts go to L2, and the block that counts
    a tile's last part reads every contributor's back and stores it (two epilogues'
    worth), each part the tile's fp32 sums. The finisher of the tile with the most
    contributors sets the pace: 128 x 128 tiles over 1280 x 8192 have ~14 (10 tiles'
    trips over 132 blocks), and ran 3x the estimate that charged two parts (H200,
    2026-12-04, bench/decode_designs.py)."""
    whole = share.dp_tiles // share.blocks
    trips = whole * share.trips + share.sk_trips / share.blocks
    part_bytes = 4 * _tile_elements(graph)
    contributors = max((len(share.contributors(t)) for t in range(share.sk_tiles)), default=1)
    parts = (1 + contributors) * part_bytes / STREAM_K_PART_BYTES_PER_CYCLE
    return (BLOCK_OVERHEAD_CYCLES + tile_time.first - tile_time.slope + trips * tile_time.slope
            + (whole + 2) * tile_time.epilogue + parts)


def _split_k_cycles(sprogram: SProgram, device: Device, graph: STaskGraph,
                    tile_time: _TileTime, tile_trips: int, tiles: int) -> float:
    """A split-K cluster per tile: each block runs its share of the trips, then the first
    block reads the others' fp32 partials from their shared memory, one after another,
    and stores the tile (or, scattered, every block reads its ``1 / blocks`` share of
    each peer's at once and stores it); clusters run in waves of those the device holds
    at once."""
    blocks = sprogram.split_k.blocks
    trips = -(-tile_trips // blocks)
    waves = -(-tiles // device.clusters_at_once(blocks))
    read = (blocks - 1) / blocks if sprogram.split_k.reduce == "scattered" else blocks - 1
    partials = read * 4 * _tile_elements(graph) / SPLIT_K_PART_BYTES_PER_CYCLE
    cold = tile_time.cold(trips) + BLOCK_OVERHEAD_CYCLES + partials
    if sprogram.persistent:
        return cold + (waves - 1) * (tile_time.warm(trips) + partials)
    return waves * cold


def _tile_elements(graph: STaskGraph) -> int:
    elements = 1
    for axis in graph.spatial_axes:
        elements *= graph.step(axis)
    return elements


#: Block simulations by (block, device, structural choices, timings): the tile order
#: over the grid does not change a block's timeline, so raster variants reuse one
#: simulation, and neither do the problem's extents beyond the tile (a range search
#: estimates each candidate at a hundred sizes of one dimension: half its cut's time was
#: simulating the same block again); measured timings take part through their
#: ``cache_key``.
_SIMULATIONS: dict[tuple, BlockSimulation] = {}
_SIMULATIONS_MAX = 20000


def _block_signature(graph: STaskGraph) -> tuple:
    """What a block's simulation reads of its graph: the sTasks, each one's extents and
    staged tiles, the tensors' types and places (not the problem's extents); worked out
    once a graph."""
    return graph.memoised(("block_signature",), lambda: _signature_of(graph))


def _signature_of(graph: STaskGraph) -> tuple:
    plan = graph.plan
    return (graph.op, graph.stasks, graph.spatial_axes, graph.reduction_axes,
            graph.causal_pairs,
            tuple((name, tuple(sorted(extents.items())))
                  for name, extents in sorted(plan.stask_extents.items())),
            tuple(sorted(plan.tensor_tiles.items())),
            tuple(sorted((name, t.dtype, t.space) for name, t in graph.tensors.items())))


def _simulate(
    sprogram: SProgram,
    graph: STaskGraph,
    device: Device,
    timings: TimingModel,
    iterations: int,
) -> BlockSimulation:
    timings_key = timings.cache_key()
    if timings_key is None:
        return simulate_block(sprogram, graph, device, timings, iterations)
    structural = tuple(
        (k, v) for k, v in sorted(sprogram.choices.items()) if not k.startswith("raster_")
    )
    key = (_block_signature(graph), device.fingerprint(), structural, iterations,
           timings_key)
    if key not in _SIMULATIONS:
        if len(_SIMULATIONS) >= _SIMULATIONS_MAX:
            _SIMULATIONS.clear()
        _SIMULATIONS[key] = simulate_block(sprogram, graph, device, timings, iterations)
    return _SIMULATIONS[key]


def estimate(
    sprogram: SProgram,
    spec: OperatorSpec,
    device: Device,
    timings: TimingModel | None = None,
) -> Estimate:
    """Estimated latency of ``sprogram`` for ``spec`` on ``device``.

    Args:
        timings: per-sTask times; the analytic model unless measured ones are given.
    """
    timings = timings or AnalyticTimings()
    graph = spec.graph(sprogram.tile)
    order_trips = max(_ordered_trips(spec, tuple(sorted(graph.tile.items())), sprogram.raster))
    owners = sprogram.owners
    iterations = min(order_trips, max(2, SIM_ITERATIONS // owners))
    sim = _simulate(sprogram, graph, device, timings, iterations)
    tile_time = _tile_time(sim)
    compute_us, dram_us, tiles, tile_us = _global(sprogram, spec, device, graph, tile_time)
    latency = max(compute_us, dram_us) + LAUNCH_OVERHEAD_US
    clock = device.clock_mhz
    timeline = [
        TimelineEntry(unit.value, stask, role, it, start / clock, end / clock)
        for unit, stask, role, it, start, end in sim.entries
    ]
    span = max(sim.end, 1.0)
    return Estimate(
        latency_us=latency,
        compute_us=compute_us,
        dram_us=dram_us,
        tile_us=tile_us,
        tiles=tiles,
        bound="dram" if dram_us > compute_us else "compute",
        unit_utilisation={u.value: busy / span for u, busy in sim.busy.items()},
        timeline=timeline,
    )


def lower_bound_us(
    sprogram: SProgram, spec: OperatorSpec, device: Device, timings: TimingModel | None = None
) -> float:
    """A cheap bound that :func:`estimate` never goes below: each tile takes at least its
    busiest sEU's work per iteration times its trips (no latencies, perfect overlap)."""
    timings = timings or AnalyticTimings()
    graph = spec.graph(sprogram.tile)
    per_unit: dict[UnitKind, float] = {}
    copies = sprogram.roles.consumer_warpgroups
    for task in graph.phase_tasks("loop"):
        unit = sprogram.mapping[task.name]
        work = instance_work(sprogram, graph, task.name, unit)
        busy = timings.busy_cycles(task, device.unit(unit), work)
        shared_load = unit in (UnitKind.TMA, UnitKind.LSU) and sprogram.consumer_split != "pingpong"
        per_unit[unit] = per_unit.get(unit, 0.0) + busy * (1 if shared_load else copies)
    owners = sprogram.owners
    # Per owner-iteration: _global multiplies trips by the owners of a pingpong block.
    slope = max(per_unit.values()) / owners
    bound = _TileTime(first=slope, slope=slope, epilogue=0.0)
    compute_us, dram_us, _, _ = _global(sprogram, spec, device, graph, bound, exact=False)
    return max(compute_us, dram_us) + LAUNCH_OVERHEAD_US
