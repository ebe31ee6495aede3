"""The shared-memory plan of a block: its regions, in order, at aligned offsets.

One function lays the plan out (:func:`plan_shared_memory`) from what a block keeps: the
rings of its operand streams, the tiles it loads once per output tile, the tiles each
consumer warpgroup lays out for its own MMA, the output tile a TMA store stages, split-K's
partial sums, and the mbarriers of each. The validator calls it with tile sizes from the
tile plan (:func:`schedule_smem_bytes`), the code generator with its operand tiles and
constant names, so the bytes the space admits are the bytes a kernel asks for.

The order of the regions is the kernel's: operand rings, tile buffers, the consumers' own
tiles, the output's staging, split-K's partials, the side outputs' staging, then the
barriers. Operand regions are padded to 1024 bytes (128B-swizzled TMA tiles start on
1024-byte boundaries); side outputs to 128, barriers to 8.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

#: Dynamic shared memory is rounded up to this boundary inside the kernel (128B swizzle
#: atoms are 1024 B); the launch asks for this much more than the plan.
SMEM_ALIGN = 1024
#: Bytes the barrier block is aligned to at the end of the plan.
BARRIER_ALIGN = 8
MBARRIER_BYTES = 8
#: The widest TMA swizzle span: a staged output sub-tile is at most this wide in bytes.
SWIZZLE_SPAN_BYTES = 128
#: Alignment of an unswizzled TMA store's shared-memory source (the side outputs' slots).
TMA_SOURCE_ALIGN = 128

#: Copies of each consumer warpgroup's own tile (a relayout written every trip): the next
#: trip's is written while the MMA of this one still reads the other.
CONSUMER_TILE_BUFFERS = 2

#: Where the output tile waits for its TMA store: ``operands`` (the idle ring stages),
#: ``ring`` (slots of its own), ``none`` (stored by ``st.global``).
Staging = Literal["operands", "ring", "none"]


def align(value: int, to: int) -> int:
    return -(-value // to) * to


@dataclass
class SmemPlan:
    """Offsets of named regions, in bytes from the 1024-byte aligned base."""

    offsets: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    end: int = 0

    def add(self, name: str, size_bytes: int, alignment: int = SMEM_ALIGN) -> int:
        """A region of ``size_bytes`` after the previous ones; its size is padded to
        ``alignment`` so the next region starts aligned."""
        if name in self.offsets:
            raise ValueError(f"shared-memory region {name} added twice")
        self.offsets[name] = self.end
        self.sizes[name] = size_bytes
        self.end += align(size_bytes, alignment)
        return self.offsets[name]

    def alias(self, name: str, of: str) -> int:
        """A region that reuses ``of``'s bytes (it must fit there)."""
        self.offsets[name] = self.offsets[of]
        self.sizes[name] = 0
        return self.offsets[name]

    @property
    def total_bytes(self) -> int:
        """Bytes from the aligned base to the end of the last region."""
        return align(self.end, 16)

    @property
    def dynamic_bytes(self) -> int:
        """What the launch asks for: the plan plus the alignment slack of the base."""
        return self.total_bytes + SMEM_ALIGN

    def layout(self) -> dict[str, int]:
        """Every offset and the total (``BYTES``), for the artifact and the tests."""
        return {**self.offsets, "BYTES": self.total_bytes}


@dataclass(frozen=True)
class StagedTile:
    """A tile a block keeps in shared memory: its region's name, one copy's bytes."""

    name: str
    stage_bytes: int


@dataclass(frozen=True)
class RingRegions:
    """One operand stream's ring: ``depth`` copies of its tiles, a full and an empty
    mbarrier a stage."""

    depth: int
    tiles: tuple[StagedTile, ...]
    full: str
    empty: str

    @property
    def bytes(self) -> int:
        return sum(self.depth * tile.stage_bytes for tile in self.tiles)


@dataclass(frozen=True)
class BufferRegions:
    """A tile loaded once per output tile, with its full and empty mbarrier."""

    tile: StagedTile
    full: str
    empty: str


@dataclass(frozen=True)
class OutputFragment:
    """The consumers' output tile, as a TMA store stages it and split-K sums it.

    ``rows`` x ``cols`` is the fragment (of a swap-AB GEMM, the output transposed);
    ``consumer_rows`` the rows one of the ``consumers`` warpgroups holds.
    """

    rows: int
    cols: int
    elem_bytes: int
    transposed: bool
    consumer_rows: int
    consumers: int

    @property
    def bytes(self) -> int:
        return self.rows * self.cols * self.elem_bytes

    @property
    def store_cols(self) -> int:
        """Columns of one stored sub-tile: the widest swizzle span (128, 64 or 32 bytes)
        whose columns divide the tile's (a 240-column tile: 16-column sub-tiles). A
        transposed fragment's sub-tile is one of its 64-row blocks: 64 output columns."""
        widest = SWIZZLE_SPAN_BYTES // self.elem_bytes
        if self.transposed:
            return widest
        return next((cols for cols in (widest, widest // 2) if self.cols % cols == 0),
                    widest // 4)

    @property
    def block_bytes(self) -> int:
        """One 64-row block of a transposed fragment, staged as the output's rows (the
        fragment's columns) of ``store_cols`` output columns."""
        return self.cols * self.store_cols * self.elem_bytes

    @property
    def slot_bytes(self) -> int:
        """One staged sub-tile of the whole output tile (every warpgroup's rows; of a
        transposed fragment, one block of every consumer)."""
        if self.transposed:
            return self.consumers * self.block_bytes
        return self.rows * self.store_cols * self.elem_bytes

    @property
    def part_floats(self) -> int:
        """fp32 sums of one consumer's rows: what a split-K or stream-K part holds a
        consumer."""
        return self.consumer_rows * self.cols


def staging_of(tma_store: bool, output: OutputFragment, ring_bytes: int, *,
               keeps_loading: bool) -> Staging:
    """Where ``output`` waits for its TMA store.

    ``operands``: one tile per block at a time, so the idle ring stages hold the whole
    tile once every consumer is done reading them. ``ring``: blocks that keep loading
    (persistent, pingpong) stage through slots of their own. ``none``: st.global.
    """
    if not tma_store:
        return "none"
    if not keeps_loading and output.bytes <= ring_bytes:
        return "operands"
    return "ring"


def staging_slots(staging: Staging, *, pingpong: bool, consumers: int) -> int:
    """Slots of a ``ring`` staging: two, taken in turn (cooperative consumers), or one
    per consumer warpgroup (pingpong)."""
    if staging != "ring":
        return 0
    return consumers if pingpong else 2


@dataclass(frozen=True)
class SplitKRegions:
    """A split-K block's partial sums and their two barriers (ready, read)."""

    part: str
    full: str
    free: str


def plan_shared_memory(
    rings: Sequence[RingRegions],
    buffers: Sequence[BufferRegions],
    output: OutputFragment,
    *,
    tma_store: bool,
    persistent: bool,
    pingpong: bool,
    split_k: SplitKRegions | None = None,
    side_row_bytes: int = 0,
    consumer_tiles: Sequence[StagedTile] = (),
) -> SmemPlan:
    """The block's plan (see the module docstring); ``side_row_bytes`` of each output row
    (attention's log-sum-exp) are staged beside a TMA-stored tile, in as many slots as
    the tile's staging takes in turn (one where it reuses the operand stages);
    ``consumer_tiles`` are written by each consumer warpgroup for its own MMA
    (:data:`CONSUMER_TILE_BUFFERS` copies each)."""
    plan = SmemPlan()
    # Pingpong consumers each hold a tile of their own: a copy of each tile buffer each.
    owners = output.consumers if pingpong else 1
    for ring in rings:
        for tile in ring.tiles:
            plan.add(tile.name, ring.depth * tile.stage_bytes)
    for buffer in buffers:
        plan.add(buffer.tile.name, owners * buffer.tile.stage_bytes)
    for tile in consumer_tiles:
        plan.add(tile.name, CONSUMER_TILE_BUFFERS * output.consumers * tile.stage_bytes)
    ring_bytes = sum(ring.bytes for ring in rings)
    staging = staging_of(tma_store, output, ring_bytes, keeps_loading=persistent or pingpong)
    if staging == "operands":
        plan.alias("C", of=rings[0].tiles[0].name)
    elif staging == "ring":
        slots = staging_slots(staging, pingpong=pingpong, consumers=output.consumers)
        plan.add("C", slots * output.slot_bytes)
    if split_k is not None:
        plan.add(split_k.part, 4 * output.consumers * output.part_floats)
    if staging != "none" and side_row_bytes:
        slots = staging_slots(staging, pingpong=pingpong, consumers=output.consumers) or 1
        plan.add("SIDE", slots * output.rows * side_row_bytes, TMA_SOURCE_ALIGN)
    for ring in rings:
        plan.add(ring.full, ring.depth * MBARRIER_BYTES, BARRIER_ALIGN)
        plan.add(ring.empty, ring.depth * MBARRIER_BYTES, BARRIER_ALIGN)
    for buffer in buffers:
        plan.add(buffer.full, owners * MBARRIER_BYTES, BARRIER_ALIGN)
        plan.add(buffer.empty, owners * MBARRIER_BYTES, BARRIER_ALIGN)
    if split_k is not None:
        plan.add(split_k.full, MBARRIER_BYTES, BARRIER_ALIGN)
        plan.add(split_k.free, MBARRIER_BYTES, BARRIER_ALIGN)
    return plan
