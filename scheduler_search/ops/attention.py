"""Attention forward: o = softmax(q kᵀ / sqrt(d)) v per head, GQA and causal masking.

The sTask-graph is the online-softmax (FlashAttention) loop over key/value tiles: q is
loaded once per output tile, k and v are streamed, and the row statistics (running max
and sum) are carried from one iteration to the next.

FP8 (``float8_e4m3`` q, k, v with fp32 per-tensor scales, as FlashAttention-3's FP8
forward takes them: ``o = softmax(q_scale k_scale q kᵀ / sqrt(d)) v_scale v``, written in
bf16): P is rounded to e4m3 for ``P V``, and wgmma reads 8-bit B operands K-major only, so
each trip's v tile is transposed in shared memory first (``transpose_v``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar, Literal

from scheduler_search.ir import STaskGraph, STaskKind, Tensor, TileShape
from scheduler_search.ops._base import (
    DType,
    SpecError,
    TensorSpec,
    row_alignment_error,
)
from scheduler_search.ops._contract import DTYPE_BYTES, InputInit
from scheduler_search.ops._graph_helpers import (
    CORES,
    EXP2_EMULATION_OPS,
    EXP_UNITS,
    TC,
    TMA_OR_CORES,
    TMA_OR_LSU,
    packed_heads,
    stask,
    tensors,
)
from scheduler_search.ops.attention_shape import HEAD_DIM_STEP, AttentionShape

if TYPE_CHECKING:
    from scheduler_search.hardware import Device

#: The log-sum-exp is a per-row statistic in fp32: checked to 1e-3 whatever the input dtype.
LSE_REL_ERROR_BOUND = 1e-3
#: Element types of q, k and v; the 8-bit float needs per-tensor scales and writes bf16.
AttentionDType = Literal["float16", "bfloat16", "float8_e4m3"]
FP8_DTYPE = "float8_e4m3"
#: An 8-bit wgmma reduces K in steps of 32 (32 bytes, as 16-bit inputs' 16).
FP8_HEAD_DIM_STEP = 32
#: FP8's o against the fp32 reference of the same (exactly widened) inputs: P rounded to
#: e4m3 (3 mantissa bits, up to 1/16 off each) is what is left, where 16-bit P is 1e-2.
FP8_O_REL_ERROR_BOUND = 5e-2
#: One per-tensor scale: a positive fp32 scalar on the device (as FlashAttention-3's
#: descales), drawn after q, k and v so that their values are a 16-bit workload's.
_SCALE = InputInit("uniform", low=0.5, high=2.0, draw=1)


class AttentionSpec(AttentionShape):
    """Scaled dot-product attention forward (the shape's fields: :class:`AttentionShape`).

    The log-sum-exp output is (batch, heads, seq_q). The softmax scale is 1/sqrt(head_dim).
    """

    streams: ClassVar[dict[str, tuple[str, ...]]] = {"k": ("load_k",), "v": ("load_v",)}
    op: ClassVar[str] = "attention"
    #: Attention's seq_q and seq_kv are one range alone or both tied to one axis.
    runtime_dims: ClassVar[tuple[str, ...]] = ("seq_q", "seq_kv")
    baseline: ClassVar[str | None] = "sdpa_cudnn"
    #: FlashAttention-2 as well as cuDNN's SDPA.
    peers: ClassVar[tuple[str, ...]] = ("sdpa_flash",)
    #: Query heads packed into a tile must divide the group.
    exact_axes: ClassVar[tuple[str, ...]] = ("g",)

    dtype: AttentionDType = "float16"

    @property
    def fp8(self) -> bool:
        return self.dtype == FP8_DTYPE

    @property
    def out_dtype(self) -> DType:
        """o's element type: the inputs', or bf16 for 8-bit inputs."""
        return "bfloat16" if self.dtype == FP8_DTYPE else self.dtype

    def check_fits(self, device: Device) -> None:
        """Also: FP8 attention is generated for the warpgroup MMA (Hopper) alone; an sm_89
        GPU multiplies 8-bit GEMMs but runs attention in 16 bits."""
        super().check_fits(device)
        if self.fp8 and not device.capabilities.wgmma:
            raise SpecError("dtype", f"{self.dtype} attention is generated for Hopper's "
                                     f"warpgroup MMA (sm_90); on {device.name} ({device.arch}) "
                                     "use float16 or bfloat16")

    def cross_field_errors(self) -> Iterator[tuple[str, str]]:
        yield from self.group_errors()
        step = FP8_HEAD_DIM_STEP if self.fp8 else HEAD_DIM_STEP
        if self.head_dim % step:
            yield (
                "head_dim",
                (
                    f"head_dim={self.head_dim} must be a multiple of {step} "
                    f"(the K step of wgmma for {self.dtype})"
                ),
            )
        else:
            # Rows of q, k, v, o hold head_dim elements; already 32-byte multiples here,
            # kept so that the rule has one home.
            message = row_alignment_error("head_dim", self.head_dim, self.dtype)
            if message:
                yield "head_dim", message

    def tensors(self) -> list[TensorSpec]:
        q_shape = self.shape_of(self.seq_q, self.heads)
        kv_shape = self.shape_of(self.seq_kv, self.kv_heads)
        scales = [TensorSpec(f"{n}_scale", (1,), "float32", "input", init=_SCALE)
                  for n in "qkv"] if self.fp8 else []
        return [
            TensorSpec("q", q_shape, self.dtype, "input"),
            TensorSpec("k", kv_shape, self.dtype, "input"),
            TensorSpec("v", kv_shape, self.dtype, "input"),
            *scales,
            TensorSpec("o", q_shape, self.out_dtype, "output",
                       rel_error_bound=FP8_O_REL_ERROR_BOUND if self.fp8 else None),
            # Per query row: log Σ exp(scaled scores), fp32 (FlashAttention's softmax_lse,
            # kept for the backward pass).
            TensorSpec("lse", (self.batch, self.heads, self.seq_q), "float32", "output",
                       rel_error_bound=LSE_REL_ERROR_BOUND),
        ]

    def grid_sharing(self, tile: TileShape | None = None) -> dict[str, dict[str, int]]:
        # A tile of g packed heads leaves group / g tiles of a kv head to share its k, v.
        shared = self.group // packed_heads(tile)
        return {"k": {"heads": shared}, "v": {"heads": shared}}

    def flops(self) -> float:
        # Two matmuls (q kᵀ and p v), 2 flops per multiply-add.
        return 4.0 * self.batch * self.heads * self.attended_pairs() * self.head_dim

    def build_graph(self, tile: TileShape) -> STaskGraph:
        return STaskGraph(
            op=self.op,
            stasks=_FP8_ATTENTION_STASKS if self.fp8 else _ATTENTION_STASKS,
            tensors=_attention_tensors(self.dtype, self.out_dtype),
            # Packed (tile "g" > 1): a tile's rows are query positions x g heads of one
            # kv group, so k and v tiles are loaded once for the g heads.
            extents={"q": self.seq_q * packed_heads(tile), "kv": self.seq_kv,
                     "d": self.head_dim, "g": self.group},
            tile=dict(tile),
            spatial_axes=("q",),
            reduction_axes=("kv",),
            grid_axes={"batch": self.batch, "heads": self.heads // packed_heads(tile)},
            causal_pairs=(("q", "kv"),) if self.causal else (),
            side_row_bytes=DTYPE_BYTES["float32"],  # the row's log-sum-exp
        )


#: Attention's sTasks: Q loaded once, K and V pipelined over the key positions, the two
#: GEMMs on the tensor cores with the online softmax between them, normalisation and the
#: store after the loop.
_ATTENTION_STASKS = (
    stask("load_q", STaskKind.LOAD, "q_s[q,d]", ("q[q,d]",), TMA_OR_LSU, phase="prologue"),
    stask("load_k", STaskKind.LOAD, "k_s[kv,d]", ("k[kv,d]",), TMA_OR_LSU),
    stask("load_v", STaskKind.LOAD, "v_s[kv,d]", ("v[kv,d]",), TMA_OR_LSU),
    stask(
        "mma_qk",
        STaskKind.MMA,
        "s[q,kv]",
        ("q_s[q,d]", "k_s[kv,d]"),
        TC,
        expr="s[q,kv] = q[q,d] * k[kv,d]",
    ),
    stask(
        "softmax_max",
        STaskKind.REDUCE,
        "m_row[q]",
        ("s[q,kv]",),
        CORES,
        ops_per_point=2.0,
        expr="m_row[q] = max(m_row[q], max_kv s[q,kv] * scale_log2)",
    ),
    stask(
        "softmax_exp2",
        STaskKind.ELEMENTWISE,
        "p[q,kv]",
        ("s[q,kv]", "m_row[q]"),
        EXP_UNITS,
        ops_per_point=1.0,
        emulation_ops=EXP2_EMULATION_OPS,
        expr="p[q,kv] = exp2(s[q,kv] * scale_log2 - m_row[q])",
    ),
    stask(
        "softmax_sum",
        STaskKind.REDUCE,
        "l_row[q]",
        ("p[q,kv]", "m_row[q]"),
        CORES,
        ops_per_point=2.0,
        expr="l_row[q] = l_row[q] * alpha[q] + sum_kv p[q,kv]",
    ),
    stask(
        "rescale",
        STaskKind.ELEMENTWISE,
        "o_acc[q,d]",
        ("o_acc[q,d]", "m_row[q]"),
        CORES,
        ops_per_point=1.0,
        expr="o_acc[q,d] *= alpha[q]",
    ),
    stask(
        "mma_pv",
        STaskKind.MMA,
        "o_acc[q,d]",
        ("p[q,kv]", "v_s[kv,d]", "o_acc[q,d]"),
        TC,
        expr="o_acc[q,d] += p[q,kv] * v[kv,d]",
    ),
    stask(
        "normalize",
        STaskKind.ELEMENTWISE,
        "o_r[q,d]",
        ("o_acc[q,d]", "l_row[q]"),
        CORES,
        phase="epilogue",
        ops_per_point=1.0,
        expr="o_r[q,d] = o_acc[q,d] / l_row[q]",
    ),
    stask(
        "store", STaskKind.STORE, "o[q,d]", ("o_r[q,d]",), TMA_OR_CORES, phase="epilogue"
    ),
)


#: FP8: each trip's v tile transposed into a consumer's own shared-memory tile by the CUDA
#: cores (keys contiguous, as an 8-bit wgmma reads B), then P (e4m3 from registers) times
#: it. The transpose comes right after the scores' MMA: a loop that issues the MMAs first
#: runs it under them (the consumer's tile has a copy per trip parity).
_FP8_TRANSPOSE_V = stask(
    "transpose_v",
    STaskKind.ELEMENTWISE,
    "vt_s[d,kv]",
    ("v_s[kv,d]",),
    CORES,
    # 512 bytes a warp: one ldmatrix, four byte permutes, one stmatrix and the lane's
    # two addresses, about 14 lane instructions for 16 elements.
    ops_per_point=1.0,
    expr="vt_s[d,kv] = v[kv,d]",
)
_FP8_ATTENTION_STASKS = tuple(
    task
    for t in _ATTENTION_STASKS
    for task in (
        (t, _FP8_TRANSPOSE_V) if t.name == "mma_qk"
        else (stask(
            "mma_pv",
            STaskKind.MMA,
            "o_acc[q,d]",
            ("p[q,kv]", "vt_s[d,kv]", "o_acc[q,d]"),
            TC,
            expr="o_acc[q,d] += p[q,kv] * v[kv,d]",
        ),) if t.name == "mma_pv"
        else (t,)
    )
)


def _attention_tensors(dt: str, out: str) -> dict[str, Tensor]:
    """Attention's tensors (inputs of data type ``dt``, the output of ``out``; scores, row
    statistics and the accumulator in fp32 registers; FP8's transposed v tile and per-
    tensor scales)."""
    extra = {}
    if dt == FP8_DTYPE:
        extra = {"vt_s": (dt, "shared"), "q_scale": ("float32", "global"),
                 "k_scale": ("float32", "global"), "v_scale": ("float32", "global")}
    return tensors(
        q=(dt, "global"),
        k=(dt, "global"),
        v=(dt, "global"),
        o=(out, "global"),
        q_s=(dt, "shared"),
        k_s=(dt, "shared"),
        v_s=(dt, "shared"),
        s=("float32", "register"),
        p=(dt, "register"),
        m_row=("float32", "register"),
        l_row=("float32", "register"),
        o_acc=("float32", "register"),
        o_r=(out, "register"),
        **extra,
    )
