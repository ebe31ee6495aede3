"""Basic device types: fixed-width integers without host headers (NVRTC has none) and
the shared-memory address of a generic pointer."""

from __future__ import annotations

from codegen.cuda._snippet import Snippet, register

TYPES = Snippet(
    "types",
    "typedef unsigned int u32;\ntypedef unsigned long long u64;\n",
)

SMEM_U32 = Snippet(
    "smem_u32",
    "// The 32-bit shared-state-space address of a generic pointer into shared memory.\n"
    "__device__ __forceinline__ u32 smem_u32(const void* p) {\n"
    "  return (u32)__cvta_generic_to_shared(p);\n"
    "}\n",
    requires=("types",),
    section='9.7.9.21 "cvta" (through __cvta_generic_to_shared)',
)

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 20

register(TYPES, SMEM_U32, rank=PRELUDE_RANK)
