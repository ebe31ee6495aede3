"""Warpgroup products from ``mma.sync`` (sm_80, sm_86, sm_89): Hopper's warpgroup MMA
shape, written as four warps of ``m16n8k16`` fed by ``ldmatrix``.

A product the operators describe as ``m64nNk16`` (64 rows of A per block) is run by the
block's four warps, warp ``w`` on rows ``16 w .. 16 w + 15``: per k16 step it loads its 16 x
16 of A with one ``ldmatrix.x4`` (transposed where A is MN-major in shared memory), then per
16 columns of B one ``ldmatrix.x4`` (transposed where B is MN-major) and two ``mma.sync``.
The accumulators land where Hopper's would (:mod:`codegen.targets.fragment`), and a register
A operand (attention's P) is the same four registers. The target writes the loops
(:meth:`~codegen.targets.ampere.target.AmpereTarget.write_mma`): per k step every row
block's A, then per 16 columns B once for all of them; this module gives the fragment
loads and the instruction. The operand tiles are the ones the copies wrote, TMA's
layout: rows one swizzle span apart, 16-byte chunks XORed with the row (the swizzle of the
absolute shared address, :mod:`codegen.cuda.swizzle`); an MN-major tile in boxes one span
wide along M / N.

Which address each lane gives ``ldmatrix`` (row of matrix ``lane / 8``) is written once,
in :data:`A_LANES` and :data:`B_LANES`, as C expressions of ``lane`` and ``warp`` that the
tests evaluate against the instructions' fragment layouts (PTX ISA 9.7.14.5.15 "ldmatrix",
9.7.14.5.8 "Matrix Fragments for mma.m16n8k16", 9.7.14.5.14 "mma").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from codegen.cuda._snippet import Snippet, register
from codegen.cuda.convert import PTX_FP8_TYPE, PTX_TYPE
from codegen.cuda.swizzle import Swizzle

MMA_SYNC_M, MMA_SYNC_N, MMA_SYNC_K = 16, 8, 16
#: Rows of a block the operators see (a warpgroup of four 16-row warps, as Hopper's m64).
BLOCK_ROWS = 4 * MMA_SYNC_M
N_STEP, N_MAX = 8, 256

#: (row of M, K) of A each lane addresses for ``ldmatrix.x4``, by A's majorness (K-major:
#: K's byte in the row, 16 bytes a matrix; MN-major: the row of K): matrix i = lane / 8 is
#: register a_i of the mma (rows +8 for odd i, K's second half for i >= 2). A K-major row's
#: 16 bytes are 8 16-bit or 16 8-bit elements: the same lanes feed m16n8k16 and m16n8k32.
A_LANES = {
    "k": ("16 * warp + (lane & 15)", "(lane >> 4) * 16"),
    "mn": ("16 * warp + ((lane >> 3) & 1) * 8", "(lane & 7) + (lane >> 4) * 8"),
}
#: (column of N within 16, K as for A) of B each lane addresses for ``ldmatrix.x4``:
#: matrices 0, 1 are the first 8 columns' b0, b1 (K's halves), matrices 2, 3 the next 8's.
B_LANES = {
    "k": ("(lane & 7) + (lane >> 4) * 8", "((lane >> 3) & 1) * 16"),
    "mn": ("(lane >> 4) * 8", "(lane & 7) + ((lane >> 3) & 1) * 8"),
}

LDMATRIX_X2 = Snippet(
    "ldmatrix_x2",
    "// Load two 8x8 b16 matrices; lanes 0-15 give the rows (row lane % 8 of matrix lane / 8).\n"
    "__device__ __forceinline__ void ldmatrix_x2(u32 addr, u32& r0, u32& r1) {\n"
    '  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"\n'
    '               : "=r"(r0), "=r"(r1) : "r"(addr) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.14.5.15 "ldmatrix"',
)

LDMATRIX_X2_TRANS = Snippet(
    "ldmatrix_x2_trans",
    "// Two 8x8 b16 matrices transposed, as ldmatrix_x4_trans; lanes 0-15 give the rows.\n"
    "__device__ __forceinline__ void ldmatrix_x2_trans(u32 addr, u32& r0, u32& r1) {\n"
    '  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"\n'
    '               : "=r"(r0), "=r"(r1) : "r"(addr) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.14.5.15 "ldmatrix"',
)

SWIZZLED = Snippet(
    "swizzled",
    "// A shared address as the copies wrote it: the 16-byte chunk XORed with the row of\n"
    "// an 8-row repeat (`span` bytes a row: 32, 64 or 128).\n"
    "__device__ __forceinline__ u32 swizzled(u32 addr, u32 span) {\n"
    "  return addr ^ ((addr >> 3) & ((span / 16 - 1) << 4));\n"
    "}\n",
    requires=("types",),
    section='9.7.15.5.1.2 "Shared Memory Matrix Layout" (swizzling modes)',
)

SWIZZLED_ROW = Snippet(
    "swizzled_row",
    "// The shared address of byte `byte` of row `row` of the tile at `addr`, as the copies\n"
    "// wrote it: rows `span` bytes apart (32, 64 or 128), each 16-byte chunk XORed with its\n"
    "// row's place in an 8-row atom of the absolute address. `addr` may sit inside an atom\n"
    "// (a k step's byte in the row, whole rows): its place there is taken apart, so where\n"
    "// the compiler knows it (a constant step on an atom-aligned stage) only the lane's row\n"
    "// and byte are left to swizzle, the same every trip. `byte` plus addr's byte in its\n"
    "// row stays below `span`.\n"
    "__device__ __forceinline__ u32 swizzled_row(u32 addr, u32 row, u32 byte, u32 span) {\n"
    "  const u32 at = addr & (8 * span - 1);  // addr's place in its atom\n"
    "  const u32 r = at / span + row;\n"
    "  const u32 b = at % span + byte;\n"
    "  return (addr - at) + r * span + (b ^ ((r * span >> 3) & ((span / 16 - 1) << 4)));\n"
    "}\n",
    requires=("types",),
    section='9.7.15.5.1.2 "Shared Memory Matrix Layout" (swizzling modes)',
)

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 125

register(LDMATRIX_X2, LDMATRIX_X2_TRANS, SWIZZLED, SWIZZLED_ROW, rank=PRELUDE_RANK)


@dataclass(frozen=True)
class SmemTile:
    """An operand tile's layout as the lanes address it: the constant the kernel holds
    (span in bits 0-15, box bytes from bit 16) and its words."""

    major: Literal["k", "mn"]
    swizzle: Swizzle
    box_bytes: int

    @property
    def layout_bits(self) -> int:
        return self.swizzle.span_bytes | self.box_bytes << 16

    def describe(self) -> str:
        return (f"{self.major.upper()}-major, {self.swizzle.span_bytes}B swizzle, "
                f"{self.box_bytes} B boxes, read by ldmatrix")


def _ptx(dtype: str) -> str:
    if dtype in PTX_TYPE:
        return PTX_TYPE[dtype]
    if dtype in PTX_FP8_TYPE:
        return PTX_FP8_TYPE[dtype]
    raise ValueError(f"mma.sync: {dtype} inputs are not generated")


def k_step(dtype: str) -> int:
    """Elements of K one ``mma.sync`` reduces over: 16 of 16-bit inputs, 32 of 8-bit floats
    (``m16n8k32``, sm_89): 32 bytes either way."""
    return 2 * MMA_SYNC_K if dtype in PTX_FP8_TYPE else MMA_SYNC_K


def tile_address(base: str, major: str, row: str, k: str, span: str, box: str) -> str:
    """The logical shared address of (``row`` of M / N, ``k``) of a tile as a C expression
    (also Python's): K-major rows one ``span`` apart, ``k`` the byte in the row; MN-major
    (16-bit) rows of K one ``span`` apart, ``k`` the row, and M / N in boxes ``box`` bytes
    apart, each one span wide."""
    if major == "k":
        return f"{base} + ({row}) * {span} + ({k})"
    return f"{base} + ({k}) * {span} + ({row}) / ({span} / 2) * {box} + ({row}) % ({span} / 2) * 2"


def tile_place(base: str, major: str, row: str, k: str, span: str, box: str,
               row0: str = "0") -> tuple[str, str, str]:
    """(``row0 + row``, ``k``) of a tile as :func:`tile_address` places it, taken apart for
    ``swizzled_row``: the address of its box, its row of ``span`` bytes and its byte in
    that row (K-major: the row of M / N and K's byte; MN-major: K's row, and M / N's byte
    in its box one span wide). ``row0``, a multiple of 16 (a column group of B), picks the
    box alone: the lane's ``row`` (under 16) stays inside it, so a constant ``row0`` leaves
    the lane's part the same for every group."""
    if major == "k":
        return base, f"{row0} + {row}" if row0 != "0" else row, k
    half = f"({span} / 2)"
    return (f"{base} + ({row0}) / {half} * {box}", k, f"(({row0}) % {half} + {row}) * 2")


def _layout_words(operand: str, major: str) -> str:
    """The span (and, MN-major, the box bytes) of ``operand``'s layout constant."""
    box = f", {operand}_box = (u32)({operand}_layout >> 16)" if major == "mn" else ""
    return f"  const u32 {operand}_span = (u32)({operand}_layout & 0xffff){box};\n"


_LANE = "  const u32 lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;\n"
#: The fragment loads' template flag: the lanes' offsets worked out apart from the tile's
#: address (``swizzled_row``: loop-invariant, so kept in registers), or the address
#: swizzled where it is used (``swizzled``: fewer live registers).
SPLIT = "SPLIT"


def _address(base: str, major: str, row: str, k: str, span: str, box: str,
             row0: str = "0") -> str:
    """The lane's swizzled address, by either form as ``SPLIT`` says (a compile-time
    choice: the other form's text is dropped)."""
    place = ", ".join(tile_place(base, major, row, k, span, box, row0))
    whole = tile_address(base, major, row if row0 == "0" else f"{row0} + {row}", k, span, box)
    return f"{SPLIT} ? swizzled_row({place}, {span}) : swizzled({whole}, {span})"
_SECTION = '9.7.14.5.15 "ldmatrix", 9.7.14.5.8 "Matrix Fragments for mma.m16n8k16"'


def a_fragment(a_major: Literal["k", "mn"]) -> Snippet:
    """``ldsm_a_<major>(a, a_addr, a_layout)``: this warp's 16 rows of A at a k step, the
    four registers of its ``mma.sync`` (one ``ldmatrix.x4``, transposed where A is MN-major)."""
    row, k = A_LANES[a_major]
    load = "ldmatrix_x4_trans" if a_major == "mn" else "ldmatrix_x4"
    address = _address("a_addr", a_major, row, k, "a_span", "a_box")
    return Snippet(
        f"ldsm_a_{a_major}",
        f"// This warp's 16 rows of a {a_major.upper()}-major A at a k step: the four registers"
        " of its mma.sync.\n"
        f"template <bool {SPLIT}>\n"
        f"__device__ __forceinline__ void ldsm_a_{a_major}(u32 (&a)[4], u32 a_addr, "
        "u64 a_layout) {\n" + _LANE + _layout_words("a", a_major)
        + f"  {load}({address}, a[0], a[1], a[2], a[3]);\n}}\n",
        requires=("types", "swizzled", "swizzled_row", load),
        section=_SECTION,
    )


def b_fragments(b_major: Literal["k", "mn"], columns: Literal[8, 16]) -> Snippet:
    """``ldsm_b_<major>_<columns>(b, b_addr, n0, b_layout)``: B at a k step, columns
    ``n0`` .. ``+ columns``: b0, b1 of each 8 (one ``ldmatrix.x4`` or ``.x2``)."""
    row, k = B_LANES[b_major]
    wide = columns == 16
    load = ("ldmatrix_x4" if wide else "ldmatrix_x2") + ("_trans" if b_major == "mn" else "")
    address = _address("b_addr", b_major, row, k, "b_span", "b_box", row0="n0")
    regs = ", ".join(f"b[{i}]" for i in range(4 if wide else 2))
    name = f"ldsm_b_{b_major}_{columns}"
    return Snippet(
        name,
        f"// {columns} columns of a {b_major.upper()}-major B at a k step, from column n0: "
        "b0, b1 of each 8.\n"
        f"template <bool {SPLIT}>\n"
        f"__device__ __forceinline__ void {name}(u32 (&b)[{4 if wide else 2}], u32 b_addr, "
        "u32 n0, u64 b_layout) {\n"
        "  const u32 lane = threadIdx.x % 32;\n" + _layout_words("b", b_major)
        + f"  {load}({address}, {regs});\n}}\n",
        requires=("types", "swizzled", "swizzled_row", load),
        section=_SECTION,
    )


def instruction(dtype: str, fresh: bool = False) -> Snippet:
    """``mma_m16n8k<k>_<type>(c, a0..a3, b0, b1)``: one ``mma.sync`` adding into the four
    fp32 accumulators at ``c``; ``fresh``: writing them (C = 0, their values not read), so
    a product's first step needs no pass that zeroes the accumulators."""
    ptx, k = _ptx(dtype), k_step(dtype)
    name = f"mma_m16n8k{k}_{ptx}" + ("_fresh" if fresh else "")
    # Operands: %0-%3 the accumulators, %4-%7 A, then (fresh) %8 a zero for all of C, then B.
    what, out = ("=", '"=f"') if fresh else ("+=", '"+f"')
    c_in, b_regs = ("{%8, %8, %8, %8}", "{%9, %10}") if fresh else ("{%0, %1, %2, %3}", "{%8, %9}")
    zero = ', "f"(0.0f)' if fresh else ""
    inputs = f'"r"(a0), "r"(a1), "r"(a2), "r"(a3){zero}, "r"(b0), "r"(b1)'
    return Snippet(
        name,
        f"// C(16x8, fp32) {what} A(16x{k}) B({k}x8), {ptx}: one warp's mma.sync.\n"
        f"__device__ __forceinline__ void {name}(float* c, u32 a0, u32 a1, u32 a2, u32 a3,\n"
        f"{' ' * (len(name) + 33)}u32 b0, u32 b1) {{\n"
        f'  asm("mma.sync.aligned.m16n8k{k}.row.col.f32.{ptx}.{ptx}.f32 "\n'
        f'      "{{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {b_regs}, {c_in};"\n'
        f'      : {out}(c[0]), {out}(c[1]), {out}(c[2]), {out}(c[3])\n'
        f'      : {inputs});\n'
        "}\n",
        requires=("types",),
        section='9.7.14.5.14 "mma"',
    )


def check_shape(n: int, dtype: str, a_major: str, b_major: str) -> None:
    """Raise ValueError for a product these instructions do not compute."""
    if n % N_STEP or not N_STEP <= n <= N_MAX:
        raise ValueError(f"mma.sync warpgroup N={n} is not a multiple of 8 in [8, 256]")
    if dtype in PTX_FP8_TYPE and (a_major != "k" or b_major != "k"):
        raise ValueError("mma.sync: 8-bit floats are read K-major only (no ldmatrix.trans)")
    _ptx(dtype)


__all__ = ["A_LANES", "BLOCK_ROWS", "B_LANES", "N_MAX", "N_STEP", "SmemTile", "a_fragment",
           "b_fragments", "check_shape", "instruction", "k_step", "tile_address", "tile_place"]
