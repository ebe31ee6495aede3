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

#: Known designs by operator.
DESIGNS: dict[str, dict[str, Choices]] = {
    "gemm": {"warp_specialized": GEMM_WARP_SPECIALIZED},
    "attention": {"flash_attention_3": FLASH_ATTENTION_3},
}
