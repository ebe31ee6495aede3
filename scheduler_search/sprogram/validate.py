"""check_valid: does an sProgram fit the device? Every rejection carries a reason.

Checks, each with the hardware rule it enforces:

- shared memory: the block's plan (:mod:`~scheduler_search.sprogram.smem`, the one code
  generation lays kernels out with: rings, prologue tiles, the output's staging, split-K's
  partials, mbarriers, 1024-byte alignment) against the per-block opt-in limit;
- registers: the live register tiles of one consumer warpgroup thread against its
  setmaxnreg budget, and the warp roles' total against the SM's register file;
- wgmma shapes: M a multiple of 64 per warpgroup, N a multiple of 8, K of 16
  (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply", m64nNk16);
- TMA boxes: inner extent a multiple of 16 bytes, at most 256 elements per box
  dimension (CUDA driver API, cuTensorMapEncodeTiled); stored rows 16-byte aligned;
- structure: threads per block, tiles no larger than the problem, stages no deeper than
  the loop, roles the architecture has; stream-K only where its lowering exists and it
  evens out a wave.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from scheduler_search.hardware.model import Device, UnitKind
from scheduler_search.ir import STask, STaskGraph, STaskKind, TilePlan
from scheduler_search.ops import DTYPE_BYTES, OperatorSpec
from scheduler_search.sprogram.schedule import (
    SPLIT_K_REDUCES,
    WARPGROUP_THREADS,
    Cluster,
    Raster,
    SplitK,
    StreamK,
    WarpRoles,
)
from scheduler_search.sprogram.smem import (
    SWIZZLE_SPAN_BYTES,
    BufferRegions,
    OutputFragment,
    RingRegions,
    SmemPlan,
    SplitKRegions,
    StagedTile,
    plan_shared_memory,
)
from scheduler_search.sprogram.stream_k import StreamKShare

#: Deepest ring a persistent block may ask for (its tiles' trips do not bound it).
STAGES_MAX = 12
TMA_BOX_DIM_MAX = 256
TMA_MIN_INNER_BYTES = 16
#: Above this many TMA boxes per tile a load costs more in issue than it saves.
TMA_BOXES_PER_TILE_MAX = 32
#: The portable cluster sizes (a cluster of up to 8 blocks runs on every Hopper part).
CLUSTER_SIZES = (2, 4, 8)
#: Blocks a split-K cluster may have (any cluster of up to 8 blocks is portable).
SPLIT_K_BLOCKS = (2, 3, 4, 5, 6, 7, 8)
WGMMA_M, WGMMA_N_STEP, WGMMA_N_MAX, WGMMA_K = 64, 8, 256, 16
#: Registers every consumer thread needs besides its tiles: addresses, loop state,
#: barrier phases, descriptors (estimate; ptxas reports the truth at compile time).
CONSUMER_OVERHEAD_REGS = 24
PRODUCER_MIN_REGS = 24


class ScheduleLike(Protocol):
    """What check_valid reads: an SProgram, or the Decisions it is emitted from."""

    tile: dict[str, int]
    mapping: dict[str, UnitKind]
    roles: WarpRoles
    stages: dict[str, int]
    streams: dict[str, tuple[str, ...]]
    order: str
    consumer_split: str
    raster: Raster
    persistent: bool
    cluster: Cluster | None
    stream_k: StreamK | None
    swap_ab: bool
    split_k: SplitK | None

    def stream_of(self, stask: str) -> str | None: ...


SProgram = ScheduleLike


class RejectReason(StrEnum):
    """Why check_valid refused a schedule."""

    SMEM = "smem_exceeded"
    REGISTERS = "registers_exceeded"
    REGISTER_SPLIT = "register_split"
    THREADS = "threads_exceeded"
    WGMMA_SHAPE = "wgmma_shape"
    TMA_BOX = "tma_box"
    TILE_SHAPE = "tile_shape"
    STAGES = "stages"
    UNSUPPORTED = "unsupported_on_arch"


@dataclass(frozen=True)
class Rejection:
    reason: RejectReason
    detail: str


@dataclass(frozen=True)
class Validity:
    """Result of check_valid: resource use, and the rejections (empty when valid)."""

    smem_bytes: int
    consumer_regs_needed: int
    rejections: tuple[Rejection, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.rejections

    @property
    def reason(self) -> RejectReason | None:
        return self.rejections[0].reason if self.rejections else None




def _units(sprogram: SProgram) -> tuple:
    """The sEU mapping as a hashable key (in its own order: an equal mapping built in
    another order only misses the memo)."""
    return tuple(sprogram.mapping.items())


def _bytes(graph: STaskGraph, plan: TilePlan, tensor: str) -> int:
    return plan.tile_elements(tensor) * DTYPE_BYTES[graph.tensors[tensor].dtype]


def _staged_bytes(graph: STaskGraph, tensor: str) -> int:
    """Shared-memory bytes of a tensor's tiles (its copies too)."""
    return graph.staged_elements(tensor) * DTYPE_BYTES[graph.tensors[tensor].dtype]


def row_axis(sprogram: SProgram, graph: STaskGraph) -> str:
    """The spatial axis of the output tile's rows (wgmma's M; the consumers split it)."""
    return graph.spatial_axes[1] if sprogram.swap_ab else graph.spatial_axes[0]


def rows_per_consumer(sprogram: SProgram, graph: STaskGraph) -> int:
    """Rows of the output tile that one consumer warpgroup owns."""
    rows = graph.step(row_axis(sprogram, graph))
    if sprogram.consumer_split == "pingpong":
        return rows
    return rows // sprogram.roles.consumer_warpgroups


def smem_bytes(sprogram: SProgram, graph: STaskGraph, plan: TilePlan) -> int:
    """Dynamic shared memory the kernel asks for (:func:`smem_plan`, with the slack the
    kernel aligns its base by)."""
    key = ("smem", _units(sprogram), tuple(sprogram.stages.items()),
           tuple(sprogram.streams.items()), sprogram.persistent, sprogram.consumer_split,
           sprogram.roles.consumer_warpgroups, sprogram.swap_ab, sprogram.split_k)
    return graph.memoised(key, lambda: smem_plan(sprogram, graph, plan).dynamic_bytes)


def smem_plan(sprogram: ScheduleLike, graph: STaskGraph, plan: TilePlan) -> SmemPlan:
    """The block's shared-memory plan with the tile plan's tile sizes: a ring per operand
    stream of asynchronous loop loads, a buffer per asynchronous prologue load, the
    output's staging for a TMA store, split-K's partial sums (:func:`plan_shared_memory`,
    which code generation lays its kernels out with)."""
    def tile(task: STask) -> StagedTile:
        return StagedTile(task.name, _staged_bytes(graph, task.output.tensor))

    async_loads = [t for t in graph.stasks if t.kind is STaskKind.LOAD
                   and sprogram.mapping[t.name] in (UnitKind.TMA, UnitKind.LSU)]
    rings = []
    for stream, members in sprogram.streams.items():
        loads = [t for t in async_loads if t.phase == "loop" and t.name in members]
        if loads:
            rings.append(RingRegions(sprogram.stages[stream], tuple(tile(t) for t in loads),
                                     f"{stream}_full", f"{stream}_empty"))
    buffers = [BufferRegions(tile(t), f"{t.name}_full", f"{t.name}_empty")
               for t in async_loads if t.phase == "prologue"]
    # Shared tiles the consumers write themselves (a relayout of a loaded one), each
    # consumer only its own rows of them.
    rows_along, rows_mine = row_axis(sprogram, graph), rows_per_consumer(sprogram, graph)

    def own_tile(task: STask) -> StagedTile:
        size = _staged_bytes(graph, task.output.tensor)
        if rows_along in task.output.axes:
            size = size * rows_mine // graph.step(rows_along)
        return StagedTile(task.name, size)

    consumer_tiles = [own_tile(t) for t in graph.stasks if t.kind is not STaskKind.LOAD
                      and graph.tensors[t.output.tensor].space == "shared"]
    (store,) = [t for t in graph.phase_tasks("epilogue") if t.kind is STaskKind.STORE]
    split_k = SplitKRegions("part", "part_full", "part_free") if sprogram.split_k else None
    return plan_shared_memory(
        rings, buffers, _output_fragment(sprogram, graph, plan, store),
        tma_store=sprogram.mapping[store.name] is UnitKind.TMA,
        persistent=sprogram.persistent, pingpong=sprogram.consumer_split == "pingpong",
        split_k=split_k, side_row_bytes=graph.side_row_bytes, consumer_tiles=consumer_tiles)


def _output_fragment(sprogram: ScheduleLike, graph: STaskGraph, plan: TilePlan,
                     store: STask) -> OutputFragment:
    """The consumers' output tile (transposed by swap-AB) as the store writes it."""
    rows, *_, cols = plan.tensor_tiles[store.inputs[0].tensor]
    if sprogram.swap_ab:
        rows, cols = cols, rows
    return OutputFragment(
        rows=rows, cols=cols, elem_bytes=DTYPE_BYTES[graph.tensors[store.output.tensor].dtype],
        transposed=sprogram.swap_ab, consumer_rows=rows_per_consumer(sprogram, graph),
        consumers=sprogram.roles.consumer_warpgroups)


def consumer_registers(sprogram: SProgram, graph: STaskGraph, plan: TilePlan) -> int:
    """Per-thread registers one consumer warpgroup's live tiles need (32-bit registers).

    All loop-carried and per-iteration register tiles count as live at once, as they are
    in the overlapped order (the next scores beside the current probabilities and the
    output accumulator: FlashAttention-3's register budget).
    """
    key = ("registers", _units(sprogram), rows_per_consumer(sprogram, graph), sprogram.swap_ab)
    return graph.memoised(key, lambda: _consumer_registers(sprogram, graph, plan))


def _consumer_registers(sprogram: SProgram, graph: STaskGraph, plan: TilePlan) -> int:
    rows_along = row_axis(sprogram, graph)
    rows_tile = graph.step(rows_along)
    rows_mine = rows_per_consumer(sprogram, graph)
    # Tensors first written in the epilogue reuse the registers of the dead accumulators.
    epilogue_outputs = {t.output.tensor for t in graph.phase_tasks("epilogue")}
    loop_outputs = {t.output.tensor for t in graph.stasks if t.phase != "epilogue"}
    register_tensors = {
        n
        for n, t in graph.tensors.items()
        if t.space == "register" and t.reuses is None
        and (n in loop_outputs or n not in epilogue_outputs)
    }
    # Loads done by the consumers themselves land in registers, not shared memory.
    for task in graph.stasks:
        if task.kind is STaskKind.LOAD and sprogram.mapping[task.name] is UnitKind.CUDA_CORE:
            register_tensors.add(task.output.tensor)
    axes_of: dict[str, tuple[str, ...]] = {}
    for task in graph.stasks:
        for access in (task.output, *task.inputs):
            axes_of.setdefault(access.tensor, access.axes)
    total_bytes = 0.0
    for name in register_tensors:
        size = _bytes(graph, plan, name)
        if rows_along in axes_of[name]:
            size = size * rows_mine / rows_tile
        total_bytes += size
    return CONSUMER_OVERHEAD_REGS + int(-(-total_bytes // (4 * WARPGROUP_THREADS)))


def _check_mma_shapes(
    sprogram: SProgram, graph: STaskGraph, plan: TilePlan
) -> tuple[Rejection, ...]:
    key = ("mma", rows_per_consumer(sprogram, graph), sprogram.swap_ab)
    return graph.memoised(key, lambda: tuple(_mma_shape_problems(sprogram, graph, plan)))


def _mma_shape_problems(
    sprogram: SProgram, graph: STaskGraph, plan: TilePlan
) -> list[Rejection]:
    problems = []
    rows_mine = rows_per_consumer(sprogram, graph)
    rows_along = row_axis(sprogram, graph)
    for task in graph.stasks:
        if task.kind is not STaskKind.MMA:
            continue
        extents = plan.stask_extents[task.name]
        m_axis, n_axis = task.output.axes[0], task.output.axes[1]
        if sprogram.swap_ab:  # the output transposed: its columns along wgmma's M
            m_axis, n_axis = n_axis, m_axis
        m = rows_mine if m_axis == rows_along else extents[m_axis]
        n = extents[n_axis]
        k_axes = [a for a in task.axes if a not in task.output.axes]
        k = 1
        for axis in k_axes:
            k *= extents[axis]
        if m % WGMMA_M or m == 0:
            problems.append(
                Rejection(
                    RejectReason.WGMMA_SHAPE,
                    f"{task.name}: M={m} per warpgroup is not a multiple of {WGMMA_M}",
                )
            )
        if n % WGMMA_N_STEP:
            problems.append(
                Rejection(
                    RejectReason.WGMMA_SHAPE,
                    f"{task.name}: N={n} is not a multiple of {WGMMA_N_STEP}",
                )
            )
        if k % WGMMA_K:
            problems.append(
                Rejection(
                    RejectReason.WGMMA_SHAPE, f"{task.name}: K={k} is not a multiple of {WGMMA_K}"
                )
            )
    return problems


def _check_tma(
    sprogram: SProgram, graph: STaskGraph, plan: TilePlan, spec: OperatorSpec
) -> tuple[Rejection, ...]:
    key = ("tma", _units(sprogram))
    return graph.memoised(key, lambda: tuple(_tma_problems(sprogram, graph, plan, spec)))


def _tma_problems(
    sprogram: SProgram, graph: STaskGraph, plan: TilePlan, spec: OperatorSpec
) -> list[Rejection]:
    problems = []
    for task in graph.stasks:
        if sprogram.mapping[task.name] is not UnitKind.TMA:
            continue
        if task.kind is STaskKind.LOAD:
            tensor, axes = task.output.tensor, task.output.axes
            elem = DTYPE_BYTES[graph.tensors[tensor].dtype]
            shape = plan.tensor_tiles[tensor]
        else:
            glob = graph.tensors[task.output.tensor]
            elem = DTYPE_BYTES[glob.dtype]
            shape = tuple(plan.stask_extents[task.name][a] for a in task.output.axes)
            axes = task.output.axes
            row = next(t for t in spec.tensors() if t.name == glob.name).shape[-1]
            if (row * elem) % TMA_MIN_INNER_BYTES:
                problems.append(
                    Rejection(
                        RejectReason.TMA_BOX,
                        f"{task.name}: {row * elem}-byte output rows are not 16-byte aligned",
                    )
                )
        inner_bytes = shape[-1] * elem
        if inner_bytes % TMA_MIN_INNER_BYTES:
            problems.append(
                Rejection(
                    RejectReason.TMA_BOX,
                    f"{task.name}: box inner extent {inner_bytes} B is not a multiple of 16 B",
                )
            )
            continue
        boxes = -(-inner_bytes // SWIZZLE_SPAN_BYTES)
        for extent in shape[:-1]:
            boxes *= -(-extent // TMA_BOX_DIM_MAX)
        if boxes > TMA_BOXES_PER_TILE_MAX:
            box = dict(zip(axes, shape, strict=True))
            problems.append(
                Rejection(
                    RejectReason.TMA_BOX,
                    f"{task.name}: {boxes} TMA boxes per tile ({box})",
                )
            )
    return problems


def check_tiles(tile: dict[str, int], spec: OperatorSpec) -> list[Rejection]:
    """The rules that depend on the tile shape alone (the space prunes with them early)."""
    graph = spec.graph(tile)
    return list(graph.memoised(("tiles",), lambda: tuple(_tile_problems(tile, graph, spec))))


def _tile_problems(tile: dict[str, int], graph: STaskGraph, spec: OperatorSpec) -> list[Rejection]:
    problems: list[Rejection] = []

    for axis, size in tile.items():
        extent = graph.extents[axis]
        if size <= 0:
            problems.append(Rejection(RejectReason.TILE_SHAPE, f"tile_{axis}={size}"))
        elif axis in type(spec).exact_axes and extent % size:
            problems.append(
                Rejection(
                    RejectReason.TILE_SHAPE, f"tile_{axis}={size} does not divide {axis}={extent}"
                )
            )
        elif size >= 2 * extent and size > WGMMA_M:
            problems.append(
                Rejection(
                    RejectReason.TILE_SHAPE, f"tile_{axis}={size} is over twice {axis}={extent}"
                )
            )
    for row, red in graph.causal_pairs:
        a, b = graph.step(row), graph.step(red)
        if a % b and b % a:
            problems.append(
                Rejection(
                    RejectReason.TILE_SHAPE,
                    f"causal blocks need tile_{row}={a} and tile_{red}={b} to nest",
                )
            )
    return problems


def _cluster_problems(
    cluster: Cluster | None, graph: STaskGraph, spec: OperatorSpec, device: Device
) -> list[Rejection]:
    """A cluster needs TMA multicast, a portable size, a tile grid it divides and a load
    its blocks share; along a grid axis, its blocks must fall in one sharing group (the
    heads of one B group), or they would multicast each other the wrong tile."""
    if cluster is None:
        return []
    problems = []
    if not device.has_tma:
        problems.append(Rejection(RejectReason.UNSUPPORTED,
                                  f"thread-block clusters need TMA multicast ({device.arch})"))
    if cluster.size not in CLUSTER_SIZES:
        problems.append(Rejection(RejectReason.TILE_SHAPE,
                                  f"cluster_size={cluster.size} is not one of {CLUSTER_SIZES}"))
    if cluster.axis in graph.grid_axes:
        tiles = graph.grid_axes[cluster.axis]
    else:
        tiles = -(-graph.extents[cluster.axis] // graph.step(cluster.axis))
    if tiles % cluster.size:
        problems.append(Rejection(
            RejectReason.TILE_SHAPE,
            f"{tiles} tiles along {cluster.axis} do not split into clusters of {cluster.size}"))
    sharing = spec.grid_sharing(graph.tile)
    for tensor, groups in sharing.items():
        group = groups.get(cluster.axis)
        if group and group % cluster.size:
            problems.append(Rejection(
                RejectReason.TILE_SHAPE,
                f"{group} tiles along {cluster.axis} share a slice of {tensor}: clusters of "
                f"{cluster.size} would span two of them"))
    if not cluster.multicast:
        problems.append(Rejection(RejectReason.UNSUPPORTED,
                                  f"no TMA load is shared along {cluster.axis}"))
    return problems


def stream_k_share(sprogram: SProgram, graph: STaskGraph, device: Device) -> StreamKShare | None:
    """The stream-K share of ``sprogram``'s persistent grid (one block an SM, every SM:
    fewer tiles than SMs are split among them all), or None. A cluster's blocks share out
    their tiles together: the share is over clusters and the tiles they take as one."""
    if sprogram.stream_k is None:
        return None
    size = sprogram.cluster.size if sprogram.cluster is not None else 1
    return StreamKShare(tiles=graph.tile_count() // size, trips=graph.loop_trips(),
                        blocks=device.clusters_at_once(size), waves=sprogram.stream_k.waves)


def _stream_k_problems(sprogram: SProgram, graph: STaskGraph, device: Device) -> list[Rejection]:
    """Stream-K is lowered for persistent grids of cooperative consumers fed by a producer
    warp, one block an SM (or one cluster a group of SMs), over a reduction loop; and only
    where it evens out a wave."""
    share = stream_k_share(sprogram, graph, device)
    if share is None:
        return []
    needs = [
        (not sprogram.persistent, "stream-K needs a persistent grid"),
        (not sprogram.roles.warp_specialized, "stream-K needs a producer warp"),
        (sprogram.consumer_split == "pingpong", "stream-K is lowered for cooperative consumers"),
        (not graph.reduction_axes, "stream-K needs a reduction loop to share"),
    ]
    problems = [Rejection(RejectReason.UNSUPPORTED, why) for failed, why in needs if failed]
    problem = share.problem()
    if problem:
        problems.append(Rejection(RejectReason.UNSUPPORTED, f"stream_k: {problem}"))
    return problems


def _split_k_problems(sprogram: SProgram, graph: STaskGraph, device: Device) -> list[Rejection]:
    """Split-K is lowered for cooperative consumers fed by a producer warp, over a
    reduction loop of at least a trip a block, in a cluster of its own (not beside a
    multicast cluster or stream-K's shares)."""
    split = sprogram.split_k
    if split is None:
        return []
    trips = graph.loop_trips()
    needs = [
        (split.blocks not in SPLIT_K_BLOCKS, f"split_k={split.blocks} is not one of "
                                             f"{SPLIT_K_BLOCKS}"),
        (split.reduce not in SPLIT_K_REDUCES, f"split_k_reduce={split.reduce!r} is not one "
                                              f"of {SPLIT_K_REDUCES}"),
        (not device.capabilities.clusters,
         f"split-K's blocks share a tile in a thread-block cluster ({device.arch} has none)"),
        (not sprogram.roles.warp_specialized, "split-K needs a producer warp"),
        (sprogram.consumer_split == "pingpong", "split-K is lowered for cooperative consumers"),
        (not graph.reduction_axes, "split-K needs a reduction loop to split"),
        (bool(graph.causal_pairs), "split-K over tiles of different trip counts"),
        (sprogram.cluster is not None, "split-K's cluster cannot also multicast along a tile axis"),
        (sprogram.stream_k is not None, "split-K and stream-K both split the loop"),
        (trips < split.blocks, f"{trips} loop trips do not give {split.blocks} blocks one each"),
    ]
    return [Rejection(RejectReason.UNSUPPORTED, why) for failed, why in needs if failed]


def check_valid(sprogram: SProgram, spec: OperatorSpec, device: Device) -> Validity:
    """Check ``sprogram`` against ``device``; every failing rule gives a Rejection."""
    graph = spec.graph(sprogram.tile)
    plan = graph.plan
    roles = sprogram.roles
    problems = check_tiles(sprogram.tile, spec)
    if any(size <= 0 for size in sprogram.tile.values()):
        return Validity(smem_bytes=0, consumer_regs_needed=0, rejections=tuple(problems))

    trips = graph.loop_trips()
    # A persistent block's ring runs on across its tiles (the next tile's loads fill the
    # slots its last trips free): there only shared memory bounds the depth.
    deepest = STAGES_MAX if sprogram.persistent else max(trips, 1)
    for stream, depth in sprogram.stages.items():
        if depth < 1 or depth > deepest:
            problems.append(
                Rejection(
                    RejectReason.STAGES, f"stages_{stream}={depth} with {trips} loop iterations"
                )
            )

    if roles.warp_specialized and not (device.has_tma or device.capabilities.cp_async):
        problems.append(
            Rejection(RejectReason.UNSUPPORTED,
                      f"warp specialisation needs TMA or cp.async ({device.arch})")
        )
    if sprogram.order != "serial" and not device.unit(UnitKind.TENSOR_CORE).is_async:
        problems.append(
            Rejection(
                RejectReason.UNSUPPORTED, f"order {sprogram.order} needs async MMA ({device.arch})"
            )
        )
    if sprogram.consumer_split == "pingpong" and roles.consumer_warpgroups < 2:
        problems.append(
            Rejection(RejectReason.UNSUPPORTED, "pingpong needs two consumer warpgroups")
        )

    if roles.threads > device.max_threads_per_block:
        problems.append(Rejection(RejectReason.THREADS, f"{roles.threads} threads per block"))
    if roles.warp_specialized and roles.producer_regs < PRODUCER_MIN_REGS:
        problems.append(
            Rejection(RejectReason.REGISTER_SPLIT, f"producer_regs={roles.producer_regs}")
        )
    if roles.registers_per_block() > device.regs_per_sm or roles.consumer_regs < PRODUCER_MIN_REGS:
        problems.append(
            Rejection(
                RejectReason.REGISTER_SPLIT, f"{roles.registers_per_block()} registers per block"
            )
        )

    problems += _check_mma_shapes(sprogram, graph, plan)
    problems += _check_tma(sprogram, graph, plan, spec)
    problems += _cluster_problems(sprogram.cluster, graph, spec, device)
    problems += _stream_k_problems(sprogram, graph, device)
    problems += _split_k_problems(sprogram, graph, device)

    smem = smem_bytes(sprogram, graph, plan)
    if smem > device.smem_per_block_bytes:
        problems.append(
            Rejection(
                RejectReason.SMEM, f"{smem} B of shared memory > {device.smem_per_block_bytes} B"
            )
        )
    regs = consumer_registers(sprogram, graph, plan)
    if regs > roles.consumer_regs:
        problems.append(
            Rejection(
                RejectReason.REGISTERS,
                f"{regs} registers per consumer thread > budget {roles.consumer_regs}",
            )
        )
    return Validity(smem_bytes=smem, consumer_regs_needed=regs, rejections=tuple(problems))
