"""FP8 attention kernels on a real GPU: e4m3 q, k, v with per-tensor scales, bf16 o, correct
against the workers' fp32 reference (of the same inputs, times their scales) within the
output's own bound (P rounded to e4m3), the log-sum-exp within 1e-3; causal and full, GQA
and MHA, head_dim 64, 128 and 256, both layouts, lengths that are not a multiple of the
tile; the FlashAttention-3 order (v transposed under the other warpgroup's MMAs), the
serial one, TMA stores, packed heads and random points of the space.

Run on an H200 with ``pytest tests/codegen -m gpu``; skipped where CuPy sees no GPU.
"""

from __future__ import annotations

from typing import Any

import pytest
from gpu import cuda_device_visible
from kernel_checks import check_kernels
from schedule_samples import sample_schedules

from codegen import feasibility
from scheduler_search.hardware import get_device
from scheduler_search.ops import OperatorSpec, parse_spec
from scheduler_search.ops.attention import FP8_O_REL_ERROR_BOUND
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import FLASH_ATTENTION_3
from scheduler_search.sprogram import SProgram

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")
ROTATED = {"map_softmax_exp2": "sfu", "map_store": "cuda_core", "persistent": True,
           "raster_major": "q", "raster_swizzle": 1}
#: (batch, heads, kv_heads, seq_q, seq_kv, head_dim, layout).
SHAPES: tuple[tuple[int, int, int, int, int, int, str], ...] = (
    (1, 32, 8, 512, 512, 128, "bshd"),
    (2, 8, 8, 300, 700, 128, "bshd"),
    (2, 16, 4, 1000, 1000, 128, "bhsd"),
    (1, 8, 8, 257, 513, 64, "bhsd"),
    (1, 8, 2, 512, 512, 256, "bshd"),
)
CHANGES: tuple[dict[str, Any], ...] = (
    {"wg_schedule": "alternate"},
    {"wg_schedule": "free", "tile_kv": 64},
    {"wg_schedule": "alternate", "order": "serial"},
    {"wg_schedule": "alternate", "map_store": "tma"},
    {"tile_q": 64, "consumer_warpgroups": 1, "tile_g": 2},
)


def _programs(spec: OperatorSpec) -> list[SProgram]:
    space = ScheduleSpace(spec, DEVICE, feasibility("attention", DEVICE))
    built = list(sample_schedules(spec, DEVICE, 2, seed=7))
    for change in CHANGES:
        sprogram, validity = space.build({**FLASH_ATTENTION_3, **ROTATED, **change})
        if validity.ok and sprogram.hash not in {b.hash for b in built}:
            built.append(sprogram)
    return built


def _cases() -> list[tuple[str, OperatorSpec, SProgram]]:
    cases = []
    for batch, heads, kv_heads, seq_q, seq_kv, head_dim, layout in SHAPES:
        for causal in (False, True):
            spec = parse_spec("attention", {
                "batch": batch, "heads": heads, "kv_heads": kv_heads, "seq_q": seq_q,
                "seq_kv": seq_kv, "head_dim": head_dim, "causal": causal,
                "dtype": "float8_e4m3", "layout": layout})
            name = (f"{batch}x{heads}({kv_heads})x{seq_q}x{seq_kv}xd{head_dim}"
                    f"{'-causal' if causal else ''}-fp8-{layout}")
            cases += [(name, spec, p) for p in _programs(spec)]
    return cases


#: Built only where the kernels can run.
CASES = _cases() if cuda_device_visible() else []


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return check_kernels(CASES, DEVICE, tmp_path_factory)


@pytest.mark.parametrize(
    ("name", "spec", "sprogram"), CASES, ids=[f"{n}-{p.hash[:8]}" for n, _, p in CASES]
)
def test_generated_fp8_attention_is_correct(
    results: dict[str, Any], name: str, spec: OperatorSpec, sprogram: SProgram
) -> None:
    result = results[sprogram.hash]
    assert result.status.value == "ok", (name, sprogram.choices, result.error, result.log[-500:])
    assert result.rel_error is not None and result.rel_error < FP8_O_REL_ERROR_BOUND
