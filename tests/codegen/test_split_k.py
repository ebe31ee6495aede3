"""Split-K over a cluster on the skeleton (CPU): the choice in the sProgram and its
identity, the schedules it cannot pair with refused with a reason, the cluster launch,
the trip shares and the on-chip sums in the text, every kernel compiled for sm_90a
clean, the knob offered only where tiles leave SMs idle, and the decode seeds."""

from __future__ import annotations

import pytest
from kernel_checks import assert_compile_clean

from codegen import render, unsupported
from codegen.artifact import WorkspaceArg
from scheduler_search.cost_model import estimate
from scheduler_search.hardware import H200
from scheduler_search.ops import parse_spec
from scheduler_search.search.warm_start import fit_to_space
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import (
    GEMM_WARP_SPECIALIZED,
    decode_designs,
    split_k_check_designs,
    split_k_designs,
)
from scheduler_search.sprogram import SplitK, SProgram, check_valid, plan_sprogram

TILE_128X64 = {**GEMM_WARP_SPECIALIZED, "tile_m": 128, "tile_n": 64, "stages_ab": 6,
               "persistent": False}


def _spec(m: int = 128, n: int = 1280, k: int = 8192, layout: str = "nk"):
    return parse_spec("gemm", {"m": m, "n": n, "k": k, "dtype": "bfloat16",
                               "b_layout": layout})


def test_split_k_is_part_of_the_sprogram_and_of_its_identity_only_when_set() -> None:
    spec = _spec()
    split = plan_sprogram(spec, H200, {**TILE_128X64, "split_k": 6})
    assert split.split_k == SplitK(6)
    assert SProgram.from_json(split.to_json()) == split
    whole = plan_sprogram(spec, H200, TILE_128X64)
    assert whole.split_k is None and "split_k" not in whole.to_dict()
    one_block = plan_sprogram(spec, H200, {**TILE_128X64, "split_k": 1})
    assert one_block.split_k is None
    def text(sprogram: SProgram) -> str:  # the kernel without its name and hash
        source = render(sprogram, spec, H200).source.replace(sprogram.hash, "")
        return source.replace(sprogram.hash[:16], "")

    assert text(one_block) == text(whole)


@pytest.mark.parametrize(("choices", "why"), [
    ({"consumer_split": "pingpong", "tile_m": 64}, "cooperative consumers"),
    ({"stream_k": 1, "persistent": True}, "stream-K"),
    ({"cluster_size": 2, "cluster_axis": "n"}, "multicast"),
    ({"split_k": 9}, "is not one of"),
    ({"warp_specialized": False}, "producer warp"),
])
def test_what_split_k_cannot_pair_with_is_refused_with_its_reason(choices: dict,
                                                                   why: str) -> None:
    spec = _spec()
    sprogram = plan_sprogram(spec, H200, {**TILE_128X64, "split_k": 4, **choices})
    rejections = check_valid(sprogram, spec, H200).rejections
    assert any(why in r.detail for r in rejections), rejections


def test_a_device_without_clusters_is_not_offered_split_k() -> None:
    from dataclasses import replace

    from scheduler_search.hardware.model import Capabilities

    bare = replace(H200, capabilities=Capabilities(tma=True, wgmma=True))
    spec = _spec()
    sprogram = plan_sprogram(spec, bare, {**TILE_128X64, "split_k": 4})
    assert any("cluster" in r.detail for r in check_valid(sprogram, spec, bare).rejections)


def test_a_block_without_a_trip_is_refused() -> None:
    spec = _spec(k=128)  # two trips of 64
    sprogram = plan_sprogram(spec, H200, {**TILE_128X64, "tile_k": 64, "split_k": 3})
    assert any("2 loop trips" in r.detail for r in check_valid(sprogram, spec, H200).rejections)


def test_the_kernel_runs_in_clusters_each_block_a_share_of_the_trips() -> None:
    spec = _spec()
    artifact = render(plan_sprogram(spec, H200, {**TILE_128X64, "split_k": 6}), spec, H200)
    assert artifact.grid == (20 * 6, 1, 1)  # 20 tiles of 128 x 64, a cluster each
    assert not any(isinstance(a, WorkspaceArg) for a in artifact.args)  # sums stay on chip
    text = artifact.source
    assert "__cluster_dims__(6, 1, 1)" in text and "constexpr int SPLIT = 6;" in text
    assert "const int trip0 = split_rank * K_ITERS / SPLIT;" in text
    assert "load_ab(ab_stage, ab_phase ^ 1, m0, n0, trip0 + trip" in text
    assert "mbarrier_wait_cluster(smem + SMEM_SPLIT_FULL, split_round & 1);" in text
    assert "for (int b = 1; b < SPLIT; ++b)" in text  # the peers' sums in rank order
    assert "if (store_tile)" in text and text.count("cluster_sync();") == 2


def test_a_scattered_sum_is_part_of_the_identity_and_the_first_block_sum_keeps_its_own(
) -> None:
    spec = _spec()
    first = plan_sprogram(spec, H200, {**TILE_128X64, "split_k": 4})
    assert first.to_dict()["split_k"] == {"blocks": 4}  # as before ``reduce`` existed
    named = plan_sprogram(spec, H200, {**TILE_128X64, "split_k": 4,
                                       "split_k_reduce": "first_block"})
    assert named.split_k == first.split_k and named.to_dict()["split_k"] == {"blocks": 4}
    scattered = plan_sprogram(spec, H200, {**TILE_128X64, "split_k": 4,
                                           "split_k_reduce": "scattered"})
    assert scattered.split_k == SplitK(4, "scattered") and scattered.hash != first.hash
    assert SProgram.from_json(scattered.to_json()) == scattered
    odd = SProgram.from_dict({**scattered.to_dict(), "split_k": {"blocks": 4, "reduce": "x"}})
    assert any("split_k_reduce" in r.detail for r in check_valid(odd, spec, H200).rejections)


def test_a_scattered_sum_has_every_block_add_and_store_its_share() -> None:
    spec = _spec()
    choices = {**TILE_128X64, "split_k": 4, "split_k_reduce": "scattered",
               "map_store": "cuda_core"}
    text = render(plan_sprogram(spec, H200, choices), spec, H200).source
    # every block reads every peer's sums (its share of them), so each counts them all
    assert text.count("(SPLIT - 1) * CONSUMERS * 4);") == 2
    assert "for (int b = 0; b < SPLIT; ++b) peer[b] = mapa_generic(part, (u32)b);" in text
    assert "for (int b = 1; b < SPLIT; ++b) sum += got[b][e];" in text  # rank order
    assert "if (lane < SPLIT && lane != split_rank) mbarrier_arrive_cluster_release(" in text
    assert "store_tile" not in text  # no block is the one that stores
    skip = "if ((mi * (ACC_REGS / 4) + j) % SPLIT != split_rank) continue;"
    assert skip in text  # the store writes this block's 8-column groups alone
    tma = render(plan_sprogram(spec, H200, {**choices, "map_store": "tma", "tile_m": 64,
                                            "tile_n": 256, "consumer_warpgroups": 1,
                                            "stages_ab": 3}), spec, H200).source
    assert "if ((s) % SPLIT != split_rank) continue;" in tma  # its stored sub-tiles


def test_a_scattered_sum_needs_a_unit_for_every_block() -> None:
    spec = _spec()
    sprogram = plan_sprogram(spec, H200, {**TILE_128X64, "split_k": 4, "map_store": "tma",
                                          "split_k_reduce": "scattered"})
    assert "1 share units of the tile for 4 blocks" in (unsupported(sprogram, H200) or "")


def test_without_split_k_the_text_has_none_of_it() -> None:
    spec = _spec()
    text = render(plan_sprogram(spec, H200, TILE_128X64), spec, H200).source
    assert "SPLIT" not in text and "split_" not in text and "__cluster_dims__" not in text


def test_every_split_k_kernel_compiles_clean() -> None:
    """Every shape of split-K's part of the kernel with B n x k, and the decode seeds at
    1 token and the scattered ones at 128 and 256. Split-K's own text does not depend on
    B's layout (only the loads do, which the plain kernels' tests compile), so B k x n is
    compiled for the swapped first-block designs alone."""
    sources = []
    for layout in ("nk", "kn"):
        spec = _spec(4000, 6000, 2000, layout)
        for choices in split_k_check_designs():
            if layout == "kn" and not (choices.get("swap_ab") and "split_k_reduce" not in choices):
                continue
            sprogram = plan_sprogram(spec, H200, choices)
            assert check_valid(sprogram, spec, H200).ok and unsupported(sprogram, H200) is None
            sources.append(render(sprogram, spec, H200).source)
    for m in (1, 128, 256):  # the seeds' scattered sums (the first block's: shapes above)
        spec = _spec(m)
        for choices in split_k_designs(m, 1280):
            if choices["split_k_reduce"] == "scattered" or m == 1:
                sources.append(render(plan_sprogram(spec, H200, choices), spec, H200).source)
    assert_compile_clean(sources)


def test_the_space_offers_split_k_only_where_tiles_leave_sms_idle() -> None:
    def offered(spec, choices: dict) -> bool:
        knob = next(k for k in ScheduleSpace(spec, H200).knobs if k.name == "split_k")
        return knob.applies(choices)

    assert offered(_spec(), TILE_128X64)  # 20 tiles
    assert not offered(_spec(8192, 8192, 8192), TILE_128X64)  # 8192 tiles
    assert not offered(_spec(), {**TILE_128X64, "stream_k": 1})
    assert not offered(_spec(), {**TILE_128X64, "cluster_size": 2})
    reduce = next(k for k in ScheduleSpace(_spec(), H200).knobs if k.name == "split_k_reduce")
    assert reduce.applies({"split_k": 4}) and not reduce.applies({"split_k": 1})


def test_the_cost_model_sees_a_split_k_cluster_finish_a_few_tile_grid_sooner() -> None:
    spec = _spec()
    whole = estimate(plan_sprogram(spec, H200, TILE_128X64), spec, H200)
    split = estimate(plan_sprogram(spec, H200, {**TILE_128X64, "split_k": 6}), spec, H200)
    assert split.latency_us < whole.latency_us
    scattered = estimate(plan_sprogram(spec, H200, {**TILE_128X64, "split_k": 6,
                                                    "split_k_reduce": "scattered"}), spec, H200)
    assert scattered.latency_us < split.latency_us  # each block reads a sixth of the sums


def test_split_k_seeds_take_the_deepest_ring_beside_their_sums() -> None:
    first = split_k_designs(128, 1280)[0]  # 128 tokens over 64 weight rows
    assert (first["split_k_reduce"], first["tile_k"], first["stages_ab"]) == ("scattered", 64, 8)
    spec = _spec(128)
    deeper = plan_sprogram(spec, H200, {**first, "stages_ab": 10})
    assert not check_valid(deeper, spec, H200).ok  # 10 x 24 KB beside 32 KB of sums


@pytest.mark.parametrize(("m", "place"), [(1, 1), (16, 1), (32, 0), (128, 0), (256, 1)])
def test_a_decode_search_measures_a_split_k_design_in_its_first_round(m: int,
                                                                      place: int) -> None:
    spec = _spec(m)
    seeds = decode_designs(spec)
    assert seeds[place].get("split_k", 1) > 1
    space = ScheduleSpace(spec, H200)
    for seed in (s for s in seeds if s.get("split_k", 1) > 1):  # seeds the space keeps
        assert space.build(seed)[1].ok, seed
        fitted = fit_to_space(space, seed)
        assert all(fitted[k] == seed[k] for k in ("split_k", "stages_ab", "tile_k")), seed
    assert not any(d.get("split_k", 1) > 1 for d in decode_designs(_spec(128, 28672, 4096)))
