"""Mamba2 chunk state in thread-block clusters: blocks of neighbouring heads of one group
share B, each fetching a slice of it by TMA multicast for all.

Held here without a GPU: B is the only multicast load and its tensor map fetches a slice
of the trip's positions, x stays whole; the ring counts the releases of every block; the
raster gives a cluster's blocks consecutive head tiles; the grid is whole clusters, as many
as run at once; what
cannot be lowered is refused with its reason; every variant compiles for sm_90a without
spills (the GPU checks them in test_mamba2_gpu.py).
"""

from __future__ import annotations

import re

import pytest
from kernel_checks import assert_compile_clean

from codegen import feasibility, lowering, render, unsupported
from codegen.artifact import TensorMapArg
from codegen.nvcc import nvcc_path
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import MAMBA2_CHUNK_STATE, MAMBA2_CHUNK_STATE_PAIRS
from scheduler_search.sprogram import plan_sprogram

DEVICE = get_device("h200")
SUITE = {"batch": 8, "seqlen": 4096, "nheads": 80, "headdim": 64, "dstate": 128,
         "ngroups": 1, "chunk_size": 256, "dtype": "float16"}
PAIRS = {**MAMBA2_CHUNK_STATE_PAIRS, "producer_regs": 40, "cluster_axis": "heads"}


def _spec(**change: object):
    return parse_spec("mamba2_chunk_state", {**SUITE, **change})


@pytest.mark.parametrize("size", [2, 4])
def test_b_is_fetched_in_slices_for_every_block_and_x_whole(size: int) -> None:
    spec = _spec()
    sp = plan_sprogram(spec, DEVICE, {**PAIRS, "cluster_size": size})
    assert sp.cluster is not None and sp.cluster.multicast == ("load_b",)
    art = render(sp, spec, DEVICE)
    alone = render(plan_sprogram(spec, DEVICE, MAMBA2_CHUNK_STATE_PAIRS), spec, DEVICE)
    maps = {t.tensor: t for t in art.args if isinstance(t, TensorMapArg)}
    plain = {t.tensor: t for t in alone.args if isinstance(t, TensorMapArg)}
    # B's box holds 1/size of the trip's 64 positions; x's is the whole trip.
    assert maps["b"].box_dims == (*plain["b"].box_dims[:2], 64 // size)
    assert maps["x"].box_dims == plain["x"].box_dims
    assert art.source.count("tma_load_3d_multicast(smem + SMEM_B") == 2  # two 64-column boxes
    assert "tma_load_3d_multicast(smem + SMEM_X" not in art.source
    consumer_warps = 4 * sp.roles.consumer_warpgroups
    assert lowering(sp, DEVICE).record.rings["xb"].empty_arrivals == size * consumer_warps
    assert art.cluster == (size, 1, 1) and alone.cluster == (1, 1, 1)
    # Persistent: one wave of the clusters the H200 runs at once (30 of 4: its GPCs).
    assert art.grid == ({2: 132, 4: 120}[size], 1, 1)


def test_a_clusters_blocks_take_consecutive_head_tiles_of_one_group() -> None:
    spec = _spec()
    art = render(plan_sprogram(spec, DEVICE, {**PAIRS, "cluster_size": 2}), spec, DEVICE)
    # 40 head pairs: 20 cluster tiles along heads, the block's rank picks its pair.
    assert re.search(r"heads0 = \(\(outer % \(TILES_HEADS / CLUSTER\)\) \* CLUSTER \+ "
                     r"\(int\)cluster_ctarank\(\)\) \* 2;", art.source)
    assert "constexpr int UNITS = 2560;" in art.source  # 5120 tiles, two per unit


def test_what_cannot_be_lowered_is_refused_with_its_reason() -> None:
    spec = _spec()
    low = plan_sprogram(spec, DEVICE, {**PAIRS, "cluster_size": 2, "producer_regs": 24})
    assert "the producer's loads need 40 registers" in unsupported(low, DEVICE)
    streaming = plan_sprogram(spec, DEVICE, {**MAMBA2_CHUNK_STATE, "warp_specialized": True,
                                             "cluster_size": 2, "cluster_axis": "heads"})
    assert unsupported(streaming, DEVICE) is None
    alone = plan_sprogram(spec, DEVICE, {**MAMBA2_CHUNK_STATE, "cluster_size": 2,
                                         "cluster_axis": "heads"})
    assert unsupported(alone, DEVICE) == "thread-block clusters need a producer warp"


def test_a_cluster_spanning_two_b_groups_is_out_of_the_space() -> None:
    grouped = _spec(ngroups=8)  # 10 heads a group: 5 head pairs
    space = ScheduleSpace(grouped, DEVICE, feasibility(grouped.op, DEVICE))
    _, validity = space.build({**PAIRS, "cluster_size": 2})
    assert not validity.ok
    assert any("would span two of them" in r.detail for r in validity.rejections)
    _, single_heads = space.build({**PAIRS, "cluster_size": 2, "tile_g": 1, "tile_p": 64,
                                   "consumer_warpgroups": 1})
    assert single_heads.ok  # 10 single heads a group: pairs of blocks stay inside one


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_clustered_variants_compile_without_spills() -> None:
    variants = []
    for size in (2, 4):
        for states_in_fp32, extra in ((True, {}), (False, {}), (True, {"persistent": False}),
                                      (False, {"map_store": "cuda_core"}),
                                      (True, {"tile_l": 32, "stages_xb": 6}),
                                      (True, {"order": "overlap"}),
                                      (True, {"map_vector_loads": "cuda_core"})):
            spec = _spec(states_in_fp32=states_in_fp32)
            sp = plan_sprogram(spec, DEVICE, {**PAIRS, "cluster_size": size, **extra})
            assert unsupported(sp, DEVICE) is None, (size, extra)
            variants.append(render(sp, spec, DEVICE).source)
    assert_compile_clean(variants)
