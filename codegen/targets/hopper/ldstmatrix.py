"""ldmatrix / stmatrix: 8x8 b16 matrices between registers and shared memory, a warp at a
time (PTX ISA 9.7.14.5.15 "ldmatrix", 9.7.14.5.16 "stmatrix").

With ``.x4`` a warp moves four matrices; lane ``l`` gives the address of row ``l % 8`` of
matrix ``l / 8``, and register ``r_i`` of every lane holds its two elements of matrix ``i``
(lane ``l``: row ``l / 4``, columns ``2 * (l % 4)`` and ``+1``). That is exactly the layout of
a wgmma fp32 accumulator after packing pairs to 16 bits, so the epilogue stores 16x16
blocks of C with one instruction.
"""

from __future__ import annotations

from codegen.cuda._snippet import Snippet, register

STMATRIX_X4 = Snippet(
    "stmatrix_x4",
    "// Store four 8x8 b16 matrices; this lane's address is row (lane % 8) of matrix lane / 8.\n"
    "__device__ __forceinline__ void stmatrix_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {\n"
    '  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"\n'
    '               :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.14.5.16 "stmatrix"',
)

STMATRIX_X4_TRANS = Snippet(
    "stmatrix_x4_trans",
    "// Store four 8x8 b16 matrices transposed: register i of lane l holds row l / 4,\n"
    "// columns 2 (l % 4) and +1 of matrix i's transpose; this lane's address is row\n"
    "// (lane % 8) of stored matrix lane / 8 (a C^T fragment written as C).\n"
    "__device__ __forceinline__ void stmatrix_x4_trans(u32 addr, u32 r0, u32 r1, u32 r2,\n"
    "                                                  u32 r3) {\n"
    '  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"\n'
    '               :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.14.5.16 "stmatrix"',
)

STMATRIX_X2_TRANS = Snippet(
    "stmatrix_x2_trans",
    "// Two 8x8 b16 matrices transposed, as stmatrix_x4_trans; lanes 0-15 give the rows.\n"
    "__device__ __forceinline__ void stmatrix_x2_trans(u32 addr, u32 r0, u32 r1) {\n"
    '  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};"\n'
    '               :: "r"(addr), "r"(r0), "r"(r1) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.14.5.16 "stmatrix"',
)

LDMATRIX_X4 = Snippet(
    "ldmatrix_x4",
    "// Load four 8x8 b16 matrices; this lane's address is row (lane % 8) of matrix lane / 8.\n"
    "__device__ __forceinline__ void ldmatrix_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {\n"
    '  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"\n'
    '               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.14.5.15 "ldmatrix"',
)

LDMATRIX_X4_TRANS = Snippet(
    "ldmatrix_x4_trans",
    "// Load four 8x8 b16 matrices transposed: register i of lane l holds row l / 4, columns\n"
    "// 2 (l % 4) and +1 of matrix i's transpose (a K x M tile read as wgmma's M x K A).\n"
    "__device__ __forceinline__ void ldmatrix_x4_trans(u32 addr, u32& r0, u32& r1, u32& r2,\n"
    "                                                  u32& r3) {\n"
    '  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"\n'
    '               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.14.5.15 "ldmatrix"',
)

LD_SHARED_F32X2 = Snippet(
    "ld_shared_f32x2",
    "// Two adjacent fp32 values from shared memory (8-byte aligned address).\n"
    "__device__ __forceinline__ float2 ld_shared_f32x2(u32 addr) {\n"
    "  float2 v;\n"
    '  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr)\n'
    '               : "memory");\n'
    "  return v;\n"
    "}\n",
    requires=("types",),
    section='9.7.9.8 "ld"',
)

LD_SHARED_F32 = Snippet(
    "ld_shared_f32",
    "// One fp32 value from shared memory.\n"
    "__device__ __forceinline__ float ld_shared_f32(u32 addr) {\n"
    "  float v;\n"
    '  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");\n'
    "  return v;\n"
    "}\n",
    requires=("types",),
    section='9.7.9.8 "ld"',
)

ST_SHARED_F32X2 = Snippet(
    "st_shared_f32x2",
    "// Two adjacent fp32 values to shared memory (8-byte aligned address).\n"
    "__device__ __forceinline__ void st_shared_f32x2(u32 addr, float x, float y) {\n"
    '  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(addr), "f"(x), "f"(y)\n'
    '               : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.9.10 "st"',
)

ST_SHARED_F32 = Snippet(
    "st_shared_f32",
    "// One fp32 value to shared memory.\n"
    "__device__ __forceinline__ void st_shared_f32(u32 addr, float x) {\n"
    '  asm volatile("st.shared.f32 [%0], %1;" :: "r"(addr), "f"(x) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.9.10 "st"',
)

LD_SHARED_U32X4 = Snippet(
    "ld_shared_u32x4",
    "// Sixteen bytes from shared memory (16-byte aligned address).\n"
    "__device__ __forceinline__ uint4 ld_shared_u32x4(u32 addr) {\n"
    "  uint4 v;\n"
    '  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"\n'
    '               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");\n'
    "  return v;\n"
    "}\n",
    requires=("types",),
    section='9.7.9.8 "ld"',
)

ST_SHARED_U32 = Snippet(
    "st_shared_u32",
    "// One 32-bit word (a 16-bit pair) to shared memory.\n"
    "__device__ __forceinline__ void st_shared_u32(u32 addr, u32 x) {\n"
    '  asm volatile("st.shared.u32 [%0], %1;" :: "r"(addr), "r"(x) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.9.10 "st"',
)

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 60

register(STMATRIX_X4, STMATRIX_X4_TRANS, STMATRIX_X2_TRANS, LDMATRIX_X4, LDMATRIX_X4_TRANS,
         LD_SHARED_F32X2, LD_SHARED_F32, ST_SHARED_F32X2, ST_SHARED_F32, LD_SHARED_U32X4,
         ST_SHARED_U32, rank=PRELUDE_RANK)
