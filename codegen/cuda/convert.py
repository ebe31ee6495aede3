"""fp32 -> fp16 / bf16 conversions in inline PTX (no ``cuda_fp16.h`` under NVRTC).

``cvt.rn.f16x2.f32 d, a, b`` puts ``a`` in the upper and ``b`` in the lower half of ``d``
(PTX ISA 9.7.9.21, "cvt"); ``pack_*`` take (low, high) in memory order.
"""

from __future__ import annotations

from codegen.cuda._snippet import Snippet, register

#: PTX type names of the 16-bit element types the renderers support (inputs and outputs).
PTX_TYPE = {"float16": "f16", "bfloat16": "bf16"}
#: PTX type names of the 8-bit float inputs the MMA multiplies (never an output here).
PTX_FP8_TYPE = {"float8_e4m3": "e4m3", "float8_e5m2": "e5m2"}


def _pack(ptx: str) -> Snippet:
    return Snippet(
        f"pack_{ptx}x2",
        f"// Two fp32 values as one {ptx}x2 word: `lo` at the lower address.\n"
        f"__device__ __forceinline__ u32 pack_{ptx}x2(float lo, float hi) {{\n"
        "  u32 packed;\n"
        f'  asm("cvt.rn.{ptx}x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));\n'
        "  return packed;\n"
        "}\n",
        requires=("types",),
        section='9.7.9.21 "cvt"',
    )


def _single(ptx: str) -> Snippet:
    return Snippet(
        f"to_{ptx}",
        f"// One fp32 value rounded to {ptx}, as its 16 bits.\n"
        f"__device__ __forceinline__ unsigned short to_{ptx}(float x) {{\n"
        "  unsigned short bits;\n"
        f'  asm("cvt.rn.{ptx}.f32 %0, %1;" : "=h"(bits) : "f"(x));\n'
        "  return bits;\n"
        "}\n",
        section='9.7.9.21 "cvt"',
    )


UNPACK_F16X2 = Snippet(
    "unpack_f16x2",
    "// An f16x2 word as two fp32 values (`lo`: the half at the lower address).\n"
    "__device__ __forceinline__ float2 unpack_f16x2(u32 packed) {\n"
    "  float2 v;\n"
    '  asm("{ .reg .f16 lo, hi; mov.b32 {lo, hi}, %2; cvt.f32.f16 %0, lo; cvt.f32.f16 %1, hi; }"\n'
    '      : "=f"(v.x), "=f"(v.y) : "r"(packed));\n'
    "  return v;\n"
    "}\n",
    requires=("types",),
    section='9.7.9.21 "cvt"',
)

UNPACK_BF16X2 = Snippet(
    "unpack_bf16x2",
    "// A bf16x2 word as two fp32 values: bf16 is the upper half of an fp32 (exact).\n"
    "__device__ __forceinline__ float2 unpack_bf16x2(u32 packed) {\n"
    "  return make_float2(__uint_as_float(packed << 16), __uint_as_float(packed & 0xffff0000u));\n"
    "}\n",
    requires=("types",),
    section='9.7.9.21 "cvt"',
)

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 40

register(*(_pack(p) for p in PTX_TYPE.values()), *(_single(p) for p in PTX_TYPE.values()),
         UNPACK_F16X2, UNPACK_BF16X2, rank=PRELUDE_RANK)


def pack2(dtype: str) -> str:
    """Name of the pair-packing snippet for ``dtype``."""
    return f"pack_{PTX_TYPE[dtype]}x2"


def unpack2(dtype: str) -> str:
    """Name of the snippet that widens a 16-bit pair of ``dtype`` to two fp32 values."""
    return f"unpack_{PTX_TYPE[dtype]}x2"


def single(dtype: str) -> str:
    """Name of the single-element conversion snippet for ``dtype``."""
    return f"to_{PTX_TYPE[dtype]}"
