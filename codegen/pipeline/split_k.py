"""Split-K's part of the kernel text: a cluster's blocks share each tile's loop trips and
add their sums in distributed shared memory.

With an sProgram's ``split_k`` set, the kernel is launched in clusters of ``SPLIT`` blocks;
a cluster walks its units (tiles) as a block would, and block ``r`` of it runs trips
``[r T / SPLIT, (r + 1) T / SPLIT)`` of each. After its trips, every block but the first
writes its fp32 sums (the output's fragment, register-major) to its own shared memory
and each of its consumer warps arrives, releasing them, on the first block's
``split_full`` barrier. The first block waits for every peer's arrivals, adds their sums
in rank order (the same bits whatever finished first), tells each peer that its
partial was read (``split_free``, which a peer waits on before it writes its next one)
and alone runs the epilogue. Nothing goes through global memory, and only the first
block of a cluster waits.
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
    return sums_spill(layout)


def emit_constants(code: Code, layout: PipelineLayout) -> None:
    """The cluster's size and a consumer's floats of a partial."""
    c = code
    c(f"constexpr int SPLIT = {layout.split_blocks};  // blocks of a cluster, each a share of "
      "a tile's loop trips")
    c(f"constexpr int SPLIT_PART_FLOATS = {layout.stream_k_part_floats};  // one consumer's "
      "rows of a tile")
    c(f'static_assert({layout.hooks.trips} >= SPLIT, "every block of a cluster has trips");')


def emit_barrier_init(code: Code) -> None:
    """``split_full`` counts every peer's consumer warps; ``split_free`` the first
    block's."""
    c = code
    c.comment(f"{FULL.lower()}: one arrival from each consumer warp of every other block of "
              f"the cluster; {FREE.lower()}: one from each of the first block's.")
    c(c.call("mbarrier_init", f"smem + SMEM_{FULL}",
             f"(SPLIT - 1) * CONSUMERS * {WARPS_PER_WARPGROUP}") + ";")
    c(c.call("mbarrier_init", f"smem + SMEM_{FREE}", f"CONSUMERS * {WARPS_PER_WARPGROUP}")
      + ";")


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


def emit_sum(code: Code, frag: str) -> None:
    """The cluster's sums meet in the first block's fragment ``frag``; ``store_tile`` says
    whether this block stores the tile (``split_round`` counts the tiles summed)."""
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


__all__ = ["FREE", "FULL", "PART", "emit_barrier_init", "emit_block_state", "emit_constants",
           "emit_sum", "problem", "trip_range"]
