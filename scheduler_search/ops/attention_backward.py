"""Attention backward: dq, dk, dv of o = softmax(q kᵀ / sqrt(d)) v, given the forward's o
and log-sum-exp and the output's gradient dO (FlashAttention-2's algorithm).

Per key/value tile j of one kv head (the output tile: dk_j and dv_j stay on chip), over
the query tiles i of each query head of its group (GQA's sum of dk and dv over the group is
the loop's): ``S = q_i k_jᵀ``, ``P = exp2(S scale log2e - lse_i log2e)``,
``dv_j += Pᵀ dO_i``, ``dP = dO_i v_jᵀ``, ``D_i = rowsum(dO_i o_i)`` (the preprocess,
fused: o streams with dO), ``dS = P (dP - D_i)``, ``dk_j += dSᵀ q_i``, ``dq_i += dS k_j``
(fp32 atomics into a workspace; the last key tile to add a query tile's part writes dq),
with ``scale`` applied to dk and dq at the end. Five products of the forward's size: 2.5
times its flops. q, dO, o and lse stream, k and v stay. Causal masks are top-left aligned,
as the forward's: key j is seen by queries i >= j.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar, Literal

from scheduler_search.ir import STaskGraph, STaskKind, TileShape
from scheduler_search.ops._base import (
    SpecError,
    TensorSpec,
    row_alignment_error,
)
from scheduler_search.ops._contract import InputInit
from scheduler_search.ops._graph_helpers import (
    CORES,
    EXP2_EMULATION_OPS,
    EXP_UNITS,
    TC,
    TMA_OR_CORES,
    TMA_OR_LSU,
    stask,
    tensors,
)
from scheduler_search.ops.attention_shape import HEAD_DIM_STEP, AttentionShape

if TYPE_CHECKING:
    from scheduler_search.hardware import Device

#: The gradients' relative error bound: five products and the recomputed softmax in 16-bit
#: inputs (FlashAttention's tests allow about twice the forward's error).
GRADIENT_REL_ERROR_BOUND = 2e-2
#: Query heads a kv head may serve whose dk and dv are summed.
MAX_GROUP = 64


class AttentionBackwardSpec(AttentionShape):
    """The backward of scaled dot-product attention (the forward's fields, 16-bit only).

    Inputs q, k, v, o (the forward's output), lse (its fp32 log-sum-exp, as
    ``attention`` writes it) and do (o's gradient); outputs dq, dk, dv in the inputs'
    type. ``deterministic`` asks for dq reduced over the key tiles in a fixed order (a
    pass by query tiles) instead of fp32 atomics, so that two runs agree bit for bit.
    """

    streams: ClassVar[dict[str, tuple[str, ...]]] = {
        "q": ("load_q", "load_lse"), "do": ("load_do", "load_o")}
    op: ClassVar[str] = "attention_backward"
    baseline: ClassVar[str | None] = "sdpa_cudnn_backward"
    #: FlashAttention-2's backward as well as cuDNN's.
    peers: ClassVar[tuple[str, ...]] = ("sdpa_flash_backward",)

    dtype: Literal["float16", "bfloat16"] = "float16"
    deterministic: bool = False

    def cross_field_errors(self) -> Iterator[tuple[str, str]]:
        errors = list(self.group_errors())
        yield from errors
        if not errors and self.group > MAX_GROUP:
            yield "kv_heads", f"at most {MAX_GROUP} query heads a kv head"
        if self.head_dim % HEAD_DIM_STEP:
            yield ("head_dim", f"head_dim={self.head_dim} must be a multiple of "
                               f"{HEAD_DIM_STEP} (the MMA's K step)")
        else:
            message = row_alignment_error("head_dim", self.head_dim, self.dtype)
            if message:
                yield "head_dim", message

    def check_fits(self, device: Device) -> None:
        """Also: the tensor cores' 16-bit products are needed (every catalog GPU has them)."""
        super().check_fits(device)
        if not (device.capabilities.wgmma or device.capabilities.mma_sync):
            raise SpecError("dtype", f"{device.name} has no 16-bit tensor-core products")

    def tensors(self) -> list[TensorSpec]:
        q_shape = self.shape_of(self.seq_q, self.heads)
        kv_shape = self.shape_of(self.seq_kv, self.kv_heads)
        forward = {"causal": self.causal, "heads_second": self.layout == "bhsd",
                   "source": "q,k,v", "draw": 1}
        # dO is drawn after q, k, v (o and lse are computed from them, not drawn).
        return [
            TensorSpec("q", q_shape, self.dtype, "input"),
            TensorSpec("k", kv_shape, self.dtype, "input"),
            TensorSpec("v", kv_shape, self.dtype, "input"),
            TensorSpec("o", q_shape, self.dtype, "input",
                       init=InputInit("attention_o", **forward)),
            TensorSpec("lse", (self.batch, self.heads, self.seq_q), "float32", "input",
                       init=InputInit("attention_lse", **forward)),
            TensorSpec("do", q_shape, self.dtype, "input", init=InputInit(draw=2)),
            TensorSpec("dq", q_shape, self.dtype, "output",
                       rel_error_bound=GRADIENT_REL_ERROR_BOUND),
            TensorSpec("dk", kv_shape, self.dtype, "output",
                       rel_error_bound=GRADIENT_REL_ERROR_BOUND),
            TensorSpec("dv", kv_shape, self.dtype, "output",
                       rel_error_bound=GRADIENT_REL_ERROR_BOUND),
        ]

    def flops(self) -> float:
        # Five products (S again, dP, dV, dK, dQ) of 2 flops per multiply-add.
        return 10.0 * self.batch * self.heads * self.attended_pairs() * self.head_dim

    def build_graph(self, tile: TileShape) -> STaskGraph:
        """Per (batch, query head) and key tile, the loop over the head's query tiles: the
        cost model's view of the kernels, whose tiles take a kv head's keys over every
        query head of its group in turn (the same work, in longer tiles)."""
        return STaskGraph(
            op=self.op,
            stasks=_BACKWARD_STASKS,
            tensors=_backward_tensors(self.dtype),
            extents={"kv": self.seq_kv, "q": self.seq_q, "d": self.head_dim,
                     "e": 2 * self.head_dim},
            tile=dict(tile),
            spatial_axes=("kv",),
            reduction_axes=("q",),
            grid_axes={"batch": self.batch, "heads": self.heads},
            # Key tile j is seen by queries i >= j: as many trips per tile as the forward's
            # query tiles, in the mirrored order.
            causal_pairs=(("kv", "q"),) if self.causal else (),
            # Every key tile adds to every query tile's dq: in any order, unless dq is to
            # be summed in key-tile order.
            shared_sums=() if self.deterministic else ("dq_acc",),
        )


#: k and v loaded once per key tile; q with its lse row, dO with o streamed per query
#: tile; D = rowsum(dO o) on the CUDA cores; five products on the tensor cores with the
#: softmax recomputed between them; dq's part leaves every trip (fp32 atomics), dk and dv
#: after the loop, together.
_BACKWARD_STASKS = (
    stask("load_k", STaskKind.LOAD, "k_s[kv,d]", ("k[kv,d]",), TMA_OR_LSU, phase="prologue"),
    stask("load_v", STaskKind.LOAD, "v_s[kv,d]", ("v[kv,d]",), TMA_OR_LSU, phase="prologue"),
    stask("load_q", STaskKind.LOAD, "q_s[q,d]", ("q[q,d]",), TMA_OR_LSU),
    stask("load_lse", STaskKind.LOAD, "lse_s[q]", ("lse[q]",), TMA_OR_CORES),
    stask("load_do", STaskKind.LOAD, "do_s[q,d]", ("do[q,d]",), TMA_OR_LSU),
    stask("load_o", STaskKind.LOAD, "o_s[q,d]", ("o[q,d]",), TMA_OR_LSU),
    stask("mma_s", STaskKind.MMA, "st[kv,q]", ("k_s[kv,d]", "q_s[q,d]"), TC,
          expr="st[kv,q] = k[kv,d] * q[q,d]"),
    # P and dS overwrite the scores and dP in their registers (FlashAttention-3's budget).
    stask("softmax_p", STaskKind.ELEMENTWISE, "st[kv,q]", ("st[kv,q]", "lse_s[q]"), EXP_UNITS,
          ops_per_point=1.0, emulation_ops=EXP2_EMULATION_OPS,
          expr="pt[kv,q] = exp2(st[kv,q] * scale_log2 - lse[q] * log2e)"),
    stask("mma_dv", STaskKind.MMA, "dv_acc[kv,d]", ("st[kv,q]", "do_s[q,d]", "dv_acc[kv,d]"),
          TC, expr="dv_acc[kv,d] += pt[kv,q] * do[q,d]"),
    stask("mma_dp", STaskKind.MMA, "dpt[kv,q]", ("v_s[kv,d]", "do_s[q,d]"), TC,
          expr="dpt[kv,q] = v[kv,d] * do[q,d]"),
    # The preprocess fused: each consumer warpgroup sums the query tile's rows of dO o.
    stask("delta", STaskKind.REDUCE, "delta_s[q]", ("do_s[q,d]", "o_s[q,d]"), CORES,
          ops_per_point=2.0, expr="delta[q] = sum_d do[q,d] * o[q,d]"),
    stask("grad_s", STaskKind.ELEMENTWISE, "dpt[kv,q]", ("st[kv,q]", "dpt[kv,q]", "delta_s[q]"),
          CORES, ops_per_point=2.0, expr="dst[kv,q] = pt[kv,q] * (dpt[kv,q] - delta[q])"),
    stask("mma_dk", STaskKind.MMA, "dk_acc[kv,d]", ("dpt[kv,q]", "q_s[q,d]", "dk_acc[kv,d]"),
          TC, expr="dk_acc[kv,d] += dst[kv,q] * q[q,d]"),
    stask("stage_ds", STaskKind.ELEMENTWISE, "ds_s[kv,q]", ("dpt[kv,q]",), CORES,
          ops_per_point=0.5, expr="ds_s[kv,q] = dst[kv,q] (16-bit, shared)"),
    # dq's part over every key row of the tile: dS staged in shared memory as its A.
    stask("mma_dq", STaskKind.MMA, "dq_part[q,d]", ("ds_s[kv,q]", "k_s[kv,d]"), TC,
          expr="dq_part[q,d] = dst[kv,q] * k[kv,d]"),
    stask("store_dq", STaskKind.STORE, "dq_acc[q,d]", ("dq_part[q,d]",), CORES,
          expr="dq_acc[q,d] += dq_part[q,d] (fp32 atomics)"),
    # dk and dv leave together: the tile's two accumulators side by side (e = 2 d).
    stask("scale_dk", STaskKind.ELEMENTWISE, "dkv_r[kv,e]", ("dk_acc[kv,d]", "dv_acc[kv,d]"),
          CORES, phase="epilogue", ops_per_point=0.5,
          expr="dkv_r[kv,e] = (dk_acc[kv,d] * scale, dv_acc[kv,d])"),
    stask("store", STaskKind.STORE, "dkv[kv,e]", ("dkv_r[kv,e]",), CORES, phase="epilogue"),
)


def _backward_tensors(dt: str) -> dict:
    """The backward's tensors: 16-bit inputs and gradients, fp32 row vectors, products and
    accumulators in fp32 registers (P and dS rounded to the inputs' type for their MMAs)."""
    return tensors(
        q=(dt, "global"), k=(dt, "global"), v=(dt, "global"), do=(dt, "global"),
        o=(dt, "global"), lse=("float32", "global"),
        dq_acc=("float32", "global"), dkv=(dt, "global"),
        q_s=(dt, "shared"), k_s=(dt, "shared"), v_s=(dt, "shared"), do_s=(dt, "shared"),
        o_s=(dt, "shared"), lse_s=("float32", "shared"), delta_s=("float32", "shared"),
        ds_s=(dt, "shared"), st=("float32", "register"), dpt=("float32", "register"),
        # dq's part is made a 64-column piece at a time after the scores are dead, in
        # their registers (a piece of 64 queries is as big as the scores of 64 keys).
        dq_part=("float32", "register", "st"),
        dv_acc=("float32", "register"), dk_acc=("float32", "register"),
        dkv_r=(dt, "register"),
    )


__all__ = ["GRADIENT_REL_ERROR_BOUND", "AttentionBackwardSpec"]
