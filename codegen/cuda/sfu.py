"""The special function unit: approximate exp2 and reciprocal, one MUFU instruction each.

``ex2.approx.ftz.f32`` computes 2^x with a maximum relative error of 2^-22 over the full
range (subnormal results flushed to zero); ``rcp.approx.ftz.f32`` 1/x likewise (PTX ISA
9.7.3.21 "ex2", 9.7.3.16 "rcp"). Online softmax scales scores by ``log2(e) / sqrt(d)`` once
so every exponential is an exp2.
"""

from __future__ import annotations

from codegen.cuda._snippet import Snippet, register

EXP2 = Snippet(
    "exp2_approx",
    "// 2^x on the SFU (ex2.approx: 2^-22 relative error, -inf -> 0).\n"
    "__device__ __forceinline__ float exp2_approx(float x) {\n"
    "  float y;\n"
    '  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));\n'
    "  return y;\n"
    "}\n",
    section='9.7.3.21 "ex2"',
)

RCP = Snippet(
    "rcp_approx",
    "// 1/x on the SFU (rcp.approx).\n"
    "__device__ __forceinline__ float rcp_approx(float x) {\n"
    "  float y;\n"
    '  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));\n'
    "  return y;\n"
    "}\n",
    section='9.7.3.16 "rcp"',
)

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 90

register(EXP2, RCP, rank=PRELUDE_RANK)
