"""Warpgroup products from ``mma.sync`` (sm_80, sm_86, sm_89): Hopper's warpgroup MMA
shape, written as four warps of ``m16n8k16`` fed by ``ldmatrix``.

A product the operators describe as ``m64nNk16`` (64 rows of A per block) is run by the
block's four warps, warp ``w`` on rows ``16 w .. 16 w + 15``: per k16 step it loads its 16 x
16 of A with one ``ldmatrix.x4`` (transposed where A is MN-major in shared memory), then per
16 columns of B one ``ldmatrix.x4`` (transposed where B is MN-major) and two ``mma.sync``.
The accumulators land where Hopper's would (:mod:`codegen.targets.fragment`), and a register
A operand (attention's P) is the same four registers. ``scale_d == 0`` starts from zero, as
Hopper's does. The operand tiles are the ones the copies wrote, TMA's layout: rows one
swizzle span apart, 16-byte chunks XORed with the row (the swizzle of the absolute shared
address, :mod:`codegen.cuda.swizzle`); an MN-major tile in boxes one span wide along M / N.

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

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 125

register(LDMATRIX_X2, LDMATRIX_X2_TRANS, SWIZZLED, rank=PRELUDE_RANK)


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


def _layout_words(operand: str, major: str) -> str:
    """The span (and, MN-major, the box bytes) of ``operand``'s layout constant."""
    box = f", {operand}_box = (u32)({operand}_layout >> 16)" if major == "mn" else ""
    return f"  const u32 {operand}_span = (u32)({operand}_layout & 0xffff){box};\n"


def name(n: int, dtype: str, b_major: str, a_major: str, a_in_registers: bool) -> str:
    a = "rs" if a_in_registers else f"a{a_major}"
    return f"mma_sync_m64n{n}k{k_step(dtype)}_{_ptx(dtype)}_{a}_b{b_major}"


def mma(n: int, dtype: str, b_major: Literal["k", "mn"],
        a_major: Literal["k", "mn"] = "k", *, a_in_registers: bool = False) -> Snippet:
    """``D(64 x n, fp32) (+)= A(64 x 16) B(16 x n)`` by this warpgroup's four warps.

    Arguments: the n / 2 accumulators, A (its tile's address at the block and k step and
    its layout constant, or four registers), B's address at the k step and layout, and
    ``scale_d``.
    """
    if n % N_STEP or not N_STEP <= n <= N_MAX:
        raise ValueError(f"mma.sync warpgroup N={n} is not a multiple of 8 in [8, 256]")
    if dtype in PTX_FP8_TYPE and (a_major != "k" or b_major != "k"):
        raise ValueError("mma.sync: 8-bit floats are read K-major only (no ldmatrix.trans)")
    ptx, regs = _ptx(dtype), n // 2
    a_params = "u32 a0, u32 a1, u32 a2, u32 a3" if a_in_registers else "u32 a_addr, u64 a_layout"
    a_from = "registers" if a_in_registers else f"{a_major.upper()}-major"
    lines = [
        f"// D(64x{n}, fp32) (+)= A(64x{k_step(dtype)}, {a_from}) * B({k_step(dtype)}x{n}, "
        f"{b_major.upper()}-major), {ptx}: warp w of the\n"
        f"// warpgroup runs rows 16w..16w+15 as mma.sync m16n8k{k_step(dtype)} over the "
        "8-column groups.\n",
        f"__device__ __forceinline__ void {name(n, dtype, b_major, a_major, a_in_registers)}(\n"
        f"    float (&d)[{regs}], {a_params}, u32 b_addr, u64 b_layout, int scale_d) {{\n",
        "  const u32 lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;\n",
        _layout_words("b", b_major),
        "  if (!scale_d) {\n",
        "#pragma unroll\n",
        f"    for (int i = 0; i < {regs}; ++i) d[i] = 0.0f;\n",
        "  }\n",
    ]
    if not a_in_registers:
        row, k = A_LANES[a_major]
        load = "ldmatrix_x4_trans" if a_major == "mn" else "ldmatrix_x4"
        address = tile_address("a_addr", a_major, row, k, "a_span", "a_box")
        lines += [_layout_words("a", a_major),
                  "  u32 a0, a1, a2, a3;\n",
                  f"  {load}(swizzled({address}, a_span), a0, a1, a2, a3);\n"]
    row, k = B_LANES[b_major]
    b_load = "ldmatrix_x4_trans" if b_major == "mn" else "ldmatrix_x4"
    b_pair = tile_address("b_addr", b_major, f"n0 + {row}", k, "b_span", "b_box")
    lines += [
        "#pragma unroll\n",
        f"  for (int n0 = 0; n0 < {n - n % 16}; n0 += 16) {{\n",
        "    u32 b[4];\n",
        f"    {b_load}(swizzled({b_pair}, b_span), b[0], b[1], b[2], b[3]);\n",
        "#pragma unroll\n",
        "    for (int j = 0; j < 2; ++j) {\n",
        "      float* c = d + (n0 / 8 + j) * 4;\n",
        f"      {_mma_asm(ptx, k_step(dtype), 'b[2 * j]', 'b[2 * j + 1]')}",
        "    }\n",
        "  }\n",
    ]
    if n % 16:
        x2 = "ldmatrix_x2_trans" if b_major == "mn" else "ldmatrix_x2"
        tail = tile_address("b_addr", b_major, f"{n - 8} + {row}", k, "b_span", "b_box")
        lines += ["  {  // the last 8 columns\n",
                  "    u32 b0, b1;\n",
                  f"    {x2}(swizzled({tail}, b_span), b0, b1);\n",
                  f"    float* c = d + {(n - 8) // 8 * 4};\n",
                  f"    {_mma_asm(ptx, k_step(dtype), 'b0', 'b1')}",
                  "  }\n"]
    lines.append("}\n")
    requires = ["types", "swizzled", b_load, *(["ldmatrix_x2_trans" if b_major == "mn"
                                                 else "ldmatrix_x2"] if n % 16 else [])]
    if not a_in_registers:
        requires.append("ldmatrix_x4_trans" if a_major == "mn" else "ldmatrix_x4")
    return Snippet(name(n, dtype, b_major, a_major, a_in_registers), "".join(lines),
                   requires=tuple(dict.fromkeys(requires)),
                   section='9.7.14.5.14 "mma" (m16n8k16), 9.7.14.5.15 "ldmatrix"')


def _mma_asm(ptx: str, k: int, b0: str, b1: str) -> str:
    """One ``mma.sync m16n8k{k}`` into the four accumulators at ``c``."""
    return (f'asm("mma.sync.aligned.m16n8k{k}.row.col.f32.{ptx}.{ptx}.f32 "\n'
            '                   "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, '
            '{%0, %1, %2, %3};"\n'
            '                   : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])\n'
            '                   : "r"(a0), "r"(a1), "r"(a2), "r"(a3), '
            f'"r"({b0}), "r"({b1}));\n')


__all__ = ["A_LANES", "BLOCK_ROWS", "B_LANES", "N_MAX", "N_STEP", "SmemTile", "k_step", "mma",
           "tile_address"]
