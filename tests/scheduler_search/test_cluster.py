"""Thread-block clusters in the sProgram: which loads the blocks share, the rules a
cluster must keep, its identity, and what the cost model makes of it."""

from __future__ import annotations

import pytest

from scheduler_search.cost_model import estimate
from scheduler_search.hardware import get_device
from scheduler_search.ops import OperatorSpec, parse_spec
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED, MAMBA2_CHUNK_STATE_PAIRS
from scheduler_search.sprogram import (
    Cluster,
    RejectReason,
    ScheduleError,
    SProgram,
    check_valid,
    plan_sprogram,
)

H200, A100 = get_device("h200"), get_device("a100")
SPEC = GemmSpec(m=8192, n=8192, k=8192, dtype="float16", b_layout="kn")
PAIR = {**GEMM_WARP_SPECIALIZED, "cluster_size": 2}


@pytest.mark.parametrize(("axis", "shared"), [("m", "load_b"), ("n", "load_a")])
def test_the_blocks_share_the_load_whose_tile_has_no_coordinate_along_the_axis(
    axis: str, shared: str
) -> None:
    sp = plan_sprogram(SPEC, H200, {**PAIR, "cluster_axis": axis})
    assert sp.cluster == Cluster(axis=axis, size=2, multicast=(shared,))
    assert check_valid(sp, SPEC, H200).ok


def test_a_cluster_survives_serialisation_and_no_cluster_is_not_serialised() -> None:
    paired = plan_sprogram(SPEC, H200, PAIR)
    assert SProgram.from_json(paired.to_json()) == paired
    alone = plan_sprogram(SPEC, H200, GEMM_WARP_SPECIALIZED)
    assert alone.cluster is None and "cluster" not in alone.to_dict()
    assert SProgram.from_json(alone.to_json()).hash == alone.hash
    assert paired.hash != alone.hash


def test_bad_cluster_choices_are_refused_naming_the_choice() -> None:
    with pytest.raises(ScheduleError, match="cluster_axis"):
        plan_sprogram(SPEC, H200, {**PAIR, "cluster_axis": "k"})
    with pytest.raises(ScheduleError, match="cluster_size"):
        plan_sprogram(SPEC, H200, {**PAIR, "cluster_size": 0})


def _reasons(spec: OperatorSpec, choices: dict, device=H200) -> list[tuple[RejectReason, str]]:
    sp = plan_sprogram(spec, device, choices)
    return [(r.reason, r.detail) for r in check_valid(sp, spec, device).rejections]


def test_a_cluster_must_divide_the_tiles_along_its_axis_and_be_a_portable_size() -> None:
    odd = GemmSpec(m=3 * 128, n=4096, k=4096, dtype="float16")
    assert (RejectReason.TILE_SHAPE,
            "3 tiles along m do not split into clusters of 2") in _reasons(odd, PAIR)
    assert any("cluster_size=3" in d for _, d in _reasons(SPEC, {**PAIR, "cluster_size": 3}))
    on_ampere = {**PAIR, "warp_specialized": False, "map_store": "cuda_core"}
    assert any("need TMA multicast" in d for _, d in _reasons(SPEC, on_ampere, A100))


def test_the_gemm_space_offers_clusters_on_hopper_only() -> None:
    names = {k.name for k in ScheduleSpace(SPEC, H200).knobs}
    assert {"cluster_size", "cluster_axis"} <= names
    assert not {"cluster_size", "cluster_axis"} & {k.name for k in ScheduleSpace(SPEC, A100).knobs}


def test_the_cost_model_counts_a_multicast_tile_once_per_cluster() -> None:
    """Each block's TMA fetches half of the shared tile: the loads' time per trip falls,
    so the estimate of a load-heavy tile does not rise."""
    choices = {**GEMM_WARP_SPECIALIZED, "tile_m": 128, "tile_n": 128, "consumer_warpgroups": 1}
    alone = estimate(plan_sprogram(SPEC, H200, choices), SPEC, H200)
    paired = estimate(plan_sprogram(SPEC, H200, {**choices, "cluster_size": 2}), SPEC, H200)
    assert paired.unit_utilisation["tma"] < alone.unit_utilisation["tma"]
    assert paired.latency_us <= alone.latency_us


STATE = parse_spec("mamba2_chunk_state", {
    "batch": 8, "seqlen": 4096, "nheads": 80, "headdim": 64, "dstate": 128, "ngroups": 8,
    "chunk_size": 256, "dtype": "float16"})
HEAD_PAIRS = {**MAMBA2_CHUNK_STATE_PAIRS, "producer_regs": 40, "cluster_axis": "heads"}


def test_along_a_grid_axis_the_blocks_share_the_tensor_its_instances_share() -> None:
    """The chunk state's heads of one group read the same B: a cluster along heads
    multicasts B and nothing else (x, dt and dA are per head)."""
    sp = plan_sprogram(STATE, H200, {**HEAD_PAIRS, "tile_g": 1, "tile_p": 64,
                                     "consumer_warpgroups": 1, "cluster_size": 2})
    assert sp.cluster == Cluster(axis="heads", size=2, multicast=("load_b",))
    assert check_valid(sp, STATE, H200).ok
    with pytest.raises(ScheduleError, match="cluster_axis"):
        plan_sprogram(STATE, H200, {**HEAD_PAIRS, "cluster_size": 2, "cluster_axis": "l"})


def test_a_cluster_along_a_grid_axis_stays_inside_one_sharing_group() -> None:
    # 10 heads a group, packed in pairs: 5 tiles share a B, so a cluster of 2 spans groups.
    reasons = _reasons(STATE, {**HEAD_PAIRS, "cluster_size": 2})
    assert (RejectReason.TILE_SHAPE, "5 tiles along heads share a slice of b: clusters of 2 "
            "would span two of them") in reasons


def test_the_chunk_state_space_leaves_clusters_to_explicit_choices() -> None:
    """Measured slower on every suite shape (tables.py): the search does not offer them."""
    names = {k.name for k in ScheduleSpace(STATE, H200).knobs}
    assert not {"cluster_size", "cluster_axis"} & names
