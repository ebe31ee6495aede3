"""Thread-block clusters: the blocks' rank, the cluster-wide barrier and arrivals on a
peer block's mbarrier (the multicast TMA load is :mod:`codegen.cuda.tma`'s).

A cluster's blocks run at the same time on neighbouring SMs and may address each other's
shared memory (``shared::cluster``). A multicast load writes the same box at the same
shared offset of every block in ``cta_mask`` and completes its transaction bytes on the
mbarrier at the same offset in each (PTX ISA 9.7.9.25.5.2, ``.multicast::cluster``); a
block's consumers then release a stage to every block that will write into it again.
"""

from __future__ import annotations

from codegen.cuda._snippet import Snippet, register

CTARANK = Snippet(
    "cluster_ctarank",
    "// This block's rank in its cluster (0 .. cluster size - 1).\n"
    "__device__ __forceinline__ u32 cluster_ctarank() {\n"
    "  u32 rank;\n"
    '  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));\n'
    "  return rank;\n"
    "}\n",
    requires=("types",),
    section='10.13 "Special Registers: %cluster_ctarank"',
)

SYNC = Snippet(
    "cluster_sync",
    "// Every thread of every block of the cluster arrives and waits: at the start, so no\n"
    "// block multicasts into a peer whose barriers are not initialised yet; at the end, so\n"
    "// no block exits while a peer may still arrive on its barriers.\n"
    "__device__ __forceinline__ void cluster_sync() {\n"
    '  asm volatile("barrier.cluster.arrive.release;\\n"\n'
    '               "barrier.cluster.wait.acquire;" ::: "memory");\n'
    "}\n",
    section='9.7.13.3 "barrier.cluster"',
)

ARRIVE_REMOTE = Snippet(
    "mbarrier_arrive_cluster",
    "// Arrive once on the mbarrier at shared offset `bar` of block `cta` of the cluster.\n"
    "// The default (CTA-scope) release: the stage's reads by this warp's wgmma are complete\n"
    "// (waited for) before it. An explicit .release.cluster made clustered GEMMs 1.4-1.8x\n"
    "// slower on an H200 (2026-12-02: 8192^3 2.4 ms against 1.52 ms, 128x8192x8192 84 us\n"
    "// against 48 us).\n"
    "__device__ __forceinline__ void mbarrier_arrive_cluster(u32 bar, u32 cta) {\n"
    '  asm volatile("{\\n"\n'
    '               ".reg .b32 remote;\\n"\n'
    '               "mapa.shared::cluster.u32 remote, %0, %1;\\n"\n'
    '               "mbarrier.arrive.shared::cluster.b64 _, [remote];\\n"\n'
    '               "}" :: "r"(bar), "r"(cta) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.9.23 "mapa"; 9.7.13.15.13 "mbarrier.arrive"',
)

ARRIVE_CLUSTER_WARP = Snippet(
    "mbarrier_arrive_cluster_warp",
    "// One arrival of the whole warp on the barrier at `bar` in each of the cluster's\n"
    "// `blocks` blocks (a stage every block multicasts into): the lanes converge first, then\n"
    "// lane i arrives on block i's barrier.\n"
    "__device__ __forceinline__ void mbarrier_arrive_cluster_warp(u32 bar, int lane,\n"
    "                                                             int blocks) {\n"
    "  __syncwarp();\n"
    "  if (lane < blocks) mbarrier_arrive_cluster(bar, (u32)lane);\n"
    "}\n",
    requires=("mbarrier_arrive_cluster",),
    section='9.7.13.15.13 "mbarrier.arrive"',
)

register(CTARANK, SYNC, ARRIVE_REMOTE, ARRIVE_CLUSTER_WARP)
