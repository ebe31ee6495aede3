"""From search choices to an sProgram, through Append and Wait.

A *choice* dict is what the search picks (tile sizes, warp roles, stages, order, sEU
mapping, raster); :func:`plan_sprogram` turns it into the explicit sProgram: which role
issues which sTask on which sEU in what order, and every barrier between them. The same
choices always give the same sProgram (and hash).

Choice keys:
    ``tile_<axis>``: tile extent of each partitioned axis.
    ``warp_specialized``: a producer warp issues the loads; consumers only compute.
    ``consumer_warpgroups``: 1-3 consumer warpgroups.
    ``consumer_split``: ``cooperative`` (warpgroups split one tile's rows) or ``pingpong``
        (each warpgroup owns a tile of its own).
    ``wg_schedule``: ``free`` or ``alternate`` (named barriers make the consumer
        warpgroups take turns on the tensor cores, so one's softmax or epilogue hides
        under the other's matmuls).
    ``order``: ``serial``, ``overlap`` (the loop's first MMA runs one iteration ahead,
        or, for a loop whose MMA comes last, its completion is awaited one iteration late)
        or, for a loop of two MMAs, ``rotate`` (FlashAttention-3's order: the first MMA
        and the register math run one iteration ahead of the second MMA, so the two MMAs
        are issued back to back and the math of one trip runs under the other's MMA),
        or ``interleave`` (the MMAs that read only loaded tiles are issued first in each
        trip, and every MMA's result is waited for only where it is read, so the math of
        one product runs under the next: the attention backward's ``dP`` under the
        exponentials of ``P``).
    ``producer_regs``: per-thread registers of the producer warpgroup (setmaxnreg).
    ``stages_<stream>``: pipeline depth of each operand stream.
    ``map_<stask>``: the sEU of an sTask that more than one sEU can run;
        ``map_vector_loads`` maps every load of a 1-D tile (dt, dA) at once.
    ``raster_major``, ``raster_swizzle``: tile order over the grid;
        ``raster_heaviest_first`` (causal grids): the heaviest tiles first across it;
        ``raster_stagger`` (sums shared by tiles, in any order): each tile's loop starts
        its index's worth of trips in.
    ``persistent``: one block per SM looping over tiles, or one block per tile.
    ``cluster_size``, ``cluster_axis``: blocks of neighbouring tiles along the axis run as
        one thread-block cluster, and the loads whose tile they share are multicast.
    ``stream_k``: waves of a persistent grid's last tiles shared out by loop trips
        (0: every tile whole; see :class:`StreamK`).
    ``swap_ab``: the tensor cores compute the output transposed (``SProgram.swap_ab``).
    ``split_k``: blocks of a cluster that split each tile's loop trips and add their sums
        in distributed shared memory (1: a tile's loop on one block; see :class:`SplitK`).
    ``split_k_reduce``: who adds a split-K cluster's sums: its first block, or every
        block a share of the tile (``SplitK.reduce``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal

from scheduler_search.hardware.model import Device, UnitKind
from scheduler_search.ir import STask, STaskGraph, STaskKind
from scheduler_search.ops import OperatorSpec
from scheduler_search.sprogram.primitives import ScheduleError, SProgramBuilder
from scheduler_search.sprogram.schedule import (
    WARPGROUP_THREADS,
    BarrierKind,
    Cluster,
    Raster,
    SplitK,
    SProgram,
    StreamK,
    WarpRoles,
    tile_owners,
)

ASYNC_COPY_UNITS = (UnitKind.TMA, UnitKind.LSU)

#: Loop orders (see ``order`` above).
ORDERS = ("serial", "overlap", "rotate", "interleave")

#: setmaxnreg takes multiples of 8 between 24 and 256 (PTX ISA, "setmaxnreg").
SETMAXNREG_MIN, SETMAXNREG_MAX, SETMAXNREG_STEP = 24, 256, 8


def default_mapping(graph: STaskGraph, device: Device) -> dict[str, UnitKind]:
    """Each sTask on its preferred sEU that the device has (a fresh dict)."""
    key = ("default_mapping", tuple(sorted(device.unit_kinds())))
    return dict(graph.memoised(key, lambda: _preferred_units(graph, device)))


@dataclass(frozen=True)
class _ChoiceKeys:
    """The keys of a choices dict by what they set, sorted too: worked out once for each
    set of keys (the space resolves millions of points over a few sets of keys)."""

    tiles: tuple[str, ...]
    maps: tuple[str, ...]
    stages: tuple[str, ...]
    sorted: tuple[str, ...]

    @staticmethod
    @functools.cache
    def of(keys: tuple[str, ...]) -> _ChoiceKeys:
        def starting(prefix: str) -> tuple[str, ...]:
            return tuple(k for k in keys if k.startswith(prefix))

        return _ChoiceKeys(starting("tile_"), starting("map_"), starting("stages_"),
                           tuple(sorted(keys)))


def _mapping(spec: OperatorSpec, graph: STaskGraph, device: Device,
             maps: list[tuple[str, Any]]) -> dict[str, UnitKind]:
    """The sEU of each sTask: its preferred one, or the one a ``map_`` choice names.

    Raises:
        ScheduleError: a choice maps an unknown sTask, or one to an sEU it cannot run on.
    """
    mapping = default_mapping(graph, device)
    for key, value in maps:
        if key == "map_vector_loads":
            for name in _vector_loads(graph):
                mapping[name] = UnitKind(value)
            continue
        name = key[4:]
        if name not in mapping:
            raise ScheduleError(f"{key}: {spec.op} has no sTask {name!r}")
        mapping[name] = UnitKind(value)
    for name, unit in mapping.items():
        if unit not in graph.stask(name).units:
            raise ScheduleError(f"map_{name}: {name} cannot run on {unit.value}")
    return mapping


def _vector_loads(graph: STaskGraph) -> tuple[str, ...]:
    """The loads of one-axis tensors (``map_vector_loads`` maps them all at once)."""
    key = ("vector_loads",)
    if key not in graph.memo:
        graph.memo[key] = tuple(
            t.name for t in graph.stasks if t.kind is STaskKind.LOAD and len(t.output.axes) == 1
        )
    return graph.memo[key]  # type: ignore[return-value]


def _readers(
    graph: STaskGraph, deps: dict[str, tuple[tuple[str, int], ...]]
) -> dict[str, list[str]]:
    """sTask -> the sTasks that read what it writes, in graph order (once per graph)."""
    key = ("readers",)
    if key not in graph.memo:
        found: dict[str, list[str]] = {}
        for reader, producers in deps.items():
            for producer in dict.fromkeys(name for name, _ in producers):
                found.setdefault(producer, []).append(reader)
        graph.memo[key] = found
    return graph.memo[key]  # type: ignore[return-value]


def _preferred_units(graph: STaskGraph, device: Device) -> dict[str, UnitKind]:
    have = device.unit_kinds()
    mapping = {}
    for task in graph.stasks:
        options = [u for u in task.units if u in have]
        if not options:
            raise ScheduleError(f"{device.name} has no sEU that can run {task.name}")
        mapping[task.name] = options[0]
    return mapping


def consumer_register_budget(
    device: Device, warp_specialized: bool, consumers: int, producer_regs: int
) -> int:
    """Largest per-thread register count the consumers can be given (multiple of 8)."""
    cap = min(device.regs_per_thread_max, SETMAXNREG_MAX)
    producer = WARPGROUP_THREADS * producer_regs if warp_specialized else 0
    per_thread = (device.regs_per_sm - producer) // (consumers * WARPGROUP_THREADS)
    return min(cap, per_thread) // SETMAXNREG_STEP * SETMAXNREG_STEP


@dataclass(frozen=True)
class Decisions:
    """The choices resolved against the graph and device, before any Append or Wait.

    It has every field that ``check_valid`` reads, so the space can reject a point
    without building its sProgram.
    """

    graph: STaskGraph
    tile: dict[str, int]
    mapping: dict[str, UnitKind]
    roles: WarpRoles
    streams: dict[str, tuple[str, ...]]
    stages: dict[str, int]
    order: str
    consumer_split: Literal["cooperative", "pingpong"]
    alternate: bool
    raster: Raster
    persistent: bool
    choices: dict[str, Any]
    cluster: Cluster | None = None
    stream_k: StreamK | None = None
    swap_ab: bool = False
    split_k: SplitK | None = None

    def stream_of(self, stask: str) -> str | None:
        for name, members in self.streams.items():
            if stask in members:
                return name
        return None

    @property
    def owners(self) -> int:
        """Tiles one unit of work holds (:func:`tile_owners`)."""
        return tile_owners(self.consumer_split, self.roles.consumer_warpgroups)


def resolve_choices(spec: OperatorSpec, device: Device, choices: dict[str, Any]) -> Decisions:
    """Resolve ``choices`` (defaults filled in) for ``spec`` on ``device``.

    Raises:
        ScheduleError: a choice names an unknown axis, stream or sTask, or maps an sTask
            to an sEU that cannot run it.
    """
    keys = _ChoiceKeys.of(tuple(choices))
    tile = {key[5:]: int(choices[key]) for key in keys.tiles}
    maps = [(key, choices[key]) for key in keys.maps]
    graph = spec.graph(tile)
    unknown = set(tile) - set(graph.extents)
    if unknown:
        raise ScheduleError(f"tile names unknown axes {sorted(unknown)}")
    key = ("mapping", tuple(sorted(device.unit_kinds())), tuple(maps))
    mapping = dict(graph.memoised(key, lambda: _mapping(spec, graph, device, maps)))

    ws = bool(choices.get("warp_specialized", device.has_tma))
    consumers = int(choices.get("consumer_warpgroups", 2 if ws else 1))
    if consumers < 1:
        raise ScheduleError(f"consumer_warpgroups: {consumers} is not >= 1")
    producer_regs = int(choices.get("producer_regs", 40)) if ws else 0
    consumer_regs = consumer_register_budget(device, ws, consumers, producer_regs)
    if ws and not device.capabilities.setmaxnreg:
        # Without setmaxnreg every warpgroup keeps the launch bound's even share.
        producer_regs = consumer_regs = consumer_register_budget(device, False, consumers + 1, 0)
    roles = WarpRoles(
        warp_specialized=ws,
        producer_warps=1 if ws else 0,
        consumer_warpgroups=consumers,
        producer_regs=producer_regs,
        consumer_regs=consumer_regs,
    )
    order = choices.get("order", "serial")
    if order not in ORDERS:
        raise ScheduleError(f"order: {order!r} is not one of {', '.join(ORDERS)}")
    split = choices.get("consumer_split", "cooperative")
    if split not in ("cooperative", "pingpong"):
        raise ScheduleError(f"consumer_split: {split!r} is not cooperative or pingpong")

    streams = spec.stream_loads()
    stages = {name: int(choices.get(f"stages_{name}", 2)) for name in streams}
    for key in keys.stages:
        if key[7:] not in streams:
            raise ScheduleError(f"{key}: {spec.op} has no operand stream {key[7:]!r}")

    raster = Raster(
        major=str(choices.get("raster_major", graph.spatial_axes[0])),
        swizzle=int(choices.get("raster_swizzle", 1)),
        heaviest_first=bool(choices.get("raster_heaviest_first", False)),
        stagger=bool(choices.get("raster_stagger", False)),
    )
    if raster.major not in graph.spatial_axes + tuple(graph.grid_axes):
        raise ScheduleError(f"raster_major: {raster.major!r} is not an axis of the grid")
    if raster.heaviest_first and not graph.causal_pairs:
        raise ScheduleError("raster_heaviest_first: every tile of this grid carries the same "
                            "work (no causal mask)")
    if raster.stagger and not graph.shared_sums:
        raise ScheduleError("raster_stagger: no tile of this kernel adds to a sum other tiles "
                            "add to in any order")
    return Decisions(
        graph=graph,
        tile=dict(graph.tile),
        mapping=mapping,
        roles=roles,
        streams=streams,
        stages=stages,
        order=order,
        consumer_split=split,
        alternate=choices.get("wg_schedule", "free") == "alternate" and consumers > 1,
        raster=raster,
        persistent=bool(choices.get("persistent", False)),
        choices={key: choices[key] for key in keys.sorted},
        cluster=_resolve_cluster(spec, graph, mapping, choices),
        stream_k=_resolve_stream_k(choices),
        swap_ab=bool(choices.get("swap_ab", False)),
        split_k=_resolve_split_k(choices),
    )


def _interleaved(graph: STaskGraph, body: list[str], mmas: list[str]) -> list[str]:
    """The loop body with the sTasks that read only loaded tiles moved to its start, MMAs
    first (each order kept): their products and math run while the rest waits.

    Raises:
        ScheduleError: no MMA would move, so the order would be the serial one.
    """
    loaded = {t.output.tensor for t in graph.stasks if t.kind is STaskKind.LOAD}

    def reads_loaded_only(name: str) -> bool:
        # An MMA's own accumulator is not an operand; math in place reads its producer's.
        task = graph.stask(name)
        return all(a.tensor in loaded for a in task.inputs
                   if not (name in mmas and a.tensor == task.output.tensor))

    early = [n for n in mmas if reads_loaded_only(n)]
    early += [n for n in body if n not in mmas and reads_loaded_only(n)]
    reordered = [*early, *(n for n in body if n not in early)]
    if [n for n in reordered if n in mmas] == mmas:
        raise ScheduleError(f"order interleave: {graph.op}'s loop already issues its MMAs "
                            "that read only loaded tiles first")
    return reordered


def _resolve_stream_k(choices: dict[str, Any]) -> StreamK | None:
    waves = int(choices.get("stream_k", 0))
    if waves < 0:
        raise ScheduleError(f"stream_k: {waves} is not >= 0")
    return StreamK(waves) if waves else None


def _resolve_split_k(choices: dict[str, Any]) -> SplitK | None:
    blocks = int(choices.get("split_k", 1))
    if blocks < 1:
        raise ScheduleError(f"split_k: {blocks} is not >= 1")
    return SplitK(blocks, choices.get("split_k_reduce", "first_block")) if blocks > 1 else None


def _resolve_cluster(
    spec: OperatorSpec, graph: STaskGraph, mapping: dict[str, UnitKind], choices: dict[str, Any]
) -> Cluster | None:
    """The cluster ``cluster_size`` / ``cluster_axis`` ask for: the loop's TMA loads its
    blocks share are multicast. Along a spatial axis they are the loads whose tile has no
    coordinate along it (GEMM's B along m); along a grid axis, the loads of a tensor that
    neighbouring instances read the same slice of (``spec.grid_sharing``: Mamba2's B,
    shared by the heads of a group)."""
    size = int(choices.get("cluster_size", 1))
    if size < 1:
        raise ScheduleError(f"cluster_size: {size} is not >= 1")
    if size == 1:
        return None
    axis = str(choices.get("cluster_axis", graph.spatial_axes[0]))
    if axis not in graph.spatial_axes + tuple(graph.grid_axes):
        raise ScheduleError(f"cluster_axis: {axis!r} is not an axis of the grid")
    sharing = spec.grid_sharing(graph.tile)

    def shared(task: STask) -> bool:
        if axis in graph.spatial_axes:
            return axis not in task.output.axes
        return any(axis in sharing.get(source.tensor, {}) for source in task.inputs)

    multicast = tuple(
        t.name for t in graph.stasks
        if t.kind is STaskKind.LOAD and t.phase == "loop" and mapping[t.name] is UnitKind.TMA
        and shared(t)
    )
    return Cluster(axis=axis, size=size, multicast=multicast)


def plan_sprogram(spec: OperatorSpec, device: Device, choices: dict[str, Any]) -> SProgram:
    """Build the sProgram that ``choices`` describe for ``spec`` on ``device``.

    Raises:
        ScheduleError: as :func:`resolve_choices`.
    """
    return emit_sprogram(spec, device, resolve_choices(spec, device, choices))


def emit_sprogram(spec: OperatorSpec, device: Device, decided: Decisions) -> SProgram:
    """Append every sTask instance and Wait on every dependence that ``decided`` implies."""
    graph, mapping, roles = decided.graph, decided.mapping, decided.roles
    ws, order, alternate = roles.warp_specialized, decided.order, decided.alternate
    streams, stages = decided.streams, decided.stages
    builder = SProgramBuilder(graph, device, mapping)
    loader = "producer" if ws else "consumer0"
    consumer_roles = roles.consumer_roles
    deps = graph.dependencies()

    def is_async_copy(name: str) -> bool:
        task = graph.stask(name)
        return task.kind is STaskKind.LOAD and mapping[name] in ASYNC_COPY_UNITS

    def readers(name: str) -> list[str]:
        return _readers(graph, deps).get(name, [])

    # Prologue: async copies by the loader; everything else by every consumer.
    for task in graph.phase_tasks("prologue"):
        if is_async_copy(task.name):
            builder.append(task.name, role=loader)
            for reader in readers(task.name)[:1]:
                builder.wait(reader, [(task.name, 0)], name=f"{task.name}_full")
        else:
            for role in consumer_roles:
                builder.append(task.name, role=role)

    # The consumers' issue order of the loop (interleave moves MMAs ahead of math).
    body = [t.name for t in graph.phase_tasks("loop") if not is_async_copy(t.name)]
    mmas = [n for n in body if graph.stask(n).kind is STaskKind.MMA]
    order_of = graph.names().index  # a ring's first and last reader
    if order == "interleave":
        body = _interleaved(graph, body, mmas)
        order_of = body.index

    # Loop, loader side: one full/empty mbarrier ring per operand stream.
    for stream, members in streams.items():
        copies = [m for m in members if is_async_copy(m)]
        for name in copies:
            builder.append(name, role=loader)
        if not copies:
            continue
        consumers_of = [r for m in copies for r in readers(m)]
        last_reader = max(consumers_of, key=order_of)
        first_reader = min(consumers_of, key=order_of)
        depth = stages[stream]
        builder.wait(first_reader, [(m, 0) for m in copies], name=f"{stream}_full", slots=depth)
        builder.wait(
            copies[0], [(last_reader, depth)], name=f"{stream}_empty", slots=depth, role=loader
        )

    # Loop, consumer side.
    lead_first_mma = order == "overlap" and bool(mmas) and mmas[0] != body[-1]
    rotate = order == "rotate" and len(mmas) == 2
    if order == "rotate" and not rotate:
        raise ScheduleError(f"order rotate needs a loop of two MMAs ({spec.op} has {len(mmas)})")
    leads = dict.fromkeys(body, 0)
    if lead_first_mma:
        body.remove(mmas[0])
        body.insert(0, mmas[0])
        leads[mmas[0]] = 1
    if rotate:
        # mma0(t+1), mma1(t), then the math of trip t+1: the MMAs back to back.
        body = [*mmas, *(n for n in body if n not in mmas)]
        leads = {n: 0 if n == mmas[1] else 1 for n in body}
    for index, role in enumerate(consumer_roles):
        for name in body:
            builder.append(name, role=role, lead=leads[name])
        if alternate and mmas:
            # Consumer i follows consumer i-1 within a step; consumer 0 follows the last
            # consumer's previous step (distance 1): the turn goes round.
            previous = consumer_roles[index - 1]
            builder.wait(
                mmas[0],
                [(mmas[-1], 0 if index > 0 else 1)],
                name=f"tc_turn_{previous}_to_{role}",
                kind=BarrierKind.TURN,
                role=role,
            )
    # An MMA result read by the CUDA cores: wait for its wgmma group.
    for name in body:
        for dep, distance in deps[name]:
            if dep in mmas and mapping[name] is not UnitKind.TENSOR_CORE:
                builder.wait(
                    name, [(dep, distance)], name=f"{dep}_done_for_{name}",
                    kind=BarrierKind.MMA_WAIT
                )
    if mmas and order == "overlap" and not lead_first_mma:
        builder.wait(mmas[-1], [(mmas[-1], 1)], name=f"{mmas[-1]}_inflight",
                     kind=BarrierKind.MMA_WAIT)

    # Epilogue.
    for task in graph.phase_tasks("epilogue"):
        for role in consumer_roles:
            builder.append(task.name, role=role)

    return builder.build(
        params=spec.params(),
        roles=roles,
        streams=streams,
        stages=stages,
        order=order,
        consumer_split=decided.consumer_split,
        raster=decided.raster,
        persistent=decided.persistent,
        choices=decided.choices,
        cluster=decided.cluster,
        stream_k=decided.stream_k,
        swap_ab=decided.swap_ab,
        split_k=decided.split_k,
    )
