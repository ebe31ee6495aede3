"""Numbers the skeleton plans with: warp sizes, the register file, named-barrier ids."""

from scheduler_search.sprogram.schedule import WARP_THREADS as WARP
from scheduler_search.sprogram.schedule import WARPGROUP_THREADS as WARPGROUP

REGISTER_FILE = 65536
#: Registers a consumer thread needs besides its accumulators (addresses, loop state,
#: barrier phases, descriptors, epilogue packing). Calibrated on an H200 with NVRTC 13
#: (CuPy 14.2): 224 accumulators in a 256-thread kernel (cap 248) spilled 912 B, so 24
#: is too few; 32 keeps every sampled schedule spill-free.
CONSUMER_OVERHEAD_REGS = 32

# Named barrier ids (0 is __syncthreads): all consumers, then one per consumer warpgroup
# for its epilogue, then one per turn of the tensor cores (PTX ISA 9.7.13.1, "bar.sync":
# 16 barriers a CTA).
BAR_CONSUMERS = 1
BAR_EPILOGUE0 = 2
NAMED_BARRIERS_MAX = 16


def warpgroup_barrier(consumers: int) -> str:
    """The id of this consumer warpgroup's own named barrier (its 128 threads: the
    epilogue's, and FP8 attention's transpose), as kernel text: a literal where there is
    one consumer (ptxas then reserves 3 barriers, not all 16)."""
    return f"{BAR_EPILOGUE0} + consumer" if consumers > 1 else str(BAR_EPILOGUE0)

__all__ = [
    "BAR_CONSUMERS",
    "BAR_EPILOGUE0",
    "CONSUMER_OVERHEAD_REGS",
    "NAMED_BARRIERS_MAX",
    "REGISTER_FILE",
    "WARP",
    "WARPGROUP",
    "warpgroup_barrier",
]
