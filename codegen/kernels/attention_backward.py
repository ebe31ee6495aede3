"""Attention backward as hooks on the pipeline skeleton: dq, dk and dv of one kv head's
key tile per output tile (FlashAttention-2's loop, written for Hopper's asynchronous MMA).

What is the backward's own:

- tiles: an output tile is ``tile_kv`` keys of one (batch, kv head); its loop runs over
  the query tiles of every query head of the group (GQA's sum of dk and dv over the group
  happens on chip), skipping, with causal masking, the query tiles wholly before the keys;
- ``load_k`` / ``load_v`` once per tile; ``load_q`` with its ``lse`` row and ``load_do``
  with the forward's ``o`` per trip (rank-4 maps over (head_dim, heads, seq, batch) as the
  forward's; lse a rank-3 fp32 map);
- five products per trip, each consumer warpgroup on its own 64-row blocks of keys:
  ``mma_s`` (``Sᵀ = K Qᵀ``, K as A, q K-major as B), ``mma_dv`` (``dV += Pᵀ dO``: Pᵀ from
  registers, dO MN-major), ``mma_dp`` (``dPᵀ = V dOᵀ``), ``mma_dk`` (``dK += dSᵀ Q``: dSᵀ
  from registers, q MN-major) and ``mma_dq`` (``dQ = dS K``, 64 x 64 pieces dealt to the
  consumers: dSᵀ staged in shared memory as an MN-major A, K MN-major as B); one stage of
  q and of dO is read both K-major and MN-major, through two descriptors;
- the register math (:mod:`codegen.kernels.attention_backward_math`): P from the scores
  and lse, ``D = rowsum(dO o)`` (the preprocess, fused), dS, dSᵀ to shared memory, dq's
  parts added to an fp32 workspace (the last key tile's consumer writes dq), dk scaled;
- the store: dk and dv side by side from their two accumulators (the skeleton's second
  output).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import cached_property

from codegen.artifact import TensorMapArg, WorkspaceArg
from codegen.cuda import swizzle
from codegen.kernels.attention_backward_math import PIECE_REGS, BackwardMath
from codegen.kernels.attention_fields import AttentionFields, input_map
from codegen.pipeline import (
    Code,
    GridAxis,
    Issue,
    OperandTile,
    OperatorHooks,
    OutputTile,
    TripAt,
    VectorTile,
)
from codegen.pipeline.hooks import SecondOutput
from codegen.targets import Mma, MmaPart
from scheduler_search.ops import DTYPE_BYTES

#: The MMA's 64 x 64 pieces dq's part is made in: one swizzle box of head_dim columns.
DQ_PIECE = 64
#: Head sizes lowered: whole 128-byte swizzle boxes of 16-bit elements, at most two.
HEAD_DIMS = (64, 128)
#: fp32 bytes of one lse or counter.
WORD_BYTES = 4
#: Accumulator registers a persistent kernel compiled beside without spills.
PERSISTENT_REGS_MAX = 160
#: The most registers a thread's S, dP, their 16-bit pairs, dK and dV may take in the
#: interleaved loop (all live at once). nvcc 13.0, Hopper, 64 rows a consumer: 160
#: (tile_q 64, head_dim 64) compiled clean; 224 (64, 128) spilled 280 B and 256 (128, 64)
#: 768 B, each with its matrix products serialised by ptxas (C7512).
INTERLEAVE_REGS_MAX = 192
#: The registers each product writes or reads from registers, pinned around its wait.
PINNED = {"mma_s": ("s_acc",), "mma_dv": ("dv_acc", "p"), "mma_dp": ("dp_acc",),
          "mma_dk": ("dk_acc", "p")}


class AttentionBackwardHooks(AttentionFields, OperatorHooks):
    """The backward's tiles, loads and matrix products on the skeleton."""

    trips = "TRIPS"
    # Two 64-key consumers at head_dim 128 need more than the 168 registers of 384
    # threads' entry: nvcc 13.0 gives them those of their setmaxnreg (R0-R229 used).
    consumers_past_entry_cap = True
    # Addresses, loop state, D, the lse row and the descriptors (fitted with the scores
    # term of accumulator_regs to nvcc 13.0's spills).
    overhead_regs = 48

    # ----- problem and tile ----------------------------------------------------------
    @property
    def elem(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def group(self) -> int:
        return self._p("heads") // self._p("kv_heads")

    @property
    def deterministic(self) -> bool:
        """dq's sums in a fixed order (key tile by key tile), the same bits every run."""
        return bool(self.params.get("deterministic", False))

    @property
    def q_tiles(self) -> int:
        return -(-self._p("seq_q") // self.tile_q)

    @property
    def trip_count(self) -> int:
        return self.group * self.q_tiles

    def tile_trips(self) -> str | None:
        # Causal: a key tile's trips start at the query tile holding its first key.
        return "GROUP * max(0, trips_per_head(kv0))" if self.causal else None

    @property
    def grid_axes(self) -> tuple[GridAxis, ...]:
        return (GridAxis("kv", self._p("seq_kv"), self.tile_kv, lightest_last=self.causal),
                GridAxis("batch", self._p("batch"), 1),
                GridAxis("heads", self._p("kv_heads"), 1))

    def tile_loads(self) -> tuple[str, ...]:
        return ("load_k", "load_v")

    @property
    def math_stasks(self) -> frozenset[str]:
        return frozenset({"softmax_p", "delta", "grad_s", "stage_ds", "scale_dk"})

    @property
    def loop_stores(self) -> frozenset[str]:
        return frozenset({"store_dq"})

    def problem(self) -> str | None:
        if self.dtype not in ("float16", "bfloat16"):
            return f"dtype {self.dtype}"
        if self.target.tensor_map_encoding != "tma":
            # dS goes to shared memory for the MMA through the async proxy's fence, and
            # its A is read MN-major: what Hopper's target writes, not yet the others.
            return f"the attention backward is generated for TMA targets, not {self.target.arch}"
        if self.head_dim not in HEAD_DIMS:
            return f"head_dim={self.head_dim}: the backward is generated for {HEAD_DIMS}"
        if self._p("seq_q") * WORD_BYTES % 16:
            return f"seq_q={self._p('seq_q')}: lse rows by TMA need a multiple of 4"
        s = self.structure
        if s.pingpong or not s.warp_specialized:
            return "the backward is lowered with a producer warp and cooperative consumers"
        if any(s.inflight.values()):
            return "the backward's products are waited for where they are read, not kept in flight"
        if s.sprogram.order == "interleave" and self.interleaved_regs > INTERLEAVE_REGS_MAX:
            return (f"order interleave with tile_q {self.tile_q} at head_dim "
                    f"{self.head_dim}: S, dP, their pairs, dK and dV live at once "
                    f"({self.interleaved_regs} registers a thread) spill")
        if s.turns:
            # The consumers meet at a barrier every trip (dS^T staged for dq): a consumer
            # waiting for its turn there would wait for one waiting for it.
            return "the consumers meet every trip; they do not take turns on the tensor cores"
        if s.persistent and self.accumulator_regs(self.consumer_rows) > PERSISTENT_REGS_MAX:
            # nvcc 13.0, Hopper: head_dim 128's 176 accumulators spilled 16 B with the
            # persistent tile loop's state, none without it.
            return "a persistent loop over key tiles beside this many accumulators spills"
        return None

    def header(self) -> str:
        p = self.params
        return (f"attention_backward batch={p['batch']} heads={p['heads']} "
                f"kv_heads={p['kv_heads']} seq_q={p['seq_q']} seq_kv={p['seq_kv']} "
                f"head_dim={p['head_dim']} {'causal ' if self.causal else ''}{self.dtype} "
                f"{'bhsd' if self.heads_second else 'bshd'}")

    # ----- operands and output -------------------------------------------------------
    def _tile(self, name: str, major: str, rows: int, cols: int) -> OperandTile:
        return OperandTile(name, major, rows, cols,  # type: ignore[arg-type]
                           swizzle.widest(min(rows if major == "mn" else cols, DQ_PIECE)
                                          * self.elem),
                           self.elem, self.target.k_step(self.dtype), self.target.mma_rows)

    @cached_property
    def tiles(self) -> dict[str, OperandTile]:
        """The loaded tiles (K-major, as TMA writes them) and the MN-major views of the
        same bytes the products read: qt, dot and kt, and each consumer's dSᵀ."""
        d, tq, tkv = self.head_dim, self.tile_q, self.tile_kv
        rows = self.consumer_rows
        return {
            "q": self._tile("q", "k", tq, d), "qt": self._tile("qt", "mn", d, tq),
            "do": self._tile("do", "k", tq, d), "dot": self._tile("dot", "mn", d, tq),
            "o": self._tile("o", "k", tq, d),
            "k": self._tile("k", "k", tkv, d), "kt": self._tile("kt", "mn", d, tkv),
            "v": self._tile("v", "k", tkv, d),
            "ds": self._tile("ds", "mn", tq, rows),
        }

    @property
    def consumer_rows(self) -> int:
        return self.tile_kv // self.structure.consumers

    @cached_property
    def lse(self) -> VectorTile:
        return VectorTile("lse", self.tile_q)

    @cached_property
    def delta(self) -> VectorTile:
        return VectorTile("delta", self.tile_q)

    def consumer_tiles(self) -> tuple[OperandTile | VectorTile, ...]:
        return (self.tiles["ds"], self.delta)

    def operand(self, stask: str) -> OperandTile | VectorTile:
        if stask == "load_lse":
            return self.lse
        return self.tiles[stask.removeprefix("load_")]

    def tensor_map(self, stask: str) -> str:
        return f"{stask.removeprefix('load_')}_map"

    def _row_pointer(self, tensor: str) -> str:
        if self.heads_second:
            return (f"{tensor} + ((unsigned long long)(batch0 * KV_HEADS + heads0) * SEQ_KV + "
                    "{row}) * HEAD_DIM")
        return (f"{tensor} + ((unsigned long long)(batch0 * SEQ_KV + {{row}}) * KV_HEADS + "
                "heads0) * HEAD_DIM")

    def output(self) -> OutputTile:
        d = self.head_dim
        return OutputTile(
            tensor="dk", dtype=self.dtype, elem_bytes=self.elem, rows=self.tile_kv,
            cols=2 * d, global_rows=self._p("seq_kv"), global_cols=2 * d,
            fragment="dk_acc", row_origin="kv0", col_origin="0",
            extent_names=("SEQ_KV", "HEAD_DIM"), row_pointer=self._row_pointer("dk"),
            second=SecondOutput("dv", "dv_acc", d, self._row_pointer("dv")))

    def side_outputs(self) -> tuple[str, ...]:
        return ("dq",)

    def workspaces(self) -> tuple[WorkspaceArg, ...]:
        p = self.params
        rows = p["batch"] * p["heads"] * p["seq_q"]
        return (WorkspaceArg("dq_accum", rows * self.head_dim * WORD_BYTES),
                WorkspaceArg("dq_count", p["batch"] * p["heads"] * self.q_tiles * WORD_BYTES))

    def accumulator_regs(self, consumer_rows: int) -> int:
        # Per key block: Sᵀ (then P) or dPᵀ (then dS), those pairs, dK and dV; dq's piece
        # once dS is in shared memory. ptxas keeps about a half scores tile more (nvcc
        # 13.0: at 232 registers a thread both 64 x 128 x d64 and 64 x 64 x d128 spill 8
        # bytes, at 240 neither does), counted here as a second scores tile.
        s_regs, d_regs = self.tile_q // 2, self.head_dim // 2
        per_block = 2 * s_regs + 2 * d_regs
        blocks = self.row_blocks(consumer_rows)
        return max(blocks * per_block, blocks * 2 * d_regs + PIECE_REGS)

    # ----- text ----------------------------------------------------------------------
    @cached_property
    def register_math(self) -> BackwardMath:
        """Writer of the register math, dq's pieces and their reduction."""
        return BackwardMath(self)

    def constants(self, code: Code, consumer_rows: int) -> None:
        c, p = code, self.params
        d = self.head_dim
        c.comment("Problem and tile (compile-time: the kernel is specialised to the shape).")
        c(f"constexpr int BATCH = {p['batch']}, HEADS = {p['heads']}, KV_HEADS = "
          f"{p['kv_heads']}, GROUP = {self.group};  // query heads per kv head")
        c(f"constexpr int SEQ_Q = {p['seq_q']}, SEQ_KV = {p['seq_kv']}, HEAD_DIM = {d};")
        c(f"constexpr int TILE_Q = {self.tile_q}, TILE_KV = {self.tile_kv}, Q_TILES = "
          f"{self.q_tiles}, KV_TILES = {-(-self._p('seq_kv') // self.tile_kv)};")
        c(f"constexpr int TRIPS = {self.trip_count};  // loop trips of a key tile: every query "
          "tile of the group's heads")
        c(f"constexpr bool CAUSAL = {'true' if self.causal else 'false'};  // key j > query i "
          "is masked")
        mma = self.target.mma_name
        c(f"constexpr int ROW_BLOCKS = {self.row_blocks(consumer_rows)};  // {mma} m64 blocks "
          "of keys per consumer")
        c(f"constexpr int S_REGS = {self.tile_q // 2}, D_REGS = {d // 2};  // fp32 "
          "accumulators per thread per block")
        c(f"constexpr float SCALE = {1 / math.sqrt(d)!r}f, SCALE_LOG2 = "
          f"{math.log2(math.e) / math.sqrt(d)!r}f, LOG2E = {math.log2(math.e)!r}f;")
        c("__device__ __forceinline__ int first_q_tile(int kv0) { return CAUSAL ? kv0 / TILE_Q "
          ": 0; }  // the first query tile that sees key kv0")
        c("__device__ __forceinline__ int trips_per_head(int kv0) { return Q_TILES - "
          "first_q_tile(kv0); }")
        self._trip_order(c)
        c("__device__ __forceinline__ int trip_head(int trip, int kv0, int heads0) { return "
          "heads0 * GROUP + trip_order(trip, kv0) / trips_per_head(kv0); }  // the trip's "
          "query head")
        c("__device__ __forceinline__ int trip_q0(int trip, int kv0) { return (first_q_tile(kv0) "
          "+ trip_order(trip, kv0) % trips_per_head(kv0)) * TILE_Q; }  // the trip's first "
          "query")
        c(f'static_assert(ROW_BLOCKS * 64 == CONSUMER_ROWS, "{mma} m64 blocks");')
        c("")
        self.register_math.constants(c)
        self._tile_constants(c)

    def _trip_order(self, code: Code) -> None:
        """Which of the key tile's (query head, query tile) pairs a trip works on: in order,
        or (``raster_stagger``) starting the key tile's index in and wrapping around, so
        the key tiles of one head, running side by side, add to different query tiles'
        dq at any moment rather than all to the same rows at once."""
        c = code
        if not self.structure.sprogram.raster.stagger:
            c("__device__ __forceinline__ int trip_order(int trip, int) { return trip; }")
            return
        c("__device__ __forceinline__ int trip_order(int trip, int kv0) { const int trips = "
          "GROUP * trips_per_head(kv0), t = trip + kv0 / TILE_KV % trips; return t < trips ? "
          "t : t - trips; }  // staggered by the key tile (the shift's modulo: once a tile)")

    def _tile_constants(self, code: Code) -> None:
        c = code
        read = ("q", "qt", "do", "dot", "k", "kt", "v", "ds")
        for t in self.tiles.values():
            c(f"constexpr u32 {t.const}_BOX_BYTES = {t.box_bytes}, {t.const}_STAGE_BYTES = "
              f"{t.stage_bytes};  // {t.rows}x{t.cols} {t.major.upper()}-major, "
              f"{t.swizzle.span_bytes}B swizzle")
            if t.name in read:
                layout = self.target.operand_descriptor(t).layout_bits
                c(f"constexpr u64 {t.const}_DESC_LAYOUT = 0x{layout:016x}ull;")
                c(f"__device__ __forceinline__ constexpr u32 {t.name}_kstep_bytes(int kk) {{ "
                  f"return {t.kstep_expr()}; }}")
        for t in (self.lse, self.delta):
            c(f"constexpr u32 {t.const}_BOX_BYTES = {t.box_bytes}, {t.const}_STAGE_BYTES = "
              f"{t.stage_bytes};")
        c("")

    def load(self, code: Code, stask: str, stage_addr: str, trip: str, full_bar: str) -> None:
        c = code
        tmap = self.tensor_map(stask)
        if stask in ("load_k", "load_v"):
            head, row = "heads0", "kv0"
        else:
            head, row = f"trip_head({trip}, kv0, heads0)", f"trip_q0({trip}, kv0)"
        if stask == "load_lse":
            c(c.call("tma_load_3d", stage_addr, tmap, row, head, "batch0", full_bar) + ";")
            return
        t = self.operand(stask)
        middle = (row, head) if self.heads_second else (head, row)
        for box in range(t.box_count):
            c(c.call("tma_load_4d", f"{stage_addr} + {box * t.box_bytes}", tmap,
                     box * t.box_inner, *middle, "batch0", full_bar) + ";")

    def consumer_state(self, code: Code) -> None:
        c = code
        c("float s_acc[ROW_BLOCKS][S_REGS];  // S^T of the trip, then P^T")
        c("float dp_acc[ROW_BLOCKS][S_REGS];  // dP^T of the trip, then dS^T")
        if self.ds_fragment == "p":
            c(f"u32 p[ROW_BLOCKS][S_REGS / 2];  // P^T, then dS^T, as 16-bit pairs: "
              f"{self.target.mma_name}'s A")
        else:
            c(f"u32 p[ROW_BLOCKS][S_REGS / 2], ds[ROW_BLOCKS][S_REGS / 2];  // P^T and dS^T "
              f"as 16-bit pairs: {self.target.mma_name}'s A (dS^T is packed while P^T's "
              "product may still read its own)")
        c("float dk_acc[ROW_BLOCKS][D_REGS], dv_acc[ROW_BLOCKS][D_REGS];")
        self.register_math.consumer_state(c)

    def begin_tile(self, code: Code) -> None:
        c = code
        c.comment("dk and dv of the new key tile start from zero (a tile may have no trips)")
        c("#pragma unroll")
        with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            c("#pragma unroll")
            c("for (int i = 0; i < D_REGS; ++i) { dk_acc[mi][i] = 0.0f; dv_acc[mi][i] = 0.0f; }")

    @property
    def interleaved_regs(self) -> int:
        """Registers a thread holds in the interleaved loop: S and dP (tile_q / 2 each),
        their pairs (tile_q / 4 each), dK and dV (head_dim / 2 each), per 64-row block."""
        blocks = self.consumer_rows // self.target.mma_rows
        return blocks * (3 * self.tile_q // 2 + self.head_dim)

    @property
    def ds_fragment(self) -> str:
        """The registers dS^T is packed into: P^T's own in the serial order, where dV's
        product is done with them by then; a fragment of its own where it may still run
        (``interleave``)."""
        return "ds" if self.structure.sprogram.order == "interleave" else "p"

    def pin(self, code: Code, stask: str) -> None:
        if stask == "mma_dq":
            self.register_math.pin_dq(code)
            return
        fragments = PINNED[stask]
        if stask == "mma_dk":
            fragments = ("dk_acc", self.ds_fragment)
        with code.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            for fragment in fragments:
                self.target.write_fence_operands(code, f"{fragment}[mi]")

    def mma(self, code: Code, issue: Issue, stages: Mapping[str, str], at: TripAt) -> None:
        if issue.stask == "mma_dq":
            self.register_math.mma_dq(code, at)
            return
        c, name = code, issue.stask
        kv_rows = f"smem + SMEM_{{}} + row0 * {self.tiles['k'].swizzle.span_bytes}"
        q_stage = f"smem + SMEM_Q + {stages.get('q', '0')} * Q_STAGE_BYTES"
        do_stage = f"smem + SMEM_DO + {stages.get('do', '0')} * DO_STAGE_BYTES"
        block = self.target.mma_rows * self.tiles["k"].swizzle.span_bytes
        # (n, b tile, b base, a tile or registers, a base, k steps, accumulator, accumulate)
        shapes = {
            "mma_s": (self.tile_q, "q", q_stage, "k", kv_rows.format("K"), "HEAD_DIM / 16",
                      "s_acc", "kk > 0"),
            "mma_dp": (self.tile_q, "do", do_stage, "v", kv_rows.format("V"), "HEAD_DIM / 16",
                       "dp_acc", "kk > 0"),
            "mma_dv": (self.head_dim, "dot", do_stage, None, "", "TILE_Q / 16", "dv_acc", "1"),
            "mma_dk": (self.head_dim, "qt", q_stage, None, "", "TILE_Q / 16", "dk_acc", "1"),
        }
        n, b, b_base, a, a_base, steps, acc, accumulate = shapes[name]
        b_tile = self.tiles[b]
        c.comment(f"{name}: {acc}[CONSUMER_ROWS x {n}] {'+' if accumulate == '1' else ''}= "
                  f"{'registers' if a is None else a.upper()} x {b.upper()} "
                  f"({self.target.mma_name} m64n{n}k16, {steps} steps)")
        registers = self.ds_fragment if name == "mma_dk" else "p"
        part = (MmaPart(f"{acc}[mi]", f"{name}_b + {b}_kstep_bytes(kk)",
                        a_registers=f"{registers}[mi][4 * kk + {{i}}]") if a is None else
                MmaPart(f"{acc}[mi]", f"{name}_b + {b}_kstep_bytes(kk)",
                        a_address=f"{name}_a + {a}_kstep_bytes(kk) + mi * {block}"))
        bases = [f"const u32 {name}_b = {b_base};"]
        if a is not None:
            bases.append(f"const u32 {name}_a = {a_base};")
        self.target.write_mma(c, Mma(
            n=n, dtype=self.dtype, b_major=b_tile.major, k_steps=steps,  # type: ignore[arg-type]
            b_layout=f"{b_tile.const}_DESC_LAYOUT",
            a_layout=None if a is None else f"{a.upper()}_DESC_LAYOUT",
            accumulate=accumulate, parts=(part,), pin=lambda: self.pin(c, name),
            bases=tuple(bases)))

    def math(self, code: Code, issue: Issue, at: TripAt) -> None:
        self.register_math.write(code, issue.stask, at)

    def loop_store(self, code: Code, issue: Issue, at: TripAt) -> None:
        self.register_math.store_dq(code, at)

    def tensor_maps(self) -> tuple[TensorMapArg, ...]:
        p = self.params
        # A box is one head's positions of a tile (rank-4 maps, as the forward's).
        maps = [input_map(name, self.tiles[name], p, p["heads"], p["seq_q"], (1, self.tile_q),
                          self.heads_second) for name in ("q", "do", "o")]
        maps += [input_map(name, self.tiles[name], p, p["kv_heads"], p["seq_kv"],
                           (1, self.tile_kv), self.heads_second) for name in ("k", "v")]
        maps.append(TensorMapArg(
            name="lse_map", tensor="lse", dtype="float32",
            global_dims=(p["seq_q"], p["heads"], p["batch"]),
            global_strides_bytes=(p["seq_q"] * WORD_BYTES, p["heads"] * p["seq_q"] * WORD_BYTES),
            box_dims=(self.tile_q, 1, 1), swizzle="none"))
        return tuple(maps)


#: Bumped whenever the backward's own text changes for the same schedule.
ATTENTION_BACKWARD_HOOKS_VERSION = "attention-backward-2"

__all__ = ["ATTENTION_BACKWARD_HOOKS_VERSION", "AttentionBackwardHooks"]
