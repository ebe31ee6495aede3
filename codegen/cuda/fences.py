"""Fences between memory proxies, and named barriers between warpgroups.

- ``fence.proxy.async.shared::cta``: shared memory written by ordinary stores (``st``,
  ``stmatrix``) and read next by the async proxy (a TMA store, the MMA) needs this fence in
  each writing thread before the barrier that orders the two (PTX ISA 9.7.13.4, "membar /
  fence", proxy fences).
- Named barriers (``bar.sync`` / ``bar.arrive`` with an id and a thread count): ids 1-15
  are free for the kernel (0 is ``__syncthreads``); ``arrive`` does not wait, so one
  warpgroup can hand a turn to another (PTX ISA 9.7.13.1, "bar, barrier").
"""

from __future__ import annotations

from codegen.cuda._snippet import Snippet, register

#: Named barrier ids available to a kernel (0 is __syncthreads).
NAMED_BARRIER_IDS = range(1, 16)

PROXY_ASYNC = Snippet(
    "fence_proxy_async_smem",
    "// Order this thread's generic-proxy shared-memory writes before async-proxy reads.\n"
    "__device__ __forceinline__ void fence_proxy_async_smem() {\n"
    '  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");\n'
    "}\n",
    section='9.7.13.4 "membar/fence" (fence.proxy.async)',
)

NAMED_SYNC = Snippet(
    "named_barrier_sync",
    "// Wait at named barrier `id` until `threads` threads (warp multiples) have arrived.\n"
    "__device__ __forceinline__ void named_barrier_sync(u32 id, u32 threads) {\n"
    '  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.13.1 "bar/barrier"',
)

NAMED_ARRIVE = Snippet(
    "named_barrier_arrive",
    "// Arrive at named barrier `id` (counted towards `threads`) without waiting.\n"
    "__device__ __forceinline__ void named_barrier_arrive(u32 id, u32 threads) {\n"
    '  asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(threads) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.13.1 "bar/barrier"',
)

NAMED_OR = Snippet(
    "named_barrier_or",
    "// Wait at named barrier `id` for `threads` threads; true in each of them if `pred` was\n"
    "// true in any (one thread's finding told to all, with no shared-memory round trip).\n"
    "__device__ __forceinline__ bool named_barrier_or(u32 id, u32 threads, bool pred) {\n"
    "  u32 any;\n"
    '  asm volatile("{\\n .reg .pred p, q;\\n setp.ne.u32 p, %1, 0;\\n"\n'
    '               " bar.red.or.pred q, %2, %3, p;\\n selp.u32 %0, 1, 0, q;\\n}"\n'
    '               : "=r"(any) : "r"((u32)pred), "r"(id), "r"(threads) : "memory");\n'
    "  return any != 0;\n"
    "}\n",
    requires=("types",),
    section='9.7.13.1 "bar/barrier"',
)

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 50

register(PROXY_ASYNC, NAMED_SYNC, NAMED_ARRIVE, NAMED_OR, rank=PRELUDE_RANK)
