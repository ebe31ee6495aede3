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

ARRIVE_REMOTE_RELEASE = Snippet(
    "mbarrier_arrive_cluster_release",
    "// Arrive once on the mbarrier at shared offset `bar` of block `cta`, releasing this\n"
    "// thread's (and, through the barrier before it, its block's) shared-memory writes to\n"
    "// the cluster: a split-K partial read by a peer after its acquiring wait.\n"
    "__device__ __forceinline__ void mbarrier_arrive_cluster_release(u32 bar, u32 cta) {\n"
    '  asm volatile("{\\n"\n'
    '               ".reg .b32 remote;\\n"\n'
    '               "mapa.shared::cluster.u32 remote, %0, %1;\\n"\n'
    '               "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\\n"\n'
    '               "}" :: "r"(bar), "r"(cta) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.9.23 "mapa"; 9.7.13.15.13 "mbarrier.arrive"',
)

WAIT_CLUSTER = Snippet(
    "mbarrier_wait_cluster",
    "// Block until the phase of parity `parity` of this block's barrier `bar` has\n"
    "// completed, acquiring at cluster scope what the arriving peers released.\n"
    "__device__ __forceinline__ void mbarrier_wait_cluster(u32 bar, u32 parity) {\n"
    '  asm volatile("{\\n"\n'
    '               ".reg .pred done;\\n"\n'
    '               "WAIT:\\n"\n'
    '               "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\\n"\n'
    '               "@!done bra WAIT;\\n"\n'
    '               "}\\n" :: "r"(bar), "r"(parity) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.13.15.16 "mbarrier.test_wait/try_wait"',
)

MAPA = Snippet(
    "mapa_generic",
    "// The generic address of what `p` (a generic pointer into this block's shared\n"
    "// memory) points at in block `cta` of this cluster: plain loads through it read the\n"
    "// peer's shared memory, and the compiler may batch them like any other load.\n"
    "__device__ __forceinline__ const float* mapa_generic(const float* p, u32 cta) {\n"
    "  const float* remote;\n"
    '  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(remote) : "l"(p), "r"(cta));\n'
    "  return remote;\n"
    "}\n",
    requires=("types",),
    section='9.7.9.23 "mapa"',
)

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 30

register(CTARANK, SYNC, ARRIVE_REMOTE, ARRIVE_CLUSTER_WARP, ARRIVE_REMOTE_RELEASE, WAIT_CLUSTER,
         MAPA, rank=PRELUDE_RANK)
