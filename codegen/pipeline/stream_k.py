"""Stream-K's part of the kernel text: the share, the work loop and the sum of parts.

With an sProgram's ``stream_k`` set, a persistent block runs its whole tiles, then its
range of the last tiles' loop trips (``scheduler_search.sprogram.StreamKShare`` holds the
same arithmetic). A tile whose trips fall to several blocks is summed without any block
waiting: each writes its part (the output's fragment, register-major, so a warpgroup's
threads write whole lines) to its slot of the ``WORKSPACE`` argument and counts it with
one atomic; the block that counts the last part adds the parts in block order (the same
sums whatever finished first) and is the only one to store the tile, then puts the count
back to zero for the next launch. ``bar.red.or`` tells every consumer thread whether
its block is that one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from codegen.pipeline.limits import BAR_CONSUMERS, WARPGROUP

if TYPE_CHECKING:
    from codegen.pipeline.code import Code
    from codegen.pipeline.layout import PipelineLayout

#: The kernel parameter of the workspace (counts and parts of shared tiles).
WORKSPACE = "sk_workspace"
#: Accumulators a consumer thread may sum a tile's parts into: ptxas 13.0 (Hopper,
#: 2026-12-02) spilled 36 and 304 bytes at 160 and 192 (8192^3 GEMMs, fp16 and e4m3, one
#: consumer), none at 128 or fewer, where the same tiles without stream-K spilled none;
#: with a fused epilogue (bias + GELU + residual, 4096^3 fp16), 128 in two row blocks
#: spilled 12 bytes (4 without stream-K), 128 in one row block none.
STREAM_K_ACC_REGS_MAX = 128


def problem(layout: PipelineLayout) -> str | None:
    """Stream-K is lowered for operators whose loop trips may be split among blocks, on
    a persistent grid of cooperative consumers fed by a producer warp, one block a
    tile; and where it evens out a wave."""
    s, share, hooks = layout.structure, layout.stream_k, layout.hooks
    if share is None:
        return None
    if not hooks.shares_reduction:
        return f"{s.sprogram.op} lowers no stream-K"
    if not (s.persistent and s.warp_specialized) or s.pingpong:
        return "stream-K needs a persistent grid, a producer warp, cooperative consumers"
    if s.cluster_size > 1 and layout.runtime_axes:
        return "stream-K over clusters at a run-time size"
    if hooks.tile_trips() is not None:
        return "stream-K over tiles of different trip counts"
    spill = sums_spill(layout)
    if spill:
        return spill
    if layout.runtime_axes:
        return None if share.waves >= 1 else f"stream_k={share.waves}: waves are >= 1"
    return share.problem()


def sums_spill(layout: PipelineLayout) -> str | None:
    """Why a kernel that adds other blocks' sums of its tile (stream-K's parts, split-K's
    partials) into its accumulators would spill, or None: more than
    :data:`STREAM_K_ACC_REGS_MAX` a thread, or that many in two row blocks with a fused
    epilogue (split-K too: 80 bytes at 513 x 1001 x 776, GELU and residual, 2026-12-04)."""
    hooks = layout.hooks
    acc = layout.stream_k_part_floats // WARPGROUP
    fused = bool(hooks.element_stasks) and hooks.row_blocks(layout.consumer_rows) > 1
    if acc > STREAM_K_ACC_REGS_MAX or (fused and acc == STREAM_K_ACC_REGS_MAX):
        return f"sums of {acc} accumulators a thread from other blocks spill"
    return None


def emit_constants(code: Code, layout: PipelineLayout) -> None:
    """The share's constants (after the operator's, which name the trips per tile); at
    run-time sizes only those that do not depend on the size (the share is counted in
    the kernel: :func:`emit_runtime_share`)."""
    c, share, trips = code, layout.stream_k, layout.hooks.trips
    assert share is not None
    clustered = layout.structure.cluster_size > 1
    c.comment(f"Stream-K: the last SK_TILES tiles ({share.waves} wave(s)' worth) are "
              "shared out by loop trips, an equal range to each of the GRID "
              + ("clusters (a cluster's blocks run their tiles' trips together)." if clustered
                 else "blocks."))
    c(f"constexpr int GRID = {share.blocks};  // persistent "
      + ("clusters (the launch's grid / CLUSTER)" if clustered else "blocks (the launch's grid)"))
    if layout.runtime_axes:
        c(f"constexpr int SK_WAVES = {share.waves};  // waves of tiles shared out")
    else:
        c(f"constexpr int SK_TILES = {share.sk_tiles}, DP_TILES = TILES - SK_TILES;")
        c(f"constexpr int SK_TRIPS = SK_TILES * {trips};")
    c(f"constexpr u32 SK_COUNT_BYTES = {layout.stream_k_count_bytes};  // workspace: a count "
      "a shared tile (and block of a cluster), then two parts a block")
    c(f"constexpr int SK_PART_FLOATS = {layout.stream_k_part_floats};  // one consumer's rows "
      "of a tile")
    if not layout.runtime_axes:
        c(f'static_assert(SK_TRIPS >= GRID && {layout.grid} * SK_TILES > 0, "every block has '
          'stream-K trips");')


def emit_runtime_share(code: Code, trips: str) -> None:
    """The share at a run-time size (``StreamKShare``'s arithmetic in the kernel): the
    last wave's part-tiles (and ``SK_WAVES - 1`` waves more) are shared; with fewer
    shared trips than blocks, only the first ``SK_BLOCKS`` take one or more each, so
    every block in a shared tile's range of contributors writes a part."""
    c = code
    c("const int SK_PARTIAL = TILES % GRID;  // tiles of the last, part-filled wave")
    c("const int SK_TILES = SK_PARTIAL == 0 ? 0 : min(TILES, SK_PARTIAL + (SK_WAVES - 1) "
      "* GRID), DP_TILES = TILES - SK_TILES;")
    c(f"const int SK_TRIPS = SK_TILES * {trips};")
    c("const int SK_BLOCKS = SK_TRIPS < GRID ? SK_TRIPS : GRID;  // blocks sharing the trips")


def emit_helpers(code: Code, trips: str, *, in_kernel: bool = False,
                 clustered: bool = False) -> None:
    """``sk_begin``, ``sk_block_of`` and ``sk_part``: a block's (a cluster's) range and
    its slots (``in_kernel``: lambdas over the share counted in the kernel, among
    ``SK_BLOCKS``; ``clustered``: the share is over clusters, and each block of one keeps
    its own slots, by its rank)."""
    c = code
    blocks = "SK_BLOCKS" if in_kernel else "GRID"
    c.comment(f"Stream-K: the first trip of block b's share (sk_begin({blocks}) ends the "
              "last), and the block whose share holds trip q.")
    if in_kernel:
        c("auto sk_begin = [&](int b) { return b >= SK_BLOCKS ? SK_TRIPS : (int)((long long)b "
          "* SK_TRIPS / SK_BLOCKS); };")
        c("auto sk_block_of = [&](int q) { return (int)(((long long)(q + 1) * SK_BLOCKS - 1) "
          "/ SK_TRIPS); };")
    else:
        c("__device__ __forceinline__ int sk_begin(int b) { return (int)((long long)b * "
          "SK_TRIPS / GRID); }")
        c("__device__ __forceinline__ int sk_block_of(int q) { return (int)(((long long)(q + 1) "
          "* GRID - 1) / SK_TRIPS); }")
    c.comment("Block b's part of shared tile t, consumer's rows: slot 0 holds the part of "
              "the block's first tile, slot 1 of its last (the tiles between are its own).")
    head = ("auto sk_part = [&](unsigned char* workspace, int b, int t, int consumer)"
            if in_kernel else
            "__device__ __forceinline__ float* sk_part(unsigned char* workspace, int b, "
            "int t, int consumer)")
    with c.block(head, tail="};" if in_kernel else "}"):
        c(f"const int slot = sk_begin(b) / {trips} == t ? 0 : 1;")
        block = f"(b * CLUSTER + (int){c.call('cluster_ctarank')})" if clustered else "b"
        c("return reinterpret_cast<float*>(workspace + SK_COUNT_BYTES) + "
          f"((unsigned long long)({block} * 2 + slot) * CONSUMERS + consumer) * "
          "SK_PART_FLOATS;")
    c("")


@contextmanager
def units(code: Code, trips: str, block: str = "blockIdx.x") -> Iterator[None]:
    """The block's (``block``: the cluster's) whole tiles, strided over the grid, then its
    range of the shared tiles' trips, one unit a tile it touches: ``unit`` (the tile),
    ``trip0`` and ``unit_trips`` in the body."""
    c = code
    c.comment("stream-K: this block's whole tiles, then its share of the last tiles' trips")
    c(f"const int sk_block = (int){block};  // whose share")
    c("const int dp_units = sk_block < DP_TILES ? (DP_TILES - 1 - sk_block) / GRID + 1 : 0;")
    c("int sk_next = sk_begin(sk_block);")
    c("const int sk_end = sk_begin(sk_block + 1);")
    with c.block("for (int work = 0; work < dp_units || sk_next < sk_end; ++work)"):
        c(f"int unit = sk_block + work * GRID, trip0 = 0, unit_trips = {trips};")
        with c.block("if (work >= dp_units)"):
            c(f"unit = DP_TILES + sk_next / {trips};")
            c(f"trip0 = sk_next % {trips};")
            c(f"unit_trips = min({trips} - trip0, sk_end - sk_next);")
            c("sk_next += unit_trips;")
        yield


def emit_fixup(code: Code, trips: str, frag: str, part_floats: int,
               clustered: bool = False) -> None:
    """A part of a shared tile goes to this block's slot; the block that counts the
    tile's last part adds every part in block order (the same sums whatever finished
    first) into the fragment ``frag``, and only it stores the tile (``store_tile``).
    ``part_floats`` is a consumer's floats of a part (how many parts it reads at
    once follows from it: :func:`_parts_at_once`). ``clustered``: each block of a cluster
    sums its own rows of the cluster's tile, with its own count."""
    c = code
    threads = f"CONSUMERS * {WARPGROUP}"
    c("bool store_tile = true;")
    with c.block(f"if (unit_trips != {trips})"):
        c.comment("stream-K: this is one part of a shared tile")
        c("const int sk_tile = unit - DP_TILES;")
        c(f"const int sk_first = sk_block_of(sk_tile * {trips});")
        c(f"const int sk_last = sk_block_of(sk_tile * {trips} + {trips} - 1);")
        c(f"float* part = sk_part({WORKSPACE}, sk_block, sk_tile, consumer);")
        fragment_loop(c, f"__stcg(part + FRAGMENT_AT, {frag}[mi][r]);")
        c("__threadfence();  // the part is visible before its count")
        c(c.call("named_barrier_sync", BAR_CONSUMERS, threads) + ";")
        c("bool finisher = false;")
        with c.block("if (consumer == 0 && thread_in_wg == 0)"):
            counted = (f"sk_tile * CLUSTER + (int){c.call('cluster_ctarank')}" if clustered
                       else "sk_tile")
            c(f"u32* count = reinterpret_cast<u32*>({WORKSPACE}) + {counted};")
            c("finisher = atomicAdd(count, 1u) == (u32)(sk_last - sk_first);")
            c("if (finisher) *count = 0;  // every part counted: ready for the next launch")
        c("store_tile = " + c.call("named_barrier_or", BAR_CONSUMERS, threads, "finisher")
          + ";")
        with c.block("if (store_tile)"):
            c("__threadfence();  // the other blocks' parts are read after their counts")
            fragment_loop(c, f"{frag}[mi][r] = 0.f;")
            _sum_parts(c, frag, _parts_at_once(part_floats))


#: Loads in flight a consumer thread aims for while it sums parts: a part's loads wait
#: one L2 round trip (~0.4 us), and a swapped decode tile's part is 4 floats a thread, so
#: one part at a time made the finisher's time a round trip a part (~11 parts a tile).
SUM_LOADS_IN_FLIGHT = 128
#: The most parts summed at once (their pointers and sums stay in registers).
SUM_PARTS_MAX = 8


def _parts_at_once(part_floats: int) -> int:
    """Parts the finisher loads together: enough for :data:`SUM_LOADS_IN_FLIGHT` loads a
    thread, one part at least, :data:`SUM_PARTS_MAX` at most."""
    per_thread = max(1, part_floats // WARPGROUP)
    return max(1, min(SUM_PARTS_MAX, SUM_LOADS_IN_FLIGHT // per_thread))


def _sum_parts(code: Code, frag: str, batch: int) -> None:
    """Adds the tile's parts to ``frag`` (zeroed), in block order, ``batch`` parts' loads
    issued together and summed left to right before they join the fragment (a fixed
    order: the same bits whatever finished first)."""
    c = code
    c("int b = sk_first;")
    if batch > 1:
        with c.block(f"for (; b + {batch - 1} <= sk_last; b += {batch})"):
            for i in range(batch):
                c(f"const float* part{i} = sk_part({WORKSPACE}, b + {i}, sk_tile, consumer);")
            loads = " + ".join(f"__ldcg(part{i} + FRAGMENT_AT)" for i in range(batch))
            fragment_loop(c, f"{frag}[mi][r] += {loads};")
    with c.block("for (; b <= sk_last; ++b)"):
        c(f"const float* other = sk_part({WORKSPACE}, b, sk_tile, consumer);")
        fragment_loop(c, f"{frag}[mi][r] += __ldcg(other + FRAGMENT_AT);")


def fragment_loop(code: Code, statement: str) -> None:
    """``statement`` for each fp32 register ``[mi][r]`` of the output's fragment;
    ``FRAGMENT_AT`` is its place in a part (register-major: a warpgroup's 128 threads
    write each register's values side by side, in whole lines)."""
    c = code
    at = f"(mi * ACC_REGS + r) * {WARPGROUP} + thread_in_wg"
    c("#pragma unroll")
    with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
        c("#pragma unroll")
        with c.block("for (int r = 0; r < ACC_REGS; ++r)"):
            c(statement.replace("FRAGMENT_AT", at))


__all__ = ["STREAM_K_ACC_REGS_MAX", "WORKSPACE", "emit_constants", "emit_fixup",
           "emit_helpers", "emit_runtime_share", "fragment_loop", "problem", "sums_spill",
           "units"]
