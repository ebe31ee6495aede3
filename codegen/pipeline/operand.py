"""A pipelined operand tile: a TMA-loaded, swizzled tile in shared memory that the MMA reads.

GEMM's A and B, attention's Q, K and V, Mamba2's x, B, C and cb are all such tiles: a
rows x cols block of a row-major global matrix, cut into TMA boxes one swizzle span wide
along its contiguous dimension, read by the MMA (on Hopper through a matrix descriptor,
which the target builds from the tile: ``Target.operand_descriptor``). Every number (box
shape, bytes, the offset of a k step or of a block of MMA rows) is derived here once and
used both in the kernel text and in the host's tensor map.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from codegen.cuda import Swizzle
from codegen.pipeline.code import Code

#: Rows of one swizzle atom: a multicast slice starts on an atom, so the slices of a box
#: land exactly where the whole box would.
SWIZZLE_ATOM_ROWS = 8


@dataclass(frozen=True)
class OperandTile:
    """One operand tile in shared memory, loaded by TMA in ``box_count`` boxes.

    Args:
        name: the shared tile's name (``a``, ``b``); constants are its upper case.
        major: ``k`` when K is contiguous in global memory, ``mn`` when M / N is.
        rows: the tile's M (or N) extent.
        cols: its K extent.
        swizzle: the swizzle TMA writes it with and the MMA reads it with.
        elem_bytes: bytes of one element.
        k_step: elements of K one MMA instruction reduces over (``Target.k_step``).
        mma_rows: rows of one MMA block (``Target.mma_rows``): the rows the MMA reads of
            the tile at a time.
        slices: the blocks of a cluster that share the tile (a multicast load): each box
            is fetched as that many slices along its outer dimension, block r fetching
            slice r for all of them.

    A K-major tile is cut along K into boxes one swizzle span wide; an MN-major tile
    (e.g. B stored K x N) along M / N.
    """

    name: str
    major: Literal["k", "mn"]
    rows: int
    cols: int
    swizzle: Swizzle
    elem_bytes: int
    k_step: int
    mma_rows: int
    slices: int = 1

    @property
    def const(self) -> str:
        """Prefix of its constants in the kernel text (``A_STAGE_BYTES``)."""
        return self.name.upper()

    @property
    def box_inner(self) -> int:
        """Elements along the contiguous dimension of one box (one swizzle span)."""
        return self.swizzle.span_bytes // self.elem_bytes

    @property
    def box_outer(self) -> int:
        return self.rows if self.major == "k" else self.cols

    @property
    def slice_outer(self) -> int:
        """Outer extent of what one TMA copy fetches (the tensor map's box)."""
        return self.box_outer // self.slices

    def slice_problem(self) -> str | None:
        """Why the boxes cannot be cut into their multicast slices, or None."""
        if self.slices > 1 and (self.box_outer % self.slices
                                or self.slice_outer % SWIZZLE_ATOM_ROWS):
            return (f"{self.name}: {self.box_outer}-row boxes do not cut into {self.slices} "
                    f"slices of whole {SWIZZLE_ATOM_ROWS}-row swizzle atoms")
        return None

    @property
    def box_count(self) -> int:
        contiguous = self.cols if self.major == "k" else self.rows
        return contiguous // self.box_inner

    @property
    def box_bytes(self) -> int:
        return self.box_inner * self.box_outer * self.elem_bytes

    @property
    def stage_bytes(self) -> int:
        """Bytes of one copy of the tile (one ring stage)."""
        return self.box_count * self.box_bytes

    def kstep_expr(self) -> str:
        """Offset of K-step ``kk`` (``k_step`` elements of K) inside a stage, as a C++
        expression of ``kk``: K-major tiles step through their boxes, MN-major ones by
        ``k_step`` rows."""
        k = self.k_step
        if self.major == "k":
            return (f"(kk * {k} / {self.box_inner}) * {self.const}_BOX_BYTES + "
                    f"(kk * {k} % {self.box_inner}) * {self.elem_bytes}")
        return f"kk * {k} * {self.swizzle.span_bytes}"

    @property
    def row_block_bytes(self) -> int:
        """Offset of the next block of MMA rows: that many swizzled rows of a K-major
        tile; the next box of an MN-major one (whose boxes are as wide as a block, see
        :meth:`rows_offset`)."""
        if self.major == "mn":
            return self.box_bytes
        return self.mma_rows * self.swizzle.span_bytes

    def rows_offset(self, rows: str) -> str:
        """Byte offset in a stage of row ``rows`` (a multiple of the MMA's rows) of M / N,
        as a C++ expression: K-major rows lie one swizzle span apart, MN-major ones a box
        per block."""
        if self.major == "mn":
            return f"{rows} / {self.mma_rows} * {self.box_bytes}"
        return f"{rows} * {self.swizzle.span_bytes}"

    def rows_problem(self) -> str | None:
        """Why the MMA cannot read this tile's rows as its M in blocks of its rows, or
        None: an MN-major tile must come in boxes exactly a block wide."""
        if self.major == "mn" and self.box_inner != self.mma_rows:
            return (f"{self.name}: MN-major rows as the MMA's M need {self.mma_rows}-element "
                    f"boxes, not {self.box_inner}")
        return None

    def box_coords(self, box: int, row0: str, k0: str) -> tuple[str, str]:
        """Global (innermost, outer) coordinates of box ``box`` of the tile at
        (``row0``, ``k0``): K-major boxes step along K, MN-major ones along M / N."""
        if self.major == "k":
            return (f"{k0} + {box * self.box_inner}", row0)
        return (f"{row0} + {box * self.box_inner}", k0)

    def multicast_slice(self, dst: str, outer: str) -> tuple[str, str, str]:
        """This block's slice of a box whose shared address is ``dst`` and whose outer
        coordinate is ``outer``: the slice's address and outer coordinate (by the block's
        ``cta_rank``, which the skeleton declares in the load function of such a ring),
        and the mask of the cluster's blocks it is multicast to."""
        slice_bytes = self.box_bytes // self.slices
        return (f"{dst} + cta_rank * {slice_bytes}",
                f"{outer} + (int)cta_rank * {self.slice_outer}",
                f"(unsigned short){(1 << self.slices) - 1}")

    def emit_loads(self, code: Code, tensor_map: str, row0: str, k0: str, stage_addr: str,
                   full_bar: str) -> None:
        """The TMA copies of the tile at (``row0``, ``k0``) into the stage at
        ``stage_addr``, completing on ``full_bar``: one per box, or this block's slice of
        each box multicast to the cluster's ``slices`` blocks (:meth:`multicast_slice`)."""
        c = code
        for box in range(self.box_count):
            inner, outer = self.box_coords(box, row0, k0)
            dst = f"{stage_addr} + {box * self.box_bytes}"
            if self.slices == 1:
                c(c.call("tma_load_2d", dst, tensor_map, inner, outer, full_bar) + ";")
                continue
            slice_dst, slice_outer, mask = self.multicast_slice(dst, outer)
            c(c.call("tma_load_2d_multicast", slice_dst, tensor_map, inner, slice_outer,
                     full_bar, mask) + ";")


@dataclass(frozen=True)
class VectorTile:
    """A 1-D fp32 tile (Mamba2's dt and dA over a chunk's positions): one unswizzled TMA
    box, read by the CUDA cores, never by the MMA. It answers what the skeleton asks of an
    :class:`OperandTile` (constants, stage bytes, box extents)."""

    name: str
    length: int
    elem_bytes: int = 4

    @property
    def const(self) -> str:
        return self.name.upper()

    @property
    def rows(self) -> int:
        return 1

    @property
    def cols(self) -> int:
        return self.length

    box_count = 1
    box_outer = 1

    @property
    def box_inner(self) -> int:
        return self.length

    @property
    def box_bytes(self) -> int:
        return self.length * self.elem_bytes

    @property
    def stage_bytes(self) -> int:
        return self.box_bytes
