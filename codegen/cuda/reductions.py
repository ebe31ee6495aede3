"""Reductions into global memory: sums many blocks add into one place.

``red.global.add.v4.f32`` adds four adjacent fp32 values at L2 without returning the old
ones (PTX ISA 9.7.12.7 "red", vector forms since PTX 8.1 for sm_90): attention backward's
dq parts from every key tile of a query tile meet this way, one L2 operation per four
values (``.v2``, two, where a kernel cannot gather four in a lane). ``ld.acquire.gpu`` ("ld", with
the memory consistency model's acquire semantics) reads a count other blocks raise
after their sums, so that sums behind it run in a fixed order (a deterministic dq).
"""

from __future__ import annotations

from codegen.cuda._snippet import Snippet, register

RED_ADD_F32X2 = Snippet(
    "red_add_f32x2",
    "// *addr += x, *(addr + 1) += y, atomically at L2 (8-byte aligned address).\n"
    "__device__ __forceinline__ void red_add_f32x2(float* addr, float x, float y) {\n"
    '  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" :: "l"(addr), "f"(x), "f"(y)\n'
    '               : "memory");\n'
    "}\n",
    section='9.7.12.7 "red"',
)

RED_ADD_F32X4 = Snippet(
    "red_add_f32x4",
    "// addr[0..3] += (x, y, z, w), atomically at L2 (16-byte aligned address).\n"
    "__device__ __forceinline__ void red_add_f32x4(float* addr, float x, float y, float z,\n"
    "                                              float w) {\n"
    '  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};"\n'
    '               :: "l"(addr), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");\n'
    "}\n",
    section='9.7.12.7 "red"',
)

LD_ACQUIRE_U32 = Snippet(
    "ld_acquire_u32",
    "// *addr, read with acquire semantics at GPU scope: what its writer did before its\n"
    "// release (a fence, then the write) is visible to what this thread does after.\n"
    "__device__ __forceinline__ unsigned int ld_acquire_u32(const unsigned int* addr) {\n"
    "  unsigned int v;\n"
    '  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(addr) : "memory");\n'
    "  return v;\n"
    "}\n",
    section='"ld" (.acquire: the memory consistency model)',
)

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 55

register(RED_ADD_F32X2, rank=PRELUDE_RANK)
register(RED_ADD_F32X4, rank=PRELUDE_RANK)
register(LD_ACQUIRE_U32, rank=PRELUDE_RANK)
