"""The attention backward's register math and dq's reduction, per consumer warpgroup.

A consumer holds ``Sᵀ`` and ``dPᵀ`` of its key rows against the trip's queries: the
accumulator fragment's rows are keys, its columns queries (so lse and D are per column,
read from shared memory where the ring's lse stage and the consumer's own D slot hold
them). Per trip:

- ``softmax_p``: ``P = exp2(S log2e/√d - lse log2e)``, masked (causal, queries past the
  sequence), packed to 16-bit pairs: ``mma_dv``'s A;
- ``delta``: ``D = rowsum(dO o)`` of the trip's queries, by the warpgroup's 128 threads
  (each row by ``128 / TILE_Q`` neighbouring lanes), into the consumer's D slot (one per
  trip parity, so a fast warp's next D does not overwrite a slow warp's);
- ``grad_s``: ``dS = P (dP - D)`` in place, P read back from its 16-bit pairs (the fp32
  scores are dead by then: a d=128 kernel that kept them beside dP, dK and dV spilled),
  packed for ``mma_dk``;
- ``stage_ds``: the packed dSᵀ to shared memory, MN-major, each consumer its key rows;
  every consumer's rows are in before any reads them (``mma_dq``: dS is its A);
- ``mma_dq`` and ``store_dq``: dq's part ``dS K`` in 64 x 64 pieces (a consumer takes
  pieces ``consumer``, ``+ CONSUMERS``, ...), added to the fp32 workspace with
  ``red.global.add.v4.f32`` (neighbouring lanes swap pairs so each adds four columns of
  one row; ``.v2``, each lane's own pairs, in the ``interleave`` order); a counter per
  (batch, head, query tile) counts the pieces added, and the warpgroup that adds the
  last converts the tile's sums to dq (times 1/√d) and puts zeros back, so the workspace
  is left as it was found. A trip's pieces are counted at the next trip, before its own
  adds (the last trip's after the loop): the fence that orders the adds before the count
  then finds them landed rather than waiting a round trip to L2 for them; a
  deterministic dq counts at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen.cuda import convert
from codegen.pipeline import Code, TripAt
from codegen.pipeline.limits import BAR_CONSUMERS, WARPGROUP, warpgroup_barrier
from codegen.targets import Mma, MmaPart
from scheduler_search.hardware.model import UnitKind

if TYPE_CHECKING:
    from codegen.kernels.attention_backward import AttentionBackwardHooks

#: fp32 accumulators of one 64 x 64 piece of dq per thread.
PIECE_REGS = 32
#: Bytes of one 16-byte chunk of a swizzled row.
CHUNK_BYTES = 16


class BackwardMath:
    """The register math of :class:`~codegen.kernels.attention_backward.AttentionBackwardHooks`."""

    def __init__(self, hooks: AttentionBackwardHooks) -> None:
        self.hooks = hooks
        self.target = hooks.target
        self.consumers = hooks.structure.consumers
        self.dq_pieces = (hooks.tile_q // 64) * (hooks.head_dim // 64)
        self.bar = warpgroup_barrier(self.consumers)

    @property
    def pieces_mine(self) -> int:
        """dq pieces a consumer takes at most."""
        return -(-self.dq_pieces // self.consumers)

    @property
    def row_threads(self) -> int:
        """Neighbouring lanes that sum one row of D."""
        return WARPGROUP // self.hooks.tile_q

    def constants(self, code: Code) -> None:
        c = code
        chunks = self.hooks.head_dim * self.hooks.elem // CHUNK_BYTES
        c(f"constexpr int D_PIECES = HEAD_DIM / 64, DQ_PIECES = {self.dq_pieces};  // dq's "
          "64 x 64 pieces per trip")
        c(f"constexpr int ROW_THREADS = {self.row_threads}, ROW_CHUNKS = "
          f"{chunks // self.row_threads};  // D: lanes a row, 16-byte chunks a lane")
        c("__device__ __forceinline__ int q_contributors(int q_tile) { return CAUSAL ? "
          "min(KV_TILES, ((q_tile + 1) * TILE_Q - 1) / TILE_KV + 1) : KV_TILES; }  // key "
          "tiles adding to a query tile's dq")
        c("")

    def consumer_state(self, code: Code) -> None:
        code(f"float dq_acc[{PIECE_REGS}];  // one 64 x 64 piece of dq's part at a time")


    def write(self, code: Code, stask: str, at: TripAt) -> None:
        {"softmax_p": self.softmax_p, "delta": self.delta, "grad_s": self.grad_s,
         "stage_ds": self.stage_ds, "scale_dk": self.scale_dk}[stask](code, at)

    # ----- per trip --------------------------------------------------------------------
    def _each_pair_column(self, code: Code, vector: str, body: list[str],
                          keys: bool = False) -> None:
        """``body`` for each score this thread holds, after the two values of ``vector``
        (an fp32 shared array over the trip's queries) at its column pair are read into
        ``v2``: ``col`` is the pair's first query (from the tile's), ``key`` the row's key
        (where ``keys``) and ``x`` the score's accumulator index."""
        c = code
        c("#pragma unroll")
        with c.block("for (int g = 0; g < S_REGS / 4; ++g)"):
            c("const int col = g * 8 + (lane & 3) * 2;")
            c(f"const float2 v2 = {c.call('ld_shared_f32x2', f'{vector} + col * 4')};")
            with self.target.accumulator_rows(c):
                if keys:
                    c("const int key = kv0 + row0 + mi * 64 + warp * 16 + h * 8 + (lane >> 2);")
                c("#pragma unroll")
                with c.block("for (int e = 0; e < 2; ++e)"):
                    c("const int x = 4 * g + 2 * h + e;")
                    c("const float v = e ? v2.y : v2.x;")
                    for line in body:
                        c(line)

    def _pack(self, code: Code, fragment: str, what: str, into: str = "p") -> None:
        c = code
        c.comment(f"{what} as the 16-bit pairs of {self.target.mma_name}'s A fragment")
        pack = c.call(convert.pack2(self.hooks.dtype), f"{fragment}[mi][2 * i]",
                      f"{fragment}[mi][2 * i + 1]")
        c("#pragma unroll")
        with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            c("#pragma unroll")
            c(f"for (int i = 0; i < S_REGS / 2; ++i) {into}[mi][i] = {pack};")

    def softmax_p(self, code: Code, at: TripAt) -> None:
        c = code
        exp2 = "exp2f"
        if self.hooks.structure.units.get("softmax_p") is UnitKind.SFU:
            c.use("exp2_approx")
            exp2 = "exp2_approx"
        mask = "(CAUSAL && key > query)"
        if self.hooks._p("seq_q") % self.hooks.tile_q:
            mask += " || query >= SEQ_Q"
        with c.block(""):
            c(f"const int q_first = trip_q0({at.index}, kv0);")
            c("const u32 lse_row = smem + SMEM_LSE + q_stage * LSE_STAGE_BYTES;")
            self._each_pair_column(c, "lse_row", [
                "float& s = s_acc[mi][x];",
                "const int query = q_first + col + e;",
                f"s = {exp2}(s * SCALE_LOG2 - v * LOG2E);",
                f"if ({mask}) s = 0.0f;",
            ], keys=True)
        self._pack(c, "s_acc", "P^T")

    def _delta_slot(self, at: TripAt) -> str:
        return f"smem + SMEM_DELTA + (consumer * 2 + (({at.index}) & 1)) * DELTA_STAGE_BYTES"

    def delta(self, code: Code, at: TripAt) -> None:
        c, dtype = code, self.hooks.dtype
        unpack = convert.unpack2(dtype)
        with c.block(""):
            c(f"const int t = threadIdx.x % {WARPGROUP}, r = t / ROW_THREADS, part = t % "
              "ROW_THREADS;")
            c("const u32 do_tile = smem + SMEM_DO + do_stage * DO_STAGE_BYTES, o_tile = smem + "
              "SMEM_O + do_stage * O_STAGE_BYTES;")
            c("float sum = 0.0f;")
            c("#pragma unroll")
            with c.block("for (int i = 0; i < ROW_CHUNKS; ++i)"):
                c("const int chunk = part * ROW_CHUNKS + i;  // of the row's HEAD_DIM / 8")
                c("const u32 at = (chunk / 8) * DO_BOX_BYTES + r * 128 + ((chunk % 8) ^ (r % 8)) "
                  "* 16;  // 128-byte swizzle")
                c(f"const uint4 a = {c.call('ld_shared_u32x4', 'do_tile + at')}, "
                  f"b = {c.call('ld_shared_u32x4', 'o_tile + at')};")
                for word in "xyzw":
                    c(f"{{ const float2 x = {c.call(unpack, f'a.{word}')}, y = "
                      f"{c.call(unpack, f'b.{word}')}; sum += x.x * y.x + x.y * y.y; }}")
            if self.row_threads > 1:
                c("#pragma unroll")
                c("for (int lanes = 1; lanes < ROW_THREADS; lanes *= 2) sum += "
                  "__shfl_xor_sync(0xffffffffu, sum, lanes);")
            with c.block("if (part == 0)"):
                c(c.call("st_shared_f32", f"{self._delta_slot(at)} + r * 4", "sum") + ";")
            c.comment("every row's D is in before any thread reads its columns")
            c(c.call("named_barrier_sync", self.bar, WARPGROUP) + ";")

    def grad_s(self, code: Code, at: TripAt) -> None:
        c = code
        with c.block(""):
            c(f"const u32 delta_row = {self._delta_slot(at)};")
            unpack = c.call(convert.unpack2(self.hooks.dtype), "p[mi][2 * g + h]")
            self._each_pair_column(c, "delta_row", [
                f"const float2 pair = {unpack};",
                "dp_acc[mi][x] = (e ? pair.y : pair.x) * (dp_acc[mi][x] - v);"])
        self._pack(c, "dp_acc", "dS^T", into=self.hooks.ds_fragment)

    def _ds_tile(self, at: TripAt, consumer: str) -> str:
        return (f"smem + SMEM_DS + ((({at.index}) & 1) * CONSUMERS + {consumer}) * "
                "DS_STAGE_BYTES")

    def stage_ds(self, code: Code, at: TripAt) -> None:
        c = code
        with c.block(""):
            c(f"const u32 ds_tile = {self._ds_tile(at, 'consumer')};")
            with self.target.accumulator_rows(c):
                c("const int r = mi * 64 + warp * 16 + h * 8 + (lane >> 2);  // this "
                  "consumer's key row")
                c("#pragma unroll")
                with c.block("for (int g = 0; g < S_REGS / 4; ++g)"):
                    c("const int col = g * 8 + (lane & 3) * 2;  // the pair's first query")
                    c("const u32 at = (col / 64) * DS_BOX_BYTES + r * 128 + "
                      "((((col % 64) / 8) ^ (r % 8)) * 16) + (col % 8) * 2;")
                    c(c.call("st_shared_u32", "ds_tile + at",
                             f"{self.hooks.ds_fragment}[mi][2 * g + h]") + ";")
            c(c.call("fence_proxy_async_smem") + ";  // read next by the MMA")
        c.comment("every consumer's rows of dS^T are in before any reads them")
        c(c.call("named_barrier_sync", BAR_CONSUMERS, f"{WARPGROUP} * CONSUMERS") + ";")

    # ----- dq's pieces -----------------------------------------------------------------
    def pin_dq(self, code: Code) -> None:
        """The pin of the dq piece's accumulators (a loop: the caller unrolls it)."""
        with code.block("for (int j = 0; j < 1; ++j)"):
            self.target.write_fence_operands(code, "dq_acc")

    def _piece(self, j: int) -> str:
        """This consumer's ``j``-th piece of dq (C++)."""
        return f"consumer + {j} * CONSUMERS" if j else "consumer"

    def _issue_piece(self, code: Code, j: int, at: TripAt) -> None:
        """The MMA of this consumer's ``j``-th piece: ``dq_acc = dS[qb] K[:, db]`` over the
        tile's keys (dSᵀ of every consumer, MN-major, as A; K MN-major as B)."""
        c = code
        c(f"const int qb = ({self._piece(j)}) / D_PIECES, db = ({self._piece(j)}) % D_PIECES;")
        region = "(kk * 16) / CONSUMER_ROWS"
        self.target.write_mma(c, Mma(
            n=64, dtype=self.hooks.dtype, b_major="mn", a_major="mn",
            k_steps="TILE_KV / 16", b_layout="KT_DESC_LAYOUT", a_layout="DS_DESC_LAYOUT",
            accumulate="kk > 0", row_blocks="1",
            parts=(MmaPart(
                "dq_acc", "dq_b + kt_kstep_bytes(kk)",
                a_address=f"dq_a + ({region}) * DS_STAGE_BYTES + "
                          "((kk * 16) % CONSUMER_ROWS) * 128"),),
            pin=lambda: self.pin_dq(c),
            bases=(f"const u32 dq_a = {self._ds_tile(at, '0')} + qb * DS_BOX_BYTES;",
                   "const u32 dq_b = smem + SMEM_K + db * KT_BOX_BYTES;")))

    def mma_dq(self, code: Code, at: TripAt) -> None:
        c = code
        c.comment(f"mma_dq: dq's part dS K in 64 x 64 pieces ({self.target.mma_name} "
                  "m64n64k16 over the tile's keys); this consumer's first (the rest in "
                  "store_dq, one at a time)")
        with c.block("if (consumer < DQ_PIECES)"):
            self._issue_piece(c, 0, at)

    @property
    def deferred_count(self) -> bool:
        """A trip's pieces are counted at the next trip (or after the loop), before that
        trip's own adds: the fence that orders them before the count then finds them
        landed instead of waiting for them. A deterministic dq counts at once (later
        key tiles wait on the count)."""
        return not self.hooks.deterministic

    def store_dq(self, code: Code, at: TripAt) -> None:
        c = code
        c.comment("a consumer with pieces of dq adds them, one at a time")
        with c.block("if (consumer < DQ_PIECES)"):
            if self.deferred_count:
                with c.block(f"if (({at.index}) > 0)"):
                    c.comment("the last trip's pieces, counted now that they have landed")
                    self._count_in(c, f"({at.index}) - 1")
            c(f"const int head = trip_head({at.index}, kv0, heads0), q_first = "
              f"trip_q0({at.index}, kv0);")
            self._sums_of(c)
            if self.hooks.deterministic:
                self._wait_turn(c)
            for j in range(self.pieces_mine):
                with c.block(f"if ({self._piece(j)} < DQ_PIECES)" if j else ""):
                    if j:
                        self._issue_piece(c, j, at)
                        self.target.write_mma_wait(c, 0)
                        c("#pragma unroll")
                        self.pin_dq(c)
                    self._add_piece(c, j)
            if not self.deferred_count:
                self._finish_tile(c)

    def flush_dq(self, code: Code) -> None:
        """After the loop: the last trip's pieces, counted (the deferred count)."""
        if not self.deferred_count:
            return
        c = code
        trips = self.hooks.tile_trips() or self.hooks.trips
        with c.block(f"if (consumer < DQ_PIECES && {trips} > 0)"):
            c.comment("the tile's last trip's pieces of dq, counted")
            self._count_in(c, f"{trips} - 1")

    def _count_in(self, code: Code, trip: str) -> None:
        """Count in the pieces trip ``trip`` of this tile added."""
        c = code
        with c.block(""):
            c(f"const int head = trip_head({trip}, kv0, heads0), q_first = trip_q0({trip}, "
              "kv0);")
            self._sums_of(c)
            self._finish_tile(c)

    @staticmethod
    def _sums_of(code: Code) -> None:
        """The fp32 rows and the counter of the query tile at (``head``, ``q_first``)."""
        code("float* dq_rows = reinterpret_cast<float*>(dq_accum) + (unsigned long long)"
             "(batch0 * HEADS + head) * SEQ_Q * HEAD_DIM;")
        code("unsigned int* count = reinterpret_cast<unsigned int*>(dq_count) + (batch0 * "
             "HEADS + head) * Q_TILES + q_first / TILE_Q;")

    def _wait_turn(self, code: Code) -> None:
        """A deterministic dq: every element's sums run in key-tile order. The query tile's
        contributors are key tiles 0, 1, ... (a causal mask drops the last ones), so this
        tile waits until the count holds every piece of the tiles before it. Tiles of one
        (batch, head) start in key order (the raster walks key tiles forwards), and each
        waits only on earlier ones: no cycle, so no deadlock."""
        c = code
        c.comment("deterministic dq: wait until the key tiles before this one added theirs")
        with c.block("if (lane == 0)"):
            c("const unsigned int before = (unsigned int)(kv0 / TILE_KV * DQ_PIECES);")
            c(f"while ({c.call('ld_acquire_u32', 'count')} < before) __nanosleep(64);")
        c("__syncwarp();")

    def _add_piece(self, code: Code, j: int) -> None:
        c = code
        if not j:  # else declared with the piece's MMA
            c(f"const int qb = ({self._piece(j)}) / D_PIECES, db = ({self._piece(j)}) % "
              "D_PIECES;")
        if self.hooks.structure.sprogram.order == "interleave":
            self._add_pairs(c)
        else:
            self._add_quads(c)

    @staticmethod
    def _add_pairs(code: Code) -> None:
        """Each lane adds its own pairs, two columns of a row at a time: where other
        products are still in flight (``interleave``), ptxas 13.0 serialised every MMA of
        the kernel once a shuffle read the piece's accumulators (C7514)."""
        c = code
        c("#pragma unroll")
        with c.block("for (int h = 0; h < 2; ++h)"):
            c("const int query = q_first + qb * 64 + warp * 16 + h * 8 + (lane >> 2);")
            c("if (query >= SEQ_Q) continue;")
            c("#pragma unroll")
            with c.block("for (int g = 0; g < 8; ++g)"):
                c("const int col = db * 64 + g * 8 + (lane & 3) * 2;")
                c(c.call("red_add_f32x2", "dq_rows + (unsigned long long)query * HEAD_DIM "
                         "+ col", "dq_acc[4 * g + 2 * h]", "dq_acc[4 * g + 2 * h + 1]") + ";")

    @staticmethod
    def _add_quads(code: Code) -> None:
        """Four columns of a row at a time, half the L2 operations of pairs: a lane and its
        neighbour (``lane ^ 1``) swap pairs so that the even lane adds four columns of row
        ``h = 0``, the odd one four of row ``h = 1``."""
        c = code
        with c.block(""):
            c("const bool odd = lane & 1;")
            c("const int query = q_first + qb * 64 + warp * 16 + (odd ? 8 : 0) + (lane >> 2);")
            c("float* sums = dq_rows + (unsigned long long)query * HEAD_DIM + db * 64 + "
              "(lane & 2) * 2;")
            c("#pragma unroll")
            with c.block("for (int g = 0; g < 8; ++g)"):
                c("const float give_x = odd ? dq_acc[4 * g] : dq_acc[4 * g + 2], give_y = odd "
                  "? dq_acc[4 * g + 1] : dq_acc[4 * g + 3];")
                c("const float take_x = __shfl_xor_sync(0xffffffffu, give_x, 1), take_y = "
                  "__shfl_xor_sync(0xffffffffu, give_y, 1);")
                c("if (query < SEQ_Q) " + c.call(
                    "red_add_f32x4", "sums + g * 8", "odd ? take_x : dq_acc[4 * g]",
                    "odd ? take_y : dq_acc[4 * g + 1]", "odd ? dq_acc[4 * g + 2] : take_x",
                    "odd ? dq_acc[4 * g + 3] : take_y") + ";")

    def _finish_tile(self, code: Code) -> None:
        """Count this consumer's pieces in; the warpgroup that counts the tile's last
        writes dq and leaves zeros behind."""
        c, dtype = code, self.hooks.dtype
        c("const int mine = (DQ_PIECES - consumer + CONSUMERS - 1) / CONSUMERS;  // pieces added")
        c("__threadfence();  // the sums land before the count says so")
        c(c.call("named_barrier_sync", self.bar, WARPGROUP) + ";")
        c("bool last = false;")
        with c.block(f"if (threadIdx.x % {WARPGROUP} == 0)"):
            c("last = atomicAdd(count, (unsigned int)mine) + mine == "
              "(unsigned int)(q_contributors(q_first / TILE_Q) * DQ_PIECES);")
        c(f"last = {c.call('named_barrier_or', self.bar, WARPGROUP, 'last')};")
        with c.block("if (last)"):
            c.comment("the query tile's dq is summed: write it (times 1/sqrt(d)), put zeros back")
            c("__threadfence();")
            c(f"for (int i = threadIdx.x % {WARPGROUP}; i < TILE_Q * HEAD_DIM / 4; i += "
              f"{WARPGROUP}) {{")
            c("  const int query = q_first + i / (HEAD_DIM / 4), col = i % (HEAD_DIM / 4) * 4;")
            c("  if (query >= SEQ_Q) break;")
            c("  float4* sums = reinterpret_cast<float4*>(dq_rows + (unsigned long long)query "
              "* HEAD_DIM + col);")
            c("  const float4 v = __ldcg(sums);")
            c("  __stcg(sums, make_float4(0.0f, 0.0f, 0.0f, 0.0f));")
            pack = convert.pack2(dtype)
            c(f"  const uint2 out = make_uint2({c.call(pack, 'v.x * SCALE', 'v.y * SCALE')}, "
              f"{c.call(pack, 'v.z * SCALE', 'v.w * SCALE')});")
            c(f"  *reinterpret_cast<uint2*>(dq + {self._dq_offset()}) = out;")
            c("}")
            c("if (threadIdx.x % 128 == 0) *count = 0u;")

    def _dq_offset(self) -> str:
        if self.hooks.heads_second:
            return "((unsigned long long)(batch0 * HEADS + head) * SEQ_Q + query) * HEAD_DIM + col"
        return "((unsigned long long)(batch0 * SEQ_Q + query) * HEADS + head) * HEAD_DIM + col"

    # ----- after the loop --------------------------------------------------------------
    def scale_dk(self, code: Code, at: TripAt) -> None:
        c = code
        self.flush_dq(c)
        c.comment("dk = dS^T q / sqrt(d): the scale the scores' product left out")
        c("#pragma unroll")
        with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            c("#pragma unroll")
            c("for (int i = 0; i < D_REGS; ++i) dk_acc[mi][i] *= SCALE;")


__all__ = ["BackwardMath"]
