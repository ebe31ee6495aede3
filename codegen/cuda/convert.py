"""fp32 -> fp16 / bf16 / e4m3 conversions in inline PTX (no ``cuda_fp16.h`` under NVRTC),
and byte permutes.

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

PACK_E4M3X4 = Snippet(
    "pack_e4m3x4",
    "// Four fp32 values as the four e4m3 bytes of one word (`e0` in the lowest), rounded to\n"
    "// nearest and saturated to the largest finite value.\n"
    "__device__ __forceinline__ u32 pack_e4m3x4(float e0, float e1, float e2, float e3) {\n"
    "  u32 packed;\n"
    '  asm("{ .reg .b16 lo, hi;\\n"\n'
    '      " cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\\n"\n'
    '      " cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\\n"\n'
    '      " mov.b32 %0, {lo, hi}; }"\n'
    '      : "=r"(packed) : "f"(e0), "f"(e1), "f"(e2), "f"(e3));\n'
    "  return packed;\n"
    "}\n",
    requires=("types",),
    section='9.7.9.21 "cvt"',
)

BYTE_PERM = Snippet(
    "byte_perm",
    "// The bytes of {y, x} picked by the four nibbles of `selector` (byte i of the result:\n"
    "// nibble i, 0-3 from x, 4-7 from y).\n"
    "__device__ __forceinline__ u32 byte_perm(u32 x, u32 y, u32 selector) {\n"
    "  u32 picked;\n"
    '  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(picked) : "r"(x), "r"(y), "r"(selector));\n'
    "  return picked;\n"
    "}\n",
    requires=("types",),
    section='"prmt" (data movement: byte permute)',
)

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 40

register(*(_pack(p) for p in PTX_TYPE.values()), *(_single(p) for p in PTX_TYPE.values()),
         UNPACK_F16X2, UNPACK_BF16X2, PACK_E4M3X4, BYTE_PERM, rank=PRELUDE_RANK)


def pack2(dtype: str) -> str:
    """Name of the pair-packing snippet for ``dtype``."""
    return f"pack_{PTX_TYPE[dtype]}x2"


def unpack2(dtype: str) -> str:
    """Name of the snippet that widens a 16-bit pair of ``dtype`` to two fp32 values."""
    return f"unpack_{PTX_TYPE[dtype]}x2"


def single(dtype: str) -> str:
    """Name of the single-element conversion snippet for ``dtype``."""
    return f"to_{PTX_TYPE[dtype]}"
