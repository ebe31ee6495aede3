"""Tile copies without TMA (sm_80, sm_86, sm_89): ``cp.async`` by the loading threads.

The kernels ask for a tile exactly as on Hopper: ``tma_load_2d(dst, &map, c0, c1, bar)``
(and the 3-d and 4-d forms). On these architectures that call is this module's text: the
first ``LOADERS`` threads of the loading warpgroup each copy every ``LOADERS``-th 16-byte
chunk of the box with ``cp.async``, writing it where TMA would (rows of the box's inner
extent, the chunk index XORed with the row as the map's swizzle says, zeros for elements
outside the tensor: ``src-size`` short of 16 fills the rest with zeros). The map is not a
``CUtensorMap`` but pipetune's own 128 bytes (:data:`COPY_MAP_FIELDS`), filled on the host
from the same ``TensorMapArg``; the kernel types it ``TensorMapOf<...>`` with the box's
geometry (:func:`map_type`), so each thread's copies unroll over constants. A thread's
copies complete a stage's full barrier through ``cp.async.mbarrier.arrive.noinc``, one
arrival per loading thread (PTX ISA 9.7.9.25.3 "cp.async", 9.7.9.25.3.3
"cp.async.mbarrier.arrive"; mbarriers themselves are sm_80).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen.cuda._snippet import Snippet, register
from scheduler_search.ops import DTYPE_BYTES

if TYPE_CHECKING:
    from codegen.artifact import TensorMapArg

#: The copy map's fields in order, as the host packs them (little-endian, 128 bytes, the
#: size and alignment of a ``CUtensorMap``, so a kernel argument is passed the same way).
COPY_MAP_FIELDS = (
    ("base", "u64", 1),           # the tensor's global address
    ("strides", "u64", 4),        # bytes between steps of dimensions 1..4
    ("dims", "u32", 5),           # the tensor's extent per dimension (1 past its rank)
    ("box", "u32", 5),            # the box's extent per dimension (1 past its rank)
    ("elem_shift", "u32", 1),     # log2 of the element's bytes
    ("swizzle_bytes", "u32", 1),  # 0 (none), 32, 64 or 128
    ("rank", "u32", 1),
    ("row_shift", "u32", 1),      # log2 of a box row's 16-byte chunks
)
COPY_MAP_BYTES = 128
#: The copy map's rank limit (the kernels' tile loads are at most 4-d).
COPY_MAP_RANK = 4


#: A copy map's geometry as its C++ type's template arguments, in order: what a kernel
#: specialised to its shapes knows of each box when it is generated.
GEOMETRY = ("RANK", "BOX1", "BOX2", "BOX3", "ROW_SHIFT", "ELEM_SHIFT", "SWIZZLE_BYTES")


def _map_struct() -> str:
    fields = "".join(f"  {ctype} {name}{f'[{count}]' if count > 1 else ''};\n"
                     for name, ctype, count in COPY_MAP_FIELDS)
    used = sum((8 if ctype == "u64" else 4) * count for _, ctype, count in COPY_MAP_FIELDS)
    params = ", ".join(f"u32 {g}" for g in GEOMETRY)
    return ("// A tensor as the loading threads copy boxes of it (pipetune's map: TMA's is\n"
            "// opaque and this architecture has no TMA), 128 bytes like a CUtensorMap.\n"
            "struct alignas(64) TensorMap {\n" + fields
            + f"  u32 unused[{(COPY_MAP_BYTES - used) // 4}];\n}};\n"
            "// The same map, its box's geometry (the map's own fields of the same names) known\n"
            "// when the kernel is generated: the copies unroll and fold it.\n"
            f"template <{params}>\nstruct TensorMapOf : TensorMap {{}};\n")


def map_type(arg: TensorMapArg) -> str:
    """The C++ type of ``arg``'s copy map in a kernel's parameters: ``TensorMapOf`` with
    the box's geometry (the host packs the same 128 bytes, :func:`geometry`)."""
    return f"TensorMapOf<{', '.join(str(v) for v in geometry(arg).values())}>"


def geometry(arg: TensorMapArg) -> dict[str, int]:
    """The box's geometry in :data:`GEOMETRY`'s order: the rank, the outer box extents
    (1 past the rank), log2 of a box row's 16-byte chunks and of the element's bytes, the
    swizzle's span in bytes (0: none)."""
    elem_bytes = DTYPE_BYTES[arg.dtype]
    box = (*arg.box_dims, 1, 1, 1)
    row_chunks = max(1, box[0] * elem_bytes // 16)
    return {"RANK": len(arg.box_dims), "BOX1": box[1], "BOX2": box[2], "BOX3": box[3],
            "ROW_SHIFT": row_chunks.bit_length() - 1, "ELEM_SHIFT": elem_bytes.bit_length() - 1,
            "SWIZZLE_BYTES": 0 if arg.swizzle == "none" else int(arg.swizzle.removesuffix("B"))}


COPY_MAP = Snippet("TensorMap", _map_struct(), requires=("types",))

CP_ASYNC_16 = Snippet(
    "cp_async_16",
    "// Copy 16 bytes from global `src` to shared `dst` asynchronously; of them the first\n"
    "// `src_bytes` are read and the rest are zeros.\n"
    "__device__ __forceinline__ void cp_async_16(u32 dst, u64 src, u32 src_bytes) {\n"
    '  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"\n'
    '               :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.9.25.3.1 "cp.async"',
)

CP_ASYNC_16_UNLESS = Snippet(
    "cp_async_16_unless",
    "// Copy 16 bytes from global `src` to shared `dst` asynchronously, or write 16 zeros\n"
    "// where `zeros` (ignore-src: `src` is not read).\n"
    "__device__ __forceinline__ void cp_async_16_unless(u32 dst, u64 src, bool zeros) {\n"
    '  asm volatile("{\\n .reg .pred p;\\n setp.ne.b32 p, %2, 0;\\n"\n'
    '               " cp.async.cg.shared.global [%0], [%1], 16, p;\\n}"\n'
    '               :: "r"(dst), "l"(src), "r"((u32)zeros) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.9.25.3.1 "cp.async" (ignore-src)',
)

CP_ASYNC_ARRIVE = Snippet(
    "cp_async_arrive_noinc",
    "// One arrival on the mbarrier `bar` once every cp.async this thread issued has landed\n"
    "// (noinc: the barrier's arrival count already counts this thread).\n"
    "__device__ __forceinline__ void cp_async_arrive_noinc(u32 bar) {\n"
    '  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];"\n'
    '               :: "r"(bar) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.9.25.3.3 "cp.async.mbarrier.arrive"',
)


def copy_box(loaders: int) -> Snippet:
    """The box copy that ``loaders`` threads share (thread ``threadIdx.x % loaders``), its
    geometry the map type's constants: the chunks a thread copies are unrolled, and only
    the dimensions the map has are bounds-checked; the extents, strides and address are
    read from the map (a range kernel's run-time extent among them).

    Where the box is rows of one plane (its outer extents 1) and the threads cover whole
    rows a pass, a thread's chunks share their column and lie a fixed number of rows
    apart: its column, first row, source address and swizzled place are worked out once,
    and each chunk adds a stride and a constant (GEMM's tiles: about 5 instructions a
    chunk where the general walk, for boxes over several planes, takes 18)."""
    params = ", ".join(f"u32 {g}" for g in GEOMETRY)
    return Snippet(
        "copy_box",
        "// Copy the box at (c0 innermost, c1, c2, c3) of `map` into shared memory at `dst`\n"
        "// as TMA lays it out; this thread issues every LOADERS-th 16-byte chunk.\n"
        f"constexpr u32 LOADERS = {loaders};\n"
        f"template <{params}>\n"
        "__device__ __forceinline__ void copy_box(\n"
        f"    u32 dst, const TensorMapOf<{', '.join(GEOMETRY)}>* map, int c0, int c1, int c2,\n"
        "    int c3) {\n"
        "  constexpr u32 CHUNKS = (BOX1 * BOX2 * BOX3) << ROW_SHIFT;\n"
        "  constexpr u32 SWIZZLE = SWIZZLE_BYTES ? (SWIZZLE_BYTES / 16 - 1) << 4 : 0u;\n"
        "  constexpr u32 PASSES = (CHUNKS + LOADERS - 1) / LOADERS;\n"
        "  // Rows of one plane, whole rows a pass, passes whole swizzle repeats (1024 B) apart:\n"
        "  // a thread's chunks are one column, PASS_ROWS rows apart, and a pass moves each\n"
        "  // one's swizzled place by LOADERS * 16 bytes.\n"
        "  constexpr bool COLUMN = BOX2 * BOX3 == 1 && LOADERS % (1u << ROW_SHIFT) == 0 &&\n"
        "                          LOADERS * 16 % 1024 == 0;\n"
        "  if constexpr (COLUMN) {\n"
        "    constexpr u32 PASS_ROWS = LOADERS >> ROW_SHIFT;\n"
        "    const u32 t = threadIdx.x % LOADERS;\n"
        "    const int x0 = c0 + (int)(((t & ((1u << ROW_SHIFT) - 1)) * 16) >> ELEM_SHIFT);\n"
        "    const int row0 = c1 + (int)(t >> ROW_SHIFT);\n"
        "    bool plane = x0 >= 0 && x0 < (int)map->dims[0];\n"
        "    if (RANK > 2) plane = plane && c2 >= 0 && c2 < (int)map->dims[2];\n"
        "    if (RANK > 3) plane = plane && c3 >= 0 && c3 < (int)map->dims[3];\n"
        "    const u32 bytes = plane ? min(16u, (map->dims[0] - (u32)x0) << ELEM_SHIFT) : 0u;\n"
        "    u64 src = map->base + ((u64)(plane ? x0 : 0) << ELEM_SHIFT) +\n"
        "              (u64)(long long)row0 * map->strides[0];\n"
        "    if (RANK > 2) src += (u64)(plane ? c2 : 0) * map->strides[1];\n"
        "    if (RANK > 3) src += (u64)(plane ? c3 : 0) * map->strides[2];\n"
        "    const u64 pass_bytes = (u64)PASS_ROWS * map->strides[0];\n"
        "    const u32 at = dst + t * 16;\n"
        "    const u32 place = at ^ ((at >> 3) & SWIZZLE);\n"
        "    if (bytes == 16u || bytes == 0u) {  // whole chunks: read or zeros, no size\n"
        "      #pragma unroll\n"
        "      for (u32 j = 0; j < PASSES; ++j) {\n"
        "        if (CHUNKS % LOADERS != 0 && t + j * LOADERS >= CHUNKS) break;\n"
        "        const u32 row = (u32)(row0 + (int)(j * PASS_ROWS));  // < 0: past the end\n"
        "        cp_async_16_unless(place + j * LOADERS * 16, src,\n"
        "                           bytes == 0u || row >= map->dims[1]);\n"
        "        src += pass_bytes;\n"
        "      }\n"
        "      return;\n"
        "    }\n"
        "    #pragma unroll\n"
        "    for (u32 j = 0; j < PASSES; ++j) {  // the tensor's last, partial chunk of a row\n"
        "      if (CHUNKS % LOADERS != 0 && t + j * LOADERS >= CHUNKS) break;\n"
        "      const u32 row = (u32)(row0 + (int)(j * PASS_ROWS));\n"
        "      const bool inside = row < map->dims[1];\n"
        "      cp_async_16(place + j * LOADERS * 16, inside ? src : map->base,\n"
        "                  inside ? bytes : 0u);\n"
        "      src += pass_bytes;\n"
        "    }\n"
        "    return;\n"
        "  }\n"
        "  #pragma unroll\n"
        "  for (u32 j = 0; j < PASSES; ++j) {\n"
        "    const u32 i = threadIdx.x % LOADERS + j * LOADERS;\n"
        "    if (CHUNKS % LOADERS != 0 && i >= CHUNKS) break;\n"
        "    const u32 row = i >> ROW_SHIFT;\n"
        "    const int x0 = c0 + (int)(((i & ((1u << ROW_SHIFT) - 1)) * 16) >> ELEM_SHIFT);\n"
        "    const int x1 = c1 + (int)(row % BOX1);\n"
        "    const int x2 = c2 + (int)(row / BOX1 % BOX2);\n"
        "    const int x3 = c3 + (int)(row / (BOX1 * BOX2));\n"
        "    bool inside = x0 >= 0 && x1 >= 0 && x0 < (int)map->dims[0] &&\n"
        "                  x1 < (int)map->dims[1];\n"
        "    if (RANK > 2) inside = inside && x2 >= 0 && x2 < (int)map->dims[2];\n"
        "    if (RANK > 3) inside = inside && x3 >= 0 && x3 < (int)map->dims[3];\n"
        "    u64 src = map->base;\n"
        "    u32 bytes = 0;\n"
        "    if (inside) {\n"
        "      bytes = min(16u, (map->dims[0] - (u32)x0) << ELEM_SHIFT);\n"
        "      src += ((u64)x0 << ELEM_SHIFT) + (u64)x1 * map->strides[0];\n"
        "      if (RANK > 2) src += (u64)x2 * map->strides[1];\n"
        "      if (RANK > 3) src += (u64)x3 * map->strides[2];\n"
        "    }\n"
        "    const u32 at = dst + i * 16;  // rows of the box lie back to back\n"
        "    cp_async_16(at ^ ((at >> 3) & SWIZZLE), src, bytes);\n"
        "  }\n"
        "}\n",
        requires=("TensorMap", "cp_async_16", "cp_async_16_unless"),
        section='9.7.9.25.3.1 "cp.async" (the src-size operand zero-fills, ignore-src '
                'writes zeros)',
    )


def _load(rank: int) -> Snippet:
    coords = ", ".join(f"int c{d}" for d in range(rank))
    passed = ", ".join([f"c{d}" for d in range(rank)] + ["0"] * (COPY_MAP_RANK - rank))
    name = f"tma_load_{rank}d"
    params = ", ".join(f"u32 {g}" for g in GEOMETRY)
    return Snippet(
        name,
        f"// The box at ({', '.join(f'c{d}' for d in range(rank))}) of `map` into shared memory "
        "at `dst`, by the loading threads'\n"
        "// cp.async (the stage's barrier completes through cp_async_arrive_noinc).\n"
        f"template <{params}>\n"
        f"__device__ __forceinline__ void {name}(u32 dst, const TensorMapOf<{', '.join(GEOMETRY)}>"
        f"* map, {coords}, u32 bar) {{\n"
        f"  copy_box(dst, map, {passed});\n"
        "}\n",
        requires=("copy_box",),
    )


MBARRIER_WAIT = Snippet(
    "mbarrier_wait",
    "// Block until the phase of parity `parity` has completed (test_wait polls: sm_80 has\n"
    "// no try_wait).\n"
    "__device__ __forceinline__ void mbarrier_wait(u32 bar, u32 parity) {\n"
    '  asm volatile("{\\n"\n'
    '               ".reg .pred done;\\n"\n'
    '               "WAIT:\\n"\n'
    '               "mbarrier.test_wait.parity.shared::cta.b64 done, [%0], %1;\\n"\n'
    '               "@!done bra WAIT;\\n"\n'
    '               "}\\n" :: "r"(bar), "r"(parity) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.13.15.16 "mbarrier.test_wait/try_wait"',
)

MBARRIER_INIT_FENCE = Snippet(
    "mbarrier_init_fence",
    "// Nothing to fence: cp.async arrives through the generic proxy, so the block barrier\n"
    "// after initialisation is enough.\n"
    "__device__ __forceinline__ void mbarrier_init_fence() {}\n",
)

PREFETCH = Snippet(
    "tma_prefetch_descriptor",
    "// Nothing to prefetch: the copy map is read from the kernel's parameters.\n"
    "__device__ __forceinline__ void tma_prefetch_descriptor(const TensorMap* map) {}\n",
    requires=("TensorMap",),
)


def variants(loaders: int) -> dict[str, Snippet]:
    """The primitives these architectures write their own way, by the name kernels call."""
    return {s.name: s for s in (COPY_MAP, MBARRIER_WAIT, MBARRIER_INIT_FENCE, PREFETCH,
                                copy_box(loaders), *(_load(r) for r in (2, 3, 4)))}


#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`): before the
#: tile copies (rank 110) that call them.
PRELUDE_RANK = 105

register(CP_ASYNC_16, CP_ASYNC_16_UNLESS, CP_ASYNC_ARRIVE, rank=PRELUDE_RANK)
