"""fp32 -> fp16 / bf16 conversions in inline PTX (no ``cuda_fp16.h`` under NVRTC).

``cvt.rn.f16x2.f32 d, a, b`` puts ``a`` in the upper and ``b`` in the lower half of ``d``
(PTX ISA 9.7.9.21, "cvt"); ``pack_*`` take (low, high) in memory order.
"""

from __future__ import annotations

from codegen.cuda._snippet import Snippet, register

#: PTX type names of the element types the renderers support.
PTX_TYPE = {"float16": "f16", "bfloat16": "bf16"}


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


register(*(_pack(p) for p in PTX_TYPE.values()), *(_single(p) for p in PTX_TYPE.values()))


def pack2(dtype: str) -> str:
    """Name of the pair-packing snippet for ``dtype``."""
    return f"pack_{PTX_TYPE[dtype]}x2"


def single(dtype: str) -> str:
    """Name of the single-element conversion snippet for ``dtype``."""
    return f"to_{PTX_TYPE[dtype]}"
