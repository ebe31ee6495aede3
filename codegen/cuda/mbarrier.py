"""mbarriers: the transaction-counting barriers that TMA completes and consumers wait on.

A barrier lives in shared memory (8 bytes) and is named by its shared address. A phase
completes when its expected arrivals have arrived and its expected transaction bytes have
landed; waiters wait on the parity of the phase they need (PTX ISA 9.7.13.15, "Parallel
Synchronization and Communication Instructions: mbarrier").

Phase convention used by the kernels: the n-th use of a ring slot waits for parity
``(n / slots) & 1``. A freshly initialised barrier is in phase 0, so waiting on parity 1
returns at once: that is how a producer's first pass over an ``_empty`` ring goes through.
"""

from __future__ import annotations

from codegen.cuda._snippet import Snippet, register

INIT = Snippet(
    "mbarrier_init",
    "// Initialise the barrier at shared address `bar` to expect `arrivals` arrivals a phase.\n"
    "__device__ __forceinline__ void mbarrier_init(u32 bar, u32 arrivals) {\n"
    '  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(arrivals)'
    ' : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.13.15.9 "mbarrier.init"',
)

INIT_FENCE = Snippet(
    "mbarrier_init_fence",
    "// Make initialised barriers visible to the async proxy (TMA) before first use.\n"
    "__device__ __forceinline__ void mbarrier_init_fence() {\n"
    '  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");\n'
    "}\n",
    section='9.7.13.4 "membar/fence" (fence.mbarrier_init)',
)

ARRIVE = Snippet(
    "mbarrier_arrive",
    "// Arrive once on the barrier (a consumer releasing a ring slot).\n"
    "__device__ __forceinline__ void mbarrier_arrive(u32 bar) {\n"
    '  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.13.15.13 "mbarrier.arrive"',
)

ARRIVE_WARP = Snippet(
    "mbarrier_arrive_warp",
    "// One arrival for the whole warp (a consumer warp releasing a slot it read): the lanes\n"
    "// converge first, so every lane's reads of the slot are ordered before lane 0's\n"
    "// arrive. Without the __syncwarp a lane that lags (its warp diverged in the math)\n"
    "// could still be reading when the producer's next TMA load lands in the slot.\n"
    "__device__ __forceinline__ void mbarrier_arrive_warp(u32 bar, int lane) {\n"
    "  __syncwarp();\n"
    "  if (lane == 0) mbarrier_arrive(bar);\n"
    "}\n",
    requires=("mbarrier_arrive",),
    section='9.7.13.15.13 "mbarrier.arrive"; CUDA C++ Programming Guide, "__syncwarp()"',
)

ARRIVE_EXPECT_TX = Snippet(
    "mbarrier_arrive_expect_tx",
    "// Arrive once and expect `bytes` more transaction bytes (the TMA loads of one stage).\n"
    "__device__ __forceinline__ void mbarrier_arrive_expect_tx(u32 bar, u32 bytes) {\n"
    '  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"\n'
    '               :: "r"(bar), "r"(bytes) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.13.15.11 "mbarrier.expect_tx" / 9.7.13.15.13 "mbarrier.arrive"',
)

WAIT = Snippet(
    "mbarrier_wait",
    "// Block until the phase of parity `parity` has completed (try_wait suspends in\n"
    "// hardware for a while before each retry).\n"
    "__device__ __forceinline__ void mbarrier_wait(u32 bar, u32 parity) {\n"
    '  asm volatile("{\\n"\n'
    '               ".reg .pred done;\\n"\n'
    '               "WAIT:\\n"\n'
    '               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\\n"\n'
    '               "@!done bra WAIT;\\n"\n'
    '               "}\\n" :: "r"(bar), "r"(parity) : "memory");\n'
    "}\n",
    requires=("types",),
    section='9.7.13.15.16 "mbarrier.test_wait/try_wait"',
)

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 70

register(INIT, INIT_FENCE, ARRIVE, ARRIVE_WARP, ARRIVE_EXPECT_TX, WAIT, rank=PRELUDE_RANK)
