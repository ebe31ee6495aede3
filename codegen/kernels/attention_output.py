"""Where attention's outputs go: o and its log-sum-exp, per consumer warpgroup's rows.

A tile's rows are ``tile_q`` packed rows of one (batch, head group): with one head, its
positions ``q0 ..``; with ``PACK`` heads, position by position in ``bshd`` (row r: position
r / PACK of head heads0 + r % PACK) or head by head in ``bhsd`` (TILE_Q / PACK positions
of each). :class:`AttentionOutput` writes the three ways they leave the block: a row
pointer for ``st.global``, the rank-4 map and box coordinates of o's TMA store (the
skeleton's :class:`~codegen.pipeline.StoreBox`), and the rank-3 map, staging and store of
the rows' lse beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codegen.artifact import TensorMapArg
from codegen.pipeline import Code, StoreBox
from codegen.targets import Target
from scheduler_search.ops import DTYPE_BYTES

#: Bytes of one lse (fp32): the attention graph's ``side_row_bytes``, which sizes its staging.
LSE_BYTES = DTYPE_BYTES["float32"]


@dataclass(frozen=True)
class AttentionOutput:
    """o and lse of a kernel's tiles: ``consumer_rows`` packed rows a warpgroup holds."""

    params: dict[str, Any]
    elem_bytes: int
    tile_q: int
    pack: int
    consumer_rows: int

    @property
    def heads_second(self) -> bool:
        return self.params.get("layout", "bshd") == "bhsd"

    @property
    def head_box(self) -> tuple[int, int]:
        """(positions, heads) of the box that holds a consumer's rows, packed head by head
        (bhsd: at most the positions a head has in the tile)."""
        rows, pack = self.consumer_rows, self.pack
        positions = min(rows, self.tile_q // pack) if self.heads_second else rows // pack
        return positions, rows // positions

    def row_pointer(self) -> str:
        """Output row ``{row}`` (a packed row of the tile at ``q0``) as a pointer."""
        if not self.heads_second:
            return ("o + ((unsigned long long)(batch0 * SEQ_Q + ({row}) / PACK) * HEADS + "
                    "heads0 + ({row}) % PACK) * HEAD_DIM")
        if self.pack == 1:
            return "o + ((unsigned long long)(batch0 * HEADS + heads0) * SEQ_Q + {row}) * HEAD_DIM"
        local = "(({row}) - q0)"  # heads outer: TILE_Q / PACK positions of each head
        return (f"o + ((unsigned long long)(batch0 * HEADS + heads0 + {local} / (TILE_Q / PACK))"
                f" * SEQ_Q + q0 / PACK + {local} % (TILE_Q / PACK)) * HEAD_DIM")

    def store_box(self) -> StoreBox:
        """o through a rank-4 map, as q is loaded: (head_dim, heads, seq, batch) in bshd,
        (head_dim, seq, heads, batch) in bhsd; a consumer's box holds its rows."""
        p, e, d = self.params, self.elem_bytes, self.params["head_dim"]
        positions, heads = self.head_box
        if self.heads_second:
            dims = (d, p["seq_q"], p["heads"], p["batch"])
            box = (positions, heads, 1)
            coordinates = (("q0 + row0", "heads0") if self.pack == 1 else
                           ("q0 / PACK + row0 % (TILE_Q / PACK)",
                            "heads0 + row0 / (TILE_Q / PACK)"))
        else:
            dims = (d, p["heads"], p["seq_q"], p["batch"])
            box = (heads, positions, 1)
            coordinates = ("heads0", "(q0 + row0) / PACK")
        strides = (d * e, dims[1] * d * e, dims[2] * dims[1] * d * e)
        return StoreBox(dims, strides, box, (*coordinates, "batch0"))

    def store_problem(self) -> str | None:
        """Why a consumer's rows are not one box of o's rank-4 map, if they are not."""
        rows, pack = self.consumer_rows, self.pack
        if not self.heads_second and rows % pack:
            return (f"tile_g={pack}: a consumer's {rows} rows are not whole positions of "
                    "the packed heads (one TMA store box)")
        positions = self.tile_q // pack
        if self.heads_second and pack > 1 and positions % rows and rows % positions:
            return (f"tile_g={pack} in bhsd: a consumer's {rows} rows neither lie in one "
                    f"head's {positions} positions nor cover whole heads (one TMA store box)")
        return None

    def lse_map(self) -> TensorMapArg:
        """lse (batch, heads, seq_q) fp32 as a rank-3 map; a box is a consumer's rows
        (positions x heads)."""
        p = self.params
        positions, heads = self.head_box
        return TensorMapArg(
            name="lse_map", tensor="lse", dtype="float32",
            global_dims=(p["seq_q"], p["heads"], p["batch"]),
            global_strides_bytes=(p["seq_q"] * LSE_BYTES, p["heads"] * p["seq_q"] * LSE_BYTES),
            box_dims=(positions, heads, 1), swizzle="none",
        )

    def stage_lse(self, code: Code, target: Target, buf: str) -> None:
        """Each row's ``lse_val`` (its first thread's) to the consumer's slot at ``buf``, in
        the lse box's order (positions, then heads: bshd's packed rows, position-major,
        go head-major)."""
        c = code
        index = ("lr" if self.pack == 1 or self.heads_second
                 else "(lr % PACK) * (CONSUMER_ROWS / PACK) + lr / PACK")
        with target.accumulator_rows(c):
            c("const int lr = mi * 64 + warp * 16 + h * 8 + (lane >> 2);  // row of this "
              "warpgroup's")
            stage = c.call("st_shared_f32", f"{buf} + {LSE_BYTES} * ({index})", "lse_val[mi][h]")
            c(f"if ((lane & 3) == 0) {stage};")

    def store_lse(self, code: Code, buf: str) -> None:
        """The TMA store of the consumer's staged lse: the box of its o rows past their
        columns, over (seq, heads, batch)."""
        *coordinates, batch = self.store_box().row_coordinates
        first = coordinates if self.heads_second else coordinates[::-1]
        code(code.call("tma_store_3d", "&lse_map", *first, batch, buf) + ";")


__all__ = ["LSE_BYTES", "AttentionOutput"]
