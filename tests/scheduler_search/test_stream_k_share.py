"""Stream-K's share: every trip of the shared tiles runs once, in the ranges the blocks
are given, and each block's parts of shared tiles fit its two workspace slots."""

from __future__ import annotations

import pytest

from scheduler_search.hardware import H200
from scheduler_search.ops import parse_spec
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import StreamKShare, check_valid, plan_sprogram

#: (tiles, trips, blocks, waves): the suite's 4096^3 (512 tiles on 132), 4000x6000x2000
#: in 128 x 256 (768), fewer tiles than blocks (split-K), two waves, one trip apart.
SHARES = [(512, 64, 132, 1), (768, 32, 132, 1), (32, 128, 132, 1), (512, 64, 132, 2),
          (1000, 3, 132, 2), (133, 7, 132, 2), (5, 31, 132, 1)]


@pytest.mark.parametrize(("tiles", "trips", "blocks", "waves"), SHARES)
def test_every_shared_trip_runs_once_in_its_blocks_range(
    tiles: int, trips: int, blocks: int, waves: int
) -> None:
    share = StreamKShare(tiles, trips, blocks, waves)
    assert share.problem() is None
    assert share.dp_tiles % blocks == 0 and share.sk_tiles > 0
    ran: dict[tuple[int, int], int] = {}
    lengths = []
    for block in range(blocks):
        segments = share.segments(block)
        lengths.append(sum(count for _, _, count in segments))
        for tile, first, count in segments:
            assert first >= 0 and first + count <= trips
            for trip in range(first, first + count):
                ran[tile, trip] = block
    assert len(ran) == share.sk_trips
    assert sorted(ran) == [(t, q) for t in range(share.sk_tiles) for q in range(trips)]
    assert max(lengths) - min(lengths) <= 1 and min(lengths) >= 1
    for tile in range(share.sk_tiles):
        owners = sorted({ran[tile, q] for q in range(trips)})
        assert owners == list(share.contributors(tile))
        for q in range(trips):
            assert share.block_of(tile * trips + q) == ran[tile, q]


@pytest.mark.parametrize(("tiles", "trips", "blocks", "waves"), SHARES)
def test_a_blocks_parts_of_shared_tiles_take_distinct_slots(
    tiles: int, trips: int, blocks: int, waves: int
) -> None:
    share = StreamKShare(tiles, trips, blocks, waves)
    for block in range(blocks):
        parts = [tile for tile, _, count in share.segments(block) if count < trips]
        assert len(parts) <= 2
        assert len({share.slot(block, tile) for tile in parts}) == len(parts)


def test_the_share_says_why_it_would_not_help() -> None:
    assert "whole waves" in StreamKShare(264, 8, 132, 1).problem()
    assert "fewer than 3 waves" in StreamKShare(200, 8, 132, 3).problem()
    assert "none" in StreamKShare(1, 8, 132, 1).problem()
    assert "waves are >= 1" in StreamKShare(100, 8, 132, 0).problem()


def _gemm(**choices: object) -> tuple:
    spec = parse_spec("gemm", {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"})
    sprogram = plan_sprogram(spec, H200, {**GEMM_WARP_SPECIALIZED, "persistent": True,
                                           **choices})
    return sprogram, check_valid(sprogram, spec, H200)


def test_stream_k_is_part_of_the_sprogram_and_its_identity() -> None:
    plain, _ = _gemm()
    shared, validity = _gemm(stream_k=1)
    assert validity.ok and shared.stream_k is not None and shared.stream_k.waves == 1
    assert "stream_k" not in plain.to_dict() and plain.hash != shared.hash
    assert type(shared).from_json(shared.to_json()) == shared


@pytest.mark.parametrize(("choices", "why"), [
    ({"persistent": False}, "persistent grid"),
    ({"warp_specialized": False}, "producer warp"),
    ({"consumer_split": "pingpong", "wg_schedule": "alternate", "tile_m": 64},
     "cooperative consumers"),
    ({"stream_k": 5}, "fewer than 5 waves"),
])
def test_stream_k_outside_its_lowering_is_rejected_with_a_reason(
    choices: dict, why: str
) -> None:
    _, validity = _gemm(**{"stream_k": 1, **choices})
    assert not validity.ok
    assert any(why in r.detail for r in validity.rejections), validity.rejections


def test_a_clustered_share_is_over_clusters_and_their_tiles() -> None:
    """A cluster's blocks run their tiles' trips together: 4096^2 in 128 x 256 tiles is 512
    tiles, 256 pairs along m, shared over the 66 pairs of blocks the H200 runs at once."""
    from scheduler_search.ops import parse_spec
    from scheduler_search.sprogram import stream_k_share

    sprogram, validity = _gemm(stream_k=1, cluster_size=2, cluster_axis="m")
    assert validity.ok, validity.rejections
    spec = parse_spec("gemm", {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"})
    share = stream_k_share(sprogram, spec.graph(sprogram.tile), H200)
    assert (share.tiles, share.blocks) == (256, H200.clusters_at_once(2))
    assert share.sk_tiles == 256 % share.blocks
