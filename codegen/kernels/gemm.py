"""GEMM as hooks on the pipeline skeleton: ``C[m, n] = A[m, k] @ B`` with fp32 accumulation.

A is row-major (K-major for the MMA); B is K x N (``kn``: MN-major, read with the transpose
bit) or N x K (``nk``: K-major). The kernel is specialised to the shape (m, n, k are
compile-time constants). What is GEMM's own:

- tiles: the output tile ``tile_m x tile_n`` on a grid over (m, n); one loop trip per
  ``tile_k`` slice of K (the last one zero-filled past K by TMA);
- ``load_a`` / ``load_b``: TMA boxes of A[m0 +: tile_m, k0 +: tile_k] and the matching B
  tile, 128-byte swizzle (64 for a 32-wide K tile);
- ``mma``: the target's MMA (``m64nNk16`` on Hopper) per 64 rows a consumer warpgroup
  owns, N = tile_n, over the stage's k16 steps, into the accumulator ``acc``;
- ``epilogue`` (when the spec fuses one): ``act(scale · acc + bias) + residual`` on the
  CUDA cores, applied by the store to each pair of accumulators as it writes them, bias
  and residual read with ``ld.global`` for exactly the elements this thread holds;
- ``store``: ``acc`` to C (the skeleton's epilogue).

Roles, rings, turns, the tile loop and the epilogue's staging are the skeleton's
(:mod:`codegen.pipeline`), read from the sProgram.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from codegen.artifact import TensorMapArg
from codegen.cuda import activations, convert, swizzle
from codegen.pipeline import (
    Code,
    GridAxis,
    Issue,
    OperandTile,
    OperatorHooks,
    OutputTile,
    TripAt,
)
from codegen.targets import Mma, MmaPart, Target
from scheduler_search.ops import DTYPE_BYTES
from scheduler_search.ops.gemm import FP8_DTYPES, GemmEpilogue

#: The input types GEMM lowers, with their sizes (``DTYPE_BYTES``, their one home).
ELEMENT_BYTES = {d: DTYPE_BYTES[d] for d in ("float16", "bfloat16", "float8_e4m3",
                                            "float8_e5m2")}
#: Bytes of a 128-byte swizzle atom (8 rows): every stage of a ring starts on one.
SWIZZLE_ATOM_BYTES = 1024
#: Registers a consumer thread needs for a fused epilogue, beyond a plain store's: the
#: pair and what it loads, the bias, the residual's row pointer, each activation's
#: temporaries. Counted only above ``EPILOGUE_FREE_ACC_REGS`` accumulators a thread:
#: fitted to ptxas 13.0 on Hopper over sampled 4096^3 schedules with bias + GELU +
#: residual (2026-12-01), where every tile of at most 128 accumulators a thread compiled
#: without spills and tiles of 192 spilled 144-248 bytes within 24-31 registers of cap.
#: Those kernels had at most ``EPILOGUE_FREE_THREADS`` threads (a cap of 168 registers) and
#: fewer than ``EPILOGUE_FREE_ROW_BLOCKS`` MMA row blocks a thread; a 512-thread kernel
#: (cap 128) with 96 accumulators and one of four row blocks (256 x 64, 128 accumulators, at
#: 255 registers) spilled 8 and 16-24 bytes with bias + GELU (2026-12-02), so there the
#: epilogue's registers always count, once per row block a thread holds (ptxas keeps a
#: row block's loads and row pointers live across the pairs). At exactly 128 accumulators
#: in two row blocks they count too: with bias + GELU + residual, 256 x 128 over two
#: consumers (384 threads) spilled 8 bytes and 128 x 128 on one consumer 0-4 bytes
#: (4096^3, 2026-12-02), where 128 in one row block (the 128 x 256 design) spilled none.
EPILOGUE_REGS = {"pair": 8, "bias": 4, "residual": 16,
                 "none": 0, "relu": 0, "gelu": 24, "gelu_tanh": 12, "silu": 8}
EPILOGUE_FREE_ACC_REGS = 128
EPILOGUE_FREE_THREADS = 384
EPILOGUE_FREE_ROW_BLOCKS = 4

def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class GemmHooks(OperatorHooks):
    """GEMM's tiles, loads, MMA and output on the skeleton."""

    trips = "K_ITERS"
    cluster_axes = ("m", "n")
    shares_reduction = True
    runtime_capable = ("m",)

    @property
    def swap(self) -> bool:
        """Whether the tensor cores compute Cᵀ = B Aᵀ (``SProgram.swap_ab``): B's tile is
        the MMA's A (n along M, the consumers' rows), A's tile its B (m along N)."""
        return self.sprogram.swap_ab

    @property
    def mma_n(self) -> int:
        """The MMA's N: the tile along n, or along m when swapped."""
        return self.tile_m if self.swap else self.tile_n

    @property
    def runtime_m(self) -> bool:
        """Whether m is a kernel argument (one kernel for every m of a range)."""
        return "m" in self.runtime_dims

    # ----- problem and tile ----------------------------------------------------------
    @property
    def m(self) -> int:
        return int(self.params["m"])

    @property
    def n(self) -> int:
        return int(self.params["n"])

    @property
    def k(self) -> int:
        return int(self.params["k"])

    @property
    def b_layout(self) -> str:
        return str(self.params.get("b_layout", "kn"))

    @cached_property
    def epilogue(self) -> GemmEpilogue:
        return GemmEpilogue.model_validate(self.params.get("epilogue") or {})

    @property
    def fp8(self) -> bool:
        return self.dtype in FP8_DTYPES

    @property
    def c_dtype(self) -> str:
        """The output's element type (bf16 by default for 8-bit inputs)."""
        out = self.params.get("out_dtype")
        return str(out) if out else ("bfloat16" if self.fp8 else self.dtype)

    @property
    def element_stasks(self) -> frozenset[str]:
        return frozenset({"epilogue"}) if self.fp8 or self.epilogue.fused else frozenset()

    def pointer_inputs(self) -> tuple[str, ...]:
        scales = ("scale_a", "scale_b") if self.fp8 else ()
        return scales + tuple(n for n in ("bias", "residual") if getattr(self.epilogue, n))

    @property
    def elem(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    @property
    def tile_m(self) -> int:
        return self.sprogram.tile["m"]

    @property
    def tile_n(self) -> int:
        return self.sprogram.tile["n"]

    @property
    def tile_k(self) -> int:
        return self.sprogram.tile["k"]

    @property
    def trip_count(self) -> int:
        return _ceil_div(self.k, self.tile_k)

    @property
    def k_steps(self) -> int:
        return self.tile_k // self.target.k_step(self.dtype)

    @property
    def tail_k_steps(self) -> int:
        """MMA k-steps the last trip needs: where K is not a multiple of tile_k, the
        steps wholly past K (zero-filled by TMA) are not issued (K = 2000 in 64-wide
        tiles: 1 of the last trip's 4)."""
        left = self.k - (self.trip_count - 1) * self.tile_k
        return _ceil_div(left, self.target.k_step(self.dtype))

    @property
    def trims_tail(self) -> bool:
        """Whether the last trip skips its k-steps past K. Not for pingpong consumers, nor
        for overlapped loops without a producer warp, nor with stream-K (whose last trip
        of a tile is a run-time one): there ptxas 13.0 serialises every MMA of the
        kernel over the early exit (C7520, "WG.AR in divergent path"), which costs more
        than the skipped steps save."""
        s = self.structure
        return (self.tail_k_steps < self.k_steps and not s.pingpong
                and (s.warp_specialized or self.sprogram.order == "serial")
                and self.sprogram.stream_k is None)

    #: The last m and n tiles end at the matrix's edge (see ``GridAxis.last_inside``):
    #: an output element depends on its own row of A and column of B only.
    last_tile_inside = True

    @property
    def pulls_last_tile_back(self) -> bool:
        """Whether the last m and n tiles end at the edge. Not with stream-K: there the
        pulled-back tile and the one before it sum a shared element's k in different
        parts (one of them a stream-K tile, its trips split among blocks), so the two
        blocks write it with bits one rounding apart, and whichever stores last wins: on
        an H200 (2026-12-03, 4000 x 6000 x 2000 bf16) every stream-K design gave other
        bits on 65-200 of 200 calls, and none did with its last tiles zero-filled
        (bench/results/stream-k-determinism-2026-12-03.json)."""
        return self.last_tile_inside and self.sprogram.stream_k is None

    @property
    def grid_axes(self) -> tuple[GridAxis, ...]:
        inside = self.pulls_last_tile_back
        return (GridAxis("m", self.m, self.tile_m, runtime_extent="M" if self.runtime_m else "",
                         last_inside=inside),
                GridAxis("n", self.n, self.tile_n, last_inside=inside))

    # ----- operands and output -------------------------------------------------------
    @cached_property
    def a(self) -> OperandTile:
        return OperandTile("a", "k", self.tile_m, self.tile_k,
                           swizzle.widest(self.tile_k * self.elem), self.elem,
                           self.target.k_step(self.dtype), self.target.mma_rows,
                           self.multicast_slices("load_a"))

    @cached_property
    def b(self) -> OperandTile:
        if self.b_layout == "nk":
            return OperandTile("b", "k", self.tile_n, self.tile_k,
                               swizzle.widest(self.tile_k * self.elem), self.elem,
                               self.target.k_step(self.dtype), self.target.mma_rows,
                               self.multicast_slices("load_b"))
        # MN-major B: boxes of the widest swizzle span that divides the tile's N (64
        # columns of 16-bit values; the space keeps to those, see tile_problem).
        return OperandTile("b", "mn", self.tile_n, self.tile_k,
                           swizzle.widest(self.tile_n * self.elem), self.elem,
                           self.target.k_step(self.dtype), self.target.mma_rows,
                           slices=self.multicast_slices("load_b"))

    def operand(self, stask: str) -> OperandTile:
        return {"load_a": self.a, "load_b": self.b}[stask]

    def tensor_map(self, stask: str) -> str:
        return {"load_a": "a_map", "load_b": "b_map"}[stask]

    def output(self) -> OutputTile:
        if self.swap:  # the fragment is Cᵀ: rows along n, columns along m
            return OutputTile(
                tensor="c", dtype=self.c_dtype, elem_bytes=ELEMENT_BYTES[self.c_dtype],
                rows=self.tile_n, cols=self.tile_m, global_rows=self.n, global_cols=self.m,
                fragment="acc", row_origin="n0", col_origin="m0", extent_names=("N", "M"),
                transposed=True, runtime_cols=self.runtime_m,
            )
        return OutputTile(
            tensor="c", dtype=self.c_dtype, elem_bytes=ELEMENT_BYTES[self.c_dtype],
            rows=self.tile_m,
            cols=self.tile_n, global_rows=self.m, global_cols=self.n, fragment="acc",
            row_origin="m0", col_origin="n0", extent_names=("M", "N"),
            runtime_rows=self.runtime_m,
        )

    def accumulator_regs(self, consumer_rows: int) -> int:
        blocks = self.row_blocks(consumer_rows)
        acc = blocks * self.mma_n // 2
        e = self.epilogue
        free = ((acc < EPILOGUE_FREE_ACC_REGS or (acc == EPILOGUE_FREE_ACC_REGS and blocks == 1))
                and self.structure.threads <= EPILOGUE_FREE_THREADS
                and blocks < EPILOGUE_FREE_ROW_BLOCKS)
        if not e.fused or free:
            return acc
        per_row_block = (EPILOGUE_REGS["pair"] + EPILOGUE_REGS[e.act]
                         + sum(EPILOGUE_REGS[name] for name in ("bias", "residual")
                               if getattr(e, name)))
        return acc + per_row_block * blocks

    def problem(self) -> str | None:
        return (self.tile_problem(self.params, self.sprogram.tile, self.target)
                or self._swap_problem()
                or self._stage_problem())

    def _stage_problem(self) -> str | None:
        """Each operand's stage starts on a 1024-byte swizzle atom: a swapped 8-token tile
        with 32-deep k steps (512 bytes of tokens) does not, and failed to compile."""
        for t in (self.a, self.b):
            if t.stage_bytes % SWIZZLE_ATOM_BYTES:
                return (f"{t.const}'s stage of {t.stage_bytes} B is not whole "
                        f"{SWIZZLE_ATOM_BYTES} B swizzle atoms (tile_k={self.tile_k})")
        return None

    def _swap_problem(self) -> str | None:
        """Swapped, B's tile is the MMA's A: K-major (``nk``), or MN-major (``kn``, 16-bit
        inputs: the instruction transposes it) in 64-column boxes; the transposed fragment is
        stored element by element with st.global, or staged transposed for a TMA store
        (``PipelineLayout`` says where that cannot be), with no fused epilogue (8-bit
        inputs' dequantising scale, which reads no position, is applied on the way)."""
        if not self.swap:
            return None
        if problem := self.b.rows_problem():
            return f"swap_ab reads B's tile as the MMA's A: {problem}"
        if self.epilogue.fused:
            return "swap_ab stores the output transposed, without a fused epilogue"
        step, widest = self.target.mma_n_step, self.target.mma_n_max
        if self.tile_m % step or self.tile_m > widest:
            return (f"swap_ab: tile_m={self.tile_m} is the MMA's N (a multiple of {step}, "
                    f"<= {widest})")
        if self.structure.cluster_size > 1:
            # On an H200 (2026-12-04, 224 swapped variants at 128 x 7168 x 8192, 256 x 4096
            # x 4096 and 16 x 4096 x 4096) clusters of 2 along m or n with 32-deep k steps,
            # non-persistent, overlapped, gave wrong sums (relative error 0.02-0.07) on 10
            # of 20 kernels; no swapped cluster led any decode grid.
            return "swap_ab runs without a cluster (wrong sums measured with some)"
        return None

    @classmethod
    def tile_problem(cls, params: dict[str, Any], tile: dict[str, int],
                     target: Target) -> str | None:
        dtype, b_layout = str(params["dtype"]), str(params.get("b_layout", "kn"))
        tile_n, tile_k = tile["n"], tile["k"]
        if dtype not in ELEMENT_BYTES:
            return f"dtype {dtype}"
        if tile_k % 32:
            return f"tile_k={tile_k}: K boxes are 32 or 64 elements wide"
        if dtype in FP8_DTYPES and (b_layout != "nk" or tile_k * ELEMENT_BYTES[dtype] < 64):
            return (f"{dtype}: B K-major (b_layout nk) and K tiles of at least 64 bytes "
                    f"(tile_k={tile_k})")
        if b_layout == "kn" and tile_n % 64:
            # MN-major B in 32- or 16-column boxes is correct but slow: on an H200
            # (2026-12-02) 4000x6000x2000 kn at 192x240 took 184 us, 146 us with B n x k.
            return (f"b_layout=kn needs tile_n % 64 == 0 (tile_n={tile_n}): B k x n in "
                    "narrower swizzle spans loses to 128-byte boxes")
        if tile_n % 16 or tile_n > target.mma_n_max:
            return f"tile_n={tile_n}: the MMA's N in 16-column steps up to {target.mma_n_max}"
        return None

    def header(self) -> str:
        fused = f", epilogue {self.epilogue.describe()}" if self.epilogue.fused else ""
        m = "M (a kernel argument)" if self.runtime_m else self.m
        swap = ", swap_ab (C^T = B A^T on the tensor cores)" if self.swap else ""
        return (f"gemm m={m} n={self.n} k={self.k} {self.dtype} b_layout={self.b_layout}, "
                f"tile k={self.tile_k}{fused}{swap}")

    # ----- text ----------------------------------------------------------------------
    def constants(self, code: Code, consumer_rows: int) -> None:
        c, a, b = code, self.a, self.b
        if self.runtime_m:
            c.comment("Problem and tile (compile-time but M, a kernel argument).")
            c(f"constexpr int N = {self.n}, K = {self.k};")
        else:
            c.comment("Problem and tile (compile-time: the kernel is specialised to the shape).")
            c(f"constexpr int M = {self.m}, N = {self.n}, K = {self.k};")
        c(f"constexpr int TILE_M = {self.tile_m}, TILE_N = {self.tile_n}, "
          f"TILE_K = {self.tile_k};")
        c(f"constexpr int K_ITERS = {self.trip_count};  // loop trips: tile_k slices of K per "
          "tile (the last one zero-filled past K)")
        mma, rows = self.target.mma_name, self.target.mma_rows
        c(f"constexpr int K_STEPS = {self.k_steps};  // {mma} k{self.target.k_step(self.dtype)} "
          "steps per trip")
        c(f"constexpr int TAIL_K_STEPS = {self.tail_k_steps};  // steps of the last trip "
          "(the rest lie past K)")
        c(f"constexpr int ROW_BLOCKS = {self.row_blocks(consumer_rows)};  // {mma} m{rows} "
          "blocks per consumer")
        c(f"constexpr int ACC_REGS = {self.mma_n // 2};  // fp32 accumulators per thread per "
          "block")
        c("")
        for t, dims in ((a, "K x M"), (b, "K x N" if b.major == "k" else "N x K")):
            c.comment(f"{t.const} stage: {t.box_count} TMA box(es) of {t.box_inner}x"
                      f"{t.box_outer} ({dims}), {t.swizzle.span_bytes}B swizzle; {mma}: "
                      f"{self.target.operand_descriptor(t).describe()}.")
            c(f"constexpr u32 {t.const}_BOX_BYTES = {t.box_bytes}, {t.const}_STAGE_BYTES = "
              f"{t.stage_bytes};")
            layout = self.target.operand_descriptor(t).layout_bits
            c(f"constexpr u64 {t.const}_DESC_LAYOUT = 0x{layout:016x}ull;")
        c(f"static_assert(A_STAGE_BYTES == {a.box_count} * A_BOX_BYTES && "
          f'B_STAGE_BYTES == {b.box_count} * B_BOX_BYTES, "boxes per stage");')
        c("static_assert(K_ITERS * TILE_K >= K, \"the trips cover K\");")
        c(f"static_assert(A_STAGE_BYTES % {SWIZZLE_ATOM_BYTES} == 0 && B_STAGE_BYTES % "
          f'{SWIZZLE_ATOM_BYTES} == 0, "stages start on swizzle-atom boundaries");')
        if self.swap:
            c(f"static_assert(ROW_BLOCKS * {rows} == CONSUMER_ROWS && TILE_M % "
              f"{self.target.mma_n_step} == 0 && TILE_M <= {self.target.mma_n_max}, "
              f'"{mma} m{rows}nNk16 shape, n along M, m along N");')
        else:
            c(f"static_assert(ROW_BLOCKS * {rows} == CONSUMER_ROWS && TILE_N % 16 == 0 && "
              f'TILE_N <= {self.target.mma_n_max}, "{mma} m{rows}nNk16 shape");')
        c("")
        c.comment(f"Offsets of one {mma} k16 step inside a stage.")
        for t in (a, b):
            c(f"__device__ __forceinline__ constexpr u32 {t.name}_kstep_bytes(int kk) {{ "
              f"return {t.kstep_expr()}; }}")
        c("")

    def load(self, code: Code, stask: str, stage_addr: str, trip: str, full_bar: str) -> None:
        t = self.operand(stask)
        row0 = "m0" if t is self.a else "n0"
        t.emit_loads(code, self.tensor_map(stask), row0, f"{trip} * TILE_K", stage_addr,
                     full_bar)

    def consumer_state(self, code: Code) -> None:
        code("float acc[ROW_BLOCKS][ACC_REGS] = {};")

    def pin(self, code: Code, stask: str = "mma") -> None:
        with code.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            self.target.write_fence_operands(code, "acc[mi]")

    def mma(self, code: Code, issue: Issue, stages: Mapping[str, str], at: TripAt) -> None:
        c = code
        # The MMA's A (rows, split among the consumers) and B: swapped, B's tile and A's.
        a, b = (self.b, self.a) if self.swap else (self.a, self.b)
        stage = stages["ab"]
        product = "B_s x A_s^T = C^T" if self.swap else "A_s x B_s"
        c.comment(f"{issue.stask}  stage={stage}: acc[CONSUMER_ROWS x {self.mma_n}] += "
                  f"{product} (ROW_BLOCKS x {self.k_steps} {self.target.mma_name} "
                  f"m{self.target.mma_rows}n{self.mma_n}k16)")
        tail = (f"kk >= TAIL_K_STEPS && {at.index} == K_ITERS - 1" if self.trims_tail
                else None)
        self.target.write_mma(c, Mma(
            n=self.mma_n, dtype=self.dtype, b_major=b.major, a_major=a.major,
            k_steps="K_STEPS", b_layout=f"{b.const}_DESC_LAYOUT",
            a_layout=f"{a.const}_DESC_LAYOUT", accumulate=f"{at.accumulates} || kk > 0",
            parts=(MmaPart("acc[mi]", f"b_stage + {b.name}_kstep_bytes(kk)",
                           a_address=f"a_stage + {a.name}_kstep_bytes(kk) + "
                                     f"mi * {a.row_block_bytes}"),),
            pin=lambda: self.pin(c),
            bases=(f"const u32 a_stage = smem + SMEM_{a.const} + {stage} * "
                   f"{a.const}_STAGE_BYTES + {a.rows_offset('row0')};",
                   f"const u32 b_stage = smem + SMEM_{b.const} + {stage} * "
                   f"{b.const}_STAGE_BYTES;"),
            tail_break=tail))

    def element_math(self, code: Code, stask: str, row: str, col: str) -> None:
        """The fused epilogue on the pair ``v0, v1`` at (``row``, ``col``): bias and
        residual read with ``ld.global`` (L2-resident bias; the residual once). Asking L2
        for the tile's residual rows at the tile's start (``prefetch.global.L2``, every
        consumer thread its rows' lines) made the same kernels 0-3% slower, not faster
        (H200, bias + residual bf16 n x k, 2026-12-04: median over 24 schedules +1.9% on
        4096^3, +2.8% on 8192x4096x14336, -0.3% on 4000x6000x2000)."""
        if stask != "epilogue":
            return super().element_math(code, stask, row, col)
        c, e = code, self.epilogue
        if self.fp8:
            c("v0 *= scale_a[0] * scale_b[0]; v1 *= scale_a[0] * scale_b[0];  // dequantise")
        if e.scale != 1.0:
            c(f"v0 *= {float(e.scale)!r}f; v1 *= {float(e.scale)!r}f;")
        if e.bias:
            self._add_pair(c, "bias", col)
        act = activations.activation(e.act)
        if act is not None:
            c(f"v0 = {c.call(act, 'v0')}; v1 = {c.call(act, 'v1')};")
        if e.residual:
            # Rows past M read the last row (computed, never stored).
            full_rows = not self.runtime_m and self.m % self.tile_m == 0
            safe_row = row if full_rows else f"min({row}, M - 1)"
            self._add_pair(c, f"residual + (unsigned long long)({safe_row}) * N", col)

    def _add_pair(self, code: Code, pointer: str, col: str) -> None:
        """``v0, v1 += pointer[col], pointer[col + 1]``: one 4-byte load where N is even
        (the pair is then aligned), else two guarded 2-byte loads; columns past N add 0."""
        c, unpack = code, convert.unpack2(self.c_dtype)
        if self.n % 2 == 0:
            load = c.call(unpack, f"*reinterpret_cast<const u32*>({pointer} + {col})")
            if self.n % self.tile_n:
                load = f"({col} < N ? {load} : make_float2(0.0f, 0.0f))"
            with c.block(""):
                c(f"const float2 add = {load};")
                c("v0 += add.x; v1 += add.y;")
            return
        one = c.call(unpack, f"(u32)({pointer})[{{i}}]") + ".x"
        c(f"if ({col} < N) v0 += {one.format(i=col)};")
        c(f"if ({col} + 1 < N) v1 += {one.format(i=f'{col} + 1')};")

    def tensor_maps(self) -> tuple[TensorMapArg, ...]:
        a, b = self.a, self.b
        b_dims = (self.k, self.n) if self.b_layout == "nk" else (self.n, self.k)
        return (
            TensorMapArg(name="a_map", tensor="a", dtype=self.dtype,
                         global_dims=(self.k, self.m), global_strides_bytes=(self.k * self.elem,),
                         box_dims=(a.box_inner, a.slice_outer),
                         swizzle=a.swizzle.tma),  # type: ignore[arg-type]
            TensorMapArg(name="b_map", tensor="b", dtype=self.dtype, global_dims=b_dims,
                         global_strides_bytes=(b_dims[0] * self.elem,),
                         box_dims=(b.box_inner, b.slice_outer),
                         swizzle=b.swizzle.tma),  # type: ignore[arg-type]
        )


#: Bumped whenever GEMM's own text changes for the same schedule.
GEMM_HOOKS_VERSION = "gemm-5"

__all__ = ["ELEMENT_BYTES", "GEMM_HOOKS_VERSION", "GemmHooks"]
