"""GEMM with ``swap_ab``: the tensor cores compute Cᵀ = B Aᵀ, so m runs along wgmma's N
(any multiple of 8) and n along its M (the consumers' 64-row blocks). The schedule is
validated with its rows along n, the kernel reads B's tile as wgmma's A and stores the
transposed fragment element by element, masked at the run-time m; what it cannot lower is
refused with a reason; and the kernels compile for sm_90a without spills."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kernel_checks import assert_compile_clean

from codegen import render, unsupported
from codegen.nvcc import nvcc_path
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED, RANGE_DESIGNS
from scheduler_search.sprogram import SProgram, check_valid, plan_sprogram

DEVICE = get_device("h200")
SWAP = {**GEMM_WARP_SPECIALIZED, "swap_ab": True, "map_store": "cuda_core",
        "consumer_warpgroups": 1, "tile_n": 128, "stages_ab": 8}


def _spec(m: int, **params: object):
    return parse_spec("gemm", {"m": m, "n": 4096, "k": 4096, "dtype": "float16",
                               "b_layout": "nk", **params})


def _plan(m: int, runtime: bool = False, params: dict | None = None,
          **choices: object) -> tuple[SProgram, object]:
    spec = _spec(m, **(params or {}))
    sprogram = plan_sprogram(spec, DEVICE, {**SWAP, **choices})
    return (replace(sprogram, runtime_dims=("m",)) if runtime else sprogram), spec


@pytest.mark.parametrize("tile_m", [8, 16, 136])
def test_a_narrow_m_tile_is_valid_only_swapped(tile_m: int) -> None:
    swapped, spec = _plan(260, tile_m=tile_m, stages_ab=6)
    assert check_valid(swapped, spec, DEVICE).ok
    plain = plan_sprogram(spec, DEVICE, {**SWAP, "swap_ab": False, "tile_m": tile_m,
                                         "stages_ab": 6})
    reasons = " ".join(str(r) for r in check_valid(plain, spec, DEVICE).rejections)
    assert "M=" in reasons and "multiple of 64" in reasons


def test_swap_is_part_of_the_schedule_only_when_set() -> None:
    swapped, spec = _plan(260, tile_m=64)
    plain = plan_sprogram(spec, DEVICE, {**SWAP, "swap_ab": False, "tile_m": 64})
    assert swapped.to_dict()["swap_ab"] is True and "swap_ab" not in plain.to_dict()
    assert swapped.hash != plain.hash
    assert SProgram.from_json(swapped.to_json()) == swapped


def test_the_kernel_multiplies_b_by_a_and_stores_the_transpose() -> None:
    sprogram, spec = _plan(16384, runtime=True, tile_m=16, stream_k=1)
    source = render(sprogram, spec, DEVICE).source
    assert "swap_ab" in source.splitlines()[0]
    assert "wgmma_m64n16k16_f16_bk" in source  # m along N: 16
    assert "a_stage = smem + SMEM_B" in source and "b_stage = smem + SMEM_A" in source
    assert "constexpr int ACC_REGS = 8;" in source
    # The transposed fragment: row r is column n, column g is row m, masked at M.
    assert "if (g + 0 < M) c[(unsigned long long)(g + 0) * N + r]" in source
    assert "if (g + 1 < M) c[(unsigned long long)(g + 1) * N + r]" in source


def test_a_static_m_that_fills_its_tiles_stores_unmasked() -> None:
    sprogram, spec = _plan(256, tile_m=64)
    source = render(sprogram, spec, DEVICE).source
    assert "c[(unsigned long long)(g + 0) * N + r] = " in source
    assert "if (g + 0 < M)" not in source


def test_a_weight_stored_k_by_n_is_read_as_wgmma_mn_major_a() -> None:
    """B stored k x n: its tile (64-column boxes, n contiguous) is wgmma's A with the
    transpose bit set, each consumer's 64 rows of n one box further on."""
    sprogram, spec = _plan(260, params={"b_layout": "kn"}, tile_m=64, tile_n=128,
                           consumer_warpgroups=2)
    assert unsupported(sprogram, DEVICE) is None and check_valid(sprogram, spec, DEVICE).ok
    source = render(sprogram, spec, DEVICE).source
    assert "wgmma_m64n64k16_f16_amn_bk(" in source
    assert "p, 1, 1, 1, 0;" in source  # transpose A, not B
    assert "a_stage = smem + SMEM_B + ab_stage * B_STAGE_BYTES + row0 / 64 * 8192;" in source


@pytest.mark.parametrize(("params", "choices", "reason"), [
    ({"epilogue": {"bias": True}}, {}, "fused epilogue"),
    ({}, {"map_store": "tma"}, "st.global"),
])
def test_what_a_swapped_kernel_cannot_lower_is_named(params: dict, choices: dict,
                                                       reason: str) -> None:
    sprogram, _ = _plan(260, params=params, tile_m=64, **choices)
    assert reason in (unsupported(sprogram, DEVICE) or "")


def test_an_fp8_swapped_kernel_dequantises_on_the_transposed_store() -> None:
    """8-bit inputs: both tiles K-major, wgmma's k32 FP8 form with the tokens along N, and
    the per-tensor scales applied to each pair before its two one-element stores (a scale
    reads no position, so the pair's two global rows do not matter to it)."""
    sprogram, spec = _plan(1, params={"dtype": "float8_e4m3"}, tile_m=8, tile_k=128,
                           stages_ab=12)
    assert unsupported(sprogram, DEVICE) is None and check_valid(sprogram, spec, DEVICE).ok
    source = render(sprogram, spec, DEVICE).source
    assert "m64n8k32.f32.e4m3.e4m3" in source
    store = source[source.index("store: acc transposed"):]
    scaled = store.index("v0 *= scale_a[0] * scale_b[0]")
    assert scaled < store.index("c[(unsigned long long)(g + 0) * N + r] = to_bf16(v0)")
    assert "c[(unsigned long long)(g + 1) * N + r] = to_bf16(v1)" in store


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_swapped_kernels_compile_without_spills() -> None:
    sources = []
    for tile_m, tile_n, consumers, stream_k, dtype in ((8, 128, 1, 1, "float16"),
                                                       (32, 256, 2, 2, "bfloat16"),
                                                       (136, 64, 1, 0, "float16")):
        sprogram, spec = _plan(16384, runtime=True, params={"dtype": dtype}, tile_m=tile_m,
                               tile_n=tile_n, consumer_warpgroups=consumers,
                               stream_k=stream_k, stages_ab=12 if tile_m < 32 else 4)
        assert unsupported(sprogram, DEVICE) is None
        sources.append(render(sprogram, spec, DEVICE).source)
    for tile_m, stream_k in ((8, 0), (16, 1)):  # 8-bit inputs, static m (decode)
        sprogram, spec = _plan(tile_m, params={"dtype": "float8_e4m3"}, tile_m=tile_m,
                               tile_k=128, stream_k=stream_k, stages_ab=12)
        assert unsupported(sprogram, DEVICE) is None
        sources.append(render(sprogram, spec, DEVICE).source)
    assert_compile_clean(sources)


def _range_design(name: str) -> tuple[SProgram, object]:
    spec = _spec(16384)
    choices = {**RANGE_DESIGNS["gemm"][name], "persistent": True}
    return replace(plan_sprogram(spec, DEVICE, choices), runtime_dims=("m",)), spec


@pytest.mark.parametrize("name", sorted(RANGE_DESIGNS["gemm"]))
def test_every_range_design_is_valid_and_lowered_with_m_at_run_time(name: str) -> None:
    sprogram, spec = _range_design(name)
    assert check_valid(sprogram, spec, DEVICE).ok
    assert unsupported(sprogram, DEVICE) is None


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_the_two_consumer_swapped_designs_compile_without_spills() -> None:
    names = [n for n in RANGE_DESIGNS["gemm"] if n.endswith("x128")]
    assert len(names) >= 4
    assert_compile_clean([render(*_range_design(n), DEVICE).source for n in names])
