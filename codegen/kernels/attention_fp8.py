"""FP8 attention's own text: v transposed for ``P V``, and P packed as the MMA reads it.

Hopper's 8-bit MMA reads B K-major only (PTX ISA 9.7.15.5.2), and for ``P V`` K is the keys,
which v (keys x head_dim, head_dim contiguous, as TMA loads it) has as its rows. So each
trip, a consumer warpgroup lays the trip's v stage out again in a tile of its own, ``vt``
(head_dim rows of ``TILE_KV`` key bytes, swizzled as a K-major operand): ``transpose_v``.
``vt`` has two copies a consumer, one per trip parity, so the next trip's transpose can
run under the tensor cores' work on this one (the loop issues it right after the MMAs).

The keys of ``vt`` are not in order. P comes from the S accumulators, whose thread holds
keys ``8 j + 2 t`` and ``+ 1`` (``t = lane % 4``) of its rows, while an 8-bit A register
holds four neighbouring columns ``4 t .. 4 t + 3``. Column ``c`` of a 32-key step is
given key ``π(c)``: ``π(4 t + i) = [2 t, 2 t + 1, 2 t + 8, 2 t + 9][i]`` (``+ 16`` for the
step's upper half), so each A register packs four of the thread's own scores, with no
shuffle, and ``vt`` puts key ``π(c)`` at column ``c``, so that ``P V`` multiplies the
right pairs.

A warp moves 16 keys (one half of a 32-key step) by 32 head_dim bytes at a time with one
``ldmatrix`` of four 8x8 b16 matrices of v, four byte permutes and one ``stmatrix .trans``
into ``vt``. Lane ``l`` of the load reads a key row of the step half: matrix ``i`` row ``r``
is key pair ``r / 2 + 4 (r % 2)`` (the pair that ``vt``'s column pair ``r`` holds under π),
its key ``i % 2``, head_dim chunk ``i / 2``; so lane ``4 r + q`` holds both keys of its
pair at head_dim bytes ``4 q .. 4 q + 3`` of both chunks. Each permute interleaves the two
keys at two head_dim bytes, which is one b16 of ``vt`` at each of two rows; the transposed
store puts them at rows ``2 q`` and ``2 q + 1``, column pair ``r`` of its matrix. The
warpgroup waits for each warp to be done with the copy's last ``P V`` (two trips back)
before, and for every store after (made visible to the MMA, the async proxy, first).
"""

from __future__ import annotations

from collections.abc import Callable

from codegen.cuda import swizzle
from codegen.pipeline import Code, OperandTile, TripAt
from codegen.targets import Mma, MmaPart, Target
from scheduler_search.hardware.model import UnitKind
from scheduler_search.ops.attention import FP8_DTYPE
from scheduler_search.sprogram.smem import CONSUMER_TILE_BUFFERS

#: Keys of one 8-bit MMA k step.
KEYS_PER_STEP = 32
#: The four keys of π group ``w`` (``w % 4 = t``) relative to ``16 (w / 4) + 2 t``.
GROUP_KEYS = (0, 1, 8, 9)
#: A warp's unit of the transpose: the keys of one half of a k step (a 16-byte column
#: segment of ``vt``) by two 16-byte head_dim chunks.
SEGMENT_KEYS, UNIT_D_BYTES = 16, 32
#: The lane's row addresses (C++ over ``matrix = lane / 8``, ``row = lane % 8``): the
#: load's key within the segment and head_dim chunk, the store's head_dim row in the unit.
LOAD_KEY = "(((row >> 1) + ((row & 1) << 2)) << 1) + (matrix & 1)"
LOAD_D = "(matrix >> 1) << 4"
STORE_D = "((matrix >> 1) << 4) + ((row >> 1) << 2) + ((matrix & 1) << 1) + (row & 1)"
#: FP8's registers a 64-row block besides its fragments (nvcc 13.0: a consumer of two
#: blocks at d128 and 64 keys, fragments and overhead 222, spilled 116 bytes at 248; of one
#: block at d128 and 128 keys, 152, fit in 168; at d256, 216, in 248).
FP8_BLOCK_REGS = 16
#: ``byte_perm`` selectors: interleave bytes 0-1 (or 2-3) of two words.
INTERLEAVE_LOW, INTERLEAVE_HIGH = 0x5140, 0x7362


def fp8_problem(tile_kv: int, exp2_unit: UnitKind | None, min_span_bytes: int) -> str | None:
    """Where FP8 attention cannot be lowered: ``vt``'s rows (``tile_kv`` key bytes) fill
    a swizzle span of ``min_span_bytes`` at least, and exp2 runs on the SFU (exp2f issues
    the SFU's ex2 too, with range checks whose registers the transpose beside the MMAs
    leaves no room for: 8 bytes spilled at d256)."""
    if tile_kv % min_span_bytes:
        return (f"tile_kv={tile_kv}: FP8's transposed v rows in {min_span_bytes}-byte "
                "swizzle spans at least")
    if exp2_unit is not UnitKind.SFU:
        return "map_softmax_exp2=cuda_core: FP8's exp2 on the SFU only"
    return None


def p_register(k_step: int, register: int) -> tuple[int, int, int, int]:
    """The S accumulator indices (``4 g + 2 h + e`` of a row block) that 8-bit A register
    ``register`` (0-3) of k step ``k_step`` packs, lowest byte first: row half
    ``h = register % 2``, 8-column groups ``4 k_step + 2 (register / 2)`` and the next."""
    half, group = register % 2, 4 * k_step + 2 * (register // 2)
    return (4 * group + 2 * half, 4 * group + 2 * half + 1,
            4 * (group + 1) + 2 * half, 4 * (group + 1) + 2 * half + 1)


def key_order(keys: int) -> list[int]:
    """π over ``keys`` keys: the key at each column of ``vt`` (and of P)."""
    order = []
    for column in range(keys):
        step, within = divmod(column, KEYS_PER_STEP)
        upper, rest = divmod(within, 16)
        t, i = divmod(rest, 4)
        order.append(step * KEYS_PER_STEP + 16 * upper + 2 * t + GROUP_KEYS[i])
    return order


class TransposedV:
    """A consumer warpgroup's ``vt``: ``transpose_v`` writes it from v's stage (``v``,
    MN-major, as loaded; keys in :func:`key_order`), ``P V`` reads it K-major."""

    def __init__(self, v: OperandTile, tile_kv: int, target: Target, barrier: str) -> None:
        self.v, self.target = v, target
        self.vt = OperandTile("vt", "k", v.rows, tile_kv,
                              swizzle.widest(tile_kv * v.elem_bytes), v.elem_bytes,
                              v.k_step, v.mma_rows)
        #: The consumer warpgroup's named barrier (its 128 threads).
        self.barrier = barrier

    @property
    def units(self) -> int:
        """Warp-sized units of the tile: 16 keys by 32 head_dim bytes."""
        return (self.vt.cols // SEGMENT_KEYS) * (self.v.rows * self.v.elem_bytes // UNIT_D_BYTES)

    def offsets(self, code: Code) -> None:
        """Device functions: the byte offset of (key, head_dim byte) in a v stage and of
        (head_dim row, key column) in ``vt``, swizzled as TMA and the MMA lay them out."""
        c = code
        for tile, row, col, what in ((self.v, "key", "d", "v[key][d] in a stage"),
                                     (self.vt, "d", "column", "vt[d][column]")):
            span = tile.swizzle.span_bytes
            c.use(tile.swizzle.function)
            c(f"// {what}: {tile.box_count} box(es) of {span}-byte rows")
            c(f"__device__ __forceinline__ u32 {tile.name}_offset(int {row}, int {col}) {{ "
              f"return ({col} / {span}) * {tile.const}_BOX_BYTES + "
              f"{tile.swizzle.function}({row} * {span} + {col} % {span}); }}")

    @staticmethod
    def tile_address(trip: str) -> str:
        """This consumer's copy of ``vt`` for loop trip ``trip`` (its parity's)."""
        return (f"smem + SMEM_VT + (consumer * {CONSUMER_TILE_BUFFERS} + (({trip}) & 1)) * "
                "VT_STAGE_BYTES")

    def write(self, code: Code, stage: str, trip: str) -> None:
        """The transpose of the v stage ``stage`` into this consumer's ``vt`` of ``trip``."""
        c = code
        segments = self.vt.cols // SEGMENT_KEYS
        c.comment("vt[d][c] = v[π(c)][d]: keys in the order of P's 8-bit A registers")
        c(c.call("named_barrier_sync", self.barrier, 128) + ";  // every warp is done with "
          "this copy's last P V")
        with c.block(""):
            c(f"const u32 v_tile = smem + SMEM_V + {stage} * V_STAGE_BYTES;")
            c(f"const u32 vt_tile = {self.tile_address(trip)};")
            c("const int matrix = lane >> 3, row = lane & 7;  // this lane's row address")
            c(f"const int load_key = {LOAD_KEY}, load_d = {LOAD_D};")
            c(f"const int store_d = {STORE_D};")
            # Not unrolled: the addresses of every unit, hoisted out of the trip loop, would
            # hold registers the accumulators need.
            c("#pragma unroll 1")
            with c.block(f"for (int unit = warp; unit < {self.units}; unit += 4)"):
                c(f"const int key0 = (unit % {segments}) * {SEGMENT_KEYS};")
                c(f"const int d0 = (unit / {segments}) * {UNIT_D_BYTES};")
                c("u32 w0, w1, w2, w3;  // keys 2 kp, 2 kp + 1 at d bytes 4 q.. of two chunks")
                c(c.call("ldmatrix_x4", "v_tile + v_offset(key0 + load_key, d0 + load_d)",
                         "w0", "w1", "w2", "w3") + ";")
                words = [c.call("byte_perm", x, y, f"0x{selector:x}u")
                         for x, y in (("w0", "w1"), ("w2", "w3"))
                         for selector in (INTERLEAVE_LOW, INTERLEAVE_HIGH)]
                c(c.call("stmatrix_x4_trans", "vt_tile + vt_offset(d0 + store_d, key0)",
                         *words) + ";")
        c(c.call("fence_proxy_async_smem") + ";  // the stores, visible to the MMA")
        c(c.call("named_barrier_sync", self.barrier, 128) + ";  // every thread's blocks written")

    def write_pv(self, code: Code, at: TripAt, pin: Callable[[], None]) -> None:
        """``O += P vt``: P in registers (e4m3 quads, A of k32 step kk: p[4kk..4kk+3])."""
        c, k, vt = code, self.vt.k_step, self.vt
        c.comment(f"mma_pv: o_acc[CONSUMER_ROWS x {vt.rows}] += P vt^T, P in registers as "
                  f"e4m3 quads (A fragment of k{k} step kk: p[4kk..4kk+3]), vt this consumer's")
        self.target.write_mma(c, Mma(
            n=vt.rows, dtype=FP8_DTYPE, b_major="k", k_steps=str(vt.cols // k),
            b_layout="VT_DESC_LAYOUT", accumulate=f"{at.accumulates} || kk > 0",
            parts=(MmaPart("o_acc[mi]", "vt_tile + vt_kstep_bytes(kk)",
                           a_registers="p[mi][4 * kk + {i}]"),),
            pin=pin,
            bases=(f"const u32 vt_tile = {self.tile_address(at.index)};",)))


__all__ = ["FP8_BLOCK_REGS", "TransposedV", "fp8_problem", "key_order", "p_register"]
