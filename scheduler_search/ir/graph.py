"""sTask-graphs and tile shapes, and Propagate: tile shapes inferred from the output tile.

A graph is built per operator from a TileShape: spatial axes are partitioned across SMs
(one output tile per EU at a time), reduction axes into loop iterations, which is what
creates pipelines. Axes absent from the TileShape are taken whole (``d`` of attention).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, TypeVar

from scheduler_search.ir.stask import STask

_T = TypeVar("_T")

TileShape = Mapping[str, int]
MemorySpace = Literal["global", "shared", "register"]


class PropagateError(ValueError):
    """An sTask-graph whose tile shapes cannot be inferred consistently."""


@dataclass(frozen=True)
class Tensor:
    """A tensor of the graph: global workload tensors, shared staging tiles, registers.
    ``reuses``: a register tensor made, a piece at a time, in the registers of another
    that is dead by then (it takes no registers beside it)."""

    name: str
    dtype: str
    space: MemorySpace
    reuses: str | None = None


@dataclass(frozen=True)
class STaskGraph:
    """The sTask-graph of one output tile.

    Args:
        op: operator name.
        stasks: in a topological order (producers before consumers).
        tensors: every tensor an sTask touches, by name.
        extents: the problem extent of every loop axis.
        tile: tile size of the partitioned axes (spatial and reduction).
        spatial_axes: axes partitioned across EUs (each EU owns one tile of them).
        reduction_axes: axes walked by the loop inside an EU (pipelined).
        grid_axes: independent problem instances per tile (batch, heads, chunks).
        causal_pairs: (row axis, reduction axis) pairs where only blocks at or below the
            diagonal do work (causal attention, the intra-chunk scan).
        copies: staged tensors a block keeps several tiles of, by name: a per-head vector
            of a tile that packs heads (the chunk state's dt and dA, one tile a head).
        side_row_bytes: bytes written beside each output row (attention's fp32
            log-sum-exp): a TMA store stages them with the output tile.
        shared_sums: global tensors every output tile adds parts to inside its loop, in
            any order (the attention backward's dq workspace): tiles running side by side
            may walk their loops from different trips (``raster_stagger``).
    """

    op: str
    stasks: tuple[STask, ...]
    tensors: Mapping[str, Tensor]
    extents: Mapping[str, int]
    tile: Mapping[str, int]
    spatial_axes: tuple[str, ...]
    reduction_axes: tuple[str, ...]
    grid_axes: Mapping[str, int] = field(default_factory=dict)
    causal_pairs: tuple[tuple[str, str], ...] = ()
    copies: Mapping[str, int] = field(default_factory=dict)
    side_row_bytes: int = 0
    shared_sums: tuple[str, ...] = ()

    def staged_elements(self, tensor: str) -> int:
        """Elements a block keeps of ``tensor``: its tile, times its :attr:`copies`."""
        return self.plan.tile_elements(tensor) * self.copies.get(tensor, 1)

    def stask(self, name: str) -> STask:
        task = self._by_name.get(name)
        if task is None:
            raise KeyError(f"{self.op} graph has no sTask {name!r}")
        return task

    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    @cached_property
    def _by_name(self) -> dict[str, STask]:
        return {t.name: t for t in self.stasks}

    def dependencies(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """Data dependences: sTask -> ((producer, iteration distance), ...).

        For each tensor an sTask reads, the producer is the nearest earlier writer in
        graph order (distance 0: same iteration); a tensor written only later in the
        loop body is carried from the previous iteration (distance 1), as the running
        max of online softmax is.
        """
        return self._dependencies

    @cached_property
    def memo(self) -> dict[tuple, object]:
        """Results that depend on this graph and a few decisions, by key: validation
        and planning look them up for each of the thousands of schedules of one tile."""
        return {}

    def memoised(self, key: tuple, compute: Callable[[], _T]) -> _T:
        """``compute()``, kept in :attr:`memo` under ``key`` (which must name every
        decision the result depends on besides the graph and its plan)."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]  # type: ignore[return-value]

    @cached_property
    def plan(self) -> TilePlan:
        """Propagate from the graph's own output tile (computed once per graph)."""
        return propagate(self)

    @cached_property
    def _dependencies(self) -> dict[str, tuple[tuple[str, int], ...]]:
        order = {t.name: i for i, t in enumerate(self.stasks)}
        deps: dict[str, tuple[tuple[str, int], ...]] = {}
        for task in self.stasks:
            found: list[tuple[str, int]] = []
            for access in task.inputs:
                writers = [w for w in self.stasks if w.output.tensor == access.tensor]
                earlier = [w for w in writers if order[w.name] < order[task.name]]
                if earlier:
                    found.append((earlier[-1].name, 0))
                elif writers and task.phase == "loop" and writers[-1].phase == "loop":
                    found.append((writers[-1].name, 1))
            deps[task.name] = tuple(dict.fromkeys(found))
        return deps

    def phase_tasks(self, phase: str) -> tuple[STask, ...]:
        return tuple(t for t in self.stasks if t.phase == phase)

    def step(self, axis: str) -> int:
        """Tile extent of ``axis``; the whole extent when it is not tiled."""
        return self.tile.get(axis, self.extents[axis])

    def loop_trips(self) -> int:
        """Reduction iterations per output tile (product over reduction axes)."""
        trips = 1
        for axis in self.reduction_axes:
            trips *= -(-self.extents[axis] // self.step(axis))
        return trips

    def tile_count(self) -> int:
        """Output tiles in the whole problem (spatial tiles x grid instances)."""
        count = 1
        for axis in self.spatial_axes:
            count *= -(-self.extents[axis] // self.step(axis))
        for instances in self.grid_axes.values():
            count *= instances
        return count


@dataclass(frozen=True)
class TilePlan:
    """What Propagate infers: the tile shape of every staged tensor (shared memory and
    registers) and the extent of every axis of every sTask."""

    tensor_tiles: Mapping[str, tuple[int, ...]]
    stask_extents: Mapping[str, Mapping[str, int]]

    def points(self, stask: str) -> int:
        """Points in one instance of ``stask``'s iteration space."""
        count = 1
        for extent in self.stask_extents[stask].values():
            count *= extent
        return count

    def tile_elements(self, tensor: str) -> int:
        count = 1
        for extent in self.tensor_tiles[tensor]:
            count *= extent
        return count


def propagate(graph: STaskGraph, output_tile: TileShape | None = None) -> TilePlan:
    """Infer every tile shape backwards from the output tile (the paper's Propagate).

    The output tile binds the axes of the graph's final store; reduction axes are bound by
    their step; walking the sTasks from last to first, each sTask's output tile binds the
    axes it shares with its consumers, and its inputs take the extents of their axes. An
    axis that nothing binds takes the graph's step for it (whole extent when untiled).

    Raises:
        PropagateError: when a tensor would get two different tile shapes, or an axis
            of an sTask is bound to two different extents.
    """
    bound: dict[str, int] = {a: graph.step(a) for a in graph.reduction_axes}
    for axis, extent in (output_tile or {a: graph.step(a) for a in graph.spatial_axes}).items():
        bound[axis] = extent
    tensor_tiles: dict[str, tuple[int, ...]] = {}
    stask_extents: dict[str, dict[str, int]] = {}

    def bind(tensor: str, axes: tuple[str, ...], extents: dict[str, int], who: str) -> None:
        # Global tensors are indexed by different axes in different sTasks (dA_cumsum[l]
        # and dA_cumsum[s]); only the staged tiles (shared, registers) are allocated.
        if graph.tensors[tensor].space == "global":
            return
        shape = tuple(extents[a] for a in axes)
        previous = tensor_tiles.setdefault(tensor, shape)
        if previous != shape:
            raise PropagateError(
                f"{who}: tile of {tensor} inferred as {shape}, but as {previous} elsewhere"
            )

    for task in reversed(graph.stasks):
        extents: dict[str, int] = {}
        if task.output.tensor in tensor_tiles:
            # Not strict: a rank mismatch is reported by bind() as a PropagateError.
            tile = tensor_tiles[task.output.tensor]
            for axis, extent in zip(task.output.axes, tile, strict=False):
                extents[axis] = extent
        for axis in task.axes:
            want = bound.get(axis, graph.step(axis))
            have = extents.setdefault(axis, want)
            if have != want:
                raise PropagateError(
                    f"{task.name}: axis {axis} is {have} in its output tile but {want} "
                    "from the output tile and the reduction steps"
                )
        bind(task.output.tensor, task.output.axes, extents, task.name)
        for access in task.inputs:
            bind(access.tensor, access.axes, extents, task.name)
        stask_extents[task.name] = extents
    ordered = {t.name: stask_extents[t.name] for t in graph.stasks}
    return TilePlan(tensor_tiles=tensor_tiles, stask_extents=ordered)
