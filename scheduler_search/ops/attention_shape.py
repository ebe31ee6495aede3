"""What attention's forward and backward specs share: the problem's shape (batch, heads
and key/value heads, the two lengths, head size, the causal mask, the memory layout) and
what follows from it alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Literal

from pydantic import Field

from scheduler_search.ops._base import MAX_DIM, OperatorSpec

#: wgmma takes K in steps of 16 (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply"),
#: and N (head_dim of P·V) up to 256.
HEAD_DIM_STEP = 16
HEAD_DIM_MAX = 256


class AttentionShape(OperatorSpec):
    """The fields of an attention problem.

    ``layout`` is how q, k, v (and o and the gradients) lie in memory: ``bshd`` (batch,
    seq, heads, head_dim), as FlashAttention takes them, or ``bhsd`` (batch, heads, seq,
    head_dim), as PyTorch's ``scaled_dot_product_attention`` does. Causal masks key j >
    query i (top-left aligned, as PyTorch's SDPA).
    """

    batch: Annotated[int, Field(ge=1, le=65536)]
    heads: Annotated[int, Field(ge=1, le=1024)]
    kv_heads: Annotated[int, Field(ge=1, le=1024)]
    seq_q: Annotated[int, Field(ge=1, le=MAX_DIM)]
    seq_kv: Annotated[int, Field(ge=1, le=MAX_DIM)]
    head_dim: Annotated[int, Field(ge=HEAD_DIM_STEP, le=HEAD_DIM_MAX)]
    causal: bool = False
    layout: Literal["bshd", "bhsd"] = "bshd"

    def group_errors(self) -> Iterator[tuple[str, str]]:
        """A kv head serves a whole group of query heads."""
        if self.heads % self.kv_heads:
            yield ("kv_heads", f"heads={self.heads} is not divisible by "
                               f"kv_heads={self.kv_heads} (each kv head serves a whole group "
                               "of query heads)")

    def shape_of(self, seq: int, heads: int) -> tuple[int, int, int, int]:
        """The shape of a q/k/v/o tensor of ``seq`` rows and ``heads`` heads in ``layout``."""
        if self.layout == "bhsd":
            return (self.batch, heads, seq, self.head_dim)
        return (self.batch, seq, heads, self.head_dim)

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.heads // self.kv_heads

    def attended_pairs(self) -> float:
        """(query, key) pairs that contribute per head; about half when causal."""
        if not self.causal:
            return float(self.seq_q) * self.seq_kv
        # Top-left aligned: query i sees keys 0..i.
        visible = min(self.seq_q, self.seq_kv)
        total = visible * (visible + 1) / 2
        if self.seq_q > self.seq_kv:
            total += (self.seq_q - self.seq_kv) * self.seq_kv
        return total


__all__ = ["HEAD_DIM_MAX", "HEAD_DIM_STEP", "AttentionShape"]
