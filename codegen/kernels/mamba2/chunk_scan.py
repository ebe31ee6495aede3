"""Mamba2 chunk scan as hooks on the pipeline skeleton (``mamba_ssm``'s ``_chunk_scan_fwd``
with ``D`` per head or per channel and the optional gate ``z``).

Per (batch, chunk, head h) with g = h / (nheads / ngroups), for row l of the chunk:
``out[l, p] = exp(dA[l]) Σ_n C[l, g, n] states[p, n]
+ Σ_{s <= l} cb[l, s] exp(dA[l] - dA[s]) dt[s] x[s, p] + D[h] x[l, p]``. What is its own:

- tiles: an output tile is ``tile_l`` rows of a chunk x ``tile_p`` of headdim; one loop trip
  per ``tile_s`` positions s, only those at or below the diagonal (``tile_trips``). A tile
  may pack ``tile_g`` heads of a group (``tile_p`` then spans their whole rows, ``headdim x
  tile_g``, as they lie in ``x`` and ``out``): the cb and C tiles, the same for every head
  of the group, are loaded once for them, and each head's products run on its own slice of
  the accumulator;
- prologue, once per tile: ``load_c`` and ``load_state`` (tile buffers), ``mma_state``
  (``acc = C statesᵀ``, both K-major over dstate), ``load_dA_l`` and ``decay_out``
  (``acc *= exp(dA[l])``);
- loop: ``load_cb`` (fp32, 32-column 128B-swizzle boxes), ``load_x``, ``load_dt`` / ``load_dA``;
  ``decay`` (SFU or CUDA cores) ``e = exp2(dA[l] log2e - dA[s] log2e)``; ``scale_cb``:
  ``cb e dt`` read from shared memory in the MMA's register A layout, masked above the
  diagonal only on the trips that cross it, packed to 16-bit pairs; ``mma_x``:
  ``acc += P x`` (A in registers, x MN-major);
- with ``cb_in_tile`` the loop loads ``B`` tiles (``load_b``, K-major over dstate) instead
  of cb, and ``mma_cb`` computes the trip's ``cb = C Bᵀ`` into registers (C from the tile
  buffer the state term read, so that buffer is held through the loop); ``scale_cb`` reads
  it there, and masks the pairs of different sequences with ``seq_idx``;
- epilogue: ``skip`` adds ``D[h] x[l, p]`` (``D[h, p]`` with ``d_per_channel``; x read from
  global at the tile's start, so the read lands while the loop runs); with ``z``, ``gate``
  multiplies each pair by ``silu(z)`` as the store writes it (z read there, once); ``store``
  writes the rows with st.global.

The register math's text (``decay_out``, ``decay``, ``scale_cb``, ``skip`` and the skip
term's early reads) is in :mod:`codegen.kernels.mamba2._chunk_scan_math`.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

from codegen.artifact import TensorMapArg
from codegen.cuda import swizzle
from codegen.kernels.mamba2._chunk_scan_math import (
    TILE_ROW,
    GramSource,
    add_skip,
    decay,
    decay_out,
    each_row,
    gate,
    masked_products,
    read_skip_inputs,
)
from codegen.kernels.mamba2._common import F32_BOX_ELEMS, Mamba2Hooks
from codegen.pipeline import (
    Code,
    GridAxis,
    Issue,
    OperandTile,
    OutputTile,
    TripAt,
    VectorTile,
)
from codegen.targets import Mma, MmaPart
from scheduler_search.hardware.model import UnitKind


class ChunkScanHooks(Mamba2Hooks):
    """Chunk scan's tiles, loads, decay, masked products and skip term on the skeleton."""

    trips = "S_TILES"
    k_tile_const = "TILE_S"
    loop_mma = "mma_x"
    a_operand = "pm"

    @property
    def tile_l(self) -> int:
        return self.sprogram.tile["l"]

    @property
    def tile_p(self) -> int:
        return self.sprogram.tile["p"]

    @property
    def tile_s(self) -> int:
        return self.sprogram.tile["s"]

    @property
    def k_tile(self) -> int:
        return self.tile_s

    @property
    def trip_count(self) -> int:
        return self.chunk // self.tile_s

    def tile_trips(self) -> str | None:
        # Causal within the chunk: the positions s <= the tile's last row.
        return "min(S_TILES, (l0 + TILE_L + TILE_S - 1) / TILE_S)"

    @property
    def head_cols(self) -> int:
        """Columns of one head in a tile (tile_p, or headdim when heads are packed)."""
        return self.tile_p // self.pack

    @property
    def grid_axes(self) -> tuple[GridAxis, ...]:
        return (GridAxis("l", self.chunk, self.tile_l, heaviest_last=True),
                GridAxis("p", self._p("headdim") * self.pack, self.tile_p), *self.outer_axes())

    @property
    def math_stasks(self) -> frozenset[str]:
        return frozenset({"decay_out", "decay", "scale_cb", "skip"})

    vector_loads = ("load_dt", "load_dA", "load_dA_l")

    # ----- operands and output -------------------------------------------------------
    @cached_property
    def c(self) -> OperandTile:
        return self.tile16("c", self.tile_l, self._p("dstate"))

    @cached_property
    def st(self) -> OperandTile:
        # The MMA's B of C statesᵀ: N = headdim rows, K = dstate contiguous (K-major).
        return self.tile16("st", self.tile_p, self._p("dstate"))

    @cached_property
    def cb(self) -> OperandTile:
        # fp32, read by the CUDA cores: rows l, positions s contiguous.
        return OperandTile("cb", "k", self.tile_l, self.tile_s, swizzle.SWIZZLES[128], 4,
                           self.target.k_step(self.dtype), self.target.mma_rows)

    @cached_property
    def b(self) -> OperandTile:
        # The MMA's B of C Bᵀ (cb_in_tile): N = positions s, K = dstate contiguous.
        return self.tile16("b", self.tile_s, self._p("dstate"))

    @property
    def cb_in_tile(self) -> bool:
        """cb is computed in the loop from B tiles (the spec's ``cb_in_tile``)."""
        return bool(self.params.get("cb_in_tile"))

    @cached_property
    def x(self) -> OperandTile:
        # The MMA's B of P x: K = positions, N = headdim contiguous (MN-major).
        return self.tile16("x", self.tile_p, self.tile_s, major="mn")

    @cached_property
    def dal(self) -> VectorTile:
        return VectorTile("dal", self.tile_l * self.pack)

    def operand(self, stask: str) -> OperandTile | VectorTile:
        return {"load_c": self.c, "load_state": self.st, "load_dA_l": self.dal,
                "load_cb": self.cb, "load_b": self.b, "load_x": self.x, "load_dt": self.dt,
                "load_dA": self.da}[stask]

    def tensor_map(self, stask: str) -> str:
        return {"load_c": "c_map", "load_state": "states_map", "load_dA_l": "dA_l_map",
                "load_cb": "cb_map", "load_b": "b_map", "load_x": "x_map", "load_dt": "dt_map",
                "load_dA": "dA_map"}[stask]

    def tile_loads(self) -> tuple[str, ...]:
        return ("load_c", "load_state", "load_dA_l")

    def output(self) -> OutputTile:
        return OutputTile(
            tensor="out", dtype=self.dtype, elem_bytes=self.elem, rows=self.tile_l,
            cols=self.tile_p, global_rows=self.chunk, global_cols=self._p("headdim") * self.pack,
            fragment="acc", row_origin="l0", col_origin="p0",
            extent_names=("CHUNK", "PACKED_COLS"),
            row_pointer=("out + (((unsigned long long)batch0 * SEQLEN + chunks0 * CHUNK + {row}) "
                         "* NHEADS + heads0) * HEADDIM"),
        )

    def pointer_inputs(self) -> tuple[str, ...]:
        gate_input = ("z",) if self.gated else ()
        packed = ("seq_idx",) if self.params.get("seq_idx") else ()
        return ("x", "D", *gate_input, *packed, *self.vector_pointers())

    @property
    def gated(self) -> bool:
        """``out`` is multiplied by ``silu(z)`` (the spec's ``z``)."""
        return bool(self.params.get("z"))

    @property
    def d_per_channel(self) -> bool:
        return bool(self.params.get("d_per_channel"))

    @property
    def element_stasks(self) -> frozenset[str]:
        return frozenset({"gate"}) if self.gated else frozenset()

    def element_math(self, code: Code, stask: str, row: str, col: str) -> None:
        if stask != "gate":
            return super().element_math(code, stask, row, col)
        gate(code, self.dtype)

    #: Fitted with ``accumulator_regs`` to what ptxas allocated (below).
    overhead_regs = 8
    #: Seven TMA streams with 3-D coordinates: at 24 registers the producer spilled 228
    #: to 308 bytes (nvcc 13.0; headdim 128, chunk 128, one consumer warpgroup).
    producer_loads_regs = 40

    def accumulator_regs(self, consumer_rows: int) -> int:
        """Per row block: acc and x for D x, one head's e at a time (ptxas interleaves a
        value's exp with its product), the 16-bit products of every packed head; dt and dA
        of every packed head when the threads load them ahead of the trip (read from the
        stage TMA filled, they live only at their use).

        Fitted on nvcc 13.0 (Hopper): fits in 168 at one row block for tile_p 64 x tile_s
        128 and for two packed heads at tile_p 128 x tile_s 64; spills at two row blocks
        for tile_p 64 x tile_s 128 under 248, for tile_p 128 x tile_s 32 with thread-loaded
        dt and dA under 248, and for two packed heads, tile_s 32, under 168.
        """
        copies = 2 if self.a_in_flight else 1  # the products per trip parity
        gram = self.tile_s // 2 if self.cb_in_tile else 0  # cb's accumulator
        per_block = (self.tile_p // 2 + self.tile_p // 4 + self.tile_s // 2 + gram
                     + copies * self.pack * self.tile_s // 4)
        vectors = 0 if self.vectors_by_tma else 8 * self.k_steps * self.pack
        return self.row_blocks(consumer_rows) * per_block + vectors

    def holds_tile_buffer(self, load: str) -> bool:
        # C and states are read by the prologue's MMA only (C also by the loop's mma_cb
        # when cb is computed in the tile); dA[l] is copied to registers.
        return load == "load_c" and self.cb_in_tile

    def problem(self) -> str | None:
        problem = self.common_problem()
        if problem:
            return problem
        if self.structure.units.get("store") is not UnitKind.CUDA_CORE:
            return ("chunk scan's output rows are one head's among all heads (stride nheads x "
                    "headdim): written with st.global (store on cuda_core)")
        if self.chunk % self.tile_l:
            return f"tile_l={self.tile_l} must divide chunk_size={self.chunk}"
        if self.pack > 1 and self.tile_p != self._p("headdim") * self.pack:
            return (f"tile_g={self.pack} packs whole heads: tile_p must be headdim x tile_g "
                    f"({self._p('headdim') * self.pack})")
        if self._p("headdim") * self.pack % self.tile_p or self.head_cols % 64:
            return (f"tile_p={self.tile_p}: x tiles are MN-major 64-column boxes and must "
                    "divide headdim")
        if self._p("dstate") % 64:
            return f"dstate={self._p('dstate')}: C and states tiles are 64-column boxes"
        if not self.cb_in_tile and self.tile_s % F32_BOX_ELEMS:
            return f"tile_s={self.tile_s}: cb tiles are {F32_BOX_ELEMS}-column fp32 boxes"
        return None

    # ----- text ----------------------------------------------------------------------
    def constants(self, code: Code, consumer_rows: int) -> None:
        c = code
        self.problem_constants(c)
        c(f"constexpr int TILE_L = {self.tile_l}, TILE_P = {self.tile_p}, TILE_S = "
          f"{self.tile_s};")
        c(f"constexpr int S_TILES = {self.trip_count};  // loop trips of the last row tile")
        c(f"constexpr int PACK = {self.pack}, HEAD_COLS = {self.head_cols}, PACKED_COLS = "
          "HEADDIM * PACK;  // heads of a tile, the columns of each")
        c(f"constexpr int N_STEPS = {self._p('dstate') // 16};  // k16 steps of C states^T")
        c(f"constexpr int ROW_BLOCKS = {self.row_blocks(consumer_rows)}, ACC_REGS = "
          f"{self.tile_p // 2}, E_REGS = {self.tile_s // 2};")
        gram = self.b if self.cb_in_tile else self.cb
        tiles: tuple[OperandTile | VectorTile, ...] = (self.c, self.st, gram, self.x)
        if self.vectors_by_tma:
            tiles += (self.dal, self.dt, self.da)
        self.tile_constants(c, tiles, read_by_mma=(self.c, self.st, self.x, self.b))

    def load(self, code: Code, stask: str, stage_addr: str, trip: str, full_bar: str) -> None:
        c, tile = code, self.operand(stask)
        tmap = self.tensor_map(stask)
        if isinstance(tile, VectorTile):
            col = "l0" if stask == "load_dA_l" else f"{trip} * TILE_S"
            self.load_vector_tile(c, tile, tmap, stage_addr, col, full_bar)
            return
        seq0 = "batch0 * SEQLEN + chunks0 * CHUNK"
        group = "heads0 / GROUP_HEADS"
        for box in range(tile.box_count):
            dst = f"{stage_addr} + {box} * {tile.const}_BOX_BYTES"
            inner = box * tile.box_inner
            if stask == "load_c":
                c(c.call("tma_load_3d", dst, tmap, inner, group, f"{seq0} + l0", full_bar) + ";")
            elif stask == "load_b":
                c(c.call("tma_load_3d", dst, tmap, inner, group, f"{seq0} + {trip} * TILE_S",
                         full_bar) + ";")
            elif stask == "load_x":  # box by box: a packed tile's boxes cover its heads in turn
                head, col = divmod(inner, self._p("headdim"))
                c(c.call("tma_load_3d", dst, tmap, f"p0 + {col}", f"heads0 + {head}",
                         f"{seq0} + {trip} * TILE_S", full_bar) + ";")
            elif stask == "load_state":
                row = "((batch0 * NCHUNKS + chunks0) * NHEADS + heads0) * HEADDIM + p0"
                c(c.call("tma_load_2d", dst, tmap, inner, row, full_bar) + ";")
            else:  # load_cb
                row = f"((batch0 * NCHUNKS + chunks0) * NGROUPS + {group}) * CHUNK + l0"
                c(c.call("tma_load_2d", dst, tmap, f"{trip} * TILE_S + {inner}", row,
                         full_bar) + ";")

    def consumer_state(self, code: Code) -> None:
        c = code
        c("float acc[ROW_BLOCKS][ACC_REGS];  // head j: columns [j HEAD_COLS, (j + 1) HEAD_COLS)")
        c("float e[PACK][ROW_BLOCKS][E_REGS];  // exp(dA[l] - dA[s]) per head (accumulator "
          "layout)")
        if self.cb_in_tile:
            c("float cb[ROW_BLOCKS][E_REGS];  // this trip's C B^T (accumulator layout)")
        mma = self.target.mma_name
        c(self.a_declaration("[PACK][ROW_BLOCKS][E_REGS / 2]") + "  // the masked products "
          f"as {mma}'s register A (a copy per trip parity when its {mma} stays in flight)")
        c("float dal[PACK][ROW_BLOCKS][2];  // dA[l] log2(e) of this thread's two rows per block")
        c("u32 x_skip[ROW_BLOCKS][2][ACC_REGS / 4];  // x[l, p] pairs of this thread's "
          "outputs, for D x")
        if not self.d_per_channel:
            c("float d_h[PACK];  // D of the tile's heads")
        self.vector_state(c, "[PACK]")

    def thread_load(self, code: Code, issue: Issue, at: TripAt) -> None:
        c = code
        for head in range(self.pack):
            with c.block(""):
                if issue.stask != "load_dA_l":
                    self.load_vector(c, issue.stask, at.index, f"[{head}]", str(head))
                    continue
                c(f"const float* dA_rows = dA_cumsum + vector_row(batch0, heads0 + {head}, "
                  "chunks0) * CHUNK + l0;")
                each_row(self.target, c,
                         [f"dal[{head}][mi][h] = __ldg(dA_rows + {TILE_ROW}) * LOG2E;"])

    def pin(self, code: Code, stask: str = "mma_x") -> None:
        with code.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            self.target.write_fence_operands(code, "cb[mi]" if stask == "mma_cb" else "acc[mi]")
            if stask == "mma_x":
                for pm in self.a_copies():
                    for head in range(self.pack):
                        self.target.write_fence_operands(code, f"{pm}[{head}][mi]")

    # ----- matrix products -----------------------------------------------------------
    def mma(self, code: Code, issue: Issue, stages: Mapping[str, str], at: TripAt) -> None:
        if issue.stask == "mma_state":
            self._mma_state(code)
        elif issue.stask == "mma_cb":
            self._mma_cb(code, stages[self.ring_stream("load_b")])
        else:
            stage = stages[self.ring_stream("load_x")]
            self.per_parity(code, at.index, lambda pm: self._mma_x(code, stage, pm))

    def _mma_state(self, code: Code) -> None:
        self._mma_from_c(code, "mma_state: acc", self.tile_p, "C_s states_s^T", "acc[mi]",
                         "ST_DESC_LAYOUT", "smem + SMEM_ST + st_kstep_bytes(kk)", "mma_state")

    def _mma_cb(self, code: Code, stage: str) -> None:
        """cb[CONSUMER_ROWS x TILE_S] = C_s B_sᵀ: the trip's positions against the tile's
        rows, over dstate (C from the tile buffer, B from the ring stage)."""
        self._mma_from_c(code, f"mma_cb  stage={stage}: cb", self.tile_s, "C_s B_s^T", "cb[mi]",
                         "B_DESC_LAYOUT", "b_tile + b_kstep_bytes(kk)", "mma_cb",
                         f"const u32 b_tile = smem + SMEM_B + {stage} * B_STAGE_BYTES;")

    def _mma_from_c(self, code: Code, what: str, n: int, product: str, acc: str,
                    b_layout: str, b_address: str, stask: str, *b_bases: str) -> None:
        """``acc`` = the tile's C rows times a K-major B tile (at ``b_address`` for k16
        step kk) transposed, over dstate: the state term's and cb's products share their A
        operand."""
        c, ct = code, self.c
        c.comment(f"{what}[CONSUMER_ROWS x {n}] = {product} (ROW_BLOCKS "
                  f"x {self._p('dstate') // 16} {self.target.mma_name} "
                  f"m{self.target.mma_rows}n{n}k16)")
        self.target.write_mma(c, Mma(
            n=n, dtype=self.dtype, b_major="k", k_steps="N_STEPS",
            b_layout=b_layout, a_layout="C_DESC_LAYOUT", accumulate="kk > 0",
            parts=(MmaPart(acc, b_address,
                           a_address=f"c_tile + c_kstep_bytes(kk) + mi * {ct.row_block_bytes}"),),
            pin=lambda: self.pin(c, stask),
            bases=(f"const u32 c_tile = smem + SMEM_C + row0 * {ct.swizzle.span_bytes};",
                   *b_bases)))

    def _mma_x(self, code: Code, stage: str, pm: str) -> None:
        """Per packed head j: its columns of acc += P_j x_j (x_j: the tile's boxes of head j)."""
        c = code
        c.comment(f"mma_x  stage={stage}: acc[CONSUMER_ROWS x {self.tile_p}] += P x_s, per "
                  f"head a {self.target.mma_name} m{self.target.mma_rows}n{self.head_cols} "
                  "(P in registers: k16 step kk is "
                  "pm[head][.][4kk..4kk+3])")
        parts = []
        for head in range(self.pack):
            acc = (f"*reinterpret_cast<float(*)[HEAD_COLS / 2]>(&acc[mi][{head} * "
                   "(HEAD_COLS / 2)])") if self.pack > 1 else "acc[mi]"
            box = f" + {head} * (HEAD_COLS / 64) * X_BOX_BYTES" if head else ""
            parts.append(MmaPart(acc, f"x_tile{box} + x_kstep_bytes(kk)",
                                 a_registers=f"{pm}[{head}]" + "[mi][4 * kk + {i}]"))
        self.target.write_mma(c, Mma(
            n=self.head_cols, dtype=self.dtype, b_major="mn", k_steps="K_STEPS",
            b_layout="X_DESC_LAYOUT", accumulate="true", parts=tuple(parts),
            pin=lambda: self.pin(c),
            bases=(f"const u32 x_tile = smem + SMEM_X + {stage} * X_STAGE_BYTES;",)))

    # ----- register math (its text in _chunk_scan_math) ------------------------------
    def math(self, code: Code, issue: Issue, at: TripAt) -> None:
        if issue.stask == "decay_out":
            decay_out(self.target, code, dal_in_smem=self.vectors_by_tma,
                      packed_sequences=bool(self.params.get("seq_idx")))
        elif issue.stask == "decay":
            self._decay(code)
        elif issue.stask == "scale_cb":
            source = (GramSource(packed_sequences=bool(self.params.get("seq_idx")))
                      if self.cb_in_tile else
                      GramSource(stage=f"{self.ring_stream('load_cb')}_stage"))
            self.per_parity(code, at.index, lambda pm: masked_products(
                self.target, code, pm, at.index, source, self.dtype))
        else:  # skip
            add_skip(self.target, code, self.dtype, self.d_per_channel)

    def _decay(self, code: Code) -> None:
        """Each packed head's e in turn, from its dt and dA (read from the stage first
        when TMA loaded them)."""
        exp2 = self.exp2(code, "decay")
        for head in range(self.pack):
            self.vectors_from_stage(code, f"[{head}]", str(head))
            decay(self.target, code, exp2, head)

    def begin_tile(self, code: Code) -> None:
        """Issue the skip term's reads of x[l, p] and D[h] now: they land while the tile's
        loop runs (read in the epilogue, they cost a memory latency per tile)."""
        read_skip_inputs(self.target, code, self.d_per_channel)

    def tensor_maps(self) -> tuple[TensorMapArg, ...]:
        p = self.params
        rows = p["batch"] * self.nchunks
        gram = (self.rows_map("b_map", "b", p["ngroups"], p["dstate"], self.b, self.tile_s)
                if self.cb_in_tile else TensorMapArg(
                    name="cb_map", tensor="cb", dtype="float32",
                    global_dims=(self.chunk, rows * p["ngroups"] * self.chunk),
                    global_strides_bytes=(self.chunk * 4,),
                    box_dims=(F32_BOX_ELEMS, self.tile_l), swizzle="128B"))
        maps = [
            self.rows_map("c_map", "c", p["ngroups"], p["dstate"], self.c, self.tile_l),
            TensorMapArg(
                name="states_map", tensor="states", dtype=self.dtype,
                global_dims=(p["dstate"], rows * p["nheads"] * p["headdim"]),
                global_strides_bytes=(p["dstate"] * self.elem,),
                box_dims=(self.st.box_inner, self.tile_p), swizzle="128B"),
            gram,
            self.rows_map("x_map", "x", p["nheads"], p["headdim"], self.x, self.tile_s),
        ]
        if self.vectors_by_tma:
            maps += [self.vector_map("dA_l_map", self.dal), self.vector_map("dt_map", self.dt),
                     self.vector_map("dA_map", self.da)]
        return tuple(maps)


#: Bumped whenever chunk scan's own text changes for the same schedule.
CHUNK_SCAN_HOOKS_VERSION = "mamba2-chunk-scan-3"
