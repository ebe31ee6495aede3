"""The global level: tiles over SMs (waves, persistent striding) and DRAM traffic with L2
reuse from the tile order.

Tiles are visited in the sProgram's raster order: ``major`` advances fastest, the next
axis is cut into bands of ``swizzle``. Blocks that run at the same time (a wave) share
operand slices in L2; the DRAM traffic of a wave is the distinct slices it touches,
less those the previous wave left in L2 when both fit.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from functools import lru_cache
from operator import itemgetter

from scheduler_search.ir import STaskGraph, STaskKind
from scheduler_search.ops import OperatorSpec
from scheduler_search.sprogram.schedule import Raster

#: Waves analysed for L2 reuse; longer grids repeat the same pattern and are scaled.
ANALYSED_WAVES_MAX = 8

#: Fraction of L2 usable for operand reuse across a wave (the rest holds outputs and
#: whatever else runs; estimate).
L2_USABLE_FRACTION = 0.5

Coord = dict[str, int]


def grid_dims(graph: STaskGraph) -> dict[str, int]:
    """Tile counts along each axis of the tile grid (spatial tiles, then instances)."""
    dims = {a: -(-graph.extents[a] // graph.step(a)) for a in graph.spatial_axes}
    dims.update(graph.grid_axes)
    return dims


def heavy_axis(graph: STaskGraph) -> str | None:
    """The axis whose tiles grow heavier (a causal mask's row axis), if any."""
    return graph.causal_pairs[0][0] if graph.causal_pairs else None


def tile_order(dims: dict[str, int], raster: Raster, heavy: str | None = None) -> Iterator[Coord]:
    """Tile coordinates in raster order, as the kernels walk them: along ``heavy`` (the
    causal row axis, whose tiles grow heavier) from the last tile back; with
    ``raster.heaviest_first``, that axis outermost, the others in grid order under it
    (the first fastest)."""
    if heavy is not None:
        last = dims[heavy] - 1
        for coord in _plane_order(dims, raster, heavy):
            coord[heavy] = last - coord[heavy]
            yield coord
        return
    yield from _plane_order(dims, raster, None)


def _plane_order(dims: dict[str, int], raster: Raster, heavy: str | None) -> Iterator[Coord]:
    """Tile coordinates along ``major`` first in bands of ``swizzle`` tiles of the next
    axis, further axes outer; or, heaviest first, ``heavy`` outermost."""
    if raster.heaviest_first and heavy is not None:
        rest = [a for a in dims if a != heavy]
        for i in range(dims[heavy]):
            for outer in itertools.product(*(range(dims[a]) for a in reversed(rest))):
                yield {heavy: i, **dict(zip(reversed(rest), outer, strict=True))}
        return
    axes = list(dims)
    major = raster.major if raster.major in dims else axes[0]
    others = [a for a in axes if a != major]
    minor = others[0] if others else None
    rest = others[1:]
    group = max(1, raster.swizzle)
    for outer in itertools.product(*(range(dims[a]) for a in rest)):
        base = dict(zip(rest, outer, strict=True))
        minor_count = dims[minor] if minor else 1
        for band in range(0, minor_count, group):
            for i in range(dims[major]):
                for m in range(band, min(band + group, minor_count)):
                    coord = dict(base)
                    coord[major] = i
                    if minor:
                        coord[minor] = m
                    yield coord


def persistent_block(unit: int, blocks: int) -> int:
    """The block of a persistent grid that runs ``unit``: units go out in waves of
    ``blocks``, every other wave in reverse block order (the kernels' snake, which gives a
    block alternately heavy and light tiles where a causal raster interleaves them)."""
    wave, index = divmod(unit, blocks)
    return blocks - 1 - index if wave % 2 else index


def makespan(durations: list[float], slots: int, persistent: bool) -> float:
    """Time until every tile is done: greedy dispatch to the first free SM, or (persistent)
    static waves of tiles over SMs (:func:`persistent_block`)."""
    if not durations:
        return 0.0
    if persistent:
        per_sm = [0.0] * min(slots, len(durations))
        for i, d in enumerate(durations):
            per_sm[persistent_block(i, len(per_sm))] += d
        return max(per_sm)
    heap = [0.0] * min(slots, len(durations))
    for d in durations:
        heapq.heapreplace(heap, heap[0] + d)
    return max(heap)


def _slice_keys(spec: OperatorSpec, graph: STaskGraph) -> dict[str, Callable[[Coord], tuple]]:
    """For each global input tensor, the key of the slice a tile reads from it."""
    sharing = spec.grid_sharing(graph.tile)
    keys: dict[str, Callable[[Coord], tuple]] = {}
    for task in graph.stasks:
        if task.kind is not STaskKind.LOAD:
            continue
        access = task.inputs[0]
        if access.tensor in keys:
            continue
        spatial = tuple(a for a in access.axes if a in graph.spatial_axes)
        groups = sharing.get(access.tensor, {})
        grid = tuple(graph.grid_axes)
        if not grid and spatial:  # a slice is named by its spatial coordinates alone
            keys[access.tensor] = itemgetter(*spatial)
            continue

        def key(
            coord: Coord, spatial: tuple = spatial, grid: tuple = grid, groups: dict = groups
        ) -> tuple:
            shared = tuple(coord[g] // groups.get(g, 1) for g in grid)
            return tuple(coord[a] for a in spatial) + shared

        keys[access.tensor] = key
    return keys


def _distinct_slices(graph: STaskGraph, spec: OperatorSpec, tensor: str) -> int:
    """How many different slices of ``tensor`` the whole grid reads."""
    groups = spec.grid_sharing(graph.tile).get(tensor, {})
    count = 1
    dims = grid_dims(graph)
    for task in graph.stasks:
        if task.kind is STaskKind.LOAD and task.inputs[0].tensor == tensor:
            for axis in task.inputs[0].axes:
                if axis in graph.spatial_axes:
                    count *= dims[axis]
            break
    for axis, instances in graph.grid_axes.items():
        count *= -(-instances // groups.get(axis, 1))
    return count


def dram_bytes(
    spec: OperatorSpec, graph: STaskGraph, raster: Raster, slots: int, l2_bytes: int
) -> float:
    """Bytes moved between DRAM and L2: inputs with wave-level reuse, outputs once."""
    return _dram_bytes_cached(spec, tuple(sorted(graph.tile.items())), raster, slots, l2_bytes)


@lru_cache(maxsize=65536)
def _dram_bytes_cached(
    spec: OperatorSpec, tile: tuple, raster: Raster, slots: int, l2_bytes: int
) -> float:
    graph = spec.graph(dict(tile))
    tensors = {t.name: t for t in spec.tensors()}
    outputs = sum(t.size_bytes for t in tensors.values() if t.role == "output")
    inputs = {n: t for n, t in tensors.items() if t.role == "input"}
    keys = {n: k for n, k in _slice_keys(spec, graph).items() if n in inputs}
    usable = l2_bytes * L2_USABLE_FRACTION
    if sum(t.size_bytes for t in inputs.values()) <= usable:
        return float(outputs + sum(t.size_bytes for t in inputs.values()))

    dims = grid_dims(graph)
    tiles = 1
    for extent in dims.values():
        tiles *= extent
    waves = -(-tiles // slots)
    analysed = min(waves, ANALYSED_WAVES_MAX)
    order = list(itertools.islice(tile_order(dims, raster, heavy_axis(graph)), analysed * slots))
    # Slice sizes from the tensor's whole extent over its distinct slices (each slice is
    # the same size: a row band of a, a head's k, ...).
    slice_bytes = {}
    for name in keys:
        slice_bytes[name] = inputs[name].size_bytes / _distinct_slices(graph, spec, name)
    total = 0.0
    previous: dict[str, set] = {n: set() for n in keys}
    previous_bytes = 0.0
    for start in range(0, len(order), slots):
        wave = order[start : start + slots]
        wave_bytes = 0.0
        current = {}
        for name, key in keys.items():
            current[name] = {key(c) for c in wave}
            wave_bytes += len(current[name]) * slice_bytes[name]
        reuse = previous_bytes + wave_bytes <= usable
        for name in keys:
            fresh = current[name] - previous[name] if reuse else current[name]
            total += len(fresh) * slice_bytes[name]
        previous, previous_bytes = current, wave_bytes
    total *= waves / analysed
    # Tensors no load reads whole (none today) still count once.
    total += sum(t.size_bytes for n, t in inputs.items() if n not in keys)
    return total + outputs
