"""The cost model's seeds: its best distinct structures, the best few alone and in
thread-block clusters (the model's credit for a multicast tile is an estimate the GPU
settles), and their tile orders."""

from __future__ import annotations

import pytest

from codegen import feasibility
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.search.seeding import cluster_twins, cost_model_seeds
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED

H200 = get_device("h200")


def test_a_structure_has_twins_alone_and_paired_along_each_axis_that_are_valid() -> None:
    spec = GemmSpec(m=4096, n=4096, k=4096, dtype="float16")
    space = ScheduleSpace(spec, H200, feasibility("gemm", H200))
    twins = cluster_twins(space, GEMM_WARP_SPECIALIZED)
    assert [(t["cluster_size"], t.get("cluster_axis")) for t in twins] == [(2, "m"), (2, "n")]
    paired = {**GEMM_WARP_SPECIALIZED, "cluster_size": 2, "cluster_axis": "n"}
    assert [(t["cluster_size"], t.get("cluster_axis")) for t in cluster_twins(space, paired)] \
        == [(1, None), (2, "m")]
    # One row of tiles along m: clusters only along n (a few-token GEMM also offers 4).
    thin = GemmSpec(m=128, n=8192, k=8192, dtype="float16", b_layout="nk")
    thin_space = ScheduleSpace(thin, H200, feasibility("gemm", H200))
    assert [(t["cluster_size"], t.get("cluster_axis"))
            for t in cluster_twins(thin_space, GEMM_WARP_SPECIALIZED)] == [(2, "n"), (4, "n")]
    assert cluster_twins(space, {**GEMM_WARP_SPECIALIZED, "warp_specialized": False}) == []


#: Two warp-specialised consumers with 64-deep k steps (the hand-written design's): 4 s to
#: rank, where the slice of the first two knobs alone takes 11 s and the whole space a
#: minute. Its best structures still have valid twins in clusters and stream-K shares.
SLICE = {"warp_specialized": True, "consumer_warpgroups": 2, "tile_k": 64}


@pytest.mark.slow
def test_the_best_structures_are_seeded_alone_and_in_clusters() -> None:
    spec = GemmSpec(m=8192, n=8192, k=8192, dtype="float16")
    feasible = feasibility("gemm", H200)
    seeds = cost_model_seeds(spec, H200, structures=6, raster_structures=2, feasible=feasible,
                             fixed=SLICE)
    assert all(s["consumer_warpgroups"] == 2 and s["warp_specialized"] for s in seeds)
    space = ScheduleSpace(spec, H200, feasible)
    assert all(space.build(s)[1].ok for s in seeds)
    keys = [tuple(sorted(s.items())) for s in seeds]
    assert len(set(keys)) == len(keys)
    for best in seeds[:2]:
        for twin in cluster_twins(space, best):
            assert twin in seeds
    sizes = {s.get("cluster_size") for s in seeds}
    assert {1, 2} <= sizes


#: A slice of a causal attention space: 864 structures over several tiles, a second to walk.
ATTENTION_SLICE = {"consumer_warpgroups": 2, "order": "rotate", "consumer_split": "cooperative",
                   "map_store": "cuda_core"}


def _causal_attention() -> object:
    from scheduler_search.ops import parse_spec

    return parse_spec("attention", {"batch": 1, "heads": 8, "kv_heads": 2, "seq_q": 512,
                                    "seq_kv": 512, "head_dim": 64, "causal": True,
                                    "dtype": "float16"})


def test_the_walk_shared_among_processes_ranks_as_one_process_does() -> None:
    """Shards of consecutive tiles are the walk in pieces (their candidates, in shard order,
    are the whole walk's, and their counts add up to its count); each shard ranked in one
    of two processes, their merge is the space's best as one process ranks it, in the same
    order, exact ties included (the selection breaks them by position in the walk)."""
    from scheduler_search.search.seeding import ranked_pool

    spec = _causal_attention()
    feasible = feasibility("attention", H200)
    space = ScheduleSpace(spec, H200, feasible, ATTENTION_SLICE)
    whole, count = space.enumerate()
    shards = [space.enumerate(shard=(index, 3)) for index in range(3)]
    assert [c.choices for part, _ in shards for c in part] == [c.choices for c in whole]
    assert sum(part_count.valid for _, part_count in shards) == count.valid
    one = ranked_pool(spec, H200, 20, feasible=feasible, fixed=ATTENTION_SLICE)
    two = ranked_pool(spec, H200, 20, feasible=feasible, fixed=ATTENTION_SLICE, jobs=2)
    assert [r.sprogram.hash for r in two] == [r.sprogram.hash for r in one] and len(one) == 20


def test_causal_seeds_include_the_heaviest_first_order_of_the_best_structures() -> None:
    seeds = cost_model_seeds(_causal_attention(), H200, structures=4, raster_structures=2,
                             pool=40, feasible=feasibility("attention", H200),
                             fixed=ATTENTION_SLICE)
    heaviest = [s for s in seeds if s.get("raster_heaviest_first")]
    assert len(heaviest) == 2  # one for each of the two best structures
    plain = [{**s, "raster_heaviest_first": False} for s in heaviest]
    assert plain == seeds[:2]  # the two best structures, in their order
