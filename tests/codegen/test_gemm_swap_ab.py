"""GEMM with ``swap_ab``: the tensor cores compute Cᵀ = B Aᵀ, so m runs along wgmma's N
(any multiple of 8) and n along its M (the consumers' 64-row blocks). The schedule is
validated with its rows along n, the kernel reads B's tile as wgmma's A (K-major, or
MN-major with the transpose bit) and stores the transposed fragment element by element,
masked at the run-time m, or stages it transposed for a TMA store; what it cannot lower is
refused with a reason; and the kernels compile for sm_90a without spills."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kernel_checks import assert_compile_clean

from codegen import render, unsupported
from codegen.nvcc import nvcc_path
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.space.designs import (
    GEMM_WARP_SPECIALIZED,
    RANGE_DESIGNS,
    swapped_wave_designs,
    with_transposed_tma_store,
)
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


def _two_consumers(tokens: int) -> dict:
    """A swapped tile of ``tokens`` over 128 weight rows, two consumers."""
    return {**SWAP, "tile_m": tokens, "consumer_warpgroups": 2, "stages_ab": 4}


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
def test_the_wave_fitted_swapped_designs_compile_without_spills() -> None:
    """Two consumers over 128 or 256 weight rows, up to 256 tokens (136 over 256 rows),
    the output staged for TMA or stored directly, at a run-time m."""
    spec = parse_spec("gemm", {"m": 16384, "n": 11200, "k": 1664, "dtype": "bfloat16",
                               "b_layout": "nk"})
    designs = swapped_wave_designs(11200, 1, 16384)
    assert {d["map_store"] for d in designs} == {"tma", "cuda_core"}
    assert {d["tile_n"] for d in designs} == {128, 256}
    sprograms = [replace(plan_sprogram(spec, DEVICE, {**d, "persistent": True}),
                         runtime_dims=("m",)) for d in designs]
    assert all(unsupported(s, DEVICE) is None for s in sprograms)
    assert_compile_clean([render(s, spec, DEVICE).source for s in sprograms])


def test_a_tma_store_stages_the_transposed_fragment_as_the_output_rows() -> None:
    """map_store tma: each consumer's 64-row block (64 output columns) is written to its
    part of a staging slot with stmatrix.trans, 16 tokens a .x4 and an odd last 8-token
    group a .x2, then stored as a box of 64 columns by the tile's tokens at the block's
    first weight row; the output's tensor map is n wide and m (a run-time extent) high."""
    sprogram, spec = _plan(16384, runtime=True, map_store="tma", tile_m=104, tile_n=128,
                           consumer_warpgroups=2, stages_ab=5)
    assert unsupported(sprogram, DEVICE) is None and check_valid(sprogram, spec, DEVICE).ok
    artifact = render(sprogram, spec, DEVICE)
    store = artifact.source[artifact.source.index("for (int s = 0; s < STORE_SUBTILES"):]
    assert "consumer * C_BLOCK_BYTES" in store
    assert "for (int j = 0; j < 6; ++j)" in store and "stmatrix_x4_trans(" in store
    assert "const int out_row = (12 + (lane >> 4)) * 8 + (lane & 7);" in store
    assert "stmatrix_x2_trans(" in store
    assert "tma_store_2d(&c_map, n0 + row0 + s * STORE_COLS, m0, buf);" in store
    assert "constexpr u32 C_BLOCK_BYTES = 13312;" in artifact.source  # 104 rows x 128 B
    c_map = next(a for a in artifact.args if a.name == "c_map")
    assert c_map.global_dims == (4096, 16384) and c_map.box_dims == (64, 104)
    assert ("m", "c_map", "global_dims", 1) in {(s.dim, s.arg, s.field, s.index)
                                                 for s in artifact.size_slots}


def test_a_tma_store_of_a_transposed_fragment_keeps_to_what_it_can_stage() -> None:
    sprogram, _ = _plan(16384, runtime=True, map_store="tma", tile_m=64, stages_ab=12)
    assert "shared memory" in (unsupported(sprogram, DEVICE) or "")
    twin = with_transposed_tma_store({**SWAP, "tile_m": 64, "stages_ab": 12})
    assert twin["map_store"] == "tma" and twin["stages_ab"] < 12
    sprogram, spec = _plan(16384, runtime=True, **twin)
    assert unsupported(sprogram, DEVICE) is None and check_valid(sprogram, spec, DEVICE).ok


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_swapped_kernels_with_tma_stores_compile_without_spills() -> None:
    """The range designs' TMA-store twins at a run-time m, B n x k and k x n, and an
    8-bit decode tile (dequantised on the way to shared memory)."""
    sources = []
    for design, layout in ((RANGE_DESIGNS["gemm"]["swap_16x64"], "nk"),
                           (_two_consumers(136), "nk"), (_two_consumers(88), "kn"),
                           (_two_consumers(232), "kn")):
        spec = _spec(16384, b_layout=layout)
        choices = {**with_transposed_tma_store(design), "persistent": True}
        sprogram = replace(plan_sprogram(spec, DEVICE, choices), runtime_dims=("m",))
        assert unsupported(sprogram, DEVICE) is None, (design["tile_m"], layout)
        sources.append(render(sprogram, spec, DEVICE).source)
    sprogram, spec = _plan(16, params={"dtype": "float8_e4m3"},
                           **with_transposed_tma_store({**SWAP, "tile_m": 16, "tile_k": 128,
                                                        "stages_ab": 12}))
    assert unsupported(sprogram, DEVICE) is None
    source = render(sprogram, spec, DEVICE).source
    assert "v0 *= scale_a[0] * scale_b[0]" in source and "stmatrix_x4_trans(" in source
    assert_compile_clean([*sources, source])
