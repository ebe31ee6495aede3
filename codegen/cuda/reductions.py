"""Reductions into global memory: sums many blocks add into one place.

``red.global.add.v2.f32`` adds two adjacent fp32 values at L2 without returning the old
ones (PTX ISA 9.7.12.7 "red", vector forms since PTX 8.1 for sm_90): attention backward's
dq parts from every key tile of a query tile meet this way.
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

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 55

register(RED_ADD_F32X2, rank=PRELUDE_RANK)
