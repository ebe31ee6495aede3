"""Stream-K GEMMs on the skeleton (CPU): the workspace in the launch contract, the work
loop and the ordered sums in the text, every kernel compiled for sm_90a clean, and the
schedules codegen has no lowering for kept out of the space with a reason."""

from __future__ import annotations

import pytest
from kernel_checks import assert_compile_clean

from codegen import feasibility, render, unsupported
from codegen.artifact import WorkspaceArg
from scheduler_search.hardware import H200
from scheduler_search.ops import parse_spec
from scheduler_search.space.designs import FLASH_ATTENTION_3, GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import plan_sprogram

PERSISTENT = {**GEMM_WARP_SPECIALIZED, "persistent": True}


def _spec(m: int = 4096, n: int = 4096, k: int = 4096, **params: object):
    return parse_spec("gemm", {"m": m, "n": n, "k": k, "dtype": "float16", **params})


def test_the_workspace_holds_a_count_a_shared_tile_and_two_parts_a_block() -> None:
    spec = _spec()
    artifact = render(plan_sprogram(spec, H200, {**PERSISTENT, "stream_k": 1}), spec, H200)
    workspace = artifact.args[-1]
    assert isinstance(workspace, WorkspaceArg) and workspace.name == "sk_workspace"
    # 116 shared tiles' counts in 512 bytes, then 132 blocks x 2 slots x a 128 x 256 tile.
    assert workspace.bytes == 512 + 132 * 2 * 128 * 256 * 4
    assert artifact.grid == (132, 1, 1)
    text = artifact.source
    assert "constexpr int SK_TILES = 116, DP_TILES = TILES - SK_TILES;" in text
    assert "load_ab(ab_stage, ab_phase ^ 1, m0, n0, trip0 + trip" in text
    assert "atomicAdd(count, 1u) == (u32)(sk_last - sk_first)" in text
    assert "if (store_tile)" in text


def test_a_schedule_without_stream_k_keeps_its_text_and_contract() -> None:
    spec = _spec()
    artifact = render(plan_sprogram(spec, H200, PERSISTENT), spec, H200)
    assert not any(isinstance(a, WorkspaceArg) for a in artifact.args)
    assert "sk_" not in artifact.source and "trip0" not in artifact.source


def test_stream_k_tiles_never_overlap_so_every_element_has_one_writer() -> None:
    """A pulled-back last tile and the one before it would both write the elements they
    share, summed in different parts when either is a stream-K tile: whichever block
    stores last decides the bits. Stream-K kernels zero-fill their last tiles instead;
    the same design without stream-K keeps the pulled-back origin."""
    spec = _spec(4000, 6000, 2000, dtype="bfloat16", b_layout="nk")
    pulled_back = "min(t_m * 128, max(4000 - 128, 0))"
    for waves in (1, 2):
        sprogram = plan_sprogram(spec, H200, {**PERSISTENT, "stream_k": waves})
        source = render(sprogram, spec, H200).source
        assert "m0 = t_m * 128;" in source and pulled_back not in source
    assert pulled_back in render(plan_sprogram(spec, H200, PERSISTENT), spec, H200).source


@pytest.mark.parametrize(("shape", "choices"), [
    ((4096, 4096, 4096), {"stream_k": 1}),
    ((4096, 4096, 4096), {"stream_k": 2, "map_store": "cuda_core", "order": "serial"}),
    ((4000, 6000, 2000), {"stream_k": 1, "tile_n": 128, "stages_ab": 5}),
    ((128, 8192, 8192), {"stream_k": 1, "tile_m": 64, "consumer_warpgroups": 1,
                         "tile_n": 192, "tile_k": 32, "stages_ab": 6}),
    ((4000, 6000, 2000), {"stream_k": 1, "cluster_size": 2, "cluster_axis": "n"}),
    ((128, 1280, 8192), {"stream_k": 1, "tile_m": 64, "consumer_warpgroups": 1,
                         "tile_n": 128, "stages_ab": 8, "cluster_size": 2,
                         "cluster_axis": "m"}),
])
def test_stream_k_kernels_compile_clean(shape: tuple[int, int, int], choices: dict) -> None:
    spec = _spec(*shape, b_layout="nk", epilogue={"bias": True, "act": "gelu"})
    sprogram = plan_sprogram(spec, H200, {**PERSISTENT, **choices})
    assert_compile_clean([render(sprogram, spec, H200).source])


def test_sums_that_would_spill_are_kept_out_with_a_reason() -> None:
    spec = _spec(8192, 8192, 8192)
    one_wide = {**PERSISTENT, "stream_k": 1, "tile_m": 128, "tile_n": 192,
                "consumer_warpgroups": 1, "stages_ab": 3}
    problem = feasibility("gemm", H200)(plan_sprogram(spec, H200, one_wide))
    assert problem is not None and "192 accumulators a thread from other blocks spill" in problem


def test_operators_without_a_stream_k_lowering_say_so() -> None:
    spec = parse_spec("attention", {"batch": 1, "heads": 8, "kv_heads": 8, "seq_q": 4096,
                                    "seq_kv": 4096, "head_dim": 128, "dtype": "float16"})
    design = {**FLASH_ATTENTION_3, "map_store": "cuda_core", "persistent": True, "stream_k": 1}
    problem = unsupported(plan_sprogram(spec, H200, design), H200)
    assert problem is not None and "attention lowers no stream-K" in problem


def test_a_clustered_share_counts_and_keeps_each_blocks_rows_apart() -> None:
    """A cluster's blocks share out their tiles' trips together (the share is over the 66
    pairs of blocks), and each block sums its own rows of a pair's tile: its own count and
    its own slots, by its rank in the cluster."""
    spec = _spec(128, 1280, 8192, dtype="bfloat16", b_layout="nk")
    choices = {**PERSISTENT, "tile_m": 64, "tile_n": 128, "consumer_warpgroups": 1,
               "stages_ab": 8, "cluster_size": 2, "cluster_axis": "m", "stream_k": 1}
    artifact = render(plan_sprogram(spec, H200, choices), spec, H200)
    text = artifact.source
    assert "constexpr int GRID = 66;" in text and artifact.grid == (132, 1, 1)
    assert "const int sk_block = (int)cluster_id;" in text
    assert "+ sk_tile * CLUSTER + (int)cluster_ctarank();" in text
    assert "(b * CLUSTER + (int)cluster_ctarank()) * 2 + slot" in text
    # 10 shared pair-tiles' counts for each of two blocks (256 bytes aligned), then 132
    # blocks' two 64 x 128 parts.
    assert artifact.args[-1].bytes == 256 + 132 * 2 * 64 * 128 * 4
