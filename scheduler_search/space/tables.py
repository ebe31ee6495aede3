"""The knob table of each operator on each architecture.

Each operator's rows are data (:mod:`scheduler_search.space.knob_rows`); this module
turns them into knobs on a device. Options that the device cannot run (TMA or async
wgmma on sm_80) are removed here, so the enumerator never builds what cannot exist.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from scheduler_search.hardware.model import Device, UnitKind
from scheduler_search.ops import OperatorSpec
from scheduler_search.space.knob_rows import KNOB_ROWS
from scheduler_search.space.knobs import Knob, is_warp_specialized, needs_two_consumers
from scheduler_search.sprogram.schedule import SPLIT_K_REDUCES

#: Few-token GEMMs also take clusters of 4: where the weight makes few tiles, stream-K
#: over four blocks that share one operand led 128 and 256 x 1280 x 8192 (H200,
#: 2026-12-04: 14.8 and 17.2 us, where pairs ran 15.2 and 20.8).
_FEW_TOKEN_CLUSTER_SIZES = (1, 2, 4)

_PRODUCER_REGS = (24, 40)
_SWIZZLES = (1, 2, 4, 8, 16)


def _clustered(choices: dict) -> bool:
    return choices.get("cluster_size", 1) > 1


def _stream_k_applies(spec: OperatorSpec, device: Device) -> Callable[[dict], bool]:
    """Stream-K is asked for where it is lowered (a persistent grid of cooperative
    consumers fed by a producer warp) and can even out a wave: the tile grid leaves the
    last (or only) wave of one block (one cluster) an SM (a group of SMs) part-empty. A
    cluster's blocks take their tiles' trips together, so the share is over clusters."""
    graph = spec.graph({})

    def applies(c: dict) -> bool:
        if not (c.get("persistent") and c.get("warp_specialized")
                and c.get("consumer_split", "cooperative") == "cooperative"):
            return False
        size = c.get("cluster_size", 1) if _clustered(c) else 1
        tiles = math.prod(-(-graph.extents[a] // c.get(f"tile_{a}", graph.extents[a]))
                          for a in graph.spatial_axes)
        return (tiles // size) % device.clusters_at_once(size) != 0

    return applies


def _split_k_applies(spec: OperatorSpec, device: Device) -> Callable[[dict], bool]:
    """Split-K is asked for where it is lowered (cooperative consumers fed by a producer
    warp, no multicast cluster, no stream-K) and where the tiles leave SMs idle: fewer
    tiles than half the SMs (a decode GEMM's few weight tiles)."""
    graph = spec.graph({})

    def applies(c: dict) -> bool:
        if not (c.get("warp_specialized") and not _clustered(c) and not c.get("stream_k")
                and c.get("consumer_split", "cooperative") == "cooperative"):
            return False
        tiles = math.prod(-(-graph.extents[a] // c.get(f"tile_{a}", graph.extents[a]))
                          for a in graph.spatial_axes)
        return 2 * tiles <= device.sm_count

    return applies


#: Few-token GEMMs (decode: m rows of tokens against an n x k weight, memory-bound): the
#: tensor cores may compute Cᵀ (``swap_ab``: the weight's n along wgmma's M, the tokens
#: along its N, which steps by 8), so a tile holds 8..32 token rows instead of 64 rows of
#: padding, and rings run deeper to keep a weight's bytes in flight on every SM. On an
#: H200 (bf16, 2026-12-04, graph replay) swapped 8-row tiles over 64-row n tiles with 11-12
#: stages streamed 1 x 4096 x 4096 at 3.0 TB/s and 1 x 14336 x 4096 at 3.9 TB/s, where the
#: space's best unswapped pick reached 1.9 and 3.4 (bench/decode_designs.py).
FEW_TOKENS = 256
_SWAP_TILE_M = (8, 16, 32)
#: 10 stages: a 16-token tile's deepest ring that fits (12 of its 20 KB stages do not).
_DEEP_STAGES = (8, 10, 12)


def swapped_ring_depths() -> tuple[int, ...]:
    """The ring depths a swapped GEMM tile may take."""
    return KNOB_ROWS["gemm"].stages + _DEEP_STAGES


def few_token_gemm(spec: OperatorSpec) -> bool:
    """A GEMM of at most :data:`FEW_TOKENS` rows of m."""
    m = spec.params().get("m") if spec.op == "gemm" else None
    return isinstance(m, int) and m <= FEW_TOKENS


def swap_applies(spec: OperatorSpec) -> bool:
    """Whether ``swap_ab`` is offered: a few-token GEMM without a fused epilogue (the
    transposed output is stored by the consumers' threads; 8-bit inputs' dequantising
    scale is applied on the way). The weight is wgmma's A either way it is stored: n x k
    read K-major, k x n read MN-major (the instruction transposes 16-bit inputs; 8-bit
    ones are refused k x n by the tile rules)."""
    return few_token_gemm(spec) and not spec.epilogue.fused


def _swappable(choices: dict) -> bool:
    """Swap is asked for with token tiles fed by a producer warp: every m tile of a
    few-token GEMM is one wgmma N can hold (8..256). Past 64 tokens a swapped tile holds
    all of them and reads the weight once, where 64-row m tiles read it once a tile (on
    an H200, 2026-12-04, 128 x 6144 x 4096 and 128 x 8192 x 3584 ran fastest so)."""
    return is_warp_specialized(choices)


def _token_tiles_specialized(choices: dict) -> tuple[bool, ...]:
    """A token tile (under 64 rows) runs only swapped, which needs a producer warp."""
    return (True,) if choices.get("tile_m", 64) < 64 else (True, False)


def _swap_viable(choices: dict) -> tuple[bool, ...]:
    """A tile of fewer than 64 rows runs only swapped (wgmma's M is 64 a warpgroup)."""
    return (True,) if choices.get("tile_m", 64) < 64 else (False, True)


def _swapped_store(options: tuple[str, ...]) -> Callable[[dict], tuple[str, ...]]:
    """A swapped tile's transposed output is stored by the consumers' threads, or, with
    cooperative consumers, staged in shared memory for a TMA store (on an H200,
    2026-12-04, the staged store ran 24 of 31 swapped middle tiles faster, up to 1.19x)."""
    def viable(choices: dict) -> tuple[str, ...]:
        if choices.get("swap_ab") and choices.get("consumer_split") == "pingpong":
            return ("cuda_core",)
        return options

    return viable


def _stages_viable(shallow: tuple[int, ...]) -> Callable[[dict], tuple[int, ...]]:
    """Deep rings only where a stage is small: swapped token tiles."""
    deep = shallow + _DEEP_STAGES
    return lambda choices: deep if choices.get("swap_ab") else shallow


#: GEMM's N tiles fitted to the shape: multiples of wgmma's N step in this range.
_FITTED_N_RANGE, _FITTED_N_STEP = (160, 256), 16


def fitted_tile(extent: int, options: tuple[int, ...]) -> int | None:
    """A wide tile (``_FITTED_N_RANGE``) that pads ``extent`` less than every option does
    (N = 6000: 240, which divides it, where 128 pads 16 columns and 256 pads 144), or
    None when an option pads as little."""
    low, high = _FITTED_N_RANGE
    best = min(range(low, high + 1, _FITTED_N_STEP), key=lambda t: (-extent % t, -t))
    if -extent % best < min(-extent % t for t in options):
        return best
    return None


def _tile_options(spec: OperatorSpec) -> dict[str, tuple[int, ...]]:
    """The tile sizes worth asking for ``spec``: GEMM also offers an N tile fitted to its
    shape (:func:`fitted_tile`); attention and Mamba2 pack heads of a group into a tile
    (``g``) in divisors of the group (attention's in either layout: one TMA box of heads x
    positions); with nothing to choose, the axis is no knob."""
    options = dict(KNOB_ROWS[spec.op].tiles)
    if spec.op == "gemm":
        fitted = fitted_tile(spec.params()["n"], options["n"])
        if fitted is not None:
            options["n"] = tuple(sorted((*options["n"], fitted)))
        if swap_applies(spec):
            options["m"] = (*_SWAP_TILE_M, *options["m"])
    if "g" not in options:
        return options
    params = spec.params()
    if spec.op == "attention":
        group = params["heads"] // params["kv_heads"]
    else:
        group = params["nheads"] // params["ngroups"]
    packs = tuple(g for g in options["g"] if group % g == 0)
    if len(packs) > 1:
        options["g"] = packs
    else:
        del options["g"]
    return options


def knob_table(spec: OperatorSpec, device: Device) -> list[Knob]:
    """The ordered knobs of ``spec``'s schedule space on ``device``."""
    rows = KNOB_ROWS[spec.op]
    graph = spec.graph({})
    hopper = device.has_tma and device.unit(UnitKind.TENSOR_CORE).is_async
    knobs = [Knob(f"tile_{axis}", options) for axis, options in _tile_options(spec).items()]
    swap = hopper and swap_applies(spec)
    # A producer warpgroup needs asynchronous copies it can issue ahead: TMA, or cp.async.
    producer = hopper or device.capabilities.cp_async
    knobs.append(Knob("warp_specialized", (True, False) if producer else (False,),
                      viable=_token_tiles_specialized if swap else None))
    knobs.append(Knob("consumer_warpgroups", (1, 2, 3)))
    knobs.append(
        Knob(
            "consumer_split",
            ("cooperative", "pingpong"),
            when=lambda c: needs_two_consumers(c) and is_warp_specialized(c),
        )
    )
    knobs.append(Knob("wg_schedule", ("free", "alternate"), when=needs_two_consumers))
    if device.capabilities.setmaxnreg:
        knobs.append(Knob("producer_regs", _PRODUCER_REGS, when=is_warp_specialized))
    if swap:
        knobs.append(Knob("swap_ab", (False, True), when=_swappable, default=False,
                          viable=_swap_viable))
    for stream in type(spec).streams:
        if swap:
            knobs.append(Knob(f"stages_{stream}", rows.stages + _DEEP_STAGES,
                              viable=_stages_viable(rows.stages)))
        else:
            knobs.append(Knob(f"stages_{stream}", rows.stages))
    knobs.append(Knob("order", spec.loop_orders(rows.orders) if hopper else ("serial",)))
    have = device.unit_kinds()
    for name in rows.mappable:
        options = tuple(u.value for u in graph.stask(name).units if u in have)
        if len(options) > 1:
            viable = _swapped_store(options) if swap and name == "store" else None
            knobs.append(Knob(f"map_{name}", options, viable=viable))
    if rows.vector_loads:
        options = tuple(u for u in rows.vector_loads if UnitKind(u) in have)
        if len(options) > 1:
            knobs.append(Knob("map_vector_loads", options))
    if hopper and rows.cluster_sizes:
        sizes = _FEW_TOKEN_CLUSTER_SIZES if few_token_gemm(spec) else rows.cluster_sizes
        knobs.append(Knob("cluster_size", sizes, when=is_warp_specialized, default=1))
        knobs.append(Knob("cluster_axis", graph.spatial_axes[:2], when=_clustered))
    knobs.append(Knob("persistent", (False, True)))
    if hopper and rows.stream_k_waves:
        knobs.append(Knob("stream_k", rows.stream_k_waves,
                          when=_stream_k_applies(spec, device), default=0))
    if hopper and rows.split_k_blocks:
        knobs.append(Knob("split_k", rows.split_k_blocks,
                          when=_split_k_applies(spec, device), default=1))
        knobs.append(Knob("split_k_reduce", SPLIT_K_REDUCES,
                          when=lambda c: c.get("split_k", 1) > 1, default="first_block"))
    order_axes = graph.spatial_axes + tuple(graph.grid_axes)
    knobs.append(Knob("raster_major", order_axes[:2], structural=False))
    knobs.append(Knob("raster_swizzle", _SWIZZLES, structural=False))
    if graph.causal_pairs:
        knobs.append(Knob("raster_heaviest_first", (False, True), structural=False))
    if graph.shared_sums:
        knobs.append(Knob("raster_stagger", (False, True), structural=False))
    return knobs
