"""Hand-written designs the spaces must contain, as search choices.

They are the reference points of the paper's claim (a searched schedule matches what
experts write) and good seeds for a search's first trials.
"""

from __future__ import annotations

from scheduler_search.ops import OperatorSpec, RangeSpec
from scheduler_search.ops.gemm import FP8_DTYPES
from scheduler_search.space.knob_rows import KNOB_ROWS
from scheduler_search.space.knobs import Choices
from scheduler_search.space.tables import few_token_gemm, swap_applies, swapped_ring_depths

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
    "cluster_size": 1,
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
    "map_store": "cuda_core",  # the output and its log-sum-exp written with st.global
}

#: The same with the output (and its log-sum-exp) staged in shared memory and stored by
#: TMA, in whole lines where st.global writes a quad's 16 bytes a row (batch-8 short
#: sequences lost 0.84-0.92x cuDNN on such stores, 2026-12-03); not yet timed on a GPU.
FLASH_ATTENTION_3_TMA_STORE: Choices = {**FLASH_ATTENTION_3, "map_store": "tma"}

#: Mamba2 chunk state as a streaming kernel: one (headdim x dstate) tile of a (batch, chunk,
#: head) per block, no producer warp, so a block needs few registers and several blocks
#: share an SM (the memory-bound kernel wants bytes in flight more than warp roles);
#: the decay on the SFU folded into x on its way to the tensor cores. Fastest of the
#: variants timed on an H200 at (8, 4096, 80 heads): 194 µs, against 214-335 µs with a
#: producer warp (one block per SM) and 290 µs for mamba_ssm's Triton kernel.
MAMBA2_CHUNK_STATE: Choices = {
    "tile_p": 64,
    "tile_n": 128,
    "tile_l": 128,
    "warp_specialized": False,
    "consumer_warpgroups": 1,
    "stages_xb": 2,
    "order": "serial",
    "map_decay": "sfu",
    "map_store": "cuda_core",
    "map_vector_loads": "tma",
    "persistent": False,
    "raster_major": "p",
    "raster_swizzle": 1,
}

#: Mamba2 chunk state on head pairs: a tile holds two heads of a B group stacked in its
#: rows (B read from L2 once for both), one consumer warpgroup per head, a producer warp
#: streaming x and B five stages ahead across the persistent loop's tiles (a ring deeper
#: than a tile's four trips: 165 KB of loads in flight), and the states staged in shared
#: memory and written by TMA while the next tile's loads land. On an H200 (2026-12-02),
#: 16-bit states: 142 µs at (8, 4096, 80 heads) and 77 µs at (1, 16384) against 152 µs and
#: 82 µs with four stages and 254 µs and 126 µs for mamba_ssm's Triton kernel; fp32 states
#: 183 µs and 97 µs (four stages: the same within 1-2%); at (1, 1024) (320 tiles) the
#: streaming design's many small blocks win.
MAMBA2_CHUNK_STATE_PAIRS: Choices = {
    **MAMBA2_CHUNK_STATE,
    "tile_g": 2,
    "tile_p": 128,
    "tile_l": 64,
    "warp_specialized": True,
    "producer_regs": 24,
    "consumer_warpgroups": 2,
    "consumer_split": "cooperative",
    "wg_schedule": "free",
    "stages_xb": 5,
    "map_store": "tma",
    "persistent": True,
}

#: Mamba2 chunk scan: 128 rows of a chunk x 64 of headdim, two consumer warpgroups
#: splitting the rows, cb, dt, dA and x streamed 64 positions a trip by a producer warp,
#: persistent so the next tile's C and states load under this tile's loop. Fastest of the
#: variants timed on an H200 at (8, 4096, 80 heads): 735 µs, against 959 µs for mamba_ssm's
#: Triton kernel (dt and dA read by the consumers' own threads: 980-1560 µs).
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
    "map_vector_loads": "tma",
    "persistent": True,
    "raster_major": "l",
    "raster_swizzle": 1,
}

#: The chunk scan with two heads of a group per tile (headdim 64): cb and C, the group's,
#: read from L2 once for both heads.
MAMBA2_CHUNK_SCAN_PACKED: Choices = {**MAMBA2_CHUNK_SCAN, "tile_g": 2, "tile_p": 128}

#: GEMM for a few rows of m, cuBLAS's small-m plan (an H200's cuBLAS 13 serves m = 8, n = k
#: = 4096 so): the tensor cores compute Cᵀ (``swap_ab``), n in 128-row blocks along
#: wgmma's M and m in a 16-wide N, a 12-deep ring of 20 KB stages keeping HBM busy, the
#: reduction shared out by stream-K.
GEMM_SWAP_NARROW: Choices = {
    **GEMM_WARP_SPECIALIZED,
    "swap_ab": True,
    "map_store": "cuda_core",
    "tile_m": 16,
    "tile_n": 128,
    "consumer_warpgroups": 1,
    "stages_ab": 12,
    "stream_k": 1,
}

#: GEMM for a few hundred rows of m (cuBLAS: 64 x 136 at m = 260): swapped, n in 64-row
#: tiles, m in a 128-wide N, so the grid has enough tiles without padding m to 256.
GEMM_SWAP_WIDE: Choices = {
    **GEMM_SWAP_NARROW,
    "tile_m": 128,
    "tile_n": 64,
    "stages_ab": 8,
    "stream_k": 0,
}

#: Shared memory a swapped design's ring may take (its depth follows from a stage's size).
_SWAP_RING_BYTES = 200 * 1024


def _swapped(tile_m: int, tile_n: int = 64) -> Choices:
    """A swapped GEMM with an m tile ``tile_m`` wide over ``tile_n``-row n tiles (one
    consumer warpgroup per 64 rows), the ring as deep as fits: with 64-row n tiles one
    wave holds m up to twice the tile (n = 4096 on 132 SMs), with 128-row ones four times
    the tile."""
    stage_bytes = (tile_m + tile_n) * GEMM_WARP_SPECIALIZED["tile_k"] * 2
    return {**GEMM_SWAP_WIDE, "tile_m": tile_m, "tile_n": tile_n,
            "consumer_warpgroups": tile_n // 64,
            "stages_ab": min(12, _SWAP_RING_BYTES // stage_bytes)}


#: Designs for kernels that serve a range of sizes (a range run's pool starts with them
#: beside :data:`DESIGNS`): the ends of a range want what one exact size never does. On
#: an H200 (n = k = 4096 fp16, L2 flushed) swapped 16- and 32-wide m tiles over 64-row n
#: tiles ran m = 8 at 18.1-19.5 us (cuBLAS 18.4) and a 136-wide one m = 260 at 22.4 us
#: (cuBLAS 23.1). Wider m tiles over 64-row n tiles lose: each of the 64 n tiles reads
#: all of A again (a 256-wide one ran m = 522 at 0.33 of cuBLAS), so past a few hundred
#: rows the swapped tiles are those fitted to the weight's waves
#: (:func:`swapped_wave_designs`). The swapped designs name their stream-K
#: share (none but the narrow one's), and so do the banded ones (none: the operator's
#: design brings its stream-K twins, and six more 128 x 256 kernels took a quarter of a
#: 24-candidate pool), so a range run adds no stream-K variants of them:
#: on the H200 stream-K's fix-up cost swapped tiles more than idle SMs did (m = 68..124
#: over 64-row n tiles: 26 us with stream-K, 19-20 us without).
#:
#: At large m the order of the tiles matters as much: the default raster walks m first, so
#: the 132 tiles in flight span all of m for one or two n tiles and every n tile reads A
#: from HBM again once A outgrows L2 (m = 15433, fp16: 126 MB read 16 times). Walking m
#: in bands of 8 n tiles, or n in bands of 16 m tiles (the order the exact-shape runs'
#: winners took on the H200's GEMM suite, 2026-12-02: 16 m tiles' A and 8 n tiles' B in
#: flight, 32 MB), keeps the operands of the tiles in flight in L2.
RANGE_DESIGNS: dict[str, dict[str, Choices]] = {
    "gemm": {"n_banded": {**GEMM_WARP_SPECIALIZED, "raster_major": "n", "raster_swizzle": 16,
                          "stream_k": 0},
             "m_banded": {**GEMM_WARP_SPECIALIZED, "raster_swizzle": 8, "stream_k": 0},
             "swap_narrow": GEMM_SWAP_NARROW, "swap_wide": GEMM_SWAP_WIDE,
             **{f"swap_{tile_m}x64": _swapped(tile_m) for tile_m in (16, 32, 64, 96, 136,
                                                                    192)}},
}

#: Few-token sizes whose likeliest decode designs a GEMM range over m starts its pool
#: with, where the range holds them (:func:`range_designs`).
_RANGE_DECODE_SIZES = (1, 16, 128)


#: Blocks an H200 runs at once, one an SM (the default wave of :func:`designs_for`).
H200_SMS = 132

#: The middle of a range over m (a few hundred to a few thousand tokens: one to a few
#: waves of tiles, nearly compute-bound) is served by whichever tile leaves the busiest
#: SM the least work, waves x tile area, which depends on the weight's n: on an H200
#: (bf16, graph replay, 2026-12-04, ``bench/decode_designs.py --grid mid``) 128 x 192
#: tiles led 442 x 11200 x 1664 (29.1 us; the 128 x 256 design 36.7), 128 x 224 ones
#: 836 x 11200 x 1664 (48.8; 54.5) and 192 x 192 ones 2484 x 1920 x 1088 (17.2, one wave;
#: 0.96x cuBLAS), the order waves x area gives. A 256-row m tile (two consumers of 128
#: rows) over 128 weight rows quantises waves differently from its transpose: a
#: 3200-row weight at m = 6493 fills five waves with it and six with 128 x 256 tiles
#: (13 n tiles, the last half empty), which served that size at 0.85 of cuBLAS (H200,
#: 2026-12-04). (m rows, consumer warpgroups, n rows):
_MID_TILES = (*((128, 2, n) for n in (128, 160, 192, 224, 256)),
              *((192, 3, n) for n in (128, 160, 192)), (256, 2, 128))
#: Sizes of a range whose busiest-SM order ranks :data:`_MID_TILES` (every quarter
#: octave from 256 to 4096 tokens).
_MID_SIZES = tuple(round(256 * 2 ** (i / 4)) for i in range(17))
#: Shared memory of a block (H200), what its barriers and 1024-byte alignment take,
#: and a 64-column output slot's bytes a row (two slots stage the output for its TMA
#: store): the ring has the rest (its stages sized for 16-bit operands).
_BLOCK_SMEM_BYTES = 227 * 1024
_SMEM_HEADROOM_BYTES = 1024
_STORE_SLOTS_BYTES_A_ROW = 2 * 64 * 2
_MID_STAGES_MAX = 6


def mid_range_designs(n: int, low: int, high: int, blocks: int = H200_SMS) -> list[Choices]:
    """The :data:`_MID_TILES` designs for sizes ``low..high`` of a weight of ``n`` rows,
    those that leave the busiest of ``blocks`` SMs the least work (waves x tile area,
    the larger tile on ties) at more of the range's :data:`_MID_SIZES` first, each with
    the deepest ring that fits beside the output's staging; none where the range holds
    none of those sizes."""
    sizes = [m for m in _MID_SIZES if low <= m <= high]
    if not sizes:
        return []

    def busiest_sm_work(m: int, tile: tuple[int, int, int]) -> tuple[int, int]:
        tiles = -(-m // tile[0]) * -(-n // tile[2])
        return (-(-tiles // blocks) * tile[0] * tile[2], -tile[0] * tile[2])

    wins = {tile: 0 for tile in _MID_TILES}
    for m in sizes:
        wins[min(_MID_TILES, key=lambda tile: busiest_sm_work(m, tile))] += 1
    designs = []
    for tile_m, warpgroups, tile_n in sorted(_MID_TILES, key=lambda t: -wins[t]):
        ring = _BLOCK_SMEM_BYTES - _SMEM_HEADROOM_BYTES - tile_m * _STORE_SLOTS_BYTES_A_ROW
        stage_bytes = (tile_m + tile_n) * GEMM_WARP_SPECIALIZED["tile_k"] * 2
        designs.append({**GEMM_WARP_SPECIALIZED, "tile_m": tile_m, "tile_n": tile_n,
                        "consumer_warpgroups": warpgroups, "stream_k": 0,
                        "stages_ab": min(_MID_STAGES_MAX, ring // stage_bytes)})
    return designs


def with_transposed_tma_store(design: Choices) -> Choices:
    """A swapped design whose transposed output is staged in shared memory and stored by
    TMA (two slots, each 64 output columns of the tile's tokens a consumer), its ring as
    deep as still fits beside them, where its own direct store writes every element with
    its own 2-byte ``st.global``."""
    tokens, warpgroups = design["tile_m"], design["consumer_warpgroups"]
    staging = warpgroups * tokens * _STORE_SLOTS_BYTES_A_ROW
    ring = _BLOCK_SMEM_BYTES - 2 * _SMEM_HEADROOM_BYTES - staging  # both regions aligned
    stage_bytes = (tokens + design["tile_n"]) * design.get("tile_k", 64) * 2
    return {**design, "map_store": "tma",
            "stages_ab": max(2, min(design["stages_ab"], ring // stage_bytes))}


#: Sizes of a range (every quarter octave from 128 to 1024 tokens) whose wave-fitted
#: swapped tile (:func:`swapped_wave_tile`) a GEMM range's pool takes.
_SWAPPED_WAVE_SIZES = tuple(round(128 * 2 ** (i / 4)) for i in range(13))
#: The weight rows of a two-consumer swapped tile (64 or 128 a consumer).
_SWAPPED_WAVE_TILES_N = (128, 256)
#: fp32 accumulators a consumer thread of a swapped tile may hold: the kernel is compiled
#: for 384 threads (168 registers each); 136 tokens over 128 weight rows a consumer
#: compiled without spills, 152 did not.
_SWAPPED_ACCUMULATORS_MAX = 136
#: Past three waves a token tile of 64 or more rows has no wave left to fill.
_SWAPPED_WAVES_MAX = 3
#: Token tiles narrower than this re-read the weight once a tile: only where one holds m.
_SWAPPED_TOKENS_MIN = 64
#: A tile's fixed cost (its prologue and epilogue, the weight slice each token tile
#: streams again) in tokens' worth of work: with none, 780 tokens of an 11200-row weight
#: took nine 88-token tiles (three waves) over six 136-token ones (two), which led there.
_TILE_OVERHEAD_TOKENS = 24
#: The shallowest ring a swapped tile keeps beside a staged TMA store.
_STAGED_RING_MIN = 3


def swapped_wave_tile(m: int, n: int, blocks: int = H200_SMS) -> tuple[int, int] | None:
    """(tokens, weight rows) of the two-consumer swapped tile that leaves the busiest of
    ``blocks`` SMs the least work at ``m`` tokens (waves x tile area with a tile's fixed
    cost; then the wider token tile, wgmma's N, then more weight rows), its token tile
    the least multiple of 8 that
    splits m into whole tiles; None where none fits. On an H200 (bf16, graph replay,
    2026-12-04, ``bench/decode_designs.py --grid fitted``) this is the tile that led each
    of 260, 442 and 780 x 11200 x 1664 (88 x 256, 152 x 128, 136 x 256: 18.0, 26.5 and
    46.6 us, cuBLAS 17.2, 25.2 and 41.9) and 478 x 3200 x 4608 (96 x 128: 22.7, cuBLAS
    23.8), where the range run's table had served them at 0.70-0.85 of cuBLAS."""
    best: tuple[tuple[int, int, int], int, int] | None = None
    for tile_n in _SWAPPED_WAVE_TILES_N:
        n_tiles = -(-n // tile_n)
        for token_tiles in range(1, -(-m // 8) + 1):
            tokens = -(-m // (8 * token_tiles)) * 8
            if tokens < _SWAPPED_TOKENS_MIN and token_tiles > 1:
                break
            if (-(-m // tokens) != token_tiles or tokens > 256
                    or tokens * tile_n // 256 > _SWAPPED_ACCUMULATORS_MAX):
                continue
            waves = -(-token_tiles * n_tiles // blocks)
            score = (waves * (tokens + _TILE_OVERHEAD_TOKENS) * tile_n, -tokens, -tile_n)
            if waves <= _SWAPPED_WAVES_MAX and (best is None or score < best[0]):
                best = (score, tokens, tile_n)
    return None if best is None else best[1:]


def swapped_wave_designs(n: int, low: int, high: int,
                         blocks: int = H200_SMS) -> list[Choices]:
    """The wave-fitted swapped tiles (:func:`swapped_wave_tile`) of a weight of ``n`` rows
    at the :data:`_SWAPPED_WAVE_SIZES` in ``low..high``, each once, two consumers and the
    deepest ring that fits; with the transposed output staged for a TMA store where the
    ring keeps :data:`_STAGED_RING_MIN` stages beside the staging. On the H200 (the grid
    above, tiles without stream-K) the staged store ran 24 of 31 such tiles faster than
    the direct one, up to 1.19x; with its ring cut to 2 stages it ran 224 and 240 tokens
    at 0.68x and 0.60x."""
    designs: list[Choices] = []
    for m in (size for size in _SWAPPED_WAVE_SIZES if low <= size <= high):
        tile = swapped_wave_tile(m, n, blocks)
        if tile is None:
            continue
        design = {**_swapped(*tile), "consumer_warpgroups": 2}
        staged = with_transposed_tma_store(design)
        if staged["stages_ab"] >= _STAGED_RING_MIN:
            design = staged
        if design not in designs:
            designs.append(design)
    return designs


def range_designs(range_spec: RangeSpec) -> list[Choices]:
    """The designs a range run's pool starts with, in order: the operator's, then for a
    GEMM range reaching few tokens the first two decode designs of its weight at
    1, 16 and 128 tokens (:func:`decode_designs`: they know the weight's n, where
    :data:`RANGE_DESIGNS` were measured at n = k = 4096 only), then for a GEMM range
    over the middle sizes the tiles fitted to its weight there (:func:`mid_range_designs`),
    then the range designs.
    On three (n, k) pairs drawn away from 4096 (H200, 2026-12-04) a pool of the operator's
    and the range designs alone served m = 3..119 of an 11200 x 1664 weight at 0.67-0.85
    of cuBLAS's speed (graph replay), where exact decode tunes of such weights reach
    about 1.0; in the simulated run of that pair every one of its 24 candidates was a
    hand-written design, nine of them 128 x 256 tiles."""
    designs = [dict(d) for d in DESIGNS.get(range_spec.op, {}).values()]
    if range_spec.op == "gemm" and range_spec.dim == "m":
        low, high = range_spec.axis.low, range_spec.axis.high
        for size in _RANGE_DECODE_SIZES:
            spec = range_spec.exact(range_spec.at(min(max(size, low), high)))
            if few_token_gemm(spec):
                designs += [d for d in decode_designs(spec)[:2] if d not in designs]
        n = range_spec.fixed["n"]
        designs += [d for d in (*mid_range_designs(n, low, high),
                                *swapped_wave_designs(n, low, high))
                    if d not in designs]
    return designs + [dict(d) for d in RANGE_DESIGNS.get(range_spec.op, {}).values()]


#: Decode GEMMs (a few tokens against a weight stored n x k: memory-bound), measured on an
#: H200 by graph replay over weights larger than the L2 (bf16, 2026-12-04,
#: bench/decode_designs.py): swapped 8-token tiles over 64 rows of n, 128-deep k steps in
#: an 11-12-deep ring streamed 1 x 4096 x 4096 at 3.0 TB/s (1.18x cuBLAS) and 1 x 4096 x
#: 14336 at 3.9 (1.06x; 64-deep k steps: 0.99x); over 128 rows of n, 1 x 14336 x 4096 at
#: 4.0 TB/s (1.04x); at 64..128 tokens unswapped 64 x 64 tiles with 128-deep k steps led
#: (1.02-1.11x), and where those tiles fill one and a half waves (128 x 6144 x 4096: 192
#: tiles on 132 SMs) their stream-K twin evens the last one out. Two tunes later that day
#: timed the 8-token tile's rings side by side many times (bench/tuning_speed.py, trials):
#: 8 stages 10.9 us (median of 10), 10 stages 11.1, 12 stages 11.9; the seed takes 8, and
#: the 12-deep ring stays a later seed (1 x 4096 x 14336 still led with it at m = 2).
GEMM_DECODE_SWAP: Choices = {**GEMM_SWAP_WIDE, "tile_m": 8, "tile_n": 64, "tile_k": 128,
                             "consumer_warpgroups": 1, "stages_ab": 8, "stream_k": 0}
#: The deepest ring the swapped tiles may take.
_DECODE_DEEP_STAGES = 12
GEMM_DECODE_SWAP_WIDE_N: Choices = {**GEMM_DECODE_SWAP, "tile_n": 128, "tile_k": 128,
                                    "stages_ab": 5}
GEMM_DECODE_NARROW: Choices = {**GEMM_WARP_SPECIALIZED, "tile_m": 64, "tile_n": 64,
                               "tile_k": 128, "consumer_warpgroups": 1, "stages_ab": 6,
                               "stream_k": 0}
#: ... and over 128 rows of n, the grid's best at 128 tokens on three of four weights
#: (7168 x 8192, 8192 x 3584, 8192 x 1024: 0.95-0.98x cuBLAS, 2026-12-04b).
GEMM_DECODE_NARROW_WIDE_N: Choices = {**GEMM_DECODE_NARROW, "tile_n": 128, "stages_ab": 4}
#: Past 64 tokens a tile of 64 rows of m reads the weight once a tile: on an H200
#: (2026-12-04, many-token grid of bench/decode_designs.py) two designs that read it once
#: led at 128 tokens: every token in one swapped tile over 64 rows of n (128 x 6144 x 4096:
#: 17.6 us, 128 x 8192 x 3584: 18.7 us) and pairs of 64-row m tiles in a cluster that
#: share each weight tile by TMA multicast (128 x 7168 x 8192: 34.6 us, the grid's best;
#: cuBLAS's own plan at these sizes is such a pair, 64-row m tiles over 96-128 rows of n).
GEMM_DECODE_M_PAIR: Choices = {**GEMM_WARP_SPECIALIZED, "tile_m": 64, "tile_n": 128,
                               "tile_k": 64, "consumer_warpgroups": 1, "stages_ab": 8,
                               "cluster_size": 2, "cluster_axis": "m"}

#: Known designs by operator.
DESIGNS: dict[str, dict[str, Choices]] = {
    "gemm": {"warp_specialized": GEMM_WARP_SPECIALIZED},
    "attention": {"flash_attention_3": FLASH_ATTENTION_3,
                  "flash_attention_3_tma_store": FLASH_ATTENTION_3_TMA_STORE},
    "mamba2_chunk_state": {"streaming": MAMBA2_CHUNK_STATE,
                           "head_pairs": MAMBA2_CHUNK_STATE_PAIRS},
    "mamba2_chunk_scan": {"triton_tiling": MAMBA2_CHUNK_SCAN,
                          "packed_heads": MAMBA2_CHUNK_SCAN_PACKED},
}


def designs_for(spec: OperatorSpec, blocks: int = H200_SMS) -> list[Choices]:
    """The designs a search of ``spec`` measures first, in order: for a GEMM of few tokens
    its decode designs (:func:`decode_designs`) before the operator's (a search's first
    round measures two seeds: a fresh H200's first decode tune, 2026-12-04, spent it on
    the 128 x 256 GEMM design and a cost-model pick, 27 us where a decode seed runs 13.6);
    for any other spec the operator's."""
    operator = list(DESIGNS.get(spec.op, {}).values())
    if not few_token_gemm(spec):
        return operator
    return [*decode_designs(spec, blocks), *operator]


def decode_designs(spec: OperatorSpec, blocks: int = H200_SMS) -> list[Choices]:
    """A few-token GEMM's decode designs its space holds, likeliest first: up to 64 tokens
    the swapped ones (where ``swap_ab`` is offered: :func:`_swapped_decode_designs`), then
    the narrow unswapped tiles; past 64 tokens, where the weight makes few tiles, stream-K
    over clusters (:func:`_clustered_stream_k_designs`), then the tile that fills
    ``blocks`` a wave best, then the narrow, wide-n, m-pair and every-token-swapped tiles
    (each led some weight's grid on the H200, 2026-12-04). Where the weight's 64-row
    tiles would leave two thirds of the SMs idle, the first split-K design
    (:func:`split_k_designs`) comes first from 17 to 128 tokens (it led 1280 x 8192 at
    32, 64 and 128) and second elsewhere (a search's first round measures both); the other
    split-K designs, and all of them for larger weights, come last."""
    m, n = spec.params()["m"], spec.params()["n"]
    narrow = [GEMM_DECODE_NARROW, {**GEMM_DECODE_NARROW, "stream_k": 1}]
    if m <= _SWAPPED_TOKENS_MAX:
        designs = narrow
        if swap_applies(spec):
            designs = [*_swapped_decode_designs(m, n, blocks), *narrow]
    else:
        fitted = wave_fitted(m, n, blocks)
        designs = [fitted, *_m_paired(fitted, m)]
        for tied in wave_tied(m, n, blocks) if m > _TIED_TOKENS_MIN else ():
            designs += [tied, *_m_paired(tied, m)]
        designs += [*narrow, GEMM_DECODE_NARROW_WIDE_N, GEMM_DECODE_M_PAIR]
        if -(-m // 64) * -(-n // 128) < blocks // 3:
            designs = [*_clustered_stream_k_designs(m, n), *designs]
        if swap_applies(spec):
            tokens = next(t for t in (128, 192, 256) if t >= m)  # every token in one tile
            designs.append(_swapped(tokens))
    split = split_k_designs(m, n, blocks)
    if not split or -(-n // 64) >= blocks // 3:  # measured where 64-row tiles are few
        designs = [*designs, *split]
    elif 16 < m <= 128:  # each tile's loop over a cluster, its sums met on chip
        designs = [split[0], *designs, *split[1:]]
    else:
        designs = [designs[0], split[0], *designs[1:], *split[1:]]
    if spec.params()["dtype"] in FP8_DTYPES:
        designs = [_same_stage_bytes_in_8_bits(d) for d in designs]
    return designs


def _clustered_stream_k_designs(m: int, n: int) -> list[Choices]:
    """Past 64 tokens, where the weight makes few tiles: stream-K over clusters whose
    blocks share an operand by multicast, likeliest first. Every token (up to 128) in one
    128-row tile in clusters along n that share it led 128 x 1280 x 8192 (14.8 us, 0.79x
    cuBLAS; the best unclustered schedule 16.7 us), and four 64-row m tiles sharing a
    weight tile led 256 x 1280 x 8192 (17.2 us, 0.88x; unclustered 19.1): H200, graph
    replay, 2026-12-04. A cluster takes the most blocks its tiles divide into (4 or 2)."""
    def size(tiles: int) -> int:
        return next((s for s in (4, 2) if tiles % s == 0), 1)

    designs = []
    n_size, m_size = size(-(-n // 64)), size(-(-m // 64))
    if m <= 128 and n_size > 1:
        designs.append({**GEMM_WARP_SPECIALIZED, "tile_m": 128, "tile_n": 64,
                        "consumer_warpgroups": 2, "stages_ab": 8, "cluster_size": n_size,
                        "cluster_axis": "n", "stream_k": 1})
    if m_size > 1:
        designs.append({**GEMM_DECODE_M_PAIR, "cluster_size": m_size, "stream_k": 1})
    return designs


def _swapped_decode_designs(m: int, n: int, blocks: int) -> list[Choices]:
    """The swapped seeds for ``m`` tokens, the likeliest two first (a search's first round):
    the token tile over 64 rows of n, then its stream-K twin where those tiles fill less
    than half the SMs (it splits k over the idle ones: 1280 x 8192 makes 20 tiles, 0.68x
    cuBLAS without it, 2026-12-04), else the tile over 128 rows of n (16 x 14336 x 4096:
    30.2 us against 33.7 over 64 rows); then the other, and the deepest ring."""
    tokens = next(t for t in (8, 16, 32, 64) if t >= m)  # the least padding
    swapped = _ring_fitted({**GEMM_DECODE_SWAP, "tile_m": tokens})
    twin = {**swapped, "stream_k": 1}
    wide = _ring_fitted({**GEMM_DECODE_SWAP_WIDE_N, "tile_m": tokens})
    deep = _ring_fitted({**swapped, "stages_ab": _DECODE_DEEP_STAGES})
    few_tiles = -(-n // swapped["tile_n"]) < blocks // 2
    designs = [swapped, *((twin, wide) if few_tiles else (wide, twin))]
    return designs + ([deep] if deep != swapped else [])


#: Shared memory a swapped decode seed's ring may take (with the barriers, under the
#: H200's 227 KB a block): its depth is the deepest of the space's that fits. 12 stages of
#: a 16-token tile (20 KB each) did not, and the seeds that asked for them were dropped
#: before they ran: 16 x 1280 x 8192 tuned without its stream-K seed at 0.76x cuBLAS
#: (H200, 2026-12-04), where the same tile in 10 stages had run at 0.96x.
_DECODE_RING_BYTES = 224 * 1024


def _ring_fitted(design: Choices) -> Choices:
    """``design`` with its ring no deeper than it asks and as deep as fits in
    :data:`_DECODE_RING_BYTES` (stages of 16-bit elements: 8-bit ones take half)."""
    stage_bytes = (design["tile_m"] + design["tile_n"]) * design["tile_k"] * 2
    depth = max(d for d in swapped_ring_depths()
                if d <= design["stages_ab"] and d * stage_bytes <= _DECODE_RING_BYTES)
    return {**design, "stages_ab": depth}


#: The decode tiles :func:`wave_fitted` chooses among: 64- or 128-row m tiles (one
#: consumer warpgroup per 64 rows) over the GEMM space's n tiles.
_WAVE_TILES_M = (64, 128)
_WAVE_TILES_N = (64, 96, 128, 160, 192, 224, 256)
#: Ring bytes of :func:`wave_fitted`'s tile (its depth follows), and the space's deepest.
_WAVE_RING_BYTES = 200 * 1024
_WAVE_STAGES_MAX = 6


def _wave_score(m: int, n: int, blocks: int, tile: tuple[int, int]) -> tuple[float, int]:
    """How well ``tile``'s grid fills the waves of ``blocks``: the filled share of its
    waves, then the fewer waves."""
    tiles = -(-m // tile[0]) * -(-n // tile[1])
    waves = -(-tiles // blocks)
    return tiles / (waves * blocks), -waves


def _wave_design(tile_m: int, tile_n: int) -> Choices:
    """A wave-fitted tile as a design: one consumer warpgroup per 64 rows, the deepest
    ring of :data:`_WAVE_RING_BYTES`."""
    stage_bytes = (tile_m + tile_n) * GEMM_WARP_SPECIALIZED["tile_k"] * 2
    return {**GEMM_WARP_SPECIALIZED, "tile_m": tile_m, "tile_n": tile_n,
            "consumer_warpgroups": tile_m // 64,
            "stages_ab": min(_WAVE_STAGES_MAX, _WAVE_RING_BYTES // stage_bytes),
            "stream_k": 0}


def _wave_tiles(m: int) -> list[tuple[int, int]]:
    return [(tm, tn) for tm in _WAVE_TILES_M for tn in _WAVE_TILES_N
            if tm <= -(-m // 64) * 64]


def wave_fitted(m: int, n: int, blocks: int) -> Choices:
    """The unswapped tile whose grid fills the waves of ``blocks`` best (then the fewest
    waves, then the largest tile). Past 64 tokens every tile streams its part of the
    weight, so a part-empty last wave is time the weight is not streamed: at 256 x 6144
    x 4096, 64 x 128 tiles make 192 (1.45 waves of 132), and pipetune ran at 0.80x cuBLAS
    (H200, 2026-12-04), whose own plan there is 128 tokens by 96 weight rows: 128 tiles."""
    tile_m, tile_n = max(_wave_tiles(m),
                         key=lambda t: (*_wave_score(m, n, blocks, t), t[0] * t[1]))
    return _wave_design(tile_m, tile_n)


#: Past this many tokens the wave-fitted tile's peer of the other height is seeded beside
#: it (up to it, a 128-row tile holds every token: the every-token designs cover it).
_TIED_TOKENS_MIN = 128


def wave_tied(m: int, n: int, blocks: int) -> list[Choices]:
    """The wave-fitted tile's peer of the other height: the largest tile of another
    ``tile_m`` whose grid fills the waves as well, where there is one. Its m tiles are
    fewer or more, so it reads the weight from L2 fewer or more times against the tokens:
    at 256 x 8192 x 3584, 64 x 256 tiles (the fitted, 0.94x cuBLAS on the H200,
    2026-12-05) and 128 x 128 ones both make 128, and cuBLAS runs the latter, its two m
    tiles paired in a cluster (the cost model: 20.3 us against 23.3)."""
    fitted = wave_fitted(m, n, blocks)
    best = _wave_score(m, n, blocks, (fitted["tile_m"], fitted["tile_n"]))
    peers = [t for t in _wave_tiles(m)
             if t[0] != fitted["tile_m"] and _wave_score(m, n, blocks, t) == best]
    return [_wave_design(*max(peers, key=lambda t: t[0] * t[1]))] if peers else []


def _m_paired(design: Choices, m: int) -> list[Choices]:
    """A wave-fitted design's twin whose m tiles share each weight tile in pairs by
    multicast (clusters of two along m), where m makes an even number of them: each
    weight tile then leaves L2 once for two m tiles, as :data:`GEMM_DECODE_M_PAIR`'s
    does, over the design's columns. At 128 x 6144 x 4096 that pair (64 x 128, 96 tiles
    for 132 SMs) led at 0.90x cuBLAS (H200, 2026-12-05); the wave-fitted 64 x 96 makes
    128. At 256 tokens cuBLAS runs such pairs (128 x 128 at 256 x 8192 x 3584), and the
    cost model puts four 64-row m tiles in two pairs well ahead of them unpaired
    (256 x 4096 x 14336: 36.9 us against 50.5; 256 x 7168 x 8192: 36.1 against 44.0)."""
    same_as_pair = (design["tile_m"], design["tile_n"]) == (
        GEMM_DECODE_M_PAIR["tile_m"], GEMM_DECODE_M_PAIR["tile_n"])
    if -(-m // design["tile_m"]) % 2 or same_as_pair:
        return []
    return [{**design, "cluster_size": 2, "cluster_axis": "m"}]


def _same_stage_bytes_in_8_bits(design: Choices) -> Choices:
    """A 16-bit design's ring for 8-bit inputs: k steps twice as deep where the space has
    them, so a stage carries the bytes it was measured with (at 128 tokens on the H200,
    2026-12-04, the 16-bit seeds' 64-deep k steps left 8-bit kernels at 0.72-0.73x
    ``torch._scaled_mm``, whose own plan there streams 128-deep k steps in 10 stages)."""
    if design["tile_k"] >= _DEEPEST_K_STEP:
        return design
    return {**design, "tile_k": design["tile_k"] * 2}


#: The deepest k step of the GEMM space's tiles.
_DEEPEST_K_STEP = 128


#: The most tokens a seeded swapped design of :data:`GEMM_DECODE_SWAP`'s deep ring holds in
#: one tile (past it, every token in one shallower swapped tile, beside unswapped ones).
_SWAPPED_TOKENS_MAX = 64


#: Shared memory a split-K design's ring and its fp32 partial may take together: the ring
#: is the deepest that fits beside the partial (a 128 x 64 tile: 8 stages of 24 KB and
#: 32 KB of sums; on an H200, 2026-12-04, 128 x 1280 x 8192 ran 11.5 us with 7 stages,
#: 13.2 with 6).
_SPLIT_SMEM_BYTES = 224 * 1024
#: The share of the SMs a split-K grid's seeds fill: on an H200 (bf16, graph replay,
#: 2026-12-04, ``bench/decode_designs.py --grid split``) the 20 tiles of 1280 x 8192 ran
#: fastest split 4 or 5 ways (80-100 blocks: 9.2, 10.6 and 13.5 us at 32, 64 and 128
#: tokens, cuBLAS 11.1, 11.6 and 11.8), 2-5% slower split 6 (the first block adds more
#: peers' sums than the extra SMs save).
_SPLIT_K_SM_SHARE = 0.76


def split_k_designs(m: int, n: int, blocks: int = H200_SMS) -> list[Choices]:
    """Split-K over clusters for a weight of few tiles, each tile's loop shared by the
    most blocks the space offers that keep the grid within :data:`_SPLIT_K_SM_SHARE` of ``blocks``
    SMs, likeliest first (the H200's leaders of 1280 x 8192, 2026-12-04): the tokens
    along wgmma's N over 64 weight rows (32 and 128 tokens), 64 x 64 unswapped tiles (64
    tokens), every token up to 128 in one unswapped tile over 64 weight rows, and the
    tokens over 128 weight rows. Each comes with its sums scattered over the cluster
    (every block adds and stores a share, with st.global) where every block has a unit,
    then added by the first block. None where the tiles already fill half the SMs."""
    tokens = next((t for t in (8, 16, 32, 64, 128) if t >= m), 256)  # the space's tiles
    swapped = {**GEMM_SWAP_WIDE, "tile_m": tokens, "consumer_warpgroups": 1}
    square = {**GEMM_WARP_SPECIALIZED, "tile_m": 64, "tile_n": 64, "consumer_warpgroups": 1}
    shapes: list[tuple[Choices, int]] = [(square, -(-m // 64) * -(-n // 64))]
    if m <= 128:
        rows = 64 if m <= 64 else 128
        shapes.append(({**GEMM_WARP_SPECIALIZED, "tile_m": rows, "tile_n": 64,
                        "consumer_warpgroups": rows // 64}, -(-n // 64)))
    if tokens <= 256:  # every token along wgmma's N (at most 256)
        first = [] if 32 < m <= 64 else [(swapped, -(-n // 64))]
        shapes = [*first, *shapes]
        if not first:
            shapes.append((swapped, -(-n // 64)))
        if tokens <= 128:  # 256 tokens over two warpgroups spill their sums (ptxas 13.0)
            shapes.append(({**swapped, "tile_n": 128, "consumer_warpgroups": 2},
                           -(-n // 128)))
    designs: list[Choices] = []
    for design, tiles in shapes:
        split = max((s for s in KNOB_ROWS["gemm"].split_k_blocks
                     if tiles * s <= _SPLIT_K_SM_SHARE * blocks), default=1)
        if split == 1 or 2 * tiles > blocks:
            continue
        # persistent: a range run's kernels count their tiles at run time
        design = {**design, "stream_k": 0, "persistent": True, "split_k": split}
        # each block adds and stores its share first, with st.global (a 64-column tile
        # is one TMA sub-tile, too few to share out), where each has a unit to add
        variants = [{**design, "split_k_reduce": "first_block"}]
        if _direct_share_units(design) >= split:
            variants.insert(0, {**design, "split_k_reduce": "scattered",
                                "map_store": "cuda_core"})
        for variant in filter(None, map(_split_k_ring, variants)):
            if variant not in designs:
                designs.append(variant)
    return designs


def _split_k_ring(design: Choices) -> Choices | None:
    """``design`` with the deepest ring that fits beside its fp32 partial (and a TMA
    store's two staging slots): 128-deep k steps where the ring still holds five of them
    (the leaders' at 8 to 64 tokens), else 64-deep. None where not two stages fit."""
    tile = design["tile_m"] * design["tile_n"]
    staged = design.get("map_store", "tma") == "tma" and not design.get("swap_ab")
    ring_bytes = _SPLIT_SMEM_BYTES - 4 * tile - (4 * tile if staged else 0)
    rows = design["tile_m"] + design["tile_n"]
    tile_k = 128 if rows * 128 * 2 * 5 <= ring_bytes else 64
    depths = [d for d in swapped_ring_depths() if d >= 2 and d * rows * tile_k * 2 <= ring_bytes]
    return {**design, "tile_k": tile_k, "stages_ab": max(depths)} if depths else None


def _direct_share_units(design: Choices) -> int:
    """The units a scattered split-K sum deals out with st.global stores: the 8-column
    groups of each 64-row block of a consumer's fragment (rows along n when swapped)."""
    rows, cols = ((design["tile_n"], design["tile_m"]) if design.get("swap_ab")
                  else (design["tile_m"], design["tile_n"]))
    return rows // design["consumer_warpgroups"] // 64 * (cols // 8)


def split_k_check_designs() -> list[Choices]:
    """One design per shape of split-K's part of the kernel (the fragment a consumer
    writes and the first block sums: its rows and warpgroups, swapped or not; the store
    after the sum; one tile a cluster or persistent clusters), for checks that must cover
    every split-K kernel the space can build."""
    designs: list[Choices] = []
    for tile_m, tile_n, consumers in ((128, 64, 2), (64, 64, 1), (128, 128, 2), (64, 256, 1)):
        for store, persistent in (("tma", False), ("cuda_core", True)):
            designs.append({**GEMM_WARP_SPECIALIZED, "tile_m": tile_m, "tile_n": tile_n,
                            "consumer_warpgroups": consumers, "stages_ab": 4,
                            "map_store": store, "persistent": persistent, "split_k": 4})
    for tokens, rows, split in ((8, 64, 6), (32, 128, 3), (128, 64, 2)):
        designs.append({**GEMM_SWAP_WIDE, "tile_m": tokens, "tile_n": rows,
                        "consumer_warpgroups": rows // 64, "stages_ab": 6, "split_k": split})
    # every block adds and stores its share: by stored sub-tile (TMA store, each
    # orientation) and by 8-column group of a row block (st.global, each orientation),
    # a unit or more a block
    scattered = {"split_k_reduce": "scattered", "stages_ab": 3}
    for tile_m, tile_n, consumers, store, split in ((128, 128, 2, "tma", 2),
                                                    (64, 256, 1, "tma", 4),
                                                    (128, 64, 2, "cuda_core", 4)):
        designs.append({**GEMM_WARP_SPECIALIZED, "tile_m": tile_m, "tile_n": tile_n,
                        "consumer_warpgroups": consumers, "map_store": store,
                        "split_k": split, **scattered})
    for tokens, rows, store, split in ((32, 128, "cuda_core", 4), (64, 256, "tma", 2)):
        designs.append({**GEMM_SWAP_WIDE, "tile_m": tokens, "tile_n": rows,
                        "consumer_warpgroups": 2, "map_store": store, "split_k": split,
                        **scattered})
    return designs


def stream_k_designs() -> list[Choices]:
    """One design per shape of stream-K's part of the kernel (the fragment a consumer
    writes and sums: its rows, its warpgroups, swapped or not, clustered or not; the store
    after the sum; one or two waves shared out), for checks that must cover every stream-K
    kernel the space can build (the same bits on every call)."""
    designs: list[Choices] = []
    for waves in (1, 2):
        for tile_m, tile_n, consumers, stages in ((128, 256, 2, 4), (128, 128, 2, 4),
                                                  (128, 128, 1, 4), (64, 256, 1, 4),
                                                  (256, 128, 2, 3)):
            for store in ("tma", "cuda_core"):
                designs.append({**GEMM_WARP_SPECIALIZED, "tile_m": tile_m, "tile_n": tile_n,
                                "consumer_warpgroups": consumers, "stages_ab": stages,
                                "map_store": store, "stream_k": waves})
        designs.append({**GEMM_WARP_SPECIALIZED, "order": "serial", "stream_k": waves})
        for swapped in (GEMM_SWAP_NARROW, _swapped(64), _swapped(128, 128)):
            designs.append({**swapped, "stream_k": waves})
        for axis in ("m", "n"):  # a cluster's blocks share their tiles' trips out together
            designs.append({**GEMM_WARP_SPECIALIZED, "cluster_size": 2, "cluster_axis": axis,
                            "stream_k": waves})
        designs.append({**GEMM_DECODE_M_PAIR, "stream_k": waves})
        for axis, tile_m, tile_n in (("m", 64, 128), ("n", 128, 64)):  # clusters of 4
            designs.append({**GEMM_WARP_SPECIALIZED, "tile_m": tile_m, "tile_n": tile_n,
                            "consumer_warpgroups": tile_m // 64, "stages_ab": 8,
                            "cluster_size": 4, "cluster_axis": axis, "stream_k": waves})
    return designs
