"""Mamba2 SSD chunk kernels: chunk state and chunk scan (as ``mamba_ssm``'s Triton kernels).

Within a chunk of ``chunk_size`` steps, with g the group of head h and dA the cumulative
sum of dt·A over the chunk:

- chunk state: states[p,n] = Σ_l x[l,p] · exp(dA[L-1] - dA[l]) · dt[l] · b[l,n]
- chunk scan:  out[l,p] = exp(dA[l]) · Σ_n c[l,n] states[p,n]
                        + Σ_{s<=l} cb[l,s] · exp(dA[l] - dA[s]) · dt[s] · x[s,p]
                        + D[h] · x[l,p]
  (``mamba_ssm``'s ``_chunk_scan_fwd`` with a per-head ``D`` and no ``z``).

Inputs are drawn as a model's are: small positive dt, a negative A per head folded into
dA_cumsum, cb computed as C·Bᵀ per chunk, and a standard-normal skip weight D per head (a
zero D would leave the chunk scan's D·x term unchecked).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Annotated, ClassVar

from pydantic import BaseModel, Field

from scheduler_search.ir import STask, STaskGraph, STaskKind, Tensor, TileShape
from scheduler_search.ops._base import DType, OperatorSpec, TensorSpec, row_alignment_error
from scheduler_search.ops._contract import InputInit
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

#: wgmma K step (PTX ISA): headdim, dstate and chunk_size are reduced over by wgmma.
MMA_K_STEP = 16

#: x, B, C and states: scaled standard normals (draw 1, after dt and dA_cumsum).
_OPERAND = InputInit("normal", scale=0.5, draw=1)


class Mamba2Shape(BaseModel):
    """The shape of Mamba2's SSD: what its chunk kernels and the whole forward
    (``mamba2_ssd``) share."""

    batch: Annotated[int, Field(ge=1, le=65536)]
    seqlen: Annotated[int, Field(ge=1, le=1 << 22)]
    nheads: Annotated[int, Field(ge=1, le=4096)]
    headdim: Annotated[int, Field(ge=MMA_K_STEP, le=512)]
    dstate: Annotated[int, Field(ge=MMA_K_STEP, le=512)]
    ngroups: Annotated[int, Field(ge=1, le=4096)]
    chunk_size: Annotated[int, Field(ge=MMA_K_STEP, le=1024)]
    dtype: DType = "float16"
    #: Sequences packed in a row, as ``mamba_ssm``'s ``seq_idx``: an int32 input (batch,
    #: seqlen) of non-decreasing sequence ids; nothing crosses from one sequence to the next
    #: (the chunk state keeps the positions of the sequence its chunk ends in, the state
    #: passing drops the carried state where a chunk ends in a new sequence, the chunk
    #: scan's state term is zero for positions of another sequence than the one before
    #: the chunk; the scan's cb comes masked, as ``_bmm_chunk_fwd`` makes it).
    seq_idx: bool = False


class _Mamba2Spec(OperatorSpec, Mamba2Shape):
    """Fields shared by the two chunk kernels (tensors laid out batch-major)."""

    exact_axes: ClassVar[tuple[str, ...]] = ("l", "s", "p", "n", "g")

    @property
    def nchunks(self) -> int:
        """Chunks covering the sequence (a spec's seqlen is a whole number of chunks; the
        references are also checked on a ragged last chunk, padded)."""
        return -(-self.seqlen // self.chunk_size)

    def cross_field_errors(self) -> Iterator[tuple[str, str]]:
        if self.seqlen % self.chunk_size:
            yield (
                "seqlen",
                (f"seqlen={self.seqlen} is not divisible by chunk_size={self.chunk_size}"),
            )
        if self.nheads % self.ngroups:
            yield "ngroups", f"nheads={self.nheads} is not divisible by ngroups={self.ngroups}"
        if self.chunk_size & (self.chunk_size - 1):
            yield "chunk_size", f"chunk_size={self.chunk_size} must be a power of two"
        for field in ("headdim", "dstate"):
            value = getattr(self, field)
            if value % MMA_K_STEP:
                yield field, f"{field}={value} must be a multiple of {MMA_K_STEP} (wgmma K step)"
                continue
            message = row_alignment_error(field, value, self.dtype)
            if message:
                yield field, message

    def _scalar_tensors(self) -> list[TensorSpec]:
        per_chunk = (self.batch, self.nheads, self.nchunks, self.chunk_size)
        dt = InputInit("time_step", low=0.01, high=0.1, length=self.seqlen)
        decay = InputInit("decay_cumsum", low=0.5, high=2.0, source="dt")
        return [
            TensorSpec("dt", per_chunk, "float32", "input", init=dt),
            TensorSpec("dA_cumsum", per_chunk, "float32", "input", init=decay),
        ]

    def _seq_idx(self) -> list[TensorSpec]:
        """The int32 sequence ids, when the spec packs sequences (drawn last: up to four
        sequences a row, one starting on a chunk's start)."""
        if not self.seq_idx:
            return []
        init = InputInit("sequence_ids", high=4, length=self.chunk_size, draw=5)
        return [TensorSpec("seq_idx", (self.batch, self.seqlen), "int32", "input", init=init)]

    def _x(self) -> TensorSpec:
        shape = (self.batch, self.seqlen, self.nheads, self.headdim)
        return TensorSpec("x", shape, self.dtype, "input", init=_OPERAND)

    def _states_shape(self) -> tuple[int, ...]:
        return (self.batch, self.nchunks, self.nheads, self.headdim, self.dstate)

    def grid_sharing(self, tile: TileShape | None = None) -> dict[str, dict[str, int]]:
        group = self.nheads // self.ngroups
        return {name: {"heads": group} for name in ("b", "c", "cb")}

    @property
    def group(self) -> int:
        """Heads sharing one group's B and C."""
        return self.nheads // self.ngroups

    def _grid_axes(self, pack: int = 1) -> dict[str, int]:
        return {"batch": self.batch, "chunks": self.nchunks, "heads": self.nheads // pack}


class Mamba2ChunkStateSpec(_Mamba2Spec):
    """Per-chunk final states: a (headdim x chunk) @ (chunk x dstate) product with decay.

    A tile may pack ``g`` heads of one group into its rows (tile ``g``; rows are then
    (head, p) pairs, ``p`` extent headdim x g): their B tiles are loaded once."""

    op: ClassVar[str] = "mamba2_chunk_state"
    baseline: ClassVar[str | None] = "mamba_ssm_chunk_state"
    streams: ClassVar[dict[str, tuple[str, ...]]] = {
        "xb": ("load_x", "load_b", "load_dt", "load_dA")
    }

    keyed_when_set: ClassVar[tuple[str, ...]] = ("states_in_fp32", "pass_states",
                                                  "initial_states", "seq_idx")

    #: As ``_chunk_state_fwd``'s argument: fp32 states (its default, what the model's
    #: state passing reads), or states in the inputs' dtype (half the bytes written).
    states_in_fp32: bool = True
    #: Fused with the state passing (``_state_passing_fwd``): ``states`` are then the
    #: states entering each chunk, ``r_c = exp(dA_c[L-1]) r_(c-1) + chunk_state_c`` carried
    #: through the chunks on chip, and ``final_states`` the state after the last one.
    pass_states: bool = False
    #: With ``pass_states``: an fp32 ``initial_states`` input (batch, nheads, headdim,
    #: dstate) is the state entering the first chunk (else zeros).
    initial_states: bool = False

    @property
    def states_dtype(self) -> str:
        return "float32" if self.states_in_fp32 else self.dtype

    def cross_field_errors(self) -> Iterator[tuple[str, str]]:
        yield from super().cross_field_errors()
        if self.initial_states and not self.pass_states:
            yield "initial_states", "initial_states needs pass_states (the state passing reads it)"

    def loop_orders(self, offered: tuple[str, ...]) -> tuple[str, ...]:
        # The state passing reads each chunk's finished product in its own trip: no MMA
        # stays in flight past it.
        return ("serial",) if self.pass_states else offered

    def _final_shape(self) -> tuple[int, ...]:
        return (self.batch, self.nheads, self.headdim, self.dstate)

    def tensors(self) -> list[TensorSpec]:
        b_shape = (self.batch, self.seqlen, self.ngroups, self.dstate)
        b = TensorSpec("b", b_shape, self.dtype, "input", init=replace(_OPERAND, draw=2))
        states = TensorSpec("states", self._states_shape(), self.states_dtype, "output")
        inputs = [b, self._x(), *self._scalar_tensors()]
        if not self.pass_states:
            return [*inputs, *self._seq_idx(), states]
        if self.initial_states:
            inputs.append(TensorSpec("initial_states", self._final_shape(), "float32", "input",
                                     init=replace(_OPERAND, draw=3)))
        final = TensorSpec("final_states", self._final_shape(), "float32", "output")
        return [*inputs, *self._seq_idx(), states, final]

    def flops(self) -> float:
        return 2.0 * self.batch * self.nheads * self.seqlen * self.headdim * self.dstate

    def grid_sharing(self, tile: TileShape | None = None) -> dict[str, dict[str, int]]:
        return {"b": {"heads": self.group // packed_heads(tile)}}

    def _grid(self, tile: TileShape) -> dict[str, int]:
        """With the state passing, one tile walks every chunk in order (chunks: 1)."""
        grid = self._grid_axes(packed_heads(tile))
        return {**grid, "chunks": 1} if self.pass_states else grid

    def _passing(self, tile: TileShape) -> tuple[STask, ...]:
        """The state passing's sTasks; its loop ones run once a chunk (every chunk /
        tile_l trips)."""
        every = max(1, self.chunk_size // tile.get("l", self.chunk_size))
        return tuple(replace(t, every_trips=every) if t.phase == "loop" else t
                     for t in _PASSING_STASKS)

    def build_graph(self, tile: TileShape) -> STaskGraph:
        stasks = (
            stask("load_x", STaskKind.LOAD, "x_s[l,p]", ("x[l,p]",), TMA_OR_LSU),
            stask("load_b", STaskKind.LOAD, "b_s[l,n]", ("b[l,n]",), TMA_OR_LSU),
            stask("load_dt", STaskKind.LOAD, "dt_s[l]", ("dt[l]",), TMA_OR_CORES),
            stask("load_dA", STaskKind.LOAD, "dA_s[l]", ("dA_cumsum[l]",), TMA_OR_CORES),
            stask(
                "decay",
                STaskKind.ELEMENTWISE,
                "w[l]",
                ("dA_s[l]", "dt_s[l]", *(("seq_idx[l]",) if self.seq_idx else ())),
                EXP_UNITS,
                ops_per_point=1.0,
                emulation_ops=EXP2_EMULATION_OPS,
                expr="w[l] = exp(dA[L-1] - dA[l]) * dt[l]",
            ),
            stask(
                "scale_x",
                STaskKind.ELEMENTWISE,
                "xw[l,p]",
                ("x_s[l,p]", "w[l]"),
                CORES,
                ops_per_point=2.0,
                expr="xw[l,p] = x[l,p] * w[l]",
            ),
            stask(
                "mma",
                STaskKind.MMA,
                "acc[p,n]",
                ("xw[l,p]", "b_s[l,n]"),
                TC,
                expr="acc[p,n] += xw[l,p] * b[l,n]",
            ),
        ) + (self._passing(tile) if self.pass_states else _STATE_STORE)
        dt = self.dtype
        return STaskGraph(
            op=self.op,
            stasks=stasks,
            tensors=tensors(
                x=(dt, "global"),
                b=(dt, "global"),
                dt=("float32", "global"),
                dA_cumsum=("float32", "global"),
                states=(self.states_dtype, "global"),
                x_s=(dt, "shared"),
                b_s=(dt, "shared"),
                dt_s=("float32", "shared"),
                dA_s=("float32", "shared"),
                w=("float32", "register"),
                xw=(dt, "register"),
                acc=("float32", "register"),
                **({"run": ("float32", "register"), "final_states": ("float32", "global")}
                   if self.pass_states else {}),
                **({"seq_idx": ("int32", "global")} if self.seq_idx else {}),
            ),
            # With the state passing the loop walks the whole sequence, chunk after chunk.
            extents={"p": self.headdim * packed_heads(tile), "n": self.dstate,
                     "l": self.seqlen if self.pass_states else self.chunk_size,
                     "g": self.group},
            tile=dict(tile),
            spatial_axes=("p", "n"),
            reduction_axes=("l",),
            grid_axes=self._grid(tile),
            copies=dict.fromkeys(("dt_s", "dA_s"), packed_heads(tile)),
        )


#: The chunk state's own store: each chunk's state, after the loop over its positions.
_STATE_STORE = (
    stask("store", STaskKind.STORE, "states[p,n]", ("acc[p,n]",), TMA_OR_CORES,
          phase="epilogue"),
)

#: Fused with the state passing: at each chunk's last trip the running state takes the
#: chunk's decay and state, and is written as the state entering the next chunk; the state
#: after the last chunk is the epilogue's.
_PASSING_STASKS = (
    # The running state it also reads is carried on chip (as online softmax's row max),
    # and the chunk's total decay dA[L-1] is read once per chunk, not from the ring.
    stask("pass_state", STaskKind.ELEMENTWISE, "run[p,n]", ("acc[p,n]",), CORES,
          ops_per_point=2.0, expr="run[p,n] = exp(dA[L-1]) * run[p,n] + acc[p,n]"),
    stask("store_state", STaskKind.STORE, "states[p,n]", ("run[p,n]",), CORES),
    stask("store", STaskKind.STORE, "final_states[p,n]", ("run[p,n]",), TMA_OR_CORES,
          phase="epilogue"),
)


class Mamba2ChunkScanSpec(_Mamba2Spec):
    """Chunk outputs: the inter-chunk term from the entering states plus the causal
    intra-chunk term through cb = c·bᵀ.

    A tile may pack ``g`` heads of one group side by side in its columns (tile ``g``;
    columns are then (head, p) pairs, ``p`` extent headdim x g): their cb and C tiles,
    the group's, are loaded once."""

    op: ClassVar[str] = "mamba2_chunk_scan"
    baseline: ClassVar[str | None] = "mamba_ssm_chunk_scan"
    streams: ClassVar[dict[str, tuple[str, ...]]] = {
        "cb": ("load_cb", "load_dt", "load_dA"),
        "x": ("load_x",),
    }
    keyed_when_set: ClassVar[tuple[str, ...]] = ("z", "d_per_channel", "seq_idx", "cb_in_tile")

    #: The gate of ``mamba_chunk_scan_combined(z=...)``: an input ``z`` shaped as ``x``,
    #: and ``out = (scan + D x) · z sigmoid(z)``.
    z: bool = False
    #: ``D`` per channel, (nheads, headdim), as ``Mamba2(D_has_hdim=True)`` keeps it; else
    #: per head, (nheads,).
    d_per_channel: bool = False
    #: ``C Bᵀ`` computed in the tile (an MMA of the loop, from ``B`` tiles the loop loads)
    #: instead of read from a ``cb`` input that ``_bmm_chunk_fwd`` wrote: the input is then
    #: ``b`` (batch, seqlen, ngroups, dstate), and with ``seq_idx`` the kernel masks the
    #: pairs of different sequences itself.
    cb_in_tile: bool = False

    def stream_loads(self) -> dict[str, tuple[str, ...]]:
        if not self.cb_in_tile:
            return super().stream_loads()
        # The stream named "cb" feeds the intra-chunk products: B tiles to compute cb from.
        return {"cb": ("load_b", "load_dt", "load_dA"), "x": ("load_x",)}

    def tensors(self) -> list[TensorSpec]:
        c_shape = (self.batch, self.seqlen, self.ngroups, self.dstate)
        out_shape = (self.batch, self.seqlen, self.nheads, self.headdim)
        return [
            self._gram_input(c_shape),
            self._x(),
            *self._scalar_tensors(),
            TensorSpec("c", c_shape, self.dtype, "input", init=_OPERAND),
            # The spec's dtype first (what the chunk-state and state-passing steps hand
            # mamba_ssm's scan), so a kernel reading states through a tensor map and the
            # peer agree on it; a kernel may take them in fp32.
            TensorSpec("states", self._states_shape(), self.dtype, "input",
                       other_dtypes=("float32",), init=_OPERAND),
            TensorSpec("D", self._d_shape(), "float32", "input", init=InputInit(draw=3)),
            *([TensorSpec("z", out_shape, self.dtype, "input", init=replace(_OPERAND, draw=4))]
              if self.z else []),
            *self._seq_idx(),
            TensorSpec("out", out_shape, self.dtype, "output", other_dtypes=("float32",)),
        ]

    def loop_orders(self, offered: tuple[str, ...]) -> tuple[str, ...]:
        # cb computed in the tile has one register buffer: mma_cb issued a trip ahead
        # would overwrite what the products still read, and MMA groups complete in
        # order, so the wait for a trip's cb also waits for the P x left in flight.
        return ("serial",) if self.cb_in_tile else offered

    def _gram_input(self, c_shape: tuple[int, ...]) -> TensorSpec:
        """``cb`` (drawn after the C it is computed from), or ``b`` when the kernel computes
        cb itself. D is drawn last, as it joined the contract after the others (the other
        inputs of a seed kept their values)."""
        if self.cb_in_tile:
            return TensorSpec("b", c_shape, self.dtype, "input", init=replace(_OPERAND, draw=2))
        cb_shape = (self.batch, self.nchunks, self.ngroups, self.chunk_size, self.chunk_size)
        cb = InputInit("chunk_gram", scale=0.5, source="c", draw=2)
        return TensorSpec("cb", cb_shape, "float32", "input", init=cb)

    def _d_shape(self) -> tuple[int, ...]:
        return (self.nheads, self.headdim) if self.d_per_channel else (self.nheads,)

    def flops(self) -> float:
        # Per output: the state term 2n, the causal intra-chunk term 2 (l + 1) (chunk + 1 on
        # average over l), the skip term D x 2.
        # The gate z sigmoid(z) and its product: 4 more (exp counted as one).
        per_output = 2.0 * self.dstate + self.chunk_size + 3 + (4 if self.z else 0)
        return self.batch * self.nheads * self.seqlen * self.headdim * per_output

    def build_graph(self, tile: TileShape) -> STaskGraph:
        stasks, graph_tensors = _CHUNK_SCAN_STASKS, _chunk_scan_tensors(self.dtype)
        if self.z:  # the gate, between the skip term and the store
            stasks = (*stasks[:-1], _GATE, stasks[-1])
            graph_tensors = {**graph_tensors, **tensors(z=(self.dtype, "global"))}
        if self.seq_idx:  # the state term's decay reads each row's sequence
            stasks = tuple(_DECAY_OUT_PACKED if t.name == "decay_out" else t for t in stasks)
            graph_tensors = {**graph_tensors, **tensors(seq_idx=("int32", "global"))}
        if self.cb_in_tile:  # B tiles and an MMA in place of the cb loads
            stasks = _gram_in_tile(stasks, self.seq_idx)
            graph_tensors = {k: v for k, v in graph_tensors.items() if k not in ("cb", "cb_s")}
            graph_tensors.update(tensors(b=(self.dtype, "global"), b_s=(self.dtype, "shared"),
                                         cb=("float32", "register")))
        return STaskGraph(
            op=self.op,
            stasks=stasks,
            tensors=graph_tensors,
            extents={
                "l": self.chunk_size,
                "p": self.headdim * packed_heads(tile),
                "s": self.chunk_size,
                "n": self.dstate,
                "g": self.group,
            },
            tile=dict(tile),
            spatial_axes=("l", "p"),
            reduction_axes=("s",),
            grid_axes=self._grid_axes(packed_heads(tile)),
            causal_pairs=(("l", "s"),),
            copies=dict.fromkeys(("dt_s", "dAs_s", "dAl_s"), packed_heads(tile)),
        )


#: The chunk scan's sTasks: the state term in the prologue, the causal intra-chunk term
#: pipelined over the source positions ``s``, the skip term and the store after the loop.
_CHUNK_SCAN_STASKS = (
    stask("load_c", STaskKind.LOAD, "c_s[l,n]", ("c[l,n]",), TMA_OR_LSU, phase="prologue"),
    stask(
        "load_state",
        STaskKind.LOAD,
        "st_s[p,n]",
        ("states[p,n]",),
        TMA_OR_LSU,
        phase="prologue",
    ),
    stask(
        "load_dA_l",
        STaskKind.LOAD,
        "dAl_s[l]",
        ("dA_cumsum[l]",),
        TMA_OR_CORES,
        phase="prologue",
    ),
    stask(
        "mma_state",
        STaskKind.MMA,
        "acc[l,p]",
        ("c_s[l,n]", "st_s[p,n]"),
        TC,
        phase="prologue",
        expr="acc[l,p] = c[l,n] * states[p,n]",
    ),
    stask(
        "decay_out",
        STaskKind.ELEMENTWISE,
        "acc[l,p]",
        ("acc[l,p]", "dAl_s[l]"),
        CORES,
        phase="prologue",
        ops_per_point=1.0,
        expr="acc[l,p] *= exp(dA[l])",
    ),
    stask("load_cb", STaskKind.LOAD, "cb_s[l,s]", ("cb[l,s]",), TMA_OR_LSU),
    stask("load_dt", STaskKind.LOAD, "dt_s[s]", ("dt[s]",), TMA_OR_CORES),
    stask("load_dA", STaskKind.LOAD, "dAs_s[s]", ("dA_cumsum[s]",), TMA_OR_CORES),
    stask("load_x", STaskKind.LOAD, "x_s[s,p]", ("x[s,p]",), TMA_OR_LSU),
    stask(
        "decay",
        STaskKind.ELEMENTWISE,
        "e[l,s]",
        ("dAl_s[l]", "dAs_s[s]"),
        EXP_UNITS,
        ops_per_point=1.0,
        emulation_ops=EXP2_EMULATION_OPS,
        expr="e[l,s] = exp(dA[l] - dA[s])",
    ),
    stask(
        "scale_cb",
        STaskKind.ELEMENTWISE,
        "pm[l,s]",
        ("cb_s[l,s]", "e[l,s]", "dt_s[s]"),
        CORES,
        ops_per_point=3.0,
        expr="pm[l,s] = (s <= l) ? cb[l,s] * e[l,s] * dt[s] : 0",
    ),
    stask(
        "mma_x",
        STaskKind.MMA,
        "acc[l,p]",
        ("pm[l,s]", "x_s[s,p]", "acc[l,p]"),
        TC,
        expr="acc[l,p] += pm[l,s] * x[s,p]",
    ),
    stask(
        "skip",
        STaskKind.ELEMENTWISE,
        "acc[l,p]",
        ("acc[l,p]", "x[l,p]", "D[]"),
        CORES,
        phase="epilogue",
        ops_per_point=2.0,
        expr="acc[l,p] += D[h] * x[l,p]",
    ),
    stask(
        "store", STaskKind.STORE, "out[l,p]", ("acc[l,p]",), TMA_OR_CORES, phase="epilogue"
    ),
)


def _gram_in_tile(stasks: tuple[STask, ...], packed: bool) -> tuple[STask, ...]:
    """The chunk scan's sTasks computing ``cb = C Bᵀ`` in the loop: ``load_b`` where
    ``load_cb`` was, ``mma_cb`` (C from the tile buffer, B from the ring) before the
    products, which read cb from its accumulator (masked between sequences when
    ``packed``)."""
    load_b = stask("load_b", STaskKind.LOAD, "b_s[s,n]", ("b[s,n]",), TMA_OR_LSU)
    mma_cb = stask("mma_cb", STaskKind.MMA, "cb[l,s]", ("c_s[l,n]", "b_s[s,n]"), TC,
                   expr="cb[l,s] = c[l,n] * b[s,n]")
    inputs = ("cb[l,s]", "e[l,s]", "dt_s[s]", *(("seq_idx[l]",) if packed else ()))
    expr = ("pm[l,s] = (s <= l && seq[s] == seq[l]) ? cb[l,s] * e[l,s] * dt[s] : 0"
            if packed else "pm[l,s] = (s <= l) ? cb[l,s] * e[l,s] * dt[s] : 0")
    scale_cb = stask("scale_cb", STaskKind.ELEMENTWISE, "pm[l,s]", inputs, CORES,
                     ops_per_point=3.0, expr=expr)
    out: list[STask] = []
    for t in stasks:
        if t.name == "load_cb":
            out.append(load_b)
        elif t.name == "scale_cb":
            out += [mma_cb, scale_cb]
        else:
            out.append(t)
    return tuple(out)


#: The state term's decay with packed sequences: zero on rows of another sequence than
#: the one before the chunk.
_DECAY_OUT_PACKED = stask(
    "decay_out",
    STaskKind.ELEMENTWISE,
    "acc[l,p]",
    ("acc[l,p]", "dAl_s[l]", "seq_idx[l]"),
    CORES,
    phase="prologue",
    ops_per_point=1.0,
    expr="acc[l,p] *= (seq[l] == seq[-1]) ? exp(dA[l]) : 0",
)

#: ``mamba_chunk_scan_combined``'s gate on the finished output, z read from global memory
#: by the store, pair by pair.
_GATE = stask(
    "gate",
    STaskKind.ELEMENTWISE,
    "acc[l,p]",
    ("acc[l,p]", "z[l,p]"),
    CORES,
    phase="epilogue",
    ops_per_point=4.0,
    expr="acc[l,p] *= z[l,p] * sigmoid(z[l,p])",
)


def _chunk_scan_tensors(dt: str) -> dict[str, Tensor]:
    """The chunk scan's tensors (inputs of data type ``dt``, the decay terms in fp32)."""
    return tensors(
        cb=("float32", "global"),
        x=(dt, "global"),
        dt=("float32", "global"),
        dA_cumsum=("float32", "global"),
        c=(dt, "global"),
        states=(dt, "global"),
        D=("float32", "global"),
        out=(dt, "global"),
        c_s=(dt, "shared"),
        st_s=(dt, "shared"),
        dAl_s=("float32", "shared"),
        cb_s=("float32", "shared"),
        dt_s=("float32", "shared"),
        dAs_s=("float32", "shared"),
        x_s=(dt, "shared"),
        e=("float32", "register"),
        pm=(dt, "register"),
        acc=("float32", "register"),
    )
