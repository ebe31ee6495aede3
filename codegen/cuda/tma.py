"""TMA (the bulk tensor copy engine): tensor maps, tiled loads and stores.

The tensor map (``CUtensorMap``, 128 opaque bytes) is encoded on the host by
``cuTensorMapEncodeTiled`` from a ``TensorMapArg`` and passed by value as a
``const __grid_constant__`` kernel parameter, 64-byte aligned; NVRTC has no CUDA headers,
so the kernel declares its own ``TensorMap`` of that size. Loads complete on an mbarrier
(``complete_tx::bytes``); out-of-bounds box elements are filled with zeros and still count
as transferred bytes. Stores go through bulk groups and are clipped at the tensor bounds
(PTX ISA 9.7.9.25, "cp.async.bulk.tensor"; 9.7.9.27 "cp.async.bulk.commit_group /
wait_group").
"""

from __future__ import annotations

from codegen.cuda._snippet import Snippet, register

TENSOR_MAP = Snippet(
    "TensorMap",
    "// CUtensorMap without the CUDA headers: 128 opaque bytes, 64-byte aligned.\n"
    "struct alignas(64) TensorMap { u64 opaque[16]; };\n",
    requires=("types",),
)

PREFETCH = Snippet(
    "tma_prefetch_descriptor",
    "// Bring a tensor map into the descriptor cache before its first use.\n"
    "__device__ __forceinline__ void tma_prefetch_descriptor(const TensorMap* map) {\n"
    '  asm volatile("prefetch.tensormap [%0];" :: "l"((u64)map) : "memory");\n'
    "}\n",
    requires=("TensorMap",),
    section='9.7.9.15 "prefetch" (prefetch.tensormap)',
)

LOAD_2D = Snippet(
    "tma_load_2d",
    "// Copy the box at coordinates (c0 innermost, c1) of `map` into shared memory at `dst`;\n"
    "// its bytes complete a transaction on the mbarrier `bar`.\n"
    "__device__ __forceinline__ void tma_load_2d(u32 dst, const TensorMap* map, int c0, int c1,\n"
    "                                            u32 bar) {\n"
    '  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"\n'
    '               " [%0], [%1, {%2, %3}], [%4];"\n'
    '               :: "r"(dst), "l"((u64)map), "r"(c0), "r"(c1), "r"(bar) : "memory");\n'
    "}\n",
    requires=("TensorMap",),
    section='9.7.9.25.5.2 "cp.async.bulk.tensor"',
)

LOAD_2D_MULTICAST = Snippet(
    "tma_load_2d_multicast",
    "// Copy the box at (c0, c1) of `map` to shared offset `dst` of every block in\n"
    "// `cta_mask`; its bytes complete a transaction on the mbarrier at offset `bar` of each.\n"
    "__device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const TensorMap* map,\n"
    "                                                      int c0, int c1, u32 bar,\n"
    "                                                      unsigned short cta_mask) {\n"
    '  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"\n'
    '               ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;"\n'
    '               :: "r"(dst), "l"((u64)map), "r"(c0), "r"(c1), "r"(bar), "h"(cta_mask)\n'
    '               : "memory");\n'
    "}\n",
    requires=("TensorMap",),
    section='9.7.9.25.5.2 "cp.async.bulk.tensor" (.multicast::cluster)',
)

LOAD_3D = Snippet(
    "tma_load_3d",
    "// Copy the box at coordinates (c0 innermost, c1, c2) of a rank-3 `map` into shared\n"
    "// memory at `dst` (e.g. rows of one head of a (rows, heads, dim) tensor).\n"
    "__device__ __forceinline__ void tma_load_3d(u32 dst, const TensorMap* map, int c0,\n"
    "                                            int c1, int c2, u32 bar) {\n"
    '  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"\n'
    '               " [%0], [%1, {%2, %3, %4}], [%5];"\n'
    '               :: "r"(dst), "l"((u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)\n'
    '               : "memory");\n'
    "}\n",
    requires=("TensorMap",),
    section='9.7.9.25.5.2 "cp.async.bulk.tensor"',
)

LOAD_3D_MULTICAST = Snippet(
    "tma_load_3d_multicast",
    "// Copy the box at (c0, c1, c2) of a rank-3 `map` to shared offset `dst` of every block\n"
    "// in `cta_mask`; its bytes complete a transaction on the mbarrier at offset `bar` of each.\n"
    "__device__ __forceinline__ void tma_load_3d_multicast(u32 dst, const TensorMap* map,\n"
    "                                                      int c0, int c1, int c2, u32 bar,\n"
    "                                                      unsigned short cta_mask) {\n"
    '  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"\n'
    '               ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;"\n'
    '               :: "r"(dst), "l"((u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar),\n'
    '                  "h"(cta_mask) : "memory");\n'
    "}\n",
    requires=("TensorMap",),
    section='9.7.9.25.5.2 "cp.async.bulk.tensor" (.multicast::cluster)',
)

LOAD_4D = Snippet(
    "tma_load_4d",
    "// Copy the box at coordinates (c0 innermost, c1, c2, c3) of a rank-4 `map` into shared\n"
    "// memory at `dst` (e.g. rows of one head of a (batch, seq, heads, dim) tensor).\n"
    "__device__ __forceinline__ void tma_load_4d(u32 dst, const TensorMap* map, int c0,\n"
    "                                            int c1, int c2, int c3, u32 bar) {\n"
    '  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"\n'
    '               " [%0], [%1, {%2, %3, %4, %5}], [%6];"\n'
    '               :: "r"(dst), "l"((u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)\n'
    '               : "memory");\n'
    "}\n",
    requires=("TensorMap",),
    section='9.7.9.25.5.2 "cp.async.bulk.tensor"',
)

STORE_2D = Snippet(
    "tma_store_2d",
    "// Copy shared memory at `src` to the box at (c0, c1) of `map`, clipped at the tensor's\n"
    "// bounds; completes with the thread's next bulk group.\n"
    "__device__ __forceinline__ void tma_store_2d(const TensorMap* map, int c0, int c1,\n"
    "                                             u32 src) {\n"
    '  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"\n'
    '               :: "l"((u64)map), "r"(c0), "r"(c1), "r"(src) : "memory");\n'
    "}\n",
    requires=("TensorMap",),
    section='9.7.9.25.5.2 "cp.async.bulk.tensor"',
)

STORE_3D = Snippet(
    "tma_store_3d",
    "// Copy shared memory at `src` to the box at (c0 innermost, c1, c2) of a rank-3 `map`,\n"
    "// clipped at its bounds; completes with the thread's next bulk group.\n"
    "__device__ __forceinline__ void tma_store_3d(const TensorMap* map, int c0, int c1, int c2,\n"
    "                                             u32 src) {\n"
    '  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group"\n'
    '               " [%0, {%1, %2, %3}], [%4];"\n'
    '               :: "l"((u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(src) : "memory");\n'
    "}\n",
    requires=("TensorMap",),
    section='9.7.9.25.5.2 "cp.async.bulk.tensor"',
)

STORE_4D = Snippet(
    "tma_store_4d",
    "// Copy shared memory at `src` to the box at (c0 innermost, c1, c2, c3) of a rank-4 `map`\n"
    "// (rows of one or several heads of a (batch, seq, heads, dim) tensor), clipped at its\n"
    "// bounds; completes with the thread's next bulk group.\n"
    "__device__ __forceinline__ void tma_store_4d(const TensorMap* map, int c0, int c1, int c2,\n"
    "                                             int c3, u32 src) {\n"
    '  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group"\n'
    '               " [%0, {%1, %2, %3, %4}], [%5];"\n'
    '               :: "l"((u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)\n'
    '               : "memory");\n'
    "}\n",
    requires=("TensorMap",),
    section='9.7.9.25.5.2 "cp.async.bulk.tensor"',
)

STORE_COMMIT = Snippet(
    "tma_store_commit",
    "// Close the bulk group of the stores issued so far by this thread.\n"
    "__device__ __forceinline__ void tma_store_commit() {\n"
    '  asm volatile("cp.async.bulk.commit_group;" ::: "memory");\n'
    "}\n",
    section='9.7.9.27 "cp.async.bulk.commit_group"',
)

STORE_WAIT_READS = Snippet(
    "tma_store_wait_reads",
    "// Wait until at most PENDING bulk groups still read their shared-memory source.\n"
    "template <int PENDING> __device__ __forceinline__ void tma_store_wait_reads() {\n"
    '  asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(PENDING) : "memory");\n'
    "}\n",
    section='9.7.9.28 "cp.async.bulk.wait_group"',
)

STORE_WAIT = Snippet(
    "tma_store_wait",
    "// Wait until at most PENDING bulk groups of this thread are incomplete (writes done).\n"
    "template <int PENDING> __device__ __forceinline__ void tma_store_wait() {\n"
    '  asm volatile("cp.async.bulk.wait_group %0;" :: "n"(PENDING) : "memory");\n'
    "}\n",
    section='9.7.9.28 "cp.async.bulk.wait_group"',
)

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 110

register(
    TENSOR_MAP, PREFETCH, LOAD_2D, LOAD_2D_MULTICAST, LOAD_3D, LOAD_3D_MULTICAST, LOAD_4D,
    STORE_2D, STORE_3D, STORE_4D, STORE_COMMIT, STORE_WAIT_READS, STORE_WAIT,
    rank=PRELUDE_RANK,
)

#: Largest box extent per dimension (cuTensorMapEncodeTiled).
BOX_DIM_MAX = 256
