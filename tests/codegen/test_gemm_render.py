"""The GEMM renderer on the CPU: the source mirrors the sProgram, is deterministic, holds
only the primitives it uses; the launch contract agrees with the kernel text; what the
renderer cannot do is kept out of the schedule space."""

from __future__ import annotations

import re

import pytest

from codegen import KernelArtifact, Unsupported, feasibility, lowering, render, unsupported
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import plan_sprogram

DEVICE = get_device("h200")
#: The classic Hopper design, with a grouped raster.
WS_2 = {**GEMM_WARP_SPECIALIZED, "raster_major": "m", "raster_swizzle": 8}


def _spec(**kw: object) -> GemmSpec:
    params = {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16", "b_layout": "kn", **kw}
    return GemmSpec(**params)


def _render(spec: GemmSpec | None = None, **choices: object) -> KernelArtifact:
    spec = spec or _spec()
    return render(plan_sprogram(spec, DEVICE, {**WS_2, **choices}), spec, DEVICE)


def test_same_schedule_gives_byte_identical_source() -> None:
    spec = _spec()
    sprogram = plan_sprogram(spec, DEVICE, WS_2)
    assert render(sprogram, spec).source == render(sprogram, spec).source
    assert render(sprogram).to_json() == render(sprogram).to_json()


def test_source_mirrors_the_sprogram() -> None:
    art = _render()
    src = art.source
    for stask in ("load_a", "load_b", "mma", "store"):
        assert re.search(rf"// {stask}\b", src), stask
    assert "// load_a  stage=stage" in src and "// mma  stage=ab_stage" in src
    assert "ab_full[stage]" in src and "ab_empty[stage]" in src
    assert "mma_inflight" in src and "wgmma_wait<1>()" in src
    assert "setmaxnreg_dec<PRODUCER_REGS>" in src and "setmaxnreg_inc<CONSUMER_REGS>" in src
    assert "__launch_bounds__(384, 1)" in src
    assert "wgmma_m64n256k16_f16_bmn" in src
    assert art.entry in src and art.schedule_hash[:16] in art.entry


def test_prelude_holds_only_what_the_kernel_uses() -> None:
    tma_store = _render().source
    direct = _render(map_store="cuda_core", wg_schedule="free").source
    assert "stmatrix_x4" in tma_store and "tma_store_2d" in tma_store
    assert "stmatrix" not in direct and "tma_store" not in direct and "swizzle_128b" not in direct
    assert "ldmatrix" not in tma_store and "named_barrier_arrive" not in tma_store
    alternate = _render(wg_schedule="alternate").source
    assert "named_barrier_arrive" in alternate and "tc_turn" in alternate
    no_ws = _render(warp_specialized=False, stages_ab=3).source
    assert "setmaxnreg" not in no_ws and "load_ahead" in no_ws


def test_tensor_maps_come_from_the_same_numbers_as_the_kernel() -> None:
    spec = _spec(b_layout="kn")
    art = _render(spec)
    maps = {a.name: a for a in art.args}
    layout = lowering(plan_sprogram(spec, DEVICE, WS_2), DEVICE).layout
    tx_bytes = layout.stage_bytes(layout.structure.rings[0])
    assert maps["a_map"].box_dims == (64, 128) and maps["a_map"].swizzle == "128B"
    assert maps["b_map"].global_dims == (4096, 4096) and maps["b_map"].box_dims == (64, 64)
    assert maps["c_map"].box_dims == (64, 64)  # 64 columns x one consumer's 64 rows
    box_bytes = [2 * a.box_dims[0] * a.box_dims[1] for a in (maps["a_map"], maps["b_map"])]
    loads_b = art.source.count("b_map, n0 + ")
    assert tx_bytes == box_bytes[0] + loads_b * box_bytes[1]
    assert f"constexpr u32 AB_TX_BYTES = {tx_bytes};" in art.source
    assert art.dynamic_smem_bytes == layout.smem.total_bytes + 1024 <= DEVICE.smem_per_block_bytes
    assert art.grid == (DEVICE.sm_count, 1, 1) and art.block == (384, 1, 1)


def test_nk_layout_uses_k_major_b_and_tile_k_32_a_64_byte_swizzle() -> None:
    spec = _spec(b_layout="nk")
    art = _render(spec, tile_k=32, stages_ab=6)
    maps = {a.name: a for a in art.args}
    assert maps["b_map"].global_dims == (4096, 4096) and maps["b_map"].box_dims == (32, 256)
    assert maps["a_map"].swizzle == "64B" and maps["b_map"].swizzle == "64B"
    assert "wgmma_m64n256k16_f16_bk" in art.source


def test_the_last_trip_issues_only_the_k_steps_inside_k() -> None:
    spec = _spec(m=4000, n=6000, k=2000, b_layout="nk")  # 2000 = 31 x 64 + 16
    for tile_k, tail in ((64, 1), (128, 5), (32, 1)):
        src = _render(spec, tile_k=tile_k, stages_ab=2).source
        assert f"constexpr int TAIL_K_STEPS = {tail};" in src
        assert "if (kk >= TAIL_K_STEPS && trip == K_ITERS - 1) break;" in src
    whole = _render(_spec(b_layout="nk"), tile_k=64).source  # k = 4096: no tail
    assert "constexpr int TAIL_K_STEPS = 4;" in whole and "kk >= TAIL_K_STEPS" not in whole
    # Where ptxas would serialise the wgmma over the early exit, every step is issued.
    pingpong = _render(spec, consumer_split="pingpong", wg_schedule="alternate", tile_m=64,
                       tile_n=128, stages_ab=3).source
    overlapped = _render(spec, warp_specialized=False, consumer_warpgroups=1, tile_n=128,
                         stages_ab=3).source
    assert "kk >= TAIL_K_STEPS" not in pingpong and "kk >= TAIL_K_STEPS" not in overlapped


def test_a_240_column_tile_stores_in_16_column_sub_tiles() -> None:
    spec = _spec(m=4000, n=6000, k=2000, b_layout="nk")
    art = _render(spec, tile_n=240)
    maps = {a.name: a for a in art.args}
    assert maps["b_map"].box_dims == (64, 240)
    assert maps["c_map"].box_dims == (16, 64) and maps["c_map"].swizzle == "32B"
    assert "STORE_COLS = 16, STORE_SUBTILES = 15;" in art.source
    assert "wgmma_m64n240k16_f16_bk" in art.source


def test_odd_shapes_render_with_clipped_stores() -> None:
    spec = GemmSpec(m=100, n=37, k=48, dtype="bfloat16", b_layout="nk")
    choices = {
        **WS_2,
        "tile_m": 64,
        "tile_n": 64,
        "tile_k": 32,
        "consumer_warpgroups": 1,
        "stages_ab": 2,
        "map_store": "cuda_core",
    }
    choices.pop("consumer_split")
    art = render(plan_sprogram(spec, DEVICE, choices), spec)
    assert "if (row >= M) continue;" in art.source
    assert "if (col + 1 < N)" in art.source  # odd n: element stores
    assert [a.name for a in art.args] == ["a_map", "b_map", "c"]


def test_unsupported_schedules_are_rejected_by_render_and_by_the_space() -> None:
    spec = _spec(b_layout="kn")
    narrow = plan_sprogram(spec, DEVICE, {**WS_2, "tile_n": 96})
    assert "tile_n % 64" in (unsupported(narrow, DEVICE) or "")
    untaken = {**WS_2, "consumer_split": "pingpong", "wg_schedule": "free", "tile_m": 64}
    free_pingpong = plan_sprogram(spec, DEVICE, untaken)
    assert "take turns" in (unsupported(free_pingpong, DEVICE) or "")
    with pytest.raises(Unsupported):
        render(free_pingpong, spec)
    space = ScheduleSpace(spec, DEVICE, feasibility("gemm", DEVICE))
    _, validity = space.build(untaken)
    assert not validity.ok and validity.rejections[0].detail.startswith("codegen:")
    _, validity = space.build({**WS_2, "order": "overlap", "stages_ab": 1})
    assert not validity.ok


@pytest.mark.slow
def test_space_keeps_the_warp_specialised_two_consumer_design() -> None:
    spec = _spec(m=8192, n=8192, k=8192)
    # The slice with two warp-specialised consumers and the design's 64-deep k steps (3 s;
    # the whole space takes a minute, and without fixing tile_k the slice takes 8 s and
    # holds the same 14 tile and split designs).
    space = ScheduleSpace(spec, DEVICE, feasibility("gemm", DEVICE),
                          fixed={"warp_specialized": True, "consumer_warpgroups": 2,
                                 "tile_k": 64})
    candidates, count = space.enumerate()
    assert count.rejected["unsupported_by_codegen"] > 0
    designs = {
        (
            c.choices["warp_specialized"],
            c.choices["consumer_warpgroups"],
            c.choices.get("consumer_split"),
            c.choices["tile_m"],
            c.choices["tile_n"],
        )
        for c in candidates
    }
    assert (True, 2, "cooperative", 128, 256) in designs
    assert (True, 2, "pingpong", 64, 256) in designs
    for candidate in candidates[:: max(1, len(candidates) // 50)]:
        assert unsupported(candidate.sprogram, DEVICE) is None
        render(candidate.sprogram, spec)


def test_artifact_round_trips_through_json() -> None:
    art = _render()
    assert KernelArtifact.from_json(art.to_json()) == art
