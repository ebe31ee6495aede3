"""Generated attention kernels on a real GPU: correct against the workers' fp32 reference
(with poisoned outputs, on seeded random inputs) over causal and full masks, GQA and MHA,
head_dim 64, 96, 128 and 256, fp16 and bf16, lengths that are not a multiple of the tile and query
lengths that differ from key lengths, o (and lse) written with st.global and by TMA; FP8
(e4m3 q, k, v with per-tensor scales, bf16 o within its own bound) on a subset of the shapes,
with the FlashAttention-3 order, the serial one, TMA stores, packed heads and random points.

Run on an H200 with ``pytest tests/codegen -m gpu``; skipped where CuPy sees no GPU. Every
kernel of the module is compiled and checked in one batch; each test reads its own result.
"""

from __future__ import annotations

from typing import Any

import pytest
from gpu import cuda_device_visible
from kernel_checks import assert_correct, check_kernels
from schedule_samples import sample_schedules

from codegen import feasibility
from scheduler_search.hardware import get_device
from scheduler_search.ops import OperatorSpec, parse_spec
from scheduler_search.ops.attention import FP8_O_REL_ERROR_BOUND
from scheduler_search.space import ScheduleSpace, rank_top
from scheduler_search.space.designs import FLASH_ATTENTION_3
from scheduler_search.sprogram import SProgram

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")
ROTATED = {"map_softmax_exp2": "sfu", "map_store": "cuda_core", "persistent": True,
           "raster_major": "q", "raster_swizzle": 1}
SAMPLES_PER_CASE = 3
#: (batch, heads, kv_heads, seq_q, seq_kv, head_dim, layout): suite-like shapes and odd
#: ones, in FlashAttention's layout (bshd) and PyTorch SDPA's (bhsd).
SHAPES: tuple[tuple[int, int, int, int, int, int, str], ...] = (
    (1, 32, 8, 512, 512, 128, "bshd"),
    (2, 16, 16, 1024, 1024, 64, "bshd"),
    (1, 8, 2, 3000, 3000, 128, "bshd"),
    (2, 8, 8, 300, 700, 128, "bshd"),
    (1, 4, 1, 200, 130, 64, "bshd"),
    (2, 8, 2, 1, 1, 64, "bshd"),  # one query, one key
    (2, 16, 4, 1, 777, 128, "bshd"),  # one query (decoding) over an odd number of keys
    (2, 16, 4, 1000, 1000, 128, "bhsd"),
    (1, 8, 8, 257, 513, 64, "bhsd"),
    (1, 8, 2, 640, 640, 96, "bshd"),  # rows of 192 bytes: 64B-swizzled boxes
    (2, 8, 2, 384, 520, 96, "bhsd"),  # packed heads one after the other in a box
    (1, 8, 2, 512, 512, 128, "bhsd"),
    (1, 8, 2, 512, 512, 256, "bshd"),
)
#: The shapes FP8 kernels are checked on (head_dim a multiple of 32, rows of 64 bytes).
FP8_SHAPES = tuple(SHAPES[i] for i in (0, 3, 7, 8, 12))
#: The FlashAttention-3 design's FP8 variants: v is transposed under the other warpgroup's
#: matrix products (rotate, turns), or between them (serial).
FP8_CHANGES: tuple[dict[str, Any], ...] = (
    {"wg_schedule": "alternate"}, {"wg_schedule": "free", "tile_kv": 64},
    {"wg_schedule": "alternate", "order": "serial"},
    {"wg_schedule": "alternate", "map_store": "tma"},
    {"tile_q": 64, "consumer_warpgroups": 1, "tile_g": 2},
)


def _sampled(spec: OperatorSpec) -> list[SProgram]:
    """Random points of the space; for one query (a space of a few points that random draws
    rarely hit), the cost model's best."""
    if spec.params()["seq_q"] > 1:
        return list(sample_schedules(spec, DEVICE, SAMPLES_PER_CASE, seed=5))
    space = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))
    candidates, _ = space.enumerate()
    return [r.sprogram for r in rank_top(space, candidates, SAMPLES_PER_CASE)]


def _rotated(spec: OperatorSpec) -> list[SProgram]:
    """The FlashAttention-3 order (a software-pipelined loop), with and without turns; with
    GQA, the query heads of a kv group packed into the tile (k, v loaded once for them);
    o and lse stored by TMA, persistent (staging slots of their own) and not (the idle
    operand stages), packed too; causal tiles heaviest first across the grid; pingpong
    consumers, each over a query tile of its own."""
    space = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))
    params = spec.params()
    group = params["heads"] // params["kv_heads"]
    packed = [{"tile_g": g, "tile_q": 64, "consumer_warpgroups": 1} for g in (2, group)
              if group > 1 and g <= group]
    built = []
    tma = {"wg_schedule": "alternate", "map_store": "tma"}
    pingpong = {"consumer_split": "pingpong", "wg_schedule": "alternate", "tile_q": 64,
                "order": "serial"}
    for change in ({"wg_schedule": "alternate"}, {"wg_schedule": "free", "tile_kv": 64},
                   tma, {**tma, "persistent": False}, pingpong, {**pingpong, **tma},
                   *packed,
                   *([{**tma, "raster_heaviest_first": True}] if params["causal"] else []),
                   *({**p, "map_store": "tma"} for p in packed)):
        sprogram, validity = space.build({**FLASH_ATTENTION_3, **ROTATED, **change})
        if validity.ok and sprogram.hash not in {b.hash for b in built}:
            built.append(sprogram)
    return built


def _fp8(spec: OperatorSpec) -> list[SProgram]:
    """Two random points of the FP8 space and the design's FP8 variants."""
    space = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))
    built = list(sample_schedules(spec, DEVICE, 2, seed=7))
    for change in FP8_CHANGES:
        sprogram, validity = space.build({**FLASH_ATTENTION_3, **ROTATED, **change})
        if validity.ok and sprogram.hash not in {b.hash for b in built}:
            built.append(sprogram)
    return built


def _cases() -> list[tuple[str, OperatorSpec, SProgram]]:
    cases = []
    for shape in SHAPES:
        for causal in (False, True):
            dtypes = ("float16", "bfloat16", *(["float8_e4m3"] if shape in FP8_SHAPES else []))
            for dtype in dtypes:
                cases += _shape_cases(shape, causal, dtype)
    return cases


def _shape_cases(shape: tuple[int, int, int, int, int, int, str], causal: bool,
                 dtype: str) -> list[tuple[str, OperatorSpec, SProgram]]:
    batch, heads, kv_heads, seq_q, seq_kv, head_dim, layout = shape
    spec = parse_spec("attention", {
        "batch": batch, "heads": heads, "kv_heads": kv_heads, "seq_q": seq_q,
        "seq_kv": seq_kv, "head_dim": head_dim, "causal": causal, "dtype": dtype,
        "layout": layout})
    name = (f"{batch}x{heads}({kv_heads})x{seq_q}x{seq_kv}xd{head_dim}"
            f"{'-causal' if causal else ''}-{dtype}-{layout}")
    programs = _fp8(spec) if dtype == "float8_e4m3" else [*_sampled(spec), *_rotated(spec)]
    return [(name, spec, p) for p in programs]


#: Built only where the kernels can run (building them takes a while on a CPU).
CASES = _cases() if cuda_device_visible() else []


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return check_kernels(CASES, DEVICE, tmp_path_factory)


@pytest.mark.parametrize(
    ("name", "spec", "sprogram"), CASES, ids=[f"{n}-{p.hash[:8]}" for n, _, p in CASES]
)
def test_generated_attention_is_correct(
    results: dict[str, Any], name: str, spec: OperatorSpec, sprogram: SProgram
) -> None:
    result = results[sprogram.hash]
    if spec.params()["dtype"] != "float8_e4m3":
        assert_correct(result, name, sprogram)
        return
    assert result.status.value == "ok", (name, sprogram.choices, result.error, result.log[-500:])
    assert result.rel_error is not None and result.rel_error < FP8_O_REL_ERROR_BOUND
