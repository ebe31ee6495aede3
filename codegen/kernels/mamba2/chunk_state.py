"""Mamba2 chunk state as hooks on the pipeline skeleton (``mamba_ssm``'s ``_chunk_state_fwd``).

Per (batch, chunk c, head h) with g = h / (nheads / ngroups) and L = chunk_size:
``states[p, n] = Σ_l x[l, p] · w[l] · B[l, g, n]``, ``w[l] = exp(dA[L-1] - dA[l]) · dt[l]``,
a (headdim x dstate) result in fp32 (``states_in_fp32``, the default) or in the inputs'
dtype. What is chunk state's own:

- tiles: an output tile is ``tile_p x tile_n`` of one (batch, chunk, head); one loop trip per
  ``tile_l`` positions of the chunk;
- ``load_x`` / ``load_b``: TMA boxes of the trip's rows of x (one head) and B (its group);
- ``decay`` (SFU or CUDA cores): ``w`` of this thread's positions;
- ``scale_x``: x read transposed from shared memory with ``ldmatrix .trans`` straight into
  the MMA's register A layout (rows p, columns l), each pair scaled by its ``w``: the decay
  costs no shared-memory pass;
- ``mma``: ``acc += (x w)ᵀ B`` with A from registers and B (positions x dstate, dstate
  contiguous) MN-major in shared memory;
- ``store``: the fp32 accumulators (or their 16-bit roundings) with st.global, or staged in
  the idle ring stages and written by TMA (states seen as one (batch x chunk x head x p) by
  dstate matrix).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from functools import cached_property

from codegen.artifact import TensorMapArg
from codegen.cuda import convert
from codegen.kernels.mamba2._common import Mamba2Hooks, fragment_col
from codegen.kernels.mamba2._state_passing import StatePassing
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
from scheduler_search.ops import DTYPE_BYTES


class ChunkStateHooks(Mamba2Hooks):
    """Chunk state's tiles, loads, decay and MMA on the skeleton (with the state passing
    fused, :mod:`codegen.kernels.mamba2._state_passing`)."""

    k_tile_const = "TILE_L"
    #: A cluster's blocks take neighbouring heads of one group: B is multicast.
    cluster_axes = ("heads",)
    loop_mma = "mma"
    a_operand = "xa"

    @cached_property
    def passing(self) -> StatePassing | None:
        """The state passing's text, when the spec fuses it."""
        return StatePassing(self) if self.params.get("pass_states") else None

    @property
    def trips(self) -> str:  # type: ignore[override]
        return "TRIPS" if self.passing else "L_TILES"

    @property
    def tile_p(self) -> int:
        return self.sprogram.tile["p"]

    @property
    def tile_n(self) -> int:
        return self.sprogram.tile["n"]

    @property
    def tile_l(self) -> int:
        return self.sprogram.tile["l"]

    @property
    def k_tile(self) -> int:
        return self.tile_l

    @property
    def trip_count(self) -> int:
        per_chunk = self.chunk // self.tile_l
        return per_chunk * self.nchunks if self.passing else per_chunk

    @property
    def head_rows(self) -> int:
        """Rows of one head in a tile (tile_p, or headdim when heads are packed)."""
        return self.tile_p // self.pack

    @property
    def grid_axes(self) -> tuple[GridAxis, ...]:
        return (GridAxis("p", self._p("headdim") * self.pack, self.tile_p),
                GridAxis("n", self._p("dstate"), self.tile_n),
                *self.outer_axes(chunks=1 if self.passing else self.nchunks))

    @property
    def math_stasks(self) -> frozenset[str]:
        return frozenset({"decay", "scale_x"} | ({"pass_state"} if self.passing else set()))

    @property
    def loop_stores(self) -> frozenset[str]:
        return frozenset({"store_state"} if self.passing else ())

    def loop_store(self, code: Code, issue: Issue, at: TripAt) -> None:
        assert self.passing is not None
        self.passing.store_state(code, at)

    # ----- operands and output -------------------------------------------------------
    @cached_property
    def x(self) -> OperandTile:
        # Rows are (position l, packed head), headdim contiguous: read transposed by
        # ldmatrix, not by the MMA.
        return self.tile16("x", self.tile_l * self.pack, self.head_rows)

    @cached_property
    def b(self) -> OperandTile:
        # The MMA's B: K = positions, N = dstate contiguous (MN-major).
        return self.tile16("b", self.tile_n, self.tile_l, major="mn",
                           slices=self.multicast_slices("load_b"))

    def operand(self, stask: str) -> OperandTile | VectorTile:
        return {"load_x": self.x, "load_b": self.b, "load_dt": self.dt, "load_dA": self.da}[stask]

    def tensor_map(self, stask: str) -> str:
        return {"load_x": "x_map", "load_b": "b_map", "load_dt": "dt_map",
                "load_dA": "dA_map"}[stask]

    def output(self) -> OutputTile:
        # states as one (batch x chunk x head x p) by dstate matrix: a tile's packed heads
        # lie one after another in it, so one row origin serves st.global and TMA alike.
        p = self.params
        if self.passing:  # the state after the last chunk, from the running state
            return OutputTile(
                tensor="final_states", dtype="float32", elem_bytes=4, rows=self.tile_p,
                cols=self.tile_n, global_rows=p["batch"] * p["nheads"] * p["headdim"],
                global_cols=p["dstate"], fragment="run",
                row_origin="((batch0 * NHEADS + heads0) * HEADDIM + p0)", col_origin="n0",
                extent_names=("FINAL_ROWS", "DSTATE"))
        dtype = "float32" if p.get("states_in_fp32", True) else self.dtype
        return OutputTile(
            tensor="states", dtype=dtype, elem_bytes=DTYPE_BYTES[dtype], rows=self.tile_p,
            cols=self.tile_n,
            global_rows=p["batch"] * self.nchunks * p["nheads"] * p["headdim"],
            global_cols=p["dstate"], fragment="acc",
            row_origin="(((batch0 * NCHUNKS + chunks0) * NHEADS + heads0) * HEADDIM + p0)",
            col_origin="n0", extent_names=("STATE_ROWS", "DSTATE"),
        )

    def side_outputs(self) -> tuple[str, ...]:
        return ("states",) if self.passing else ()

    def pointer_inputs(self) -> tuple[str, ...]:
        # dA_cumsum for the chunk's last position, once per chunk.
        initial = ("initial_states",) if self.params.get("initial_states") else ()
        packed = ("seq_idx",) if self.packed_sequences else ()
        return (self.vector_pointers() or ("dA_cumsum",)) + initial + packed

    @property
    def packed_sequences(self) -> bool:
        """The spec packs sequences in a row (``seq_idx``)."""
        return bool(self.params.get("seq_idx"))

    def accumulator_regs(self, consumer_rows: int) -> int:
        # acc, the scaled x pairs and w of the block's head; dt and dA while w is computed
        # (nvcc 13.0: two 64x128 blocks of tile_l 64 took 242 registers, of tile_l 128 spilled).
        # With the MMA in flight the scaled pairs (4 a k16 step) have a copy per parity.
        copies = 2 if self.a_in_flight else 1
        running = self.tile_n // 2 if self.passing else 0  # the running state
        per_block = self.tile_n // 2 + running + (4 * copies + 4) * self.k_steps
        return self.row_blocks(consumer_rows) * per_block + 4 * self.k_steps

    def holds_tile_buffer(self, load: str) -> bool:
        return False

    def problem(self) -> str | None:
        problem = self.common_problem()
        if problem:
            return problem
        if self.pack > 1 and self.tile_p != self._p("headdim") * self.pack:
            return (f"tile_g={self.pack} packs whole heads: tile_p must be headdim x tile_g "
                    f"({self._p('headdim') * self.pack})")
        if self._p("headdim") * self.pack % self.tile_p or self.head_rows % 64:
            return (f"tile_p={self.tile_p}: x tiles are 64-column 128B-swizzle boxes and must "
                    "divide headdim")
        if self._p("dstate") % self.tile_n or self.tile_n % 64:
            return (f"tile_n={self.tile_n}: B tiles are MN-major 64-column boxes and must divide "
                    "dstate")
        return None

    # ----- text ----------------------------------------------------------------------
    def constants(self, code: Code, consumer_rows: int) -> None:
        c = code
        self.problem_constants(c)
        c(f"constexpr int TILE_P = {self.tile_p}, TILE_N = {self.tile_n}, TILE_L = {self.tile_l};")
        c(f"constexpr int PACK = {self.pack}, HEAD_ROWS = {self.head_rows};  // heads of a group "
          "per tile (rows: head x p), B loaded once for them")
        c("constexpr int STATE_ROWS = BATCH * NCHUNKS * NHEADS * HEADDIM;  // rows of states as "
          "a matrix")
        c(f"constexpr int L_TILES = {self.chunk // self.tile_l};  // loop trips: tile_l "
          "positions each")
        if self.passing:
            self.passing.constants(c)
            c("constexpr int FINAL_ROWS = BATCH * NHEADS * HEADDIM;  // rows of final_states as "
              "a matrix")
        c(f"constexpr int ROW_BLOCKS = {self.row_blocks(consumer_rows)}, ACC_REGS = "
          f"{self.tile_n // 2};")
        tiles = (self.x, self.b) + ((self.dt, self.da) if self.vectors_by_tma else ())
        self.tile_constants(c, tiles, read_by_mma=(self.b,))

    def load(self, code: Code, stask: str, stage_addr: str, trip: str, full_bar: str) -> None:
        c, tile = code, self.operand(stask)
        tmap = self.tensor_map(stask)
        if isinstance(tile, VectorTile):
            if self.passing:  # the trip's chunk, and its positions in it
                self.load_vector_tile(c, tile, tmap, stage_addr, f"({trip}) % L_TILES * TILE_L",
                                      full_bar, chunk=f"({trip}) / L_TILES")
            else:
                self.load_vector_tile(c, tile, tmap, stage_addr, f"{trip} * TILE_L", full_bar)
            return
        row = f"batch0 * SEQLEN + chunks0 * CHUNK + {trip} * TILE_L"
        col0, head = ("p0", "heads0") if stask == "load_x" else ("n0", "heads0 / GROUP_HEADS")
        for box in range(tile.box_count):
            dst = f"{stage_addr} + {box} * {tile.const}_BOX_BYTES"
            col = f"{col0} + {box * tile.box_inner}"
            if tile.slices == 1:
                c(c.call("tma_load_3d", dst, tmap, col, head, row, full_bar) + ";")
                continue
            # This block's slice of the box's positions, multicast to the cluster's blocks.
            slice_dst, slice_row, mask = tile.multicast_slice(dst, row)
            c(c.call("tma_load_3d_multicast", slice_dst, tmap, col, head, slice_row, full_bar,
                     mask) + ";")

    def consumer_state(self, code: Code) -> None:
        c = code
        c("float acc[ROW_BLOCKS][ACC_REGS];")
        c(self.a_declaration("[ROW_BLOCKS][4 * K_STEPS]") + f"  // (x w)^T as "
          f"{self.target.mma_name}'s register A, k16 step kk: xa[.][4kk..4kk+3] (a copy per "
          "trip parity when in flight)")
        c("float w[ROW_BLOCKS][K_STEPS][4];  // exp(dA[last] - dA[l]) dt[l] of this thread's "
          "positions, for the block's head")
        c("float dA_last[ROW_BLOCKS];  // dA_cumsum at the chunk's last position")
        self.vector_state(c, "[ROW_BLOCKS]")
        if self.passing:
            self.passing.consumer_state(c)

    def _each_block(self, code: Code) -> contextlib.AbstractContextManager[None]:
        """A loop over this consumer's m64 blocks, each of one head (``head``: its slot in
        the tile's packed heads)."""
        code("#pragma unroll")
        block = code.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)")
        return _with_head(code, block)

    def begin_tile(self, code: Code) -> None:
        if self.passing:  # dA_last per chunk, read with the chunk's first decay
            self.passing.begin_tile(code)
            return
        self._last_decay(code, "chunks0")

    def _last_decay(self, code: Code, chunk: str) -> None:
        with self._each_block(code):
            code(f"dA_last[mi] = dA_cumsum[vector_row(batch0, heads0 + head, {chunk}) * CHUNK + "
                 "CHUNK - 1];")

    def thread_load(self, code: Code, issue: Issue, at: TripAt) -> None:
        with self._each_block(code):
            self.load_vector(code, issue.stask, at.index, slot="[mi]", head="head")

    def pin(self, code: Code, stask: str = "mma") -> None:
        with code.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            self.target.write_fence_operands(code, "acc[mi]")
            for xa in self.a_copies():
                self.target.write_fence_operands(code, f"{xa}[mi]")

    def math(self, code: Code, issue: Issue, at: TripAt) -> None:
        if issue.stask == "decay":
            if self.passing:
                self._last_decay(code, f"({at.index}) / L_TILES")
            self._decay(code, at.index)
        elif issue.stask == "pass_state":
            assert self.passing is not None
            self.passing.pass_state(code, at, self.exp2(code, "decay"))
        else:
            self.per_parity(code, at.index, lambda xa: self._scale_x(code, xa))

    def _decay(self, code: Code, trip: str) -> None:
        c = code
        exp2 = self.exp2(c, "decay")
        if self.packed_sequences:
            self._sequences_of_trip(c, trip)
        with self._each_block(c):
            self.vectors_from_stage(c, slot="[mi]", head="head")
            c("const float last2 = dA_last[mi] * LOG2E;")
            c("#pragma unroll")
            with c.block("for (int kk = 0; kk < K_STEPS; ++kk)"):
                c("#pragma unroll")
                with c.block("for (int j = 0; j < 4; ++j)"):
                    keep = " * kept[kk][j]" if self.packed_sequences else ""
                    c(f"w[mi][kk][j] = {exp2}(fmaf(-dA_v[mi][kk][j], LOG2E, last2)) * "
                      f"dt_v[mi][kk][j]{keep};")

    def _sequences_of_trip(self, code: Code, trip: str) -> None:
        """``kept``: 1 for this thread's positions of the trip that belong to the sequence
        their chunk ends in (and that one is not padding, id >= 0), else 0."""
        c = code
        c("const int* seq_row = seq_idx + (unsigned long long)batch0 * SEQLEN + chunks0 * "
          f"CHUNK + ({trip}) * TILE_L;")
        c("const int seq_end = __ldg(seq_idx + (unsigned long long)batch0 * SEQLEN + "
          f"((chunks0 * CHUNK + ({trip}) * TILE_L) / CHUNK + 1) * CHUNK - 1);")
        c("float kept[K_STEPS][4];  // the positions of the chunk's last sequence")
        c("#pragma unroll")
        with c.block("for (int kk = 0; kk < K_STEPS; ++kk)"):
            for half in (0, 1):
                c(f"const int2 s{half} = __ldg(reinterpret_cast<const int2*>(seq_row + "
                  f"{fragment_col('kk', str(2 * half))}));")
                c(f"kept[kk][{2 * half}] = s{half}.x == seq_end && seq_end >= 0 ? 1.f : 0.f;")
                c(f"kept[kk][{2 * half + 1}] = s{half}.y == seq_end && seq_end >= 0 ? 1.f : "
                  "0.f;")

    def _scale_x(self, code: Code, xa: str) -> None:
        """ldmatrix .trans of 16x16 blocks of x (lane / 8 picks the 8x8 matrix: bit 0 +8
        rows of p, bit 1 +8 positions), each 16-bit pair times its two positions' w."""
        c = code
        stage = f"{self.ring_stream('load_x')}_stage"
        unpack, pack = convert.unpack2(self.dtype), convert.pack2(self.dtype)
        c.use("swizzle_128b")
        c(f"const u32 x_tile = smem + SMEM_X + {stage} * X_STAGE_BYTES;")
        c("#pragma unroll")
        with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            c("const int row = row0 + mi * 64 + warp * 16 + ((lane >> 3) & 1) * 8;  // in the tile")
            c("const int head = row / HEAD_ROWS, p = row % HEAD_ROWS;  // packed head, its p")
            c("#pragma unroll")
            with c.block("for (int kk = 0; kk < K_STEPS; ++kk)"):
                c("const int l = 16 * kk + (lane & 7) + (lane >> 4) * 8;")
                c("u32 r[4];")
                addr = ("x_tile + (p / 64) * X_BOX_BYTES + swizzle_128b((l * PACK + head) * 128 + "
                        "(p % 64) * 2)")
                c(c.call("ldmatrix_x4_trans", addr, "r[0]", "r[1]", "r[2]", "r[3]") + ";")
                c("#pragma unroll")
                with c.block("for (int j = 0; j < 4; ++j)"):
                    c(f"const float2 v = {c.call(unpack, 'r[j]')};")
                    c("const int h = (j >> 1) * 2;  // positions 2t, 2t+1 (j < 2) or +8")
                    scaled = c.call(pack, "v.x * w[mi][kk][h]", "v.y * w[mi][kk][h + 1]")
                    c(f"{xa}[mi][4 * kk + j] = {scaled};")

    def mma(self, code: Code, issue: Issue, stages: Mapping[str, str], at: TripAt) -> None:
        stage = stages[self.ring_stream("load_b")]
        self.per_parity(code, at.index, lambda xa: self._mma(code, stage, at, xa))

    def _mma(self, code: Code, stage: str, at: TripAt, xa: str) -> None:
        c = code
        c.comment(f"mma  stage={stage}: acc[CONSUMER_ROWS x {self.tile_n}] += (x w)^T B_s "
                  f"(ROW_BLOCKS x {self.k_steps} {self.target.mma_name} "
                  f"m{self.target.mma_rows}n{self.tile_n}k16, A in registers)")
        self.target.write_mma(c, Mma(
            n=self.tile_n, dtype=self.dtype, b_major="mn", k_steps="K_STEPS",
            b_layout="B_DESC_LAYOUT", accumulate=f"{self._accumulates(at)} || kk > 0",
            parts=(MmaPart("acc[mi]", "b_stage + b_kstep_bytes(kk)",
                           a_registers=xa + "[mi][4 * kk + {i}]"),),
            pin=lambda: self.pin(c),
            bases=(f"const u32 b_stage = smem + SMEM_B + {stage} * B_STAGE_BYTES;",)))

    def _accumulates(self, at: TripAt) -> str:
        """The trip's MMA adds to the accumulators: all but the first trip (of each chunk,
        with the state passing)."""
        return f"({at.index}) % L_TILES > 0" if self.passing else at.accumulates

    def tensor_maps(self) -> tuple[TensorMapArg, ...]:
        p = self.params
        maps = [self.rows_map("x_map", "x", p["nheads"], p["headdim"], self.x, self.tile_l,
                              box_heads=self.pack),
                self.rows_map("b_map", "b", p["ngroups"], p["dstate"], self.b,
                              self.b.slice_outer)]
        if self.vectors_by_tma:
            maps += [self.vector_map("dt_map", self.dt), self.vector_map("dA_map", self.da)]
        return tuple(maps)


@contextlib.contextmanager
def _with_head(code: Code, block: contextlib.AbstractContextManager[None]) -> Iterator[None]:
    """Inside ``block`` (the m64-block loop), ``head``: the block's packed head."""
    with block:
        code("const int head = (row0 + mi * 64) / HEAD_ROWS;  // m64 blocks lie in one head")
        yield


#: Bumped whenever chunk state's own text changes for the same schedule.
CHUNK_STATE_HOOKS_VERSION = "mamba2-chunk-state-4"
