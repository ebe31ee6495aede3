"""The sProgram as the skeleton lowers it: roles and their streams, rings, turns, waits.

Everything here is read from the sProgram (its role streams, barrier sTasks, stages, warp
roles, split, raster and persistence) and from its sTask-graph (the phase of each sTask:
prologue, loop or epilogue). Nothing is read from the search's choices. A barrier is
recognised by what it orders, not by its name:

- an ``mbarrier`` whose deps are async copies is a stream's *full* barrier (its waiter is
  the first reader of a stage); one whose waiter is an async copy is the stream's *empty*
  barrier (it waits for the last reader, ``depth`` trips back);
- a ``named`` barrier hands the tensor cores from one consumer warpgroup to the next;
- an MMA wait (``BarrierKind.MMA_WAIT``) that an MMA waits on for its own previous trip
  leaves one MMA group in flight across the loop (``inflight``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from functools import cached_property

from scheduler_search.hardware.model import UnitKind
from scheduler_search.ir import STaskGraph, STaskKind
from scheduler_search.ops import parse_spec
from scheduler_search.sprogram import BarrierKind, BarrierTask, Raster, SProgram
from scheduler_search.sprogram.plan import ASYNC_COPY_UNITS
from scheduler_search.sprogram.schedule import WARP_THREADS, WARPGROUP_THREADS

WARPS_PER_WARPGROUP = WARPGROUP_THREADS // WARP_THREADS



@functools.lru_cache(maxsize=4096)
def _graph(op: str, params_json: str, tile: tuple[tuple[str, int], ...]) -> STaskGraph:
    """The sTask-graph of a workload and tile, built once (a space asks for each of its
    schedules' graphs; most share a tile)."""
    return parse_spec(op, json.loads(params_json)).graph(dict(tile))


@dataclass(frozen=True)
class Issue:
    """One sTask instance of a role's stream, as the skeleton emits it."""

    stask: str
    unit: UnitKind
    kind: STaskKind
    phase: str
    lead: int


@dataclass(frozen=True)
class Ring:
    """The full / empty mbarrier ring of one operand stream.

    ``full[s]`` completes when the stage's loads have landed (one arrival with the
    transaction bytes, then the bytes); ``empty[s]`` when every warp that reads the stage
    has released it. The n-th use of a slot waits for parity ``(n / depth) & 1``.
    A ring that holds a multicast load is filled by every block of the cluster, so its
    ``empty[s]`` counts the reading warps of all ``cluster_blocks`` blocks.
    """

    stream: str
    depth: int
    loads: tuple[str, ...]
    full_name: str
    empty_name: str
    first_reader: str
    last_reader: str
    loader: str
    empty_arrivals: int
    cluster_blocks: int = 1

    @property
    def const(self) -> str:
        """Prefix of the ring's constants in the kernel text (``AB_STAGES``)."""
        return self.stream.upper()

    def full(self, stage: str) -> str:
        """Shared address of ``full[stage]`` (a call of the ring's device helper)."""
        return f"{self.full_name}(smem, {stage})"

    def empty(self, stage: str) -> str:
        """Shared address of ``empty[stage]``."""
        return f"{self.empty_name}(smem, {stage})"

    def stage(self, index: str) -> str:
        """Ring slot of the stream's ``index``-th load."""
        return f"({index}) % {self.const}_STAGES"

    def parity(self, index: str) -> str:
        """Phase parity the ``index``-th use of its slot completes."""
        return f"(({index}) / {self.const}_STAGES) & 1"


@dataclass(frozen=True)
class TileBuffer:
    """A tile loaded once per output tile (attention's Q) into a buffer of its own.

    ``full`` is the sProgram's barrier (the load has landed); the buffer is reused by the
    block's next tile only after every reading consumer warp has released it at the end of
    the tile's loop: ``empty``, a barrier the skeleton adds, as the sProgram orders the
    tiles of a block one after the other.
    """

    load: str
    full_name: str
    first_reader: str
    loader: str
    empty_arrivals: int
    #: Copies, one per tile a unit of work holds: pingpong consumers each read their own
    #: tile's (``owner`` = the consumer), a full and an empty barrier each.
    owners: int = 1

    @property
    def empty_name(self) -> str:
        return f"{self.load}_empty"

    def full(self, owner: str = "0") -> str:
        return f"{self.full_name}(smem, {owner})"

    def empty(self, owner: str = "0") -> str:
        return f"{self.empty_name}(smem, {owner})"


@dataclass(frozen=True)
class Turn:
    """A named barrier: ``to_role``'s ``waiter`` starts after ``from_role``'s ``after``
    (``distance`` trips back: the turn goes round the consumer warpgroups)."""

    name: str
    waiter: str
    after: str
    from_role: str
    to_role: str
    distance: int


@dataclass(frozen=True)
class PipelineStructure:
    """An sProgram's roles, streams and barriers, in the terms the skeleton emits."""

    sprogram: SProgram

    @cached_property
    def graph(self) -> STaskGraph:
        sp = self.sprogram
        return _graph(sp.op, json.dumps(sp.params, sort_keys=True),
                      tuple(sorted(sp.tile.items())))

    # ----- roles ---------------------------------------------------------------------
    @property
    def warp_specialized(self) -> bool:
        return self.sprogram.roles.warp_specialized

    @cached_property
    def consumer_roles(self) -> tuple[str, ...]:
        return self.sprogram.roles.consumer_roles

    @cached_property
    def roles(self) -> tuple[str, ...]:
        """Every role that issues work, the producer first."""
        producer = ("producer",) if self.warp_specialized else ()
        return producer + self.consumer_roles

    @property
    def consumers(self) -> int:
        return self.sprogram.roles.consumer_warpgroups

    @property
    def pingpong(self) -> bool:
        """Consumer warpgroups own tiles of their own (else they split one tile's rows)."""
        return self.sprogram.consumer_split == "pingpong"

    @property
    def owners(self) -> int:
        """Tiles one unit of work holds: one per consumer warpgroup with pingpong."""
        return self.sprogram.owners

    @property
    def threads(self) -> int:
        return self.sprogram.roles.threads

    def stream(self, role: str) -> tuple[Issue, ...]:
        """``role``'s sTask instances in issue order (``SProgram.role_stream``)."""
        return self._streams.get(role, ())

    @cached_property
    def _streams(self) -> dict[str, tuple[Issue, ...]]:
        tasks = {t.name: t for t in self.graph.stasks}
        ops = sorted(((op.step, op.role, op.stask, unit, op.lead)
                      for unit, unit_ops in self.sprogram.programs.items() for op in unit_ops),
                     key=lambda o: o[0])
        streams: dict[str, list[Issue]] = {}
        for _, role, stask, unit, lead in ops:
            task = tasks[stask]
            streams.setdefault(role, []).append(Issue(stask, unit, task.kind, task.phase, lead))
        return {role: tuple(issues) for role, issues in streams.items()}

    @cached_property
    def units(self) -> dict[str, UnitKind]:
        """The sEU each sTask is issued on, from the per-sEU programs."""
        return {op.stask: unit for unit, ops in self.sprogram.programs.items() for op in ops}

    def is_async_copy(self, stask: str) -> bool:
        return (self.graph.stask(stask).kind is STaskKind.LOAD
                and self.units.get(stask) in ASYNC_COPY_UNITS)

    def compute_stream(self, role: str) -> tuple[Issue, ...]:
        """``role``'s stream without the loads it issues for the ring (a loader's)."""
        return tuple(i for i in self.stream(role) if i.stask not in self._async_copies)

    @cached_property
    def _async_copies(self) -> frozenset[str]:
        return frozenset(name for name in self.units if self.is_async_copy(name))

    def load_stream(self, role: str) -> tuple[Issue, ...]:
        return tuple(i for i in self.stream(role) if self.is_async_copy(i.stask))

    @property
    def loader(self) -> str:
        """The role that issues the rings' loads."""
        return "producer" if self.warp_specialized else self.consumer_roles[0]

    # ----- barriers ------------------------------------------------------------------
    def _barriers(self, kind: BarrierKind) -> list[BarrierTask]:
        return [b for b in self.sprogram.barriers if b.kind == kind]

    @cached_property
    def rings(self) -> tuple[Ring, ...]:
        """One ring per operand stream whose loads are async copies, in stream order."""
        sp = self.sprogram
        mbarriers = self._barriers(BarrierKind.STAGE)
        rings = []
        for stream in sp.streams:
            full = [b for b in mbarriers if b.deps and all(
                self.is_async_copy(d) and sp.stream_of(d) == stream for d, _ in b.deps)]
            empty = [b for b in mbarriers if self.is_async_copy(b.waiter)
                     and sp.stream_of(b.waiter) == stream]
            if not full or not empty:
                continue
            readers = 1 if self.pingpong else self.consumers
            loads = tuple(d for d, _ in full[0].deps)
            blocks = self.cluster_size if set(loads) & set(self.multicast) else 1
            rings.append(Ring(
                stream=stream,
                depth=sp.stages[stream],
                loads=loads,
                full_name=full[0].name,
                empty_name=empty[0].name,
                first_reader=full[0].waiter,
                last_reader=empty[0].deps[0][0],
                loader=empty[0].role,
                empty_arrivals=readers * WARPS_PER_WARPGROUP * blocks,
                cluster_blocks=blocks,
            ))
        return tuple(rings)

    @property
    def cluster_size(self) -> int:
        """Blocks per thread-block cluster (1: no cluster)."""
        cluster = self.sprogram.cluster
        return cluster.size if cluster else 1

    @property
    def multicast(self) -> tuple[str, ...]:
        """The loads the blocks of a cluster share (each fetches a slice for all)."""
        cluster = self.sprogram.cluster
        return cluster.multicast if cluster else ()

    @cached_property
    def tile_buffers(self) -> tuple[TileBuffer, ...]:
        """One buffer per async copy of the prologue (loaded once per output tile)."""
        buffers = []
        readers = 1 if self.pingpong else self.consumers
        for b in self._barriers(BarrierKind.STAGE):
            (dep, _), *rest = b.deps
            if rest or not self.is_async_copy(dep) or self.graph.stask(dep).phase != "prologue":
                continue
            loader = next(r for r in self.roles if any(i.stask == dep for i in self.stream(r)))
            buffers.append(TileBuffer(dep, b.name, b.waiter, loader,
                                      readers * WARPS_PER_WARPGROUP, self.owners))
        return tuple(buffers)

    def unringed_barriers(self) -> list[BarrierTask]:
        """mbarriers that belong to no ring and no tile buffer."""
        named = {r.full_name for r in self.rings} | {r.empty_name for r in self.rings}
        named |= {t.full_name for t in self.tile_buffers}
        return [b for b in self._barriers(BarrierKind.STAGE) if b.name not in named]

    @cached_property
    def turns(self) -> tuple[Turn, ...]:
        turns = []
        for b in self._barriers(BarrierKind.TURN):
            (after, distance), = b.deps
            index = self.consumer_roles.index(b.role)
            turns.append(Turn(b.name, b.waiter, after, self.consumer_roles[index - 1], b.role,
                              distance))
        return tuple(turns)

    @cached_property
    def inflight(self) -> dict[str, int]:
        """MMA groups an MMA sTask leaves pending after it issues (0: waits for itself)."""
        pending = {}
        for b in self._barriers(BarrierKind.MMA_WAIT):
            if b.deps == ((b.waiter, 1),):
                pending[b.waiter] = 1
        return pending

    def result_waits(self) -> list[BarrierTask]:
        """MMA waits other than an MMA's own in-flight group: an MMA's result read by the
        CUDA cores (``mma_qk_done_for_softmax_max``)."""
        return [b for b in self._barriers(BarrierKind.MMA_WAIT) if b.deps != ((b.waiter, 1),)]

    # ----- the tile loop and the epilogue --------------------------------------------
    @property
    def persistent(self) -> bool:
        return self.sprogram.persistent

    @property
    def raster(self) -> Raster:
        return self.sprogram.raster
