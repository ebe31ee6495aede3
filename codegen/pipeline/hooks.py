"""What an operator adds to the pipeline skeleton: its tiles, loads, math and output.

The skeleton (:mod:`codegen.pipeline.skeleton`) owns everything a Hopper kernel of the
space shares: the shared-memory plan, the mbarrier rings, the producer loop, the consumer
warpgroups and their register budgets, the turn barriers, the persistent tile loop and
its raster, the epilogue. An operator implements :class:`OperatorHooks`; the skeleton
calls, in this order:

1. :meth:`~OperatorHooks.problem` (may the operator lower this sProgram at all),
   :attr:`~OperatorHooks.grid_axes`, :meth:`~OperatorHooks.operand` for each loaded
   sTask and :meth:`~OperatorHooks.output` while it plans;
2. :meth:`~OperatorHooks.constants` once, at the top of the kernel text;
3. :meth:`~OperatorHooks.load` inside the ring's load function, once per loaded sTask;
4. :meth:`~OperatorHooks.consumer_state` at the top of each consumer warpgroup;
5. for each output tile, the prologue's sTasks (once per tile), then each loop trip's:
   :meth:`~OperatorHooks.mma` for an MMA sTask, with the ring stages it reads, and
   :meth:`~OperatorHooks.pin` around the MMA waits; :meth:`~OperatorHooks.math` for
   register math; :meth:`~OperatorHooks.thread_load` for a load on the CUDA cores;
6. :meth:`~OperatorHooks.tensor_maps` for the launch contract.

(ThunderKittens' LCF template splits a kernel the same way: a layout, a producer
``load``, a consumer ``compute`` and ``finish``.)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from codegen.artifact import TensorMapArg, WorkspaceArg
from codegen.pipeline.code import Code
from codegen.pipeline.limits import CONSUMER_OVERHEAD_REGS
from codegen.pipeline.operand import OperandTile, VectorTile
from codegen.pipeline.pipelined import TripAt
from codegen.pipeline.structure import Issue, PipelineStructure
from codegen.targets import Target, target_for

#: Producer registers with multicast loads (see :attr:`OperatorHooks.producer_min_regs`).
MULTICAST_PRODUCER_REGS = 40


@dataclass(frozen=True)
class GridAxis:
    """One axis of the grid of output tiles: ``tiles`` tiles of ``tile`` elements over
    ``extent``; the tile's origin along it is ``<name>0`` in the kernel text."""

    name: str
    extent: int
    tile: int
    #: Tiles further along the axis carry more work (causal attention's query tiles): the
    #: raster visits them first, so the longest do not run last on an otherwise idle GPU.
    heaviest_last: bool = False
    #: Tiles further along the axis carry less work (the attention backward's key tiles,
    #: whose causal loop starts at a later query tile): the raster's own order already
    #: visits the heaviest first, and ``raster_heaviest_first`` puts the axis outermost.
    lightest_last: bool = False
    #: The extent as a C++ expression of the kernel's size arguments (``M``, ``SEQ_Q *
    #: PACK``) where it is taken at run time: ``TILES_<A>`` is then counted in the kernel,
    #: and ``extent`` is the size the kernel is planned at. Empty: a compile-time extent.
    runtime_extent: str = ""
    #: The last tile ends at the extent (its origin pulled back over the tile before, whose
    #: shared elements it recomputes and writes again, with the same values only where
    #: both tiles sum them in the same order: not with stream-K), so its TMA
    #: boxes never cross the tensor's edge: on an H200 a box partly out of bounds loads
    #: slower than a whole one (a run-time-m GEMM tile with 4 of 64 rows inside ran 1.2x
    #: the time of one with 60). Only where a tile's outputs depend on nothing but their
    #: own rows and columns (a GEMM; not attention's softmax over a query tile's keys).
    last_inside: bool = False

    @property
    def extent_expr(self) -> str:
        """The extent as C++: the run-time expression, or the planned constant."""
        return f"({self.runtime_extent})" if self.runtime else str(self.extent)

    @property
    def runtime(self) -> bool:
        """Whether the axis's tiles are counted in the kernel."""
        return bool(self.runtime_extent)

    @property
    def tiles(self) -> int:
        return -(-self.extent // self.tile)

    @property
    def const(self) -> str:
        return self.name.upper()

    @property
    def origin(self) -> str:
        return f"{self.name}0"


@dataclass(frozen=True)
class StoreBox:
    """A TMA store of the output through a tensor map of rank above two, where a
    consumer's rows of the tile are not one run of a row-major matrix (attention's O
    over (head_dim, heads, seq, batch): a tile's rows are positions of one head, or
    several heads' positions side by side).

    The box's first dimension is the stored sub-tile's columns; the rest, innermost
    first, multiply to the consumer's rows, in the order its fragment rows run, so the
    staged rows are the box as TMA reads it from shared memory.
    """

    #: The tensor's extents and byte strides, innermost (the output's columns) first.
    global_dims: tuple[int, ...]
    global_strides_bytes: tuple[int, ...]
    #: The box past its columns: extents whose product is the consumer's rows.
    row_box: tuple[int, ...]
    #: C++ coordinates of a consumer's box past its first (column) coordinate, in the
    #: epilogue's scope (the tile's origins and ``row0``, the consumer's first row).
    row_coordinates: tuple[str, ...]

    @property
    def rank(self) -> int:
        return len(self.global_dims)


@dataclass(frozen=True)
class SecondOutput:
    """A second output tensor the store writes beside the first, from a fragment of its
    own (attention backward's dv beside dk): the tile's columns from ``first_cols`` on
    are its columns ``0 ..``, with the first's rows."""

    tensor: str
    fragment: str
    first_cols: int
    #: C++ pointer to the first element of its row ``{row}`` (format string).
    row_pointer: str


@dataclass(frozen=True)
class OutputTile:
    """The fp32 accumulator a store sTask writes, and the global matrix it goes to.

    The accumulator is the MMA's fragment ``fragment[ROW_BLOCKS][ACC_REGS]`` of each
    consumer warpgroup (64 rows per row block, ``cols / 2`` registers a thread); the
    global matrix is ``global_rows`` x ``global_cols``, row-major, ``dtype``.
    """

    tensor: str
    dtype: str
    elem_bytes: int
    rows: int
    cols: int
    global_rows: int
    global_cols: int
    fragment: str
    row_origin: str
    col_origin: str
    #: Constants of the kernel text that hold ``global_rows`` and ``global_cols``.
    extent_names: tuple[str, str]
    #: C++ pointer to the first element of output row ``{row}`` (format string).
    row_pointer: str = ""
    #: ``global_rows`` is a kernel argument: every store masks its rows.
    runtime_rows: bool = False
    #: The fragment is the global matrix transposed (a GEMM with ``swap_ab``): fragment
    #: row r, column c is global row ``col_origin + c``, column ``row_origin + r``; the
    #: extents and origins above are the fragment's (``global_rows`` along its rows).
    transposed: bool = False
    #: ``global_cols`` is a kernel argument (a transposed fragment's columns are m).
    runtime_cols: bool = False
    #: The TMA store's map where it is not the row-major ``global_rows`` x
    #: ``global_cols`` matrix.
    store_box: StoreBox | None = None
    #: The tile's last columns go to another tensor (``global_cols`` counts both).
    second: SecondOutput | None = None

    @property
    def map_name(self) -> str:
        return f"{self.tensor}_map"

    @property
    def ctype(self) -> str:
        """The C++ element type the kernel writes (16-bit types as their bits)."""
        return ctype(self.dtype)


def ctype(dtype: str) -> str:
    """C++ element type of a tensor of ``dtype`` in the kernel's parameters."""
    return {"float32": "float", "int32": "int"}.get(dtype, "unsigned short")


class OperatorHooks(ABC):
    """An operator's part of a kernel. Implementations hold the operator's plan (tile
    sizes, operand tiles) and write only operator-specific text; they never emit
    barriers, role dispatch or loops over tiles."""

    #: Name of the constant that counts loop trips per output tile.
    trips: str = "TRIPS"
    #: Registers a consumer thread needs besides :meth:`accumulator_regs` (addresses,
    #: loop state), as measured with ptxas for the operator's kernels.
    overhead_regs: int = CONSUMER_OVERHEAD_REGS
    #: Registers the producer warpgroup's loads need without a cluster (its setmaxnreg
    #: floor is 24).
    producer_loads_regs: int = 24
    #: Whether ptxas was seen to give the consumers' code the registers setmaxnreg raises
    #: them to, past the entry's cap (see ``PipelineLayout.register_cap``).
    consumers_past_entry_cap: bool = False
    #: Grid axes along which the operator's loads and tiles are lowered for thread-block
    #: clusters (its operand tiles cut into multicast slices).
    cluster_axes: tuple[str, ...] = ()
    #: Whether one tile's loop trips may be split among blocks (stream-K): the skeleton
    #: then passes loads a trip's index in the whole loop (``trip0``, the first trip of
    #: the block's part, plus the loop's), and sums the parts of the output's fragment.
    shares_reduction: bool = False
    #: Workload dimensions the operator's kernels can take at run time (an sProgram's
    #: ``runtime_dims``): each is an ``int`` kernel argument (:meth:`size_arg`); grid axes
    #: whose extent follows from one name it in ``GridAxis.runtime_extent``.
    runtime_capable: tuple[str, ...] = ()

    def __init__(self, structure: PipelineStructure) -> None:
        self.structure = structure
        self.sprogram = structure.sprogram
        self.params: dict[str, Any] = dict(structure.sprogram.params)

    @cached_property
    def target(self) -> Target:
        """The instructions of the schedule's architecture for what the operator
        describes (asked for only when text is written)."""
        return target_for(self.sprogram.arch)

    @property
    def runtime_dims(self) -> tuple[str, ...]:
        """The dimensions this kernel takes as arguments (the sProgram's)."""
        return self.sprogram.runtime_dims

    def size_arg(self, dim: str) -> str:
        """The kernel argument that holds run-time dimension ``dim`` (``m`` -> ``M``)."""
        return dim.upper()

    def runtime_constants(self, code: Code) -> None:  # noqa: B027 - optional hook
        """Values the operator derives from its size arguments (``KV_TILES`` from
        ``SEQ_KV``), declared at the top of the kernel before the grid is counted: the
        run-time twins of the compile-time constants :meth:`constants` leaves out."""

    @property
    def dtype(self) -> str:
        """The workload's element type (``float16`` / ``bfloat16``)."""
        return str(self.params["dtype"])

    @property
    def producer_min_regs(self) -> int:
        """Registers the producer needs: multicast loads (the block's rank, its slice
        offsets, the cluster mask, the exit's cluster barrier) spilled 8-36 bytes at 24
        (ptxas 13.0, Hopper, 2026-12-02: GEMM and the chunk state)."""
        if self.structure.multicast:
            return max(self.producer_loads_regs, MULTICAST_PRODUCER_REGS)
        return self.producer_loads_regs

    def multicast_slices(self, stask: str) -> int:
        """Slices a load's boxes are fetched in: the cluster's size for a load its blocks
        share, else 1."""
        return self.structure.cluster_size if stask in self.structure.multicast else 1

    def row_blocks(self, consumer_rows: int) -> int:
        """MMA blocks of the rows one consumer warpgroup owns."""
        return consumer_rows // self.target.mma_rows

    # ----- planning ------------------------------------------------------------------
    @abstractmethod
    def problem(self) -> str | None:
        """Why the operator cannot lower this sProgram (dtype, tile shape), or None."""

    @classmethod
    def tile_problem(cls, params: dict[str, Any], tile: dict[str, int],
                     target: Target) -> str | None:
        """Why no schedule of this tile can be lowered for a workload of ``params`` on
        ``target``, or None: the part of :meth:`problem` that follows from the shape and
        tile alone, so a schedule space drops a tile's every completion without planning
        one."""
        return None

    @property
    @abstractmethod
    def grid_axes(self) -> tuple[GridAxis, ...]:
        """The axes of the grid of output tiles: the raster walks the first two (the
        sProgram's raster names one of them), the others are outer loops."""

    @property
    @abstractmethod
    def trip_count(self) -> int:
        """Loop trips per output tile at most (the value of :attr:`trips`)."""

    def tile_trips(self) -> str | None:
        """Loop trips of the current tile as a C++ expression of the grid origins, where
        it varies by tile (causal attention skips tiles above the diagonal); None when every
        tile takes :attr:`trip_count`."""
        return None

    def tile_loads(self) -> tuple[str, ...]:
        """Load sTasks whose tile is loaded once per output tile (before the loop)."""
        return ()

    @property
    def math_stasks(self) -> frozenset[str]:
        """The register-math sTasks (CUDA cores, SFU) the operator writes in :meth:`math`."""
        return frozenset()

    @property
    def element_stasks(self) -> frozenset[str]:
        """Epilogue math sTasks written by :meth:`element_math`: applied by the store to
        each pair of accumulators as it writes them, so that their temporaries (a bias,
        a residual) live one pair at a time, not a whole tile at once."""
        return frozenset()

    def element_math(self, code: Code, stask: str, row: str, col: str) -> None:
        """Write ``stask`` on ``v0, v1`` (fp32 lvalues in scope): the outputs at row
        ``row`` and columns ``col``, ``col + 1`` (C++ expressions, global coordinates;
        rows and columns past the output are computed, never stored)."""
        raise KeyError(f"{self.sprogram.op} writes no element math for {stask}")

    @abstractmethod
    def operand(self, stask: str) -> OperandTile | VectorTile:
        """The shared tile a TMA load sTask fills (one per ring stage)."""

    @abstractmethod
    def tensor_map(self, stask: str) -> str:
        """The kernel parameter (a tensor map) a TMA load sTask reads through."""

    @abstractmethod
    def output(self) -> OutputTile:
        """What the store sTask writes."""

    def side_outputs(self) -> tuple[str, ...]:
        """Output tensors of the spec written besides :meth:`output` (attention's fp32
        log-sum-exp, its backward's dq) with st.global, passed as pointers after it, in
        this order."""
        return ()

    @property
    def side_outputs_staged(self) -> bool:
        """Whether the per-row side outputs travel with a TMA-stored output tile: held in
        registers by the math that makes them, staged by :meth:`stage_side_outputs` and
        stored by :meth:`store_side_outputs` (their maps among :meth:`tensor_maps`)."""
        return False

    def stage_side_outputs(self, code: Code, buf: str) -> None:
        """Write this consumer's side outputs to its rows' slot at shared address ``buf``
        (``4`` bytes a row), in the order their TMA store's box reads them."""
        raise KeyError(f"{self.sprogram.op} stages no side outputs")

    def store_side_outputs(self, code: Code, buf: str) -> None:
        """Issue the TMA stores of the side outputs staged at ``buf`` (one thread, in the
        output tile's first bulk group)."""
        raise KeyError(f"{self.sprogram.op} stores no side outputs by TMA")

    def workspaces(self) -> tuple[WorkspaceArg, ...]:
        """Scratch global memory the operator's text keeps across launches (attention
        backward's fp32 dq sums and their counters), passed as ``unsigned char*`` after
        the pointer inputs; the kernel leaves it as it found it (zeros)."""
        return ()

    def pointer_inputs(self) -> tuple[str, ...]:
        """Input tensors the kernel reads through plain pointers (``const T*``) besides its
        tensor maps (Mamba2's ``D``, vectors the CUDA cores load), after the outputs."""
        return ()

    @property
    def thread_loads(self) -> frozenset[str]:
        """Load sTasks on the CUDA cores the operator writes in :meth:`thread_load`."""
        return frozenset()

    #: The operator addresses its tile buffers through :meth:`tile_buffer_base`, so
    #: pingpong consumers can each read their own tile's copy.
    owner_tile_buffers: bool = False

    def tile_buffer_base(self, const: str) -> str:
        """Shared address of this consumer's copy of the tile buffer ``SMEM_<const>`` (one
        copy per owner with pingpong consumers)."""
        if self.structure.owners > 1:
            return f"smem + SMEM_{const} + consumer * {const}_STAGE_BYTES"
        return f"smem + SMEM_{const}"

    def holds_tile_buffer(self, load: str) -> bool:
        """Whether the loop still reads the tile ``load`` brought in once per output tile
        (attention's Q); if not, it is released after the prologue, so the producer can
        load the next tile's copy while this tile's loop runs."""
        return True

    @abstractmethod
    def accumulator_regs(self, consumer_rows: int) -> int:
        """fp32 registers a consumer thread holds for its accumulators."""

    # ----- text ----------------------------------------------------------------------
    @abstractmethod
    def constants(self, code: Code, consumer_rows: int) -> None:
        """The operator's compile-time constants (problem, tile, operand layouts)."""

    @abstractmethod
    def load(self, code: Code, stask: str, stage_addr: str, trip: str, full_bar: str) -> None:
        """TMA copies of ``stask``'s tile for loop trip ``trip`` into ``stage_addr``,
        completing on ``full_bar``; the tile's origin is in the grid axes' origins."""

    @abstractmethod
    def consumer_state(self, code: Code) -> None:
        """Declare a consumer warpgroup's registers (accumulators)."""

    def begin_tile(self, code: Code) -> None:  # noqa: B027 - optional hook, empty by default
        """Reset per-tile register state at the start of each output tile (default: none)."""

    @abstractmethod
    def pin(self, code: Code, stask: str) -> None:
        """Pin the registers ``stask``'s MMA writes or reads around its wait (the compiler
        cannot see the asynchronous MMA): their uses stay after it, and they are not reused
        before it."""

    def math(self, code: Code, issue: Issue, at: TripAt) -> None:
        """Write a register-math sTask (one of :attr:`math_stasks`) for loop trip ``at``."""
        raise KeyError(f"{self.sprogram.op} writes no register math for {issue.stask}")

    @property
    def relayout_stasks(self) -> frozenset[str]:
        """The math sTasks (among :attr:`math_stasks`) that lay a ring stage out again in
        one of :meth:`consumer_tiles` (FP8 attention's v transposed for the MMA), written
        in :meth:`relayout`."""
        return frozenset()

    def relayout(self, code: Code, issue: Issue, stages: Mapping[str, str], at: TripAt) -> None:
        """Write a relayout sTask for loop trip ``at``, reading the ring stages ``stages``
        (stream -> stage index, as :meth:`mma` gets them)."""
        raise KeyError(f"{self.sprogram.op} writes no relayout for {issue.stask}")

    def consumer_tiles(self) -> tuple[OperandTile | VectorTile, ...]:
        """Shared tiles each consumer warpgroup writes for its own MMA (a copy each, at
        ``SMEM_<const> + consumer * <const>_STAGE_BYTES``)."""
        return ()

    @property
    def loop_stores(self) -> frozenset[str]:
        """Store sTasks of the loop the operator writes in :meth:`loop_store`."""
        return frozenset()

    def loop_store(self, code: Code, issue: Issue, at: TripAt) -> None:
        """Write a store sTask of the loop (one of :attr:`loop_stores`) for trip ``at``:
        what the trip's MMAs made leaves for global memory (attention backward's dq part,
        added with fp32 atomics)."""
        raise KeyError(f"{self.sprogram.op} writes no store in the loop for {issue.stask}")

    def thread_load(self, code: Code, issue: Issue, at: TripAt) -> None:
        """Write a load sTask on the CUDA cores (one of :attr:`thread_loads`): the
        consumer threads read what they need of it from global memory into registers."""
        raise KeyError(f"{self.sprogram.op} writes no thread load for {issue.stask}")

    @abstractmethod
    def mma(self, code: Code, issue: Issue, stages: Mapping[str, str], at: TripAt) -> None:
        """Issue ``issue``'s MMA group for trip ``at`` on the ring stages ``stages``
        (stream -> stage address); ``at.accumulates`` is false on the trip whose result
        overwrites the accumulators. An MMA of the prologue (once per output tile, on
        tile buffers) gets no stages and ``at`` of trip 0."""

    @abstractmethod
    def tensor_maps(self) -> tuple[TensorMapArg, ...]:
        """The load tensor maps, in kernel-parameter order."""

    def header(self) -> str:
        """One line naming the workload, for the top of the source."""
        return f"{self.sprogram.op} {self.params}"
