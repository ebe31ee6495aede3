"""Split-K's part of the kernel text: a cluster's blocks share each tile's loop trips and
add their sums in distributed shared memory.

With an sProgram's ``split_k`` set, the kernel is launched in clusters of ``SPLIT`` blocks;
a cluster walks its units (tiles) as a block would, and block ``r`` of it runs trips
``[r T / SPLIT, (r + 1) T / SPLIT)`` of each. After its trips, a block writes its fp32
sums (the output's fragment, register-major) to its own shared memory and each of its
consumer warps arrives, releasing them, on the ``split_full`` barrier of each block that
reads them; a reader frees them (``split_free``, which the writer waits on before its
next sums) once read. Who reads (``SplitK.reduce``):

- ``first_block``: the first block waits for every peer's sums, adds them to its own in
  rank order and alone runs the epilogue; the others do not wait.
- ``scattered``: the tile's fragment is dealt out in share units (an 8-column group of
  a row block; with a TMA store, one stored sub-tile), round robin over the blocks;
  every block adds the rank-ordered sums of its own units and stores them, so each
  reads ``1 / SPLIT`` of the partials.

Either way every element is the same rank-ordered sum, so the bits do not depend on
which block finished first, or on who added. Nothing goes through global memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from codegen.pipeline.limits import WARPGROUP
from codegen.pipeline.stream_k import fragment_loop, sums_spill

if TYPE_CHECKING:
    from codegen.pipeline.code import Code
    from codegen.pipeline.layout import PipelineLayout

#: Shared-memory regions of split-K: the block's partial sums and its two barriers.
PART, FULL, FREE = "SPLIT_PART", "SPLIT_FULL", "SPLIT_FREE"
WARPS_PER_WARPGROUP = WARPGROUP // 32


def problem(layout: PipelineLayout) -> str | None:
    """Split-K is lowered for operators whose loop trips may be split among blocks,
    with cooperative consumers fed by a producer warp, over tiles of equal trips, each
    block with at least one; alone in its cluster."""
    s, hooks = layout.structure, layout.hooks
    if s.sprogram.split_k is None:
        return None
    if not hooks.shares_reduction:
        return f"{s.sprogram.op} lowers no split-K"
    if not s.warp_specialized or s.pingpong:
        return "split-K needs a producer warp and cooperative consumers"
    if s.cluster_size > 1 or s.sprogram.stream_k is not None:
        return "split-K beside a multicast cluster or stream-K"
    if hooks.tile_trips() is not None:
        return "split-K over tiles of different trip counts"
    if hooks.trip_count < layout.split_blocks:
        return f"{hooks.trip_count} loop trips for {layout.split_blocks} blocks"
    if scattered(layout) and share_units(layout) < layout.split_blocks:
        return (f"{share_units(layout)} share units of the tile for {layout.split_blocks} "
                "blocks to add")
    return sums_spill(layout)


def scattered(layout: PipelineLayout) -> bool:
    """Every block of the split-K cluster adds and stores a share of the tile (else the
    first block adds and stores all of it)."""
    split = layout.structure.sprogram.split_k
    return split is not None and split.reduce == "scattered"


def share_units(layout: PipelineLayout) -> int:
    """Units a scattered sum deals out: a consumer's stored sub-tiles (TMA store), else
    the 8-column groups of each of its row blocks. Every consumer has the same units of
    its own rows, and a unit's owner depends on nothing but the block's rank: a test
    that differed between warps of a warpgroup would put the accumulators in a divergent
    path, and ptxas then serialises every MMA of the kernel."""
    if layout.tma_store:
        return layout.store_subtiles
    return layout.consumer_rows // layout.hooks.target.mma_rows * (layout.output.cols // 8)


def fragment_share(layout: PipelineLayout, mi: str, group: str) -> str:
    """The share unit (C++) of a thread's registers in row block ``mi``, 8-column group
    ``group``; the block of rank ``unit % SPLIT`` adds and stores it."""
    if layout.tma_store:
        return mi if layout.output.transposed else f"({group}) / (STORE_COLS / 8)"
    return f"{mi} * (ACC_REGS / 4) + {group}"


def emit_skip_unowned(code: Code, unit: str) -> None:
    """In a loop over share units: go on to the next unless this block owns ``unit``."""
    code(f"if (({unit}) % SPLIT != split_rank) continue;  // another block of the cluster's "
         "share")


def emit_constants(code: Code, layout: PipelineLayout) -> None:
    """The cluster's size and a consumer's floats of a partial."""
    c = code
    c(f"constexpr int SPLIT = {layout.split_blocks};  // blocks of a cluster, each a share of "
      "a tile's loop trips")
    c(f"constexpr int SPLIT_PART_FLOATS = {layout.stream_k_part_floats};  // one consumer's "
      "rows of a tile")
    c(f'static_assert({layout.hooks.trips} >= SPLIT, "every block of a cluster has trips");')


def emit_barrier_init(code: Code, layout: PipelineLayout) -> None:
    """``split_full`` counts the consumer warps of every block whose sums this one reads;
    ``split_free`` those of every block that reads this one's."""
    c = code
    peers = f"(SPLIT - 1) * CONSUMERS * {WARPS_PER_WARPGROUP}"
    if scattered(layout):
        c.comment(f"{FULL.lower()} and {FREE.lower()}: one arrival from each consumer warp of "
                  "every other block of the cluster (each reads a share of every block's "
                  "sums).")
        readers = peers
    else:
        c.comment(f"{FULL.lower()}: one arrival from each consumer warp of every other block "
                  f"of the cluster; {FREE.lower()}: one from each of the first block's.")
        readers = f"CONSUMERS * {WARPS_PER_WARPGROUP}"
    c(c.call("mbarrier_init", f"smem + SMEM_{FULL}", peers) + ";")
    c(c.call("mbarrier_init", f"smem + SMEM_{FREE}", readers) + ";")


def emit_block_state(code: Code) -> None:
    """The block's rank in its cluster and the generic address of its partial (kernel
    scope: the producer's trip range and the consumers' sums read the rank)."""
    c = code
    c(f"const int split_rank = (int){c.call('cluster_ctarank')};  // this block's share")
    c("float* const split_part = reinterpret_cast<float*>(smem_raw + (smem - "
      f"{c.call('smem_u32', 'smem_raw')}) + SMEM_{PART});")


@contextmanager
def trip_range(code: Code, trips: str) -> Iterator[None]:
    """Inside a unit: ``trip0`` and ``unit_trips``, this block's range of the tile's trips."""
    c = code
    c(f"const int trip0 = split_rank * {trips} / SPLIT;")
    c(f"const int unit_trips = (split_rank + 1) * {trips} / SPLIT - trip0;")
    yield


def emit_sum(code: Code, layout: PipelineLayout) -> str | None:
    """The cluster's sums meet in the fragment of the block (or blocks) that store them;
    returns the condition under which this block runs the epilogue (None: always, each
    block its own share). ``split_round`` counts the tiles summed."""
    if scattered(layout):
        _emit_scattered_sum(code, layout)
        return None
    _emit_first_block_sum(code, layout.output.fragment)
    return "store_tile"


def _emit_first_block_sum(code: Code, frag: str) -> None:
    c = code
    c("const bool store_tile = split_rank == 0;")
    c("float* const part = split_part + consumer * SPLIT_PART_FLOATS;")
    with c.block("if (!store_tile)"):
        c.comment("split-K: this block's sums go to its shared memory, once the first block "
                  "has read its previous ones")
        with c.block("if (split_round > 0)"):
            c(c.call("mbarrier_wait_cluster", f"smem + SMEM_{FREE}", "(split_round - 1) & 1")
              + ";")
        fragment_loop(c, f"part[FRAGMENT_AT] = {frag}[mi][r];")
        c("__syncwarp();")
        c("if (lane == 0) "
          + c.call("mbarrier_arrive_cluster_release", f"smem + SMEM_{FULL}", "0u") + ";")
    with c.block("else"):
        c.comment("split-K: every peer's sums, added in rank order (deterministic)")
        c(c.call("mbarrier_wait_cluster", f"smem + SMEM_{FULL}", "split_round & 1") + ";")
        c("#pragma unroll")
        with c.block("for (int b = 1; b < SPLIT; ++b)"):
            c(f"const float* other = {c.call('mapa_generic', 'part', '(u32)b')};")
            fragment_loop(c, f"{frag}[mi][r] += other[FRAGMENT_AT];")
        c("__syncwarp();")
        c.comment("each peer may write its next sums: lane b tells block b")
        c("if (lane > 0 && lane < SPLIT) "
          + c.call("mbarrier_arrive_cluster_release", f"smem + SMEM_{FREE}", "(u32)lane") + ";")
    c("++split_round;")


def _emit_scattered_sum(code: Code, layout: PipelineLayout) -> None:
    c, frag = code, layout.output.fragment
    others = "lane < SPLIT && lane != split_rank"
    c("float* const part = split_part + consumer * SPLIT_PART_FLOATS;")
    c.comment("split-K: this block's sums go to its shared memory, once every peer has read "
              "its share of the previous ones; then lane b tells block b they are there")
    with c.block("if (split_round > 0)"):
        c(c.call("mbarrier_wait_cluster", f"smem + SMEM_{FREE}", "(split_round - 1) & 1") + ";")
    fragment_loop(c, f"part[FRAGMENT_AT] = {frag}[mi][r];")
    c("__syncwarp();")
    c(f"if ({others}) "
      + c.call("mbarrier_arrive_cluster_release", f"smem + SMEM_{FULL}", "(u32)lane") + ";")
    c.comment("this block's share of the tile: every block's sums in rank order "
              "(deterministic), its own read back like the others'; a unit's loads all "
              "under one test of its owner, so they are in flight together")
    c(c.call("mbarrier_wait_cluster", f"smem + SMEM_{FULL}", "split_round & 1") + ";")
    c("const float* peer[SPLIT];")
    c("#pragma unroll")
    c(f"for (int b = 0; b < SPLIT; ++b) peer[b] = {c.call('mapa_generic', 'part', '(u32)b')};")
    c("#pragma unroll")
    with c.block("for (int mi = 0; mi < ROW_BLOCKS; ++mi)"):
        c("#pragma unroll")
        with c.block("for (int j = 0; j < ACC_REGS / 4; ++j)"):
            emit_skip_unowned(c, fragment_share(layout, "mi", "j"))
            c("float got[SPLIT][4];")
            c("#pragma unroll")
            with c.block("for (int b = 0; b < SPLIT; ++b)"):
                c("#pragma unroll")
                c("for (int e = 0; e < 4; ++e) got[b][e] = peer[b][(mi * ACC_REGS + 4 * j + e) "
                  f"* {WARPGROUP} + thread_in_wg];")
            c("#pragma unroll")
            with c.block("for (int e = 0; e < 4; ++e)"):
                c("float sum = got[0][e];")
                c("#pragma unroll")
                c("for (int b = 1; b < SPLIT; ++b) sum += got[b][e];")
                c(f"{frag}[mi][4 * j + e] = sum;")
    c("__syncwarp();")
    c.comment("each peer may write its next sums: lane b tells block b")
    c(f"if ({others}) "
      + c.call("mbarrier_arrive_cluster_release", f"smem + SMEM_{FREE}", "(u32)lane") + ";")
    c("++split_round;")


__all__ = ["FREE", "FULL", "PART", "emit_barrier_init", "emit_block_state", "emit_constants",
           "emit_skip_unowned", "emit_sum", "fragment_share", "problem", "scattered",
           "share_units", "trip_range"]
