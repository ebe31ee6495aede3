"""The workload fields both attention kernels (forward and backward) read the same way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codegen.artifact import TensorMapArg
from codegen.pipeline import OperandTile


class AttentionFields:
    """An attention kernel's shape: its params and its sProgram's q and kv tiles (a mixin
    of the operator hooks, which hold ``params`` and ``sprogram``)."""

    params: dict[str, Any]
    sprogram: Any

    def _p(self, name: str) -> int:
        return int(self.params[name])

    @property
    def causal(self) -> bool:
        return bool(self.params["causal"])

    @property
    def heads_second(self) -> bool:
        """Layout ``bhsd`` (batch, heads, seq, head_dim), else ``bshd``."""
        return self.params.get("layout", "bshd") == "bhsd"

    @property
    def head_dim(self) -> int:
        return self._p("head_dim")

    @property
    def tile_q(self) -> int:
        return int(self.sprogram.tile["q"])

    @property
    def tile_kv(self) -> int:
        return int(self.sprogram.tile["kv"])


def input_map(name: str, tile: OperandTile, params: Mapping[str, object], heads: int,
               seq: int, box: tuple[int, int], heads_second: bool) -> TensorMapArg:
    """q's, k's or v's rank-4 map, innermost first: (head_dim, heads, seq, batch) for bshd,
    (head_dim, seq, heads, batch) for bhsd; a box is ``box`` (heads, positions) of rows."""
    d, e, batch = int(params["head_dim"]), tile.elem_bytes, int(params["batch"])
    middle = [(heads, box[0]), (seq, box[1])]
    if heads_second:
        middle.reverse()
    (n1, box1), (n2, box2) = middle
    return TensorMapArg(
        name=f"{name}_map", tensor=name, dtype=str(params["dtype"]),
        global_dims=(d, n1, n2, batch),
        global_strides_bytes=(d * e, n1 * d * e, n2 * n1 * d * e),
        box_dims=(tile.box_inner, box1, box2, 1),
        swizzle=tile.swizzle.tma,  # type: ignore[arg-type]
    )


__all__ = ["AttentionFields", "input_map"]
