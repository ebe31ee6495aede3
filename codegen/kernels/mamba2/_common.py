"""What Mamba2's two chunk kernels share on the pipeline skeleton.

Both work per (batch, chunk, head) on tensors laid out as ``mamba_ssm`` takes them: ``x``
(batch, seqlen, nheads, headdim), ``B`` / ``C`` (batch, seqlen, ngroups, dstate) shared by the
``nheads / ngroups`` heads of a group, ``dt`` and ``dA_cumsum`` (batch, nheads, nchunks,
chunk_size) fp32. The grid's outer axes run heads fastest, so the blocks running together
read the same B, C and cb tiles from L2.

Both reduce over a chunk's positions with an MMA whose A operand is computed in registers
(the position-wise decay is folded into it), so a trip's K columns are this thread's A
fragment columns: for k16 step ``kk``, columns ``16 kk + 2 (lane % 4)`` and ``+1``, ``+8``,
``+9`` (:func:`fragment_col`). ``dt`` and ``dA`` of those columns reach the registers
``dt_v[kk][j]`` / ``dA_v[kk][j]`` either straight from global memory (the load sTasks on
the CUDA cores) or from the ring stage TMA filled (read by the first math sTask).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable
from functools import cached_property

from codegen.artifact import TensorMapArg
from codegen.cuda import swizzle
from codegen.pipeline import Code, GridAxis, OperandTile, OperatorHooks, VectorTile
from scheduler_search.hardware.model import UnitKind
from scheduler_search.ops import DTYPE_BYTES
from scheduler_search.ops.attention import packed_heads

#: The input types the Mamba2 kernels lower, with their sizes (``DTYPE_BYTES``).
ELEMENT_BYTES = {d: DTYPE_BYTES[d] for d in ("float16", "bfloat16")}
LOG2E = math.log2(math.e)
#: Every 16-bit tile that TMA loads here is cut into 128-byte (64-element) swizzle boxes.
BOX_ELEMS = 64
#: fp32 tiles (cb) are cut into 128-byte boxes of 32 elements.
F32_BOX_ELEMS = 32


def fragment_col(kk: str, j: str) -> str:
    """Column (within a trip's tile) of this thread's A-fragment value ``j`` of k16 step
    ``kk``: j = 0, 1 at ``16 kk + 2 (lane % 4)`` and +1; j = 2, 3 eight further."""
    return f"(16 * ({kk}) + 2 * (lane & 3) + (({j}) & 1) + (({j}) >> 1) * 8)"


class Mamba2Hooks(OperatorHooks):
    """Problem constants, grid, vector loads and tensor maps of both chunk kernels."""

    #: Constant holding the positions one loop trip reduces over (a K tile).
    k_tile_const: str = ""
    #: The loop's dt / dA load sTasks.
    vector_loads = ("load_dt", "load_dA")
    #: Whether the loop's register A operand has a copy per trip parity, so that the
    #: MMA of one trip stays in flight while the next trip's math writes the other.
    a_double_buffered = True
    #: The loop's MMA sTask and the register array that holds its A operand.
    loop_mma: str = ""
    a_operand: str = ""

    # ----- problem -------------------------------------------------------------------
    def _p(self, name: str) -> int:
        return int(self.params[name])

    @property
    def elem(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    @property
    def chunk(self) -> int:
        return self._p("chunk_size")

    @property
    def nchunks(self) -> int:
        return self._p("seqlen") // self.chunk

    @property
    @abstractmethod
    def k_tile(self) -> int:
        """Positions of a chunk one loop trip reduces over."""

    @property
    def k_steps(self) -> int:
        return self.k_tile // 16

    @property
    def pack(self) -> int:
        """Heads of one group a tile packs (the tile's ``g``)."""
        return packed_heads(self.sprogram.tile)

    def outer_axes(self, chunks: int | None = None) -> tuple[GridAxis, ...]:
        """(batch, chunk, head) of a tile, heads fastest (they share B, C and cb in L2);
        ``chunks``: the chunk axis's extent (1: a tile walks every chunk)."""
        return (GridAxis("heads", self._p("nheads"), self.pack),
                GridAxis("chunks", self.nchunks if chunks is None else chunks, 1),
                GridAxis("batch", self._p("batch"), 1))

    def common_problem(self) -> str | None:
        if self.dtype not in ELEMENT_BYTES:
            return f"dtype {self.dtype}"
        if self.chunk % self.k_tile:
            return f"a loop tile of {self.k_tile} positions must divide chunk_size={self.chunk}"
        if any(self.structure.inflight.values()) and not self.a_double_buffered:
            return ("the loop's MMA reads its A operand from registers that the next trip's "
                    "math rewrites while the group is in flight (order overlap)")
        return None

    def problem_constants(self, code: Code) -> None:
        p, c = self.params, code
        c.comment("Problem (compile-time: the kernel is specialised to the shape).")
        c(f"constexpr int BATCH = {p['batch']}, SEQLEN = {p['seqlen']}, NHEADS = {p['nheads']}, "
          f"HEADDIM = {p['headdim']}, DSTATE = {p['dstate']};")
        c(f"constexpr int NGROUPS = {p['ngroups']}, GROUP_HEADS = NHEADS / NGROUPS;  // heads "
          "sharing B and C")
        c(f"constexpr int CHUNK = {self.chunk}, NCHUNKS = {self.nchunks};")
        c(f"constexpr int K_STEPS = {self.k_steps};  // {self.target.mma_name} k16 steps per "
          "loop trip")
        c(f"constexpr float LOG2E = {LOG2E!r}f;")
        c("__device__ __forceinline__ constexpr unsigned long long vector_row(int batch0, "
          "int heads0, int chunks0) { return ((unsigned long long)batch0 * NHEADS + heads0) * "
          "NCHUNKS + chunks0; }  // dt / dA_cumsum row of a (batch, head, chunk)")

    def tile_constants(self, code: Code, tiles: tuple[OperandTile | VectorTile, ...],
                       read_by_mma: tuple[OperandTile, ...]) -> None:
        """Box and stage bytes of every TMA tile; descriptor layout and k16-step offsets
        of those the MMA reads."""
        c = code
        for t in tiles:
            c(f"constexpr u32 {t.const}_BOX_BYTES = {t.box_bytes}, {t.const}_STAGE_BYTES = "
              f"{t.stage_bytes};")
            if t in read_by_mma:
                layout = self.target.operand_descriptor(t).layout_bits
                c(f"constexpr u64 {t.const}_DESC_LAYOUT = 0x{layout:016x}ull;")
                c(f"__device__ __forceinline__ constexpr u32 {t.name}_kstep_bytes(int kk) {{ "
                  f"return {t.kstep_expr()}; }}")
        c("")

    # ----- tiles ---------------------------------------------------------------------
    def tile16(self, name: str, rows: int, cols: int, major: str = "k",
               slices: int = 1) -> OperandTile:
        """A 16-bit tile cut into 128-byte swizzle boxes along its contiguous dimension
        (each fetched as ``slices`` multicast slices when a cluster shares it)."""
        return OperandTile(name, major, rows, cols, swizzle.SWIZZLES[128], self.elem,  # type: ignore[arg-type]
                           self.target.k_step(self.dtype), self.target.mma_rows, slices=slices)

    @cached_property
    def dt(self) -> VectorTile:
        return VectorTile("dt", self.k_tile * self.pack)

    @cached_property
    def da(self) -> VectorTile:
        return VectorTile("da", self.k_tile * self.pack)

    # ----- dt and dA of this thread's columns ----------------------------------------
    @property
    def vectors_by_tma(self) -> bool:
        return self.structure.units.get("load_dt") is UnitKind.TMA

    @property
    def thread_loads(self) -> frozenset[str]:
        return frozenset(self.vector_loads)

    def vector_state(self, code: Code, slots: str = "") -> None:
        code(f"float dt_v{slots}[K_STEPS][4], dA_v{slots}[K_STEPS][4];  // this thread's "
             "columns of the trip")

    def vector_pointers(self) -> tuple[str, ...]:
        """dt / dA_cumsum as plain pointers when the CUDA cores load them."""
        return () if self.vectors_by_tma else ("dt", "dA_cumsum")

    def load_vector(self, code: Code, stask: str, trip: str, slot: str = "",
                    head: str = "0") -> None:
        """``dt_v`` or ``dA_v`` (``[slot]``) of this thread's columns, for head
        ``heads0 + head``, from global memory."""
        c = code
        src, dst = ("dt", "dt_v") if stask == "load_dt" else ("dA_cumsum", "dA_v")
        c(f"const float* {src}_row = {src} + vector_row(batch0, heads0 + {head}, chunks0) * "
          f"CHUNK + ({trip}) * {self.k_tile_const};")
        c("#pragma unroll")
        with c.block("for (int kk = 0; kk < K_STEPS; ++kk)"):
            for half in (0, 1):
                c(f"const float2 v{half} = __ldg(reinterpret_cast<const float2*>({src}_row + "
                  f"{fragment_col('kk', str(2 * half))}));")
                c(f"{dst}{slot}[kk][{2 * half}] = v{half}.x; "
                  f"{dst}{slot}[kk][{2 * half + 1}] = v{half}.y;")

    def vectors_from_stage(self, code: Code, slot: str = "", head: str = "0") -> None:
        """With TMA: ``dt_v`` and ``dA_v`` (``[slot]``) of head ``heads0 + head`` from the
        ring stage the trip reads (the stage holds each packed head's positions in turn)."""
        if not self.vectors_by_tma:
            return
        c = code
        stage = f"{self.ring_stream('load_dt')}_stage"
        c.comment("dt and dA of this thread's columns, from the stage TMA filled")
        c("#pragma unroll")
        with c.block("for (int kk = 0; kk < K_STEPS; ++kk)"):
            for half in (0, 1):
                col = f"({head}) * {self.k_tile_const} + {fragment_col('kk', str(2 * half))}"
                for t, dst in ((self.dt, "dt_v"), (self.da, "dA_v")):
                    addr = f"smem + SMEM_{t.const} + {stage} * {t.const}_STAGE_BYTES + ({col}) * 4"
                    c(f"{{ const float2 v = {c.call('ld_shared_f32x2', addr)}; "
                      f"{dst}{slot}[kk][{2 * half}] = v.x; "
                      f"{dst}{slot}[kk][{2 * half + 1}] = v.y; }}")

    # ----- the loop's register A operand, one copy per trip parity in flight -------
    @property
    def a_in_flight(self) -> bool:
        """The loop's MMA stays in flight across trips (order overlap)."""
        return bool(self.structure.inflight.get(self.loop_mma))

    def a_copies(self) -> tuple[str, ...]:
        a = self.a_operand
        return (f"{a}[0]", f"{a}[1]") if self.a_in_flight else (a,)

    def a_declaration(self, shape: str) -> str:
        """The A array's declaration: ``shape``, after a parity dimension when in flight."""
        return f"u32 {self.a_operand}{'[2]' if self.a_in_flight else ''}{shape};"

    def per_parity(self, code: Code, trip: str, emit: Callable[[str], None]) -> None:
        """``emit(a)`` with this trip's copy of the A operand: the array itself, or (with
        the MMA in flight) ``a[0]`` / ``a[1]`` by trip parity, each branch with constant
        indices so that both copies stay in registers."""
        first, *other = self.a_copies()
        if not other:
            emit(first)
            return
        with code.block(f"if ((({trip}) & 1) == 0)"):
            emit(first)
        with code.block("else"):
            emit(other[0])

    def ring_stream(self, load: str) -> str:
        return next(r.stream for r in self.structure.rings if load in r.loads)

    def exp2(self, code: Code, stask: str) -> str:
        """exp2 on the sEU the sProgram maps ``stask`` to."""
        if self.structure.units.get(stask) is UnitKind.SFU:
            code.use("exp2_approx")
            return "exp2_approx"
        return "exp2f"

    # ----- tensor maps ---------------------------------------------------------------
    def rows_map(self, name: str, tensor: str, heads: int, cols: int, tile: OperandTile,
                 rows: int, box_heads: int = 1) -> TensorMapArg:
        """A (batch * seqlen, heads, cols) tensor read ``rows`` positions of ``box_heads``
        heads at a time (x, B, C): rank 3, innermost first; in shared memory, row
        ``position * box_heads + head``."""
        e, seq = self.elem, self._p("batch") * self._p("seqlen")
        return TensorMapArg(
            name=name, tensor=tensor, dtype=self.dtype, global_dims=(cols, heads, seq),
            global_strides_bytes=(cols * e, heads * cols * e),
            box_dims=(tile.box_inner, box_heads, rows),
            swizzle=tile.swizzle.tma,  # type: ignore[arg-type]
        )

    def vector_map(self, name: str, tile: VectorTile) -> TensorMapArg:
        """dt / dA_cumsum as (position, chunk, batch * nheads): a box is ``tile`` positions
        of one chunk for each packed head, one head after the other."""
        tensor = "dt" if tile.name == "dt" else "dA_cumsum"
        length = tile.length // self.pack
        return TensorMapArg(
            name=name, tensor=tensor, dtype="float32",
            global_dims=(self.chunk, self.nchunks, self._p("batch") * self._p("nheads")),
            global_strides_bytes=(self.chunk * 4, self.nchunks * self.chunk * 4),
            box_dims=(length, 1, self.pack), swizzle="none",
        )

    def load_vector_tile(self, code: Code, tile: VectorTile, tmap: str, stage_addr: str,
                         col: str, full_bar: str, chunk: str = "chunks0") -> None:
        code(code.call("tma_load_3d", stage_addr, tmap, col, chunk,
                       "batch0 * NHEADS + heads0", full_bar) + ";")

    def header(self) -> str:
        p = self.params
        return (f"{self.sprogram.op} batch={p['batch']} seqlen={p['seqlen']} nheads={p['nheads']} "
                f"headdim={p['headdim']} dstate={p['dstate']} ngroups={p['ngroups']} "
                f"chunk={self.chunk} {self.dtype}")
