"""Attention forward as hooks on the pipeline skeleton: ``o = softmax(q kᵀ / √d) v`` per head.

Tensors are laid out (batch, seq, heads, head_dim) as FlashAttention takes them (``bshd``),
or (batch, heads, seq, head_dim) as PyTorch's SDPA does (``bhsd``); query head
``h`` reads key/value head ``h / (heads / kv_heads)`` (GQA, MQA); causal masks key ``j > i``
(top-left aligned, as the workers' reference). What is attention's own:

- tiles: an output tile is ``tile_q`` queries of one (batch, head); the grid is
  q tiles x batch x heads; one loop trip per ``tile_kv`` keys, and with causal masking only
  the trips at or below the diagonal (``tile_trips``);
- ``load_q`` once per output tile, ``load_k`` / ``load_v`` per trip: TMA boxes of rank-4
  tensor maps over (head_dim, heads, seq, batch), so rows past the sequence read as zeros;
- ``mma_qk``: ``S = Q Kᵀ`` with the MMA (Q and K K-major in shared memory);
- the online softmax on the consumers' registers: ``softmax_max`` (scores masked where a
  tile crosses the diagonal or the end of the keys, the running row max of the raw scores
  and the factor ``alpha`` that rescales what came before), ``softmax_exp2`` (``2^(s c -
  m c)`` with ``c = log2(e) / √d``, one FMA, on the SFU with ``ex2.approx`` or on the CUDA
  cores with ``exp2f``, as the sProgram maps it), ``softmax_sum`` (this thread's part of the row
  sum; the four threads of a row add theirs in ``normalize``), ``rescale``, written by
  :class:`~codegen.kernels.attention_softmax.OnlineSoftmax`;
- ``mma_pv``: ``O += P V`` with P straight from the S accumulators converted to 16-bit
  pairs (the register-A form of the MMA) and V MN-major in shared memory;
- ``normalize`` and ``store``: ``O / l``, written with st.global or staged in shared
  memory and stored by TMA through a rank-4 map like q's (a consumer's rows one box:
  :class:`~codegen.pipeline.StoreBox`), and the row's fp32 log-sum-exp
  ``lse = (m c + log2 l) ln 2`` (a side output, FlashAttention's softmax_lse).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import cached_property

from codegen.artifact import TensorMapArg
from codegen.cuda import swizzle
from codegen.kernels.attention_fields import AttentionFields, input_map
from codegen.kernels.attention_fp8 import FP8_BLOCK_REGS, TransposedV, fp8_problem
from codegen.kernels.attention_order import order_problem
from codegen.kernels.attention_output import AttentionOutput
from codegen.kernels.attention_softmax import OnlineSoftmax
from codegen.pipeline import (
    Code,
    GridAxis,
    Issue,
    OperandTile,
    OperatorHooks,
    OutputTile,
    TripAt,
)
from codegen.pipeline.limits import warpgroup_barrier
from codegen.targets import Mma, MmaPart
from scheduler_search.hardware.model import UnitKind
from scheduler_search.ops import DTYPE_BYTES
from scheduler_search.ops.attention import FP8_DTYPE, packed_heads

#: The input types attention lowers, with their sizes (``DTYPE_BYTES``).
ELEMENT_BYTES = {d: DTYPE_BYTES[d] for d in ("float16", "bfloat16", FP8_DTYPE)}
#: Registers a thread holds per 64-row block besides the S and O accumulators: the row
#: max, sum and rescale factor of its two rows.
ROW_STATE_REGS = 6
#: The narrowest swizzle span q, k and v rows are laid out in (64B boxes: head_dim 96 as
#: three; the 32B mode is not used).
MIN_SWIZZLE_SPAN_BYTES = 64


class AttentionHooks(AttentionFields, OperatorHooks):
    """Attention's tiles, loads, softmax and matrix products on the skeleton."""

    trips = "KV_TILES"
    #: A range of sequence lengths: ``SEQ_Q`` (the query tiles counted in the kernel) and
    #: ``SEQ_KV`` (the loop's trips and the key mask) as kernel arguments.
    runtime_capable = ("seq_q", "seq_kv")
    #: nvcc 13.0, 384 threads (cap 168): S + P + O + row state of 166 registers compiled
    #: without spills at head_dim 128 / tile_kv 128; 190 (tile_kv 160) spilled.
    overhead_regs = 2
    owner_tile_buffers = True

    # ----- problem and tile ----------------------------------------------------------
    @property
    def elem(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    @property
    def fp8(self) -> bool:
        """8-bit q, k, v: per-tensor scales, v transposed each trip, bf16 o."""
        return self.dtype == FP8_DTYPE

    @property
    def out_dtype(self) -> str:
        return "bfloat16" if self.fp8 else self.dtype

    @property
    def pack(self) -> int:
        """Query heads of one kv group packed into a tile's rows, in one TMA box: in bshd
        packed row r is query position r / PACK of head heads0 + r % PACK; in bhsd the box
        holds the heads one after the other, TILE_Q / PACK positions each."""
        return packed_heads(self.sprogram.tile)

    @property
    def trip_count(self) -> int:
        return -(-self._p("seq_kv") // self.tile_kv)

    def tile_trips(self) -> str | None:
        if not self.causal:
            return None
        # Top-left aligned: the tile's last query (q0 + TILE_Q - 1) / PACK sees keys up to
        # itself.
        return "min(KV_TILES, ((q0 + TILE_Q - 1) / PACK + TILE_KV) / TILE_KV)"

    @property
    def grid_axes(self) -> tuple[GridAxis, ...]:
        # Causal: a query tile's trips grow with its index; the heaviest go first.
        return (GridAxis("q", self._p("seq_q") * self.pack, self.tile_q,
                         heaviest_last=self.causal,
                         runtime_extent="Q_ROWS" if "seq_q" in self.runtime_dims else ""),
                GridAxis("batch", self._p("batch"), 1),
                GridAxis("heads", self._p("heads"), self.pack))

    def tile_loads(self) -> tuple[str, ...]:
        return ("load_q",)

    @property
    def math_stasks(self) -> frozenset[str]:
        return frozenset({"softmax_max", "softmax_exp2", "softmax_sum", "rescale", "normalize",
                          *self.relayout_stasks})

    @property
    def relayout_stasks(self) -> frozenset[str]:
        return frozenset({"transpose_v"}) if self.fp8 else frozenset()

    # ----- operands and output -------------------------------------------------------
    @cached_property
    def q(self) -> OperandTile:
        return OperandTile("q", "k", self.tile_q, self.head_dim,
                           swizzle.widest(self.head_dim * self.elem), self.elem,
                           self.target.k_step(self.dtype), self.target.mma_rows)

    @cached_property
    def k(self) -> OperandTile:
        return OperandTile("k", "k", self.tile_kv, self.head_dim,
                           swizzle.widest(self.head_dim * self.elem), self.elem,
                           self.target.k_step(self.dtype), self.target.mma_rows)

    @cached_property
    def v(self) -> OperandTile:
        # P V: V (kv x d) is B with K = kv rows and N = d contiguous: MN-major, in boxes
        # of the widest swizzle span that divides a row (head_dim 96: three 64B boxes).
        return OperandTile("v", "mn", self.head_dim, self.tile_kv,
                           swizzle.widest(self.head_dim * self.elem), self.elem,
                           self.target.k_step(self.dtype), self.target.mma_rows)

    @property
    def vt(self) -> OperandTile:
        """FP8: a consumer's v transposed (d x kv, keys contiguous), B of P V K-major."""
        return self._transposed.vt

    def consumer_tiles(self) -> tuple[OperandTile, ...]:
        return (self.vt,) if self.fp8 else ()

    def operand(self, stask: str) -> OperandTile:
        return {"load_q": self.q, "load_k": self.k, "load_v": self.v}[stask]

    def tensor_map(self, stask: str) -> str:
        return {"load_q": "q_map", "load_k": "k_map", "load_v": "v_map"}[stask]

    def output(self) -> OutputTile:
        return OutputTile(
            tensor="o", dtype=self.out_dtype, elem_bytes=DTYPE_BYTES[self.out_dtype],
            rows=self.tile_q,
            cols=self.head_dim, global_rows=self._p("seq_q") * self.pack,
            global_cols=self.head_dim, fragment="o_acc", row_origin="q0", col_origin="0",
            extent_names=("Q_ROWS", "HEAD_DIM"),
            runtime_rows="seq_q" in self.runtime_dims,
            row_pointer=self._output.row_pointer(),
            store_box=self._output.store_box(),
        )

    @cached_property
    def _output(self) -> AttentionOutput:
        s = self.structure
        rows = self.tile_q if s.pingpong else self.tile_q // s.consumers
        return AttentionOutput(dict(self.params), DTYPE_BYTES[self.out_dtype], self.tile_q,
                               self.pack, rows)

    def side_outputs(self) -> tuple[str, ...]:
        return () if self.side_outputs_staged else ("lse",)

    def pointer_inputs(self) -> tuple[str, ...]:
        return ("q_scale", "k_scale", "v_scale") if self.fp8 else ()

    @property
    def side_outputs_staged(self) -> bool:
        """lse travels with a TMA-stored O where its rows of a head are whole 16-byte
        strides of a rank-3 map (seq_q a multiple of 4, known when compiling); else the
        row's first thread writes it."""
        return (self.structure.units.get("store") is UnitKind.TMA
                and "seq_q" not in self.runtime_dims and self._p("seq_q") % 4 == 0)

    def stage_side_outputs(self, code: Code, buf: str) -> None:
        self._output.stage_lse(code, self.target, buf)

    def store_side_outputs(self, code: Code, buf: str) -> None:
        self._output.store_lse(code, buf)

    def accumulator_regs(self, consumer_rows: int) -> int:
        # S, P as 16-bit pairs (or 8-bit quads) while P V runs, O, the row statistics; FP8
        # also the e4m3 packing's and the transpose's registers beside the MMAs.
        p_regs = self.tile_kv * self.elem // 8
        per_block = (self.tile_kv // 2 + p_regs + self.head_dim // 2 + ROW_STATE_REGS
                     + (FP8_BLOCK_REGS if self.fp8 else 0))
        return self.row_blocks(consumer_rows) * per_block

    def problem(self) -> str | None:
        if self.dtype not in ELEMENT_BYTES:
            return f"dtype {self.dtype}"
        if self.head_dim * self.elem % MIN_SWIZZLE_SPAN_BYTES:
            return (f"head_dim={self.head_dim}: rows of q, k, v in {MIN_SWIZZLE_SPAN_BYTES}-byte "
                    "swizzle spans at least")
        if self.tile_kv % 16 or self.tile_kv > self.target.mma_n_max:
            return f"tile_kv={self.tile_kv}: the MMA's 16-key steps over the keys of P V"
        if self.fp8 and not self.target.fp8_attention:
            return f"FP8 attention is not generated for {self.target.arch}"
        fp8 = (fp8_problem(self.tile_kv, self.structure.units.get("softmax_exp2"),
                           MIN_SWIZZLE_SPAN_BYTES) if self.fp8 else None)
        problem = fp8 or order_problem(self.structure)
        if problem:
            return problem
        if self.pack > 1 and self.tile_q % self.pack:
            return (f"tile_g={self.pack}: tile_q={self.tile_q} is not a multiple of the packed "
                    "heads (one TMA box of positions x heads)")
        if self.pack > 1 and self.heads_second and (
                "seq_q" in self.runtime_dims or self._p("seq_q") % (self.tile_q // self.pack)):
            return (f"tile_g={self.pack} in bhsd: seq_q must be a multiple of the "
                    f"{self.tile_q // self.pack} positions a head has in a tile (every packed "
                    "row is a query)")
        if self.structure.units.get("store") is UnitKind.TMA:
            return self._output.store_problem()
        return None

    def _seq(self, dim: str) -> str:
        """A sequence length as the header names it (an argument's at run time)."""
        return "(run time)" if dim in self.runtime_dims else str(self.params[dim])

    def header(self) -> str:
        p = self.params
        return (f"attention batch={p['batch']} heads={p['heads']} kv_heads={p['kv_heads']} "
                f"seq_q={self._seq('seq_q')} seq_kv={self._seq('seq_kv')} "
                f"head_dim={p['head_dim']} "
                f"{'causal ' if self.causal else ''}{self.dtype} "
                f"{'bhsd' if self.heads_second else 'bshd'}")

    # ----- text ----------------------------------------------------------------------
    def constants(self, code: Code, consumer_rows: int) -> None:
        c, p = code, self.params
        scale_log2 = math.log2(math.e) / math.sqrt(self.head_dim)
        runtime = self.runtime_dims
        if runtime:
            names = " and ".join(self.size_arg(d) for d in runtime)
            c.comment(f"Problem and tile (compile-time but {names}, kernel arguments).")
        else:
            c.comment("Problem and tile (compile-time: the kernel is specialised to the shape).")
        c(f"constexpr int BATCH = {p['batch']}, HEADS = {p['heads']}, KV_HEADS = "
          f"{p['kv_heads']}, GROUP = {p['heads'] // p['kv_heads']};  // query heads per kv head")
        static_seq = [f"{n} = {p[d]}" for d, n in (("seq_q", "SEQ_Q"), ("seq_kv", "SEQ_KV"))
                      if d not in runtime]
        c(f"constexpr int {', '.join([*static_seq, f'HEAD_DIM = {self.head_dim}'])};")
        c(f"constexpr int TILE_Q = {self.tile_q}, TILE_KV = {self.tile_kv};")
        q_rows = "" if "seq_q" in runtime else ", Q_ROWS = SEQ_Q * PACK"
        order = ("row r: position r / PACK, head heads0 + r % PACK" if not self.softmax.heads_outer
                else "head by head: TILE_Q / PACK positions of each")
        c(f"constexpr int PACK = {self.pack}{q_rows};  // query heads packed "
          f"into a tile's rows ({order})")
        if "seq_kv" not in runtime:
            c(f"constexpr int KV_TILES = {self.trip_count};  // loop trips of a full tile")
        c(f"constexpr bool CAUSAL = {'true' if self.causal else 'false'};  // key j > query i "
          "is masked")
        mma, rows = self.target.mma_name, self.target.mma_rows
        c(f"constexpr int ROW_BLOCKS = {self.row_blocks(consumer_rows)};  // {mma} m{rows} "
          "blocks per consumer")
        c(f"constexpr int S_REGS = {self.tile_kv // 2}, O_REGS = {self.head_dim // 2};  // "
          "fp32 accumulators per thread per block")
        c(f"constexpr float SCALE_LOG2 = {scale_log2!r}f;  // log2(e) / sqrt(head_dim)")
        c("")
        self._tile_constants(code)
        c(f'static_assert(ROW_BLOCKS * {rows} == CONSUMER_ROWS, "{mma} m{rows} blocks");')
        keys = "HEADS % KV_HEADS == 0" if "seq_kv" in runtime else (
            "KV_TILES * TILE_KV >= SEQ_KV && HEADS % KV_HEADS == 0")
        c(f'static_assert({keys}, "the keys");')
        c("")
        c.comment(f"Offsets of one {mma} k{self.q.k_step} step inside a tile.")
        for t in self._mma_tiles:
            c(f"__device__ __forceinline__ constexpr u32 {t.name}_kstep_bytes(int kk) {{ "
              f"return {t.kstep_expr()}; }}")
        if self.fp8:
            self._transposed.offsets(c)
        c("")

    @property
    def _mma_tiles(self) -> tuple[OperandTile, ...]:
        """The tiles the MMA reads: q, k and v, or FP8's transposed vt for v."""
        return (self.q, self.k, self.vt if self.fp8 else self.v)

    def _tile_constants(self, code: Code) -> None:
        """Each tile's boxes, bytes and (where the MMA reads it) descriptor layout."""
        c, mma = code, self.target.mma_name
        dims = {"q": "D x Q", "k": "D x KV", "v": "D x KV", "vt": "KV x D"}
        for t in (self.q, self.k, self.v, *self.consumer_tiles()):
            read = t in self._mma_tiles
            how = f"{mma}: {self.target.operand_descriptor(t).describe()}" if read else (
                "transposed into vt for the MMA")
            box = "box(es) a consumer writes" if t.name == "vt" else "TMA box(es)"
            c.comment(f"{t.const} tile: {t.box_count} {box} of {t.box_inner}x{t.box_outer}"
                      f" ({dims[t.name]}), {t.swizzle.span_bytes}B swizzle; {how}.")
            c(f"constexpr u32 {t.const}_BOX_BYTES = {t.box_bytes}, {t.const}_STAGE_BYTES = "
              f"{t.stage_bytes};")
            if read:
                layout = self.target.operand_descriptor(t).layout_bits
                c(f"constexpr u64 {t.const}_DESC_LAYOUT = 0x{layout:016x}ull;")

    @cached_property
    def _transposed(self) -> TransposedV:
        return TransposedV(self.v, self.tile_kv, self.target,
                           warpgroup_barrier(self.structure.consumers))

    def relayout(self, code: Code, issue: Issue, stages: Mapping[str, str], at: TripAt) -> None:
        self._transposed.write(code, stages["v"], at.index)

    def runtime_constants(self, code: Code) -> None:
        if "seq_q" in self.runtime_dims:
            code("const int Q_ROWS = SEQ_Q * PACK;  // packed query rows")
        if "seq_kv" in self.runtime_dims:
            code("const int KV_TILES = (SEQ_KV + TILE_KV - 1) / TILE_KV;  // loop trips of a "
                 "full tile")

    def load(self, code: Code, stask: str, stage_addr: str, trip: str, full_bar: str) -> None:
        c, t = code, self.operand(stask)
        tmap = self.tensor_map(stask)
        if stask == "load_q":
            head, row = "heads0", "q0 / PACK"
        else:
            head, row = "heads0 / GROUP", f"{trip} * TILE_KV"
        middle = (row, head) if self.heads_second else (head, row)
        for box in range(t.box_count):
            c(c.call("tma_load_4d", f"{stage_addr} + {box * t.box_bytes}", tmap,
                     box * t.box_inner, *middle, "batch0", full_bar) + ";")

    def consumer_state(self, code: Code) -> None:
        code("float s_acc[ROW_BLOCKS][S_REGS];  // S = Q K^T of the current trip, then P")
        code("float o_acc[ROW_BLOCKS][O_REGS] = {};")
        if self.fp8:
            code("u32 p[ROW_BLOCKS][S_REGS / 4];  // P as e4m3 quads (keys in vt's order): "
                 f"{self.target.mma_name}'s A while P V runs")
            code("const float scale_log2 = SCALE_LOG2 * q_scale[0] * k_scale[0];  // with the "
                 "inputs' scales")
            code("const float v_scale0 = v_scale[0];")
        else:
            code("u32 p[ROW_BLOCKS][S_REGS / 2];  // P as 16-bit pairs: "
                 f"{self.target.mma_name}'s A while P V runs")
        code("float m_row[ROW_BLOCKS][2], l_row[ROW_BLOCKS][2], alpha[ROW_BLOCKS][2];  "
             "// rows lane/4 and +8")
        if self.side_outputs_staged:
            code("float lse_val[ROW_BLOCKS][2];  // the rows' log-sum-exp, staged with o")

    def begin_tile(self, code: Code) -> None:
        self.softmax.begin_tile(code)

    def pin(self, code: Code, stask: str = "mma_qk") -> None:
        fragments = ["s_acc"] if stask == "mma_qk" else ["o_acc", "p"]
        with code.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            for fragment in fragments:
                self.target.write_fence_operands(code, f"{fragment}[mi]")

    def mma(self, code: Code, issue: Issue, stages: Mapping[str, str], at: TripAt) -> None:
        if issue.stask == "mma_qk":
            self._mma_qk(code, stages["k"], at)
        elif self.fp8:  # reads this consumer's vt, not a stage
            self._transposed.write_pv(code, at, lambda: self.pin(code, "mma_pv"))
        else:
            self._mma_pv(code, stages["v"], at)

    def _mma_qk(self, code: Code, stage: str, at: TripAt) -> None:
        c, q, k = code, self.q, self.q.k_step
        c.comment(f"mma_qk  stage={stage}: s_acc[CONSUMER_ROWS x {self.tile_kv}] = Q_s K_s^T "
                  f"(ROW_BLOCKS x {self.head_dim // k} {self.target.mma_name} "
                  f"m{self.target.mma_rows}n{self.tile_kv}k{k})")
        self.target.write_mma(c, Mma(
            n=self.tile_kv, dtype=self.dtype, b_major="k", k_steps=str(self.head_dim // k),
            b_layout="K_DESC_LAYOUT", a_layout="Q_DESC_LAYOUT", accumulate="kk > 0",
            parts=(MmaPart("s_acc[mi]", "k_tile + k_kstep_bytes(kk)",
                           a_address=f"q_tile + q_kstep_bytes(kk) + mi * {q.row_block_bytes}"),),
            pin=lambda: self.pin(c, "mma_qk"),
            bases=(f"const u32 q_tile = {self.tile_buffer_base('Q')} + row0 * "
                   f"{q.swizzle.span_bytes};",
                   f"const u32 k_tile = smem + SMEM_K + {stage} * K_STAGE_BYTES;")))

    def _mma_pv(self, code: Code, stage: str, at: TripAt) -> None:
        c = code
        c.comment(f"mma_pv  stage={stage}: o_acc[CONSUMER_ROWS x {self.head_dim}] += P V_s, P "
                  "in registers as 16-bit pairs (A fragment of k16 step kk: p[4kk..4kk+3])")
        self.target.write_mma(c, Mma(
            n=self.head_dim, dtype=self.dtype, b_major="mn", k_steps=str(self.tile_kv // 16),
            b_layout="V_DESC_LAYOUT", accumulate=f"{at.accumulates} || kk > 0",
            parts=(MmaPart("o_acc[mi]", "v_tile + v_kstep_bytes(kk)",
                           a_registers="p[mi][4 * kk + {i}]"),),
            pin=lambda: self.pin(c, "mma_pv"),
            bases=(f"const u32 v_tile = smem + SMEM_V + {stage} * V_STAGE_BYTES;",)))

    # ----- the online softmax ----------------------------------------------------------
    @cached_property
    def softmax(self) -> OnlineSoftmax:
        """Writer of :attr:`math_stasks`: the register math on the accumulators' values."""
        return OnlineSoftmax(self.dtype, self.structure.units["softmax_exp2"], self.target,
                             heads_outer=self.heads_second and self.pack > 1,
                             lse_staged=self.side_outputs_staged,
                             scaled_inputs=self.fp8)

    def math(self, code: Code, issue: Issue, at: TripAt) -> None:
        self.softmax.write(code, issue.stask, at)

    def tensor_maps(self) -> tuple[TensorMapArg, ...]:
        p = self.params
        maps = [input_map(name, tile, p, heads, seq, rows, self.heads_second)
                for name, tile, heads, seq, rows in (
                    ("q", self.q, p["heads"], p["seq_q"], (self.pack, self.tile_q // self.pack)),
                    ("k", self.k, p["kv_heads"], p["seq_kv"], (1, self.tile_kv)),
                    ("v", self.v, p["kv_heads"], p["seq_kv"], (1, self.tile_kv)))]
        if self.side_outputs_staged:
            maps.append(self._output.lse_map())
        return tuple(maps)


#: Bumped whenever attention's own text changes for the same schedule.
ATTENTION_HOOKS_VERSION = "attention-5"

__all__ = ["ATTENTION_HOOKS_VERSION", "AttentionHooks"]
