"""Hand-written designs the spaces must contain, as search choices.

They are the reference points of the paper's claim (a searched schedule matches what
experts write) and good seeds for a search's first trials.
"""

from __future__ import annotations

from scheduler_search.space.knobs import Choices

#: CUTLASS-style warp-specialised GEMM: one producer warp issuing TMA into a 4-stage ring,
#: two consumer warpgroups splitting a 128x256 tile, wgmma kept one group in flight.
GEMM_WARP_SPECIALIZED: Choices = {
    "tile_m": 128,
    "tile_n": 256,
    "tile_k": 64,
    "warp_specialized": True,
    "consumer_warpgroups": 2,
    "consumer_split": "cooperative",
    "wg_schedule": "free",
    "producer_regs": 40,
    "stages_ab": 4,
    "order": "overlap",
    "map_store": "tma",
    "persistent": True,
}

#: FlashAttention-3's forward plan: q loaded once, k and v streamed through 2-stage rings,
#: two consumer warpgroups taking turns on the tensor cores (ping-pong), and the loop
#: rotated (intra-warpgroup overlap): q·kᵀ of the next tile and p·v of this one issued back
#: to back, the next tile's softmax running while p·v is on the tensor cores.
FLASH_ATTENTION_3: Choices = {
    "tile_q": 128,
    "tile_kv": 128,
    "warp_specialized": True,
    "consumer_warpgroups": 2,
    "consumer_split": "cooperative",
    "wg_schedule": "alternate",
    "producer_regs": 24,
    "order": "rotate",
    "stages_k": 2,
    "stages_v": 2,
}

#: Mamba2 chunk state as a streaming kernel: one (headdim x dstate) tile of a (batch, chunk,
#: head) per block, x and B streamed through a 3-stage ring by a producer warp, the decay
#: on the SFU folded into x on its way to the tensor cores.
MAMBA2_CHUNK_STATE: Choices = {
    "tile_p": 64,
    "tile_n": 128,
    "tile_l": 64,
    "warp_specialized": True,
    "consumer_warpgroups": 1,
    "producer_regs": 40,
    "stages_xb": 3,
    "order": "serial",
    "map_decay": "sfu",
    "map_store": "cuda_core",
    "map_vector_loads": "tma",
    "persistent": False,
    "raster_major": "p",
    "raster_swizzle": 1,
}

#: Mamba2 chunk scan as the Triton kernel tiles it: 128 rows of a chunk x 64 of headdim,
#: two consumer warpgroups splitting the rows, cb and x streamed 64 positions a trip, dt and
#: dA loaded by the consumers' own threads.
MAMBA2_CHUNK_SCAN: Choices = {
    "tile_l": 128,
    "tile_p": 64,
    "tile_s": 64,
    "warp_specialized": True,
    "consumer_warpgroups": 2,
    "consumer_split": "cooperative",
    "wg_schedule": "free",
    "producer_regs": 40,
    "stages_cb": 2,
    "stages_x": 2,
    "order": "serial",
    "map_decay": "sfu",
    "map_store": "cuda_core",
    "map_vector_loads": "cuda_core",
    "persistent": False,
    "raster_major": "l",
    "raster_swizzle": 1,
}

#: Known designs by operator.
DESIGNS: dict[str, dict[str, Choices]] = {
    "gemm": {"warp_specialized": GEMM_WARP_SPECIALIZED},
    "attention": {"flash_attention_3": FLASH_ATTENTION_3},
    "mamba2_chunk_state": {"streaming": MAMBA2_CHUNK_STATE},
    "mamba2_chunk_scan": {"triton_tiling": MAMBA2_CHUNK_SCAN},
}
