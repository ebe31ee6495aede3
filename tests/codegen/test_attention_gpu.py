"""Generated attention kernels on a real GPU: correct against the workers' fp32 reference
(with poisoned outputs, on seeded random inputs) over causal and full masks, GQA and MHA,
head_dim 64, 96, 128 and 256, fp16 and bf16, lengths that are not a multiple of the tile and query
lengths that differ from key lengths, o (and lse) written with st.global and by TMA.

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


def _cases() -> list[tuple[str, OperatorSpec, SProgram]]:
    cases = []
    for batch, heads, kv_heads, seq_q, seq_kv, head_dim, layout in SHAPES:
        for causal in (False, True):
            for dtype in ("float16", "bfloat16"):
                spec = parse_spec("attention", {
                    "batch": batch, "heads": heads, "kv_heads": kv_heads, "seq_q": seq_q,
                    "seq_kv": seq_kv, "head_dim": head_dim, "causal": causal, "dtype": dtype,
                    "layout": layout})
                name = (f"{batch}x{heads}({kv_heads})x{seq_q}x{seq_kv}xd{head_dim}"
                        f"{'-causal' if causal else ''}-{dtype}-{layout}")
                programs = [*_sampled(spec), *_rotated(spec)]
                cases += [(name, spec, p) for p in programs]
    return cases


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
    assert_correct(result, name, sprogram)
