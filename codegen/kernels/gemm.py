"""The GEMM emitter: a GEMM sProgram to one warp-specialised TMA + wgmma kernel.

``C[m, n] = A[m, k] @ B`` with fp32 accumulation; A is row-major (K-major), B is K x N
(``kn``: MN-major for wgmma, read with the transpose bit) or N x K (``nk``: K-major).
The kernel is specialised to the shape: m, n, k are compile-time constants.

How the sProgram maps onto the kernel:

- sTasks: ``load_a`` / ``load_b`` -> TMA tiled loads (128-byte swizzle, 64 for a 32-wide
  K tile); ``mma`` -> wgmma m64nNk16 per 64 rows a consumer warpgroup owns, N = tile_n;
  ``store`` -> registers -> stmatrix into swizzled shared memory -> TMA store (``tma``),
  or st.global from registers (``cuda_core``).
- barriers: ``ab_full`` / ``ab_empty`` -> mbarrier rings of ``stages`` slots (TMA
  completes ``ab_full``, every consumer warp releases ``ab_empty``); ``mma_inflight`` ->
  ``wgmma.wait_group 1`` (order ``overlap``: one group stays in flight and the previous
  stage is released); ``tc_turn_*`` -> named barriers handing the tensor cores from one
  consumer warpgroup to the next (``wg_schedule=alternate``).
- warp roles: warp-specialised kernels have a producer warpgroup (its first warp issues
  every load, all four give registers back with setmaxnreg) and 1-3 consumer warpgroups;
  otherwise every warpgroup computes and thread 0 issues the loads ``stages`` ahead.
- ``consumer_split``: ``cooperative`` warpgroups split one tile's rows; ``pingpong``
  warpgroups own consecutive tiles of the raster order (a *unit* of tiles per block).
- ``raster``: tiles are visited along ``major`` in bands of ``swizzle`` tiles of the
  other axis (the cost model's order); ``persistent`` blocks stride over units, one block
  per SM; otherwise one unit per block.

Every derived number (boxes, transaction bytes, shared-memory offsets, descriptor bits,
swizzles) is computed once in :class:`GemmPlan` and used both in the kernel text and in
the artifact's tensor maps.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from codegen.artifact import KernelArg, KernelArtifact, TensorArg, TensorMapArg
from codegen.cuda import SmemMatrix, Swizzle, convert, swizzle, wgmma
from codegen.cuda.mbarrier import MBARRIER_BYTES
from codegen.cuda.tma import BOX_DIM_MAX
from codegen.kernels._code import Code
from scheduler_search.hardware.model import Device, UnitKind
from scheduler_search.sprogram import SProgram

#: Bumped whenever generated text changes for the same schedule.
GEMM_CODEGEN_VERSION = "gemm-1"

WARPGROUP = 128
WARP = 32
#: Dynamic shared memory is rounded up to this boundary inside the kernel (128B swizzle
#: atoms are 1024 B); the launch asks for this much more than the layout.
SMEM_ALIGN = 1024
REGISTER_FILE = 65536
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2}
#: Registers a consumer thread needs besides its accumulators (addresses, loop state,
#: barrier phases, descriptors, epilogue packing). Calibrated on an H200 with NVRTC 13
#: (CuPy 14.2): 224 accumulators in a 256-thread kernel (cap 248) spilled 912 B, so 24
#: is too few; 32 keeps every sampled schedule spill-free.
CONSUMER_OVERHEAD_REGS = 32

# Named barrier ids (0 is __syncthreads).
BAR_CONSUMERS = 1
BAR_EPILOGUE0 = 2


class Unsupported(ValueError):
    """The schedule is valid but this renderer cannot generate it (kept out of the space)."""


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _align(value: int, to: int) -> int:
    return _ceil_div(value, to) * to


@dataclass(frozen=True)
class OperandTile:
    """One pipelined operand tile in shared memory, loaded by TMA in ``boxes`` boxes.

    ``rows`` is its M (A) or N (B) extent, ``cols`` its K extent. A K-major tile is cut
    along K into boxes one swizzle span wide; an MN-major tile (B stored K x N) along N.
    """

    name: str
    major: str
    rows: int
    cols: int
    swizzle: Swizzle
    elem_bytes: int

    @property
    def box_inner(self) -> int:
        """Elements along the contiguous dimension of one box (one swizzle span)."""
        return self.swizzle.span_bytes // self.elem_bytes

    @property
    def box_outer(self) -> int:
        return self.rows if self.major == "k" else self.cols

    @property
    def box_count(self) -> int:
        contiguous = self.cols if self.major == "k" else self.rows
        return contiguous // self.box_inner

    @property
    def box_bytes(self) -> int:
        return self.box_inner * self.box_outer * self.elem_bytes

    @property
    def stage_bytes(self) -> int:
        return self.box_count * self.box_bytes

    @property
    def matrix(self) -> SmemMatrix:
        span = self.swizzle.span_bytes
        if self.major == "k":
            # K-major: 8-row groups are 8 swizzled rows apart; LBO unused (PTX: assumed 1).
            return SmemMatrix("k", self.swizzle, lbo_bytes=16, sbo_bytes=8 * span)
        # MN-major: the next 64 columns of N are the next box; 8 rows of K are 8 spans.
        return SmemMatrix("mn", self.swizzle, lbo_bytes=self.box_bytes, sbo_bytes=8 * span)

    def kstep_bytes(self, kk: int) -> int:
        """Offset of K-step ``kk`` (16 elements of K) inside a stage."""
        k0 = kk * wgmma.WGMMA_K
        if self.major == "k":
            return (k0 // self.box_inner) * self.box_bytes + (k0 % self.box_inner) * self.elem_bytes
        return k0 * self.swizzle.span_bytes

    @property
    def row_block_bytes(self) -> int:
        """Offset of the next 64 rows (wgmma M) of a K-major tile."""
        return wgmma.WGMMA_M * self.swizzle.span_bytes


@dataclass(frozen=True)
class GemmPlan:
    """Every number of the kernel, derived once from the sProgram and the device."""

    schedule: Any  # an SProgram, or the Decisions it is emitted from (same fields)
    params: dict[str, Any]
    device: Device

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
    def dtype(self) -> str:
        return str(self.params["dtype"])

    @property
    def b_layout(self) -> str:
        return str(self.params.get("b_layout", "kn"))

    @property
    def elem(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    @property
    def tile_m(self) -> int:
        return self.schedule.tile["m"]

    @property
    def tile_n(self) -> int:
        return self.schedule.tile["n"]

    @property
    def tile_k(self) -> int:
        return self.schedule.tile["k"]

    @property
    def stages(self) -> int:
        return self.schedule.stages["ab"]

    @property
    def k_iters(self) -> int:
        return _ceil_div(self.k, self.tile_k)

    @property
    def k_steps(self) -> int:
        return self.tile_k // wgmma.WGMMA_K

    # ----- roles ---------------------------------------------------------------------
    @property
    def ws(self) -> bool:
        return self.schedule.roles.warp_specialized

    @property
    def consumers(self) -> int:
        return self.schedule.roles.consumer_warpgroups

    @property
    def pingpong(self) -> bool:
        return self.schedule.consumer_split == "pingpong"

    @property
    def owners(self) -> int:
        """Tiles a block's unit holds: one per consumer warpgroup with pingpong."""
        return self.consumers if self.pingpong else 1

    @property
    def consumer_rows(self) -> int:
        return self.tile_m if self.pingpong else self.tile_m // self.consumers

    @property
    def row_blocks(self) -> int:
        return self.consumer_rows // wgmma.WGMMA_M

    @property
    def acc_regs(self) -> int:
        return self.tile_n // 2

    @property
    def threads(self) -> int:
        return self.schedule.roles.threads

    @property
    def alternate(self) -> bool:
        """``tc_turn_*`` named barriers: consumer warpgroups take turns on the tensor cores."""
        return self.schedule.choices.get("wg_schedule") == "alternate" and self.consumers > 1

    @property
    def overlap(self) -> bool:
        """``mma_inflight``: one wgmma group stays in flight (wgmma.wait_group 1)."""
        return self.schedule.order == "overlap"

    @property
    def empty_arrivals(self) -> int:
        """Arrivals that release a stage: every warp of the warpgroups that read it."""
        readers = 1 if self.pingpong else self.consumers
        return readers * (WARPGROUP // WARP)

    # ----- grid ----------------------------------------------------------------------
    @property
    def tiles_m(self) -> int:
        return _ceil_div(self.m, self.tile_m)

    @property
    def tiles_n(self) -> int:
        return _ceil_div(self.n, self.tile_n)

    @property
    def tiles(self) -> int:
        return self.tiles_m * self.tiles_n

    @property
    def units(self) -> int:
        return _ceil_div(self.tiles, self.owners)

    @property
    def grid(self) -> int:
        if self.schedule.persistent:
            return min(self.device.sm_count, self.units)
        return self.units

    # ----- operands ------------------------------------------------------------------
    @cached_property
    def a(self) -> OperandTile:
        return OperandTile(
            "a", "k", self.tile_m, self.tile_k, swizzle.widest(self.tile_k * self.elem), self.elem
        )

    @cached_property
    def b(self) -> OperandTile:
        if self.b_layout == "nk":
            return OperandTile(
                "b", "k", self.tile_n, self.tile_k, swizzle.widest(self.tile_k * self.elem),
                self.elem,
            )
        return OperandTile("b", "mn", self.tile_n, self.tile_k, swizzle.SWIZZLES[128], self.elem)

    @property
    def tx_bytes(self) -> int:
        """Bytes one stage's TMA loads deliver (out-of-bounds zeros count too)."""
        return self.a.stage_bytes + self.b.stage_bytes

    # ----- epilogue ------------------------------------------------------------------
    @property
    def tma_store(self) -> bool:
        return self.schedule.mapping["store"] is UnitKind.TMA

    @property
    def store_cols(self) -> int:
        """Columns of one stored sub-tile: one swizzle span."""
        return 64 if self.tile_n % 64 == 0 else 32

    @property
    def store_swizzle(self) -> Swizzle:
        return swizzle.SWIZZLES[self.store_cols * self.elem]

    @property
    def store_subtiles(self) -> int:
        return self.tile_n // self.store_cols

    @property
    def store_rows(self) -> int:
        """Rows one warpgroup stores (its part of the tile)."""
        return self.consumer_rows

    @property
    def c_slot_bytes(self) -> int:
        """One staged sub-tile of the whole tile (every warpgroup's rows)."""
        return self.tile_m * self.store_cols * self.elem

    @property
    def staging(self) -> str:
        """Where C is staged for the TMA store.

        ``operands``: one tile per block at a time, so the idle operand stages hold the
        whole tile once every consumer is done reading them. ``ring``: blocks that keep
        loading (persistent, pingpong) stage through slots of their own: two, taken in
        turn (cooperative), or one per consumer warpgroup (pingpong).
        """
        if not self.tma_store:
            return "none"
        operands = self.stages * (self.a.stage_bytes + self.b.stage_bytes)
        fits = self.tile_m * self.tile_n * self.elem <= operands
        if not self.schedule.persistent and not self.pingpong and fits:
            return "operands"
        return "ring"

    @property
    def c_slots(self) -> int:
        if self.staging != "ring":
            return 0
        return self.consumers if self.pingpong else 2

    # ----- shared memory layout ------------------------------------------------------
    @cached_property
    def smem(self) -> dict[str, int]:
        """Byte offsets from the 1024-aligned base, and the total."""
        layout: dict[str, int] = {}
        offset = 0
        layout["A"] = offset
        offset += _align(self.stages * self.a.stage_bytes, SMEM_ALIGN)
        layout["B"] = offset
        offset += _align(self.stages * self.b.stage_bytes, SMEM_ALIGN)
        layout["C"] = 0 if self.staging == "operands" else offset
        offset += _align(self.c_slots * self.c_slot_bytes, SMEM_ALIGN)
        layout["AB_FULL"] = offset
        offset += self.stages * MBARRIER_BYTES
        layout["AB_EMPTY"] = offset
        offset += self.stages * MBARRIER_BYTES
        layout["BYTES"] = _align(offset, 16)
        return layout

    @property
    def dynamic_smem_bytes(self) -> int:
        return self.smem["BYTES"] + SMEM_ALIGN

    # ----- named barriers ------------------------------------------------------------
    @property
    def bar_turn0(self) -> int:
        return BAR_EPILOGUE0 + self.consumers

    # ----- what this renderer cannot do ----------------------------------------------
    def unsupported(self) -> str | None:
        """Why this schedule cannot be generated, or None."""
        sp = self.schedule
        if self.dtype not in ELEMENT_BYTES:
            return f"dtype {self.dtype}"
        loads = (sp.mapping.get("load_a"), sp.mapping.get("load_b"))
        if loads != (UnitKind.TMA, UnitKind.TMA):
            return "operand loads must be TMA"
        if sp.mapping.get("mma") is not UnitKind.TENSOR_CORE:
            return "mma must run on the tensor cores (wgmma)"
        if self.tile_k % 32:
            return f"tile_k={self.tile_k}: K boxes are 32 or 64 elements wide"
        if self.b_layout == "kn" and self.tile_n % 64:
            # MN-major B: a 128B-swizzle atom spans 64 columns of N.
            return f"b_layout=kn needs tile_n % 64 == 0 (tile_n={self.tile_n})"
        if self.consumer_rows % wgmma.WGMMA_M or self.tile_n % 16 or self.tile_n > 256:
            return "wgmma shape"
        if self.overlap and self.stages < 2:
            # The stage of the wgmma left in flight is the only slot: the next load waits
            # for its release, which comes after the next wgmma: a deadlock.
            return "order=overlap needs stages_ab >= 2"
        if self.pingpong and not self.ws:
            return "pingpong needs warp specialisation"
        if self.pingpong and not self.alternate:
            # A later owner would wait on ab_full phases two or more passes of the ring
            # ahead, which a parity wait cannot tell from the current one (it passes early:
            # hangs and faults seen on an H200). Taking turns bounds the lead to one pass.
            return "pingpong needs wg_schedule=alternate"
        if max(self.a.box_outer, self.b.box_outer, self.store_rows) > BOX_DIM_MAX:
            return "TMA box over 256 rows"
        limit = self.device.smem_per_block_bytes
        if self.dynamic_smem_bytes > limit:
            return f"{self.dynamic_smem_bytes} B of shared memory (with alignment) > {limit} B"
        if self.ws:
            roles = sp.roles
            total = WARPGROUP * (roles.producer_regs + self.consumers * roles.consumer_regs)
            if total > REGISTER_FILE:
                return f"{total} registers per block"
        need = self.row_blocks * self.acc_regs + CONSUMER_OVERHEAD_REGS
        if need > self.register_cap:
            return (f"{need} registers per consumer thread > {self.register_cap}, what ptxas "
                    f"may allocate for {self.threads} threads")
        return None

    @property
    def register_cap(self) -> int:
        """Registers per thread ptxas compiles the whole kernel with.

        ``__launch_bounds__(threads, 1)`` caps every thread at the register file over the
        block's threads; setmaxnreg moves registers between warpgroups at run time, but
        ptxas allocates the consumer code within the entry cap (nvcc 13.0: a 512-thread
        kernel with a 128-register wgmma accumulator fails with C7602 "Insufficient
        registers (128)").
        """
        per_thread = min(self.device.regs_per_thread_max, REGISTER_FILE // self.threads)
        return per_thread // 8 * 8


class GemmEmitter:
    """Writes the kernel of one :class:`GemmPlan`."""

    def __init__(self, plan: GemmPlan, sprogram: SProgram) -> None:
        self.p = plan
        self.sprogram = sprogram
        self.code = Code()
        self.entry = f"pipetune_gemm_{sprogram.hash[:16]}"
        self.mma = wgmma.mma(plan.tile_n, plan.dtype, plan.b.major)
        self.pack = convert.pack2(plan.dtype)

    # ----- the whole source ----------------------------------------------------------
    def source(self) -> str:
        c = self.code
        self._constants()
        self._tile_origin()
        self._load_stage()
        self._kernel()
        body = c.text()
        from codegen.cuda import prelude

        return self._header() + "\n" + prelude(c.uses) + "\n" + body

    def _header(self) -> str:
        p, sp = self.p, self.sprogram
        lines = [
            f"// pipetune {GEMM_CODEGEN_VERSION}: gemm m={p.m} n={p.n} k={p.k} {p.dtype} "
            f"b_layout={p.b_layout}",
            f"// schedule {sp.hash}",
            f"// tile {p.tile_m}x{p.tile_n}x{p.tile_k}, stages ab={p.stages}, order {sp.order}, "
            f"{sp.consumer_split}, raster {sp.raster.major}/{sp.raster.swizzle}, "
            + ("persistent" if sp.persistent else "one unit per block"),
            "// warp roles: "
            + (
                f"producer warpgroup (1 TMA warp, {sp.roles.producer_regs} regs) + "
                if p.ws
                else "no producer (thread 0 loads ahead) + "
            )
            + f"{p.consumers} consumer warpgroup(s) ({sp.roles.consumer_regs} regs)",
        ]
        roles = ["producer", *sp.roles.consumer_roles] if p.ws else list(sp.roles.consumer_roles)
        for role in roles:
            stream = " -> ".join(f"{op.stask}@{unit.value}" for unit, op in sp.role_stream(role))
            lines.append(f"//   {role}: {stream}")
        for barrier in sp.barriers:
            deps = ", ".join(f"{d}-{dist}" if dist else d for d, dist in barrier.deps)
            lines.append(
                f"//   barrier {barrier.name} ({barrier.kind}, {barrier.slots} slot(s)): "
                f"{barrier.waiter} waits for {deps}"
            )
        return "\n".join(lines) + "\n"

    # ----- constants -----------------------------------------------------------------
    def _constants(self) -> None:
        c, p = self.code, self.p
        c.use("types")
        a, b = p.a, p.b
        c.comment("Problem and tile (compile-time: the kernel is specialised to the shape).")
        c(f"constexpr int M = {p.m}, N = {p.n}, K = {p.k};")
        c(f"constexpr int TILE_M = {p.tile_m}, TILE_N = {p.tile_n}, TILE_K = {p.tile_k};")
        c(f"constexpr int TILES_M = {p.tiles_m}, TILES_N = {p.tiles_n}, TILES = {p.tiles};")
        c(f"constexpr int K_ITERS = {p.k_iters};  // stages of K per tile (the last one "
          "zero-filled past K)")
        c(f"constexpr int K_STEPS = {p.k_steps};  // wgmma k16 steps per stage")
        c(f"constexpr int STAGES = {p.stages};  // ab ring depth")
        c(f"constexpr int CONSUMERS = {p.consumers};  // consumer warpgroups")
        c(f"constexpr int OWNERS = {p.owners};  // tiles per unit (pingpong: one per consumer)")
        c(f"constexpr int UNITS = {p.units};")
        c(f"constexpr int CONSUMER_ROWS = {p.consumer_rows};  // tile rows one consumer owns")
        c(f"constexpr int ROW_BLOCKS = {p.row_blocks};  // wgmma m64 blocks per consumer")
        c(f"constexpr int ACC_REGS = {p.acc_regs};  // fp32 accumulators per thread per block")
        c("")
        c.comment(f"A stage: {a.box_count} TMA box(es) of {a.box_inner}x{a.box_outer} "
                  f"(K x M), {a.swizzle.span_bytes}B swizzle; wgmma: {a.matrix.describe()}.")
        c(f"constexpr u32 A_BOX_BYTES = {a.box_bytes}, A_STAGE_BYTES = {a.stage_bytes};")
        c(f"constexpr u64 A_DESC_LAYOUT = 0x{a.matrix.layout_bits:016x}ull;")
        b_dims = "K x N" if b.major == "k" else "N x K"
        c.comment(f"B stage: {b.box_count} TMA box(es) of {b.box_inner}x{b.box_outer} "
                  f"({b_dims}), {b.swizzle.span_bytes}B swizzle; wgmma: {b.matrix.describe()}.")
        c(f"constexpr u32 B_BOX_BYTES = {b.box_bytes}, B_STAGE_BYTES = {b.stage_bytes};")
        c(f"constexpr u64 B_DESC_LAYOUT = 0x{b.matrix.layout_bits:016x}ull;")
        c(f"constexpr u32 AB_TX_BYTES = {p.tx_bytes};  // load_a + load_b bytes of one stage")
        c("")
        c.comment("Shared memory, from the 1024-byte aligned base.")
        s = p.smem
        c(f"constexpr u32 SMEM_A = {s['A']}, SMEM_B = {s['B']};")
        if p.tma_store:
            c(f"constexpr u32 SMEM_C = {s['C']};  // C staging ({p.staging})")
        c(f"constexpr u32 SMEM_AB_FULL = {s['AB_FULL']}, SMEM_AB_EMPTY = {s['AB_EMPTY']};")
        c(f"constexpr u32 SMEM_BYTES = {s['BYTES']};")
        if p.tma_store:
            c(f"constexpr int STORE_COLS = {p.store_cols}, STORE_SUBTILES = {p.store_subtiles};"
              f"  // C staged in {p.store_cols}-column sub-tiles ({p.staging})")
            c(f"constexpr u32 C_ROW_BYTES = {p.store_cols * p.elem}, "
              f"C_SLOT_BYTES = {p.c_slot_bytes};")
        c("")
        c(f"static_assert(SMEM_BYTES + {SMEM_ALIGN} <= {p.device.smem_per_block_bytes}, "
          '"shared memory budget (with alignment slack)");')
        c('static_assert(AB_TX_BYTES == A_STAGE_BYTES + B_STAGE_BYTES, "stage bytes");')
        c(f"static_assert(A_STAGE_BYTES == {a.box_count} * A_BOX_BYTES && "
          f'B_STAGE_BYTES == {b.box_count} * B_BOX_BYTES, "boxes per stage");')
        c("static_assert(K_ITERS * TILE_K >= K && TILES_M * TILE_M >= M && TILES_N * TILE_N >= N, "
          '"the tiles cover the problem");')
        c('static_assert(UNITS * OWNERS >= TILES && CONSUMER_ROWS * (OWNERS > 1 ? 1 : CONSUMERS) '
          '== TILE_M, "units and rows cover the tiles");')
        c('static_assert(A_STAGE_BYTES % 1024 == 0 && B_STAGE_BYTES % 1024 == 0, '
          '"stages start on swizzle-atom boundaries");')
        c('static_assert(CONSUMER_ROWS % 64 == 0 && TILE_N % 16 == 0 && TILE_N <= 256, '
          '"wgmma m64nNk16 shape");')
        if p.ws:
            roles = self.sprogram.roles
            c(f"constexpr int PRODUCER_REGS = {roles.producer_regs}, "
              f"CONSUMER_REGS = {roles.consumer_regs};  // setmaxnreg")
            c(f"static_assert(128 * (PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) <= "
              f'{REGISTER_FILE}, "register file");')
        c("")
        c.comment("Offsets of one wgmma k16 step inside a stage.")
        c(f"__device__ __forceinline__ constexpr u32 a_kstep_bytes(int kk) {{ return "
          f"{self._kstep_expr(a)}; }}")
        c(f"__device__ __forceinline__ constexpr u32 b_kstep_bytes(int kk) {{ return "
          f"{self._kstep_expr(b)}; }}")
        c("")

    @staticmethod
    def _kstep_expr(t: OperandTile) -> str:
        if t.major == "k":
            return (f"(kk * 16 / {t.box_inner}) * {t.name.upper()}_BOX_BYTES + "
                    f"(kk * 16 % {t.box_inner}) * {t.elem_bytes}")
        return f"kk * 16 * {t.swizzle.span_bytes}"

    # ----- raster ------------------------------------------------------------------
    def _tile_origin(self) -> None:
        c = self.code
        raster = self.sprogram.raster
        major, minor = ("M", "N") if raster.major == "m" else ("N", "M")
        c.comment(f"Raster: tiles along {raster.major} first, in bands of {raster.swizzle} "
                  f"tile(s) along the other axis (L2 reuse between concurrent tiles).")
        with c.block("__device__ __forceinline__ void tile_origin(int tile, int& m0, int& n0)"):
            c(f"constexpr int BAND = {raster.swizzle};")
            c(f"const int band = tile / (BAND * TILES_{major});")
            c(f"const int in_band = tile % (BAND * TILES_{major});")
            c(f"const int width = TILES_{minor} - band * BAND < BAND ? "
              f"TILES_{minor} - band * BAND : BAND;")
            c(f"const int t_{major.lower()} = in_band / width;")
            c(f"const int t_{minor.lower()} = band * BAND + in_band % width;")
            c("m0 = t_m * TILE_M;")
            c("n0 = t_n * TILE_N;")
        c("")

    # ----- one stage of the ab stream (the loader's work) -----------------------------
    def _load_stage(self) -> None:
        c, p = self.code, self.p
        c.comment("One stage of the ab stream: wait for the slot, then load_a and load_b into "
                  "it.")
        head = ("__device__ __forceinline__ void load_stage(int stage, u32 empty_parity, int m0, "
                "int n0, int k0, u32 smem, const TensorMap* a_map, const TensorMap* b_map)")
        with c.block(head):
            c("const u32 full = smem + SMEM_AB_FULL + 8 * stage;")
            c.comment("ab_empty[stage]: the consumers released the slot (the mma STAGES loads ago)")
            c(c.call("mbarrier_wait", "smem + SMEM_AB_EMPTY + 8 * stage", "empty_parity") + ";")
            c(c.call("mbarrier_arrive_expect_tx", "full", "AB_TX_BYTES") + ";")
            for t in (p.a, p.b):
                self._emit_load(t)
        c("")

    def _emit_load(self, t: OperandTile) -> None:
        c = self.code
        what = (f"{t.name.upper()}[{'m0' if t.name == 'a' else 'n0'} +: {t.rows}, k0 +: {t.cols}]")
        c.comment(f"load_{t.name}  stage=stage: {what} via TMA, {t.box_count} box(es)")
        base = "SMEM_A" if t.name == "a" else "SMEM_B"
        stage_bytes = f"{t.name.upper()}_STAGE_BYTES"
        for box in range(t.box_count):
            dst = f"smem + {base} + stage * {stage_bytes} + {box * t.box_bytes}"
            if t.major == "k":
                row0 = "m0" if t.name == "a" else "n0"
                coords = (f"k0 + {box * t.box_inner}", row0)
            else:
                coords = (f"n0 + {box * t.box_inner}", "k0")
            c(c.call("tma_load_2d", dst, f"{t.name}_map", *coords, "full") + ";")

    # ----- the kernel ----------------------------------------------------------------
    def _kernel(self) -> None:
        c, p = self.code, self.p
        params = [
            "const __grid_constant__ TensorMap a_map",
            "const __grid_constant__ TensorMap b_map",
        ]
        if p.tma_store:
            params.append("const __grid_constant__ TensorMap c_map")
        else:
            params.append("unsigned short* __restrict__ c")
        c(f'extern "C" __global__ void __launch_bounds__({p.threads}, 1)')
        with c.block(f"{self.entry}({', '.join(params)})"):
            c("extern __shared__ __align__(1024) unsigned char smem_raw[];")
            c(f"const u32 smem = ({c.call('smem_u32', 'smem_raw')} + 1023u) & ~1023u;")
            c(f"const int warpgroup = threadIdx.x / {WARPGROUP};")
            c(f"const int warp = (threadIdx.x / {WARP}) % 4, lane = threadIdx.x % {WARP};")
            c("")
            c.comment(f"ab_full[s]: 1 arrival (+ TMA bytes); ab_empty[s]: {p.empty_arrivals} "
                      "arrivals (one per reading consumer warp).")
            with c.block("if (threadIdx.x == 0)"):
                with c.block("for (int s = 0; s < STAGES; ++s)"):
                    c(c.call("mbarrier_init", "smem + SMEM_AB_FULL + 8 * s", 1) + ";")
                    c(c.call("mbarrier_init", "smem + SMEM_AB_EMPTY + 8 * s",
                             p.empty_arrivals) + ";")
                c(c.call("mbarrier_init_fence") + ";")
            c("__syncthreads();")
            c("")
            if p.ws:
                with c.block("if (warpgroup == 0)"):
                    self._producer()
                with c.block("else"):
                    c(c.call("setmaxnreg_inc<CONSUMER_REGS>") + ";")
                    c("const int consumer = warpgroup - 1;")
                    self._consumer()
            else:
                c("const int consumer = warpgroup;")
                self._consumer()
        c("")

    @contextmanager
    def _units(self) -> Iterator[None]:
        """The block's units: strided over the grid (persistent) or just its own."""
        c = self.code
        if self.sprogram.persistent:
            with c.block("for (int unit = blockIdx.x; unit < UNITS; unit += gridDim.x)"):
                yield
        else:
            c.comment("one unit per block")
            with c.block(""):
                c("const int unit = blockIdx.x;")
                yield

    def _producer(self) -> None:
        c, p = self.code, self.p
        c.comment("Producer warpgroup: registers go to the consumers; one thread issues the loads.")
        c(c.call("setmaxnreg_dec<PRODUCER_REGS>") + ";")
        with c.block("if (threadIdx.x == 0)"):
            c(c.call("tma_prefetch_descriptor", "&a_map") + ";")
            c(c.call("tma_prefetch_descriptor", "&b_map") + ";")
            c("int stage = 0;  // ring slot of the next load")
            c("u32 phase = 0;  // flips at each pass over the ring")
            with self._units():
                owner_loop = (
                    "for (int owner = 0; owner < OWNERS; ++owner)"
                    if p.pingpong
                    else "for (int owner = 0; owner < 1; ++owner)"
                )
                with c.block(owner_loop):
                    c("const int tile = unit * OWNERS + owner;")
                    c("if (tile >= TILES) break;")
                    c("int m0, n0;")
                    c("tile_origin(tile, m0, n0);")
                    with c.block("for (int k0 = 0; k0 < K; k0 += TILE_K)"):
                        c("load_stage(stage, phase ^ 1, m0, n0, k0, smem, &a_map, &b_map);")
                        c("if (++stage == STAGES) { stage = 0; phase ^= 1; }")

    # ----- consumers -----------------------------------------------------------------
    def _consumer(self) -> None:
        c, p = self.code, self.p
        if p.tma_store:
            c(f"const int thread_in_wg = threadIdx.x % {WARPGROUP};")
        c("float acc[ROW_BLOCKS][ACC_REGS] = {};")
        c("int loads_before = 0;  // loads of this block's sequence before the current unit")
        if p.staging == "ring" and not p.pingpong:
            c("int store_round = 0;  // sub-tiles stored so far (ring slot = store_round % 2)")
        if p.alternate:
            c("bool first_turn = true;")
        if not p.ws:
            c.comment("No producer: thread 0 issues the loads, STAGES ahead of the slowest reader.")
            c("const int block_tiles = (TILES - blockIdx.x + gridDim.x - 1) / gridDim.x;"
              if self.sprogram.persistent else "const int block_tiles = 1;")
            c("const int block_loads = block_tiles * K_ITERS;")
            c.comment("load x of this block's sequence: tile x / K_ITERS of the block's tiles")
            with c.block("auto load_ahead = [&](int x)", tail="};"):
                tile = ("blockIdx.x + (x / K_ITERS) * gridDim.x" if self.sprogram.persistent
                        else "blockIdx.x")
                c(f"const int tile = {tile};")
                c("int m0, n0;")
                c("tile_origin(tile, m0, n0);")
                c("load_stage(x % STAGES, ((x / STAGES) & 1) ^ 1, m0, n0, (x % K_ITERS) * TILE_K, "
                  "smem, &a_map, &b_map);")
            with c.block("if (threadIdx.x == 0)"):
                c(c.call("tma_prefetch_descriptor", "&a_map") + ";")
                c(c.call("tma_prefetch_descriptor", "&b_map") + ";")
                with c.block(
                    "for (int ahead = 0; ahead < STAGES && ahead < block_loads; ++ahead)"
                ):
                    c("load_ahead(ahead);")
            c("__syncwarp();")
        with self._units():
            if p.pingpong:
                c("const int tile = unit * OWNERS + consumer;")
                c("const int unit_tiles = TILES - unit * OWNERS < OWNERS ? "
                  "TILES - unit * OWNERS : OWNERS;")
                c("const int x0 = loads_before + consumer * K_ITERS;  // after earlier owners")
                c("loads_before += unit_tiles * K_ITERS;")
                c("int m0 = 0, n0 = 0;")
                c("if (tile < TILES) tile_origin(tile, m0, n0);")
                c("const int row0 = 0;")
                if p.alternate:
                    self._turn_wait()
                with c.block("if (tile < TILES)"):
                    self._mainloop("x0")
                if p.alternate:
                    self._turn_pass()
                with c.block("if (tile < TILES)"):
                    self._epilogue()
            else:
                c("const int tile = unit;")
                c("int m0, n0;")
                c("tile_origin(tile, m0, n0);")
                c("const int row0 = consumer * CONSUMER_ROWS;  // this warpgroup's rows")
                c("const int x0 = loads_before;")
                c("loads_before += K_ITERS;")
                self._mainloop("x0")
                self._epilogue()
        if p.alternate:
            c.comment("tc_turn: take the last hand-over, so no named-barrier arrival is left over")
            with c.block("if (consumer == 0)"):
                c(c.call("named_barrier_sync", p.bar_turn0, 2 * WARPGROUP) + ";")
        if p.tma_store:
            with c.block("if (thread_in_wg == 0)"):
                c(c.call("tma_store_wait<0>") + ";  // C written before the block exits")

    def _turn_wait(self) -> None:
        c, p = self.code, self.p
        c.comment("tc_turn: wait until the previous consumer warpgroup hands over the tensor cores")
        c("if (consumer != 0 || !first_turn) "
          + c.call("named_barrier_sync", f"{p.bar_turn0} + consumer", 2 * WARPGROUP) + ";")
        c("first_turn = false;")

    def _turn_pass(self) -> None:
        c, p = self.code, self.p
        c.comment("tc_turn: hand the tensor cores to the next consumer warpgroup")
        c(c.call("named_barrier_arrive", f"{p.bar_turn0} + (consumer + 1) % CONSUMERS",
                 2 * WARPGROUP) + ";")

    def _release(self, x: str) -> None:
        """ab_empty arrival for load ``x``, and (no producer) the load that reuses its slot."""
        c, p = self.code, self.p
        c.comment(f"ab_empty: this warp is done with the stage of load {x}")
        c("if (lane == 0) "
          + c.call("mbarrier_arrive", f"smem + SMEM_AB_EMPTY + 8 * (({x}) % STAGES)") + ";")
        if not p.ws:
            c(f"if (threadIdx.x == 0 && ({x}) + STAGES < block_loads) load_ahead(({x}) + STAGES);")
            c("__syncwarp();")

    def _pin(self) -> None:
        c = self.code
        with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            c(c.call("wgmma_fence_operands", "acc[mi]") + ";")

    def _mainloop(self, x0: str) -> None:
        c, p = self.code, self.p
        c.comment("Main loop over K, one ab stage a trip.")
        with c.block("for (int kt = 0; kt < K_ITERS; ++kt)"):
            c(f"const int x = {x0} + kt, stage = x % STAGES;")
            c.comment("ab_full[stage]: load_a and load_b of this stage have landed")
            c(c.call("mbarrier_wait", "smem + SMEM_AB_FULL + 8 * stage", "(x / STAGES) & 1") + ";")
            if p.alternate and not p.pingpong:
                self._turn_wait()
            self._emit_mma()
            if p.alternate and not p.pingpong:
                self._turn_pass()
            if p.overlap:
                c.comment("mma_inflight: keep this wgmma group in flight; the previous one is done")
                c(c.call("wgmma_wait<1>") + ";")
                c("#pragma unroll")
                self._pin()
                with c.block("if (kt > 0)"):
                    self._release("x - 1")
            else:
                c(c.call("wgmma_wait<0>") + ";")
                c("#pragma unroll")
                self._pin()
                self._release("x")
        if p.overlap:
            c(c.call("wgmma_wait<0>") + ";")
            c("#pragma unroll")
            self._pin()
            self._release(f"{x0} + K_ITERS - 1")

    def _emit_mma(self) -> None:
        c, p = self.code, self.p
        c.comment(f"mma  stage=stage: acc[{p.consumer_rows}x{p.tile_n}] += A_s x B_s "
                  f"({p.row_blocks} x {p.k_steps} wgmma m64n{p.tile_n}k16)")
        c("#pragma unroll")
        self._pin()
        c(c.call("wgmma_fence") + ";")
        c("const u32 a_stage = smem + SMEM_A + stage * A_STAGE_BYTES + "
          f"row0 * {p.a.swizzle.span_bytes};")
        c("const u32 b_stage = smem + SMEM_B + stage * B_STAGE_BYTES;")
        c("#pragma unroll")
        with c.block("for (int kk = 0; kk < K_STEPS; ++kk)"):
            c("const u64 desc_b = "
              + c.call("wgmma_descriptor", "b_stage + b_kstep_bytes(kk)", "B_DESC_LAYOUT") + ";")
            c("#pragma unroll")
            with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
                desc_a = c.call(
                    "wgmma_descriptor",
                    f"a_stage + a_kstep_bytes(kk) + mi * {p.a.row_block_bytes}",
                    "A_DESC_LAYOUT",
                )
                c(c.call(self.mma, "acc[mi]", desc_a, "desc_b", "kt > 0 || kk > 0") + ";")
        c(c.call("wgmma_commit") + ";")

    # ----- epilogue ------------------------------------------------------------------
    def _epilogue(self) -> None:
        if self.p.tma_store:
            self._store_tma()
        else:
            self._store_direct()

    def _store_tma(self) -> None:
        c, p = self.code, self.p
        swz = p.store_swizzle
        c.comment(f"store: acc -> shared memory (stmatrix, {swz.span_bytes}B swizzle) -> C via "
                  f"TMA, {p.store_cols}-column sub-tiles")
        if p.staging == "operands":
            c.comment("every consumer finished reading the operand stages, which now stage C")
            c(c.call("named_barrier_sync", BAR_CONSUMERS, "CONSUMERS * 128") + ";")
        bar = f"{BAR_EPILOGUE0} + consumer"
        c("#pragma unroll")
        with c.block("for (int s = 0; s < STORE_SUBTILES; ++s)"):
            if p.staging == "operands":
                c("const u32 buf = smem + SMEM_C + s * C_SLOT_BYTES + row0 * C_ROW_BYTES;")
            elif p.pingpong:
                c("const u32 buf = smem + SMEM_C + consumer * C_SLOT_BYTES;")
                c.comment("this warpgroup's previous store finished reading its slot")
                c("if (thread_in_wg == 0) " + c.call("tma_store_wait_reads<0>") + ";")
                c(c.call("named_barrier_sync", bar, WARPGROUP) + ";")
            else:
                c("const u32 buf = smem + SMEM_C + (store_round % 2) * C_SLOT_BYTES + "
                  "row0 * C_ROW_BYTES;")
                c.comment("the store that last used this slot finished reading it")
                c("if (thread_in_wg == 0) " + c.call("tma_store_wait_reads<1>") + ";")
                c(c.call("named_barrier_sync", bar, WARPGROUP) + ";")
            c("#pragma unroll")
            with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
                c("#pragma unroll")
                with c.block("for (int j = 0; j < STORE_COLS / 16; ++j)"):
                    c.comment("16x16 of C: lane/8 picks the 8x8 matrix (bit 0: +8 rows, "
                              "bit 1: +8 columns)")
                    c("const int group = s * (STORE_COLS / 8) + 2 * j;  // 8-column group in tile")
                    c("const int row = mi * 64 + warp * 16 + (lane & 8) + (lane & 7);")
                    c("const u32 col_bytes = (2 * j + (lane >> 4)) * 16;")
                    regs = [
                        c.call(self.pack, f"acc[mi][4 * group + {2 * i}]",
                               f"acc[mi][4 * group + {2 * i + 1}]")
                        for i in range(4)
                    ]
                    addr = f"buf + {c.call(swz.function, 'row * C_ROW_BYTES + col_bytes')}"
                    c(c.call("stmatrix_x4", addr, *regs) + ";")
            c(c.call("fence_proxy_async_smem") + ";")
            c(c.call("named_barrier_sync", bar, WARPGROUP) + ";")
            with c.block("if (thread_in_wg == 0)"):
                c(c.call("tma_store_2d", "&c_map", "n0 + s * STORE_COLS", "m0 + row0", "buf") + ";")
                c(c.call("tma_store_commit") + ";")
            if p.staging == "ring" and not p.pingpong:
                c("++store_round;")

    def _store_direct(self) -> None:
        c, p = self.code, self.p
        c.comment("store: acc -> C with st.global, two elements a thread per 8-column group")
        full_m = p.m % p.tile_m == 0
        full_n = p.n % p.tile_n == 0
        c("#pragma unroll")
        with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
            c("#pragma unroll")
            with c.block("for (int h = 0; h < 2; ++h)"):
                c("const int row = m0 + row0 + mi * 64 + warp * 16 + h * 8 + (lane >> 2);")
                if not full_m:
                    c("if (row >= M) continue;")
                c("unsigned short* c_row = c + (unsigned long long)row * N;")
                c("#pragma unroll")
                with c.block("for (int j = 0; j < ACC_REGS / 4; ++j)"):
                    c("const int col = n0 + j * 8 + (lane & 3) * 2;")
                    lo, hi = "acc[mi][4 * j + 2 * h]", "acc[mi][4 * j + 2 * h + 1]"
                    if p.n % 2 == 0:
                        store = (f"*reinterpret_cast<u32*>(c_row + col) = "
                                 f"{c.call(self.pack, lo, hi)};")
                        c(store if full_n else f"if (col < N) {store}")
                    else:
                        single = convert.single(p.dtype)
                        c(f"if (col < N) c_row[col] = {c.call(single, lo)};")
                        c(f"if (col + 1 < N) c_row[col + 1] = {c.call(single, hi)};")


def gemm_tensor_maps(plan: GemmPlan) -> tuple[TensorMapArg, ...]:
    """The TMA descriptors, from the same plan as the kernel text."""
    p = plan
    maps = [
        TensorMapArg(
            name="a_map",
            tensor="a",
            dtype=p.dtype,
            global_dims=(p.k, p.m),
            global_strides_bytes=(p.k * p.elem,),
            box_dims=(p.a.box_inner, p.a.box_outer),
            swizzle=p.a.swizzle.tma,  # type: ignore[arg-type]
        )
    ]
    b_dims = (p.k, p.n) if p.b_layout == "nk" else (p.n, p.k)
    maps.append(
        TensorMapArg(
            name="b_map",
            tensor="b",
            dtype=p.dtype,
            global_dims=b_dims,
            global_strides_bytes=(b_dims[0] * p.elem,),
            box_dims=(p.b.box_inner, p.b.box_outer),
            swizzle=p.b.swizzle.tma,  # type: ignore[arg-type]
        )
    )
    if p.tma_store:
        maps.append(
            TensorMapArg(
                name="c_map",
                tensor="c",
                dtype=p.dtype,
                global_dims=(p.n, p.m),
                global_strides_bytes=(p.n * p.elem,),
                box_dims=(p.store_cols, p.store_rows),
                swizzle=p.store_swizzle.tma,  # type: ignore[arg-type]
            )
        )
    return tuple(maps)


def render_gemm(sprogram: SProgram, device: Device) -> KernelArtifact:
    """The kernel and launch contract of a GEMM sProgram.

    Raises:
        Unsupported: the schedule is one this renderer cannot generate.
    """
    if sprogram.op != "gemm":
        raise Unsupported(f"not a gemm sProgram ({sprogram.op})")
    plan = GemmPlan(sprogram, sprogram.params, device)
    problem = plan.unsupported()
    if problem:
        raise Unsupported(problem)
    emitter = GemmEmitter(plan, sprogram)
    source = emitter.source()
    args: list[KernelArg] = list(gemm_tensor_maps(plan))
    if not plan.tma_store:
        args.append(TensorArg("c", plan.dtype, (plan.m, plan.n), "output"))
    return KernelArtifact(
        op="gemm",
        params=dict(sprogram.params),
        schedule_hash=sprogram.hash,
        source=source,
        entry=emitter.entry,
        grid=(plan.grid, 1, 1),
        block=(plan.threads, 1, 1),
        dynamic_smem_bytes=plan.dynamic_smem_bytes,
        args=tuple(args),
        compile_options=("-std=c++17", "-arch=sm_90a"),
        extra={
            "codegen_version": GEMM_CODEGEN_VERSION,
            "choices": dict(sprogram.choices),
            "smem_layout": dict(plan.smem),
            "staging": plan.staging,
            "tiles": plan.tiles,
            "units": plan.units,
            "flops": 2.0 * plan.m * plan.n * plan.k,
        },
    )


def gemm_unsupported(schedule: Any, params: dict[str, Any], device: Device) -> str | None:
    """Why the GEMM ``schedule`` (an SProgram or its Decisions) cannot be rendered."""
    return GemmPlan(schedule, params, device).unsupported()


__all__ = [
    "GEMM_CODEGEN_VERSION",
    "GemmEmitter",
    "GemmPlan",
    "OperandTile",
    "Unsupported",
    "gemm_tensor_maps",
    "gemm_unsupported",
    "render_gemm",
]
