"""Decode GEMMs (few tokens against a weight stored n x k) in the exact-shape space: swap-AB
with token tiles of 8..32 and deep rings are offered where they can be lowered, and the
decode designs a search measures first are points of that space."""

from __future__ import annotations

import pytest

from codegen import feasibility, render
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.search.warm_start import fit_to_space
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import (
    DESIGNS,
    decode_designs,
    designs_for,
    wave_fitted,
    wave_tied,
)
from scheduler_search.space.tables import FEW_TOKENS, knob_table, swap_applies

H200 = get_device("h200")


def _spec(m: int, **overrides: object) -> GemmSpec:
    params = {"m": m, "n": 4096, "k": 4096, "dtype": "bfloat16", "b_layout": "nk", **overrides}
    return GemmSpec(**params)


def _knobs(spec: GemmSpec) -> dict[str, tuple]:
    return {k.name: k.options for k in knob_table(spec, H200)}


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("m", [1, 16, FEW_TOKENS])
def test_few_token_gemms_offer_swap_narrow_token_tiles_and_deep_rings(m: int,
                                                                       layout: str) -> None:
    knobs = _knobs(_spec(m, b_layout=layout))
    assert knobs["swap_ab"] == (False, True)
    assert {8, 16, 32} <= set(knobs["tile_m"])
    assert {8, 12} <= set(knobs["stages_ab"])


@pytest.mark.parametrize("overrides", [
    {"m": FEW_TOKENS + 1},              # enough rows for unswapped tiles
    {"epilogue": {"bias": True}},       # the transposed store has no fused epilogue
])
def test_swap_is_not_offered_where_it_cannot_be_lowered(overrides: dict) -> None:
    spec = _spec(**{"m": 16, **overrides})
    assert not swap_applies(spec)
    knobs = _knobs(spec)
    assert "swap_ab" not in knobs
    assert min(knobs["tile_m"]) == 64 and max(knobs["stages_ab"]) == 6


def test_fp8_decode_gemms_offer_swap_too() -> None:
    """8-bit inputs: the transposed store applies the dequantising scale on the way."""
    spec = _spec(1, dtype="float8_e4m3")
    assert swap_applies(spec) and _knobs(spec)["swap_ab"] == (False, True)


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3"])
@pytest.mark.parametrize("m", [1, 7, 16, 32, 64, 128, 256])
def test_decode_designs_are_valid_points_of_the_space(m: int, dtype: str) -> None:
    spec = _spec(m, dtype=dtype)
    space = ScheduleSpace(spec, H200, feasibility("gemm", H200))
    designs, decode = designs_for(spec), decode_designs(spec)
    assert designs == [*decode, *DESIGNS["gemm"].values()]  # a first round measures decode
    assert decode[0].get("swap_ab", False) == (m <= 64)
    assert decode and any(d.get("stream_k") for d in decode)
    swapped = [d for d in decode if d.get("swap_ab")]
    assert swapped and max(d["tile_m"] for d in swapped) >= m  # one tile holds every token
    assert any(d.get("cluster_axis") == "m" for d in decode) == (m > 64)
    for design in decode:
        fitted = fit_to_space(space, design)
        assert all(fitted[k] == v for k, v in design.items() if k in fitted)
        for knob in ("tile_m", "tile_n", "tile_k", "stages_ab", "stream_k", "cluster_size",
                     "split_k"):
            if knob in design:
                assert fitted[knob] == design[knob]  # kept, not left to the sampler
        assert fitted.get("swap_ab", False) == design.get("swap_ab", False)
        sprogram, validity = space.build(fitted)
        assert validity.ok, (design, validity.rejections)  # a seed that cannot run is lost
        assert render(sprogram, spec, H200).source


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3"])
@pytest.mark.parametrize(("m", "leader"), [(96, ("n", 4)), (128, ("n", 4)), (256, ("m", 4))])
def test_few_weight_tiles_past_64_tokens_lead_with_stream_k_over_clusters(
        m: int, leader: tuple, dtype: str) -> None:
    """A 1280-row weight makes 10 tiles of 128 rows: the first seeds share k over
    clusters whose blocks multicast the operand they have in common, and they run."""
    spec = _spec(m, n=1280, k=8192, dtype=dtype)
    space = ScheduleSpace(spec, H200, feasibility("gemm", H200))
    seeds = decode_designs(spec)
    first = seeds[0] if m > 128 else seeds[1]  # up to 128 tokens split-K leads
    assert m > 128 or seeds[0]["split_k"] > 1
    assert (first["cluster_axis"], first["cluster_size"], first["stream_k"]) == (*leader, 1)
    for design in decode_designs(spec):
        sprogram, validity = space.build(fit_to_space(space, design))
        assert validity.ok, (design, validity.rejections)
        if design.get("stream_k") and design.get("cluster_size", 1) > 1:
            assert sprogram.stream_k is not None and sprogram.cluster is not None


def test_many_weight_tiles_keep_the_wave_fitted_tile_first() -> None:
    spec = _spec(256, n=7168, k=8192)
    assert decode_designs(spec)[0] == wave_fitted(256, 7168, 132)


@pytest.mark.parametrize("m", [8, 16, 32, 64])
def test_swapped_seeds_take_the_deepest_ring_that_fits(m: int) -> None:
    """12 stages of a 16-token tile overflow shared memory; the seed takes 10 (split-K
    seeds size their rings beside their partial sums: :func:`_split_k_ring`)."""
    swapped = [d for d in designs_for(_spec(m)) if d.get("swap_ab") and not d.get("split_k")]
    expected = {8: 12, 16: 10, 32: 8, 64: 6}[m]
    assert max(d["stages_ab"] for d in swapped) == expected


def test_swapped_token_tiles_fit_the_tokens() -> None:
    for m, tokens in ((1, 8), (8, 8), (9, 16), (30, 32), (64, 64)):
        swapped = [d for d in designs_for(_spec(m)) if d.get("swap_ab")]
        assert {d["tile_m"] for d in swapped} == {tokens}


def test_large_gemms_keep_their_designs() -> None:
    spec = _spec(4096)
    assert designs_for(spec) == list(DESIGNS["gemm"].values())


def test_the_walk_of_the_space_skips_what_cannot_run_but_the_sampler_sees_all() -> None:
    """Token tiles under 64 rows are walked only swapped, deep rings only swapped and a
    swapped output of pingpong consumers only through the consumers' stores (a staged
    transposed store takes cooperative ones); the knobs still offer every option to the
    sampler (one distribution per name)."""
    import itertools

    space = ScheduleSpace(_spec(1), H200, feasibility("gemm", H200))
    seen_swapped = seen_deep = 0
    swapped_stores = set()
    for choices in itertools.islice(space.structural_choices(), 200_000):
        swapped = choices.get("swap_ab", False)
        if choices["tile_m"] < 64:
            assert swapped
        if choices["stages_ab"] > 6:
            assert swapped
            seen_deep += 1
        if swapped:
            assert choices["tile_m"] <= 64
            if choices.get("consumer_split") == "pingpong":
                assert choices["map_store"] == "cuda_core"
            swapped_stores.add(choices["map_store"])
            seen_swapped += 1
    assert seen_swapped and seen_deep and swapped_stores == {"tma", "cuda_core"}
    knobs = {k.name: k.options for k in space.knobs}
    assert knobs["swap_ab"] == (False, True) and knobs["map_store"] == ("tma", "cuda_core")


@pytest.mark.parametrize("axis", ["m", "n"])
def test_swapped_tiles_are_never_clustered(axis: str) -> None:
    """Swapped clusters summed wrong on the H200 (codegen's ``_swap_problem``): the space
    rejects them, naming why."""
    spec = _spec(128)
    space = ScheduleSpace(spec, H200, feasibility("gemm", H200))
    design = next(d for d in decode_designs(spec) if d.get("swap_ab"))
    swapped = fit_to_space(space, design)
    assert space.build(swapped)[1].ok
    _, validity = space.build({**swapped, "cluster_size": 2, "cluster_axis": axis})
    assert not validity.ok and "cluster" in str(validity.rejections)


@pytest.mark.parametrize(("m", "n", "tiles"), [(256, 6144, 128), (256, 7168, 128),
                                               (128, 6144, 128), (256, 4096, 128)])
def test_the_wave_fitted_seed_fills_the_sms(m: int, n: int, tiles: int) -> None:
    """Past 64 tokens one seed's grid fills the waves of the SMs best: at 256 x 6144 the
    64 x 128 tiles of the other seeds make 192 (1.45 waves of 132); it makes 128."""
    design = wave_fitted(m, n, 132)
    assert -(-m // design["tile_m"]) * -(-n // design["tile_n"]) == tiles
    assert design in designs_for(_spec(m, n=n))
    assert design not in designs_for(_spec(m, n=n), blocks=114)  # an H100 PCIe's wave
    assert wave_fitted(m, n, 114) in designs_for(_spec(m, n=n), blocks=114)


@pytest.mark.parametrize(("tile_k", "ok"), [(32, False), (64, True)])
def test_stages_that_miss_a_swizzle_atom_are_kept_out(tile_k: int, ok: bool) -> None:
    """8 tokens by 32-deep k steps are 512 bytes a stage: the ring's stages would not start
    on 1024-byte swizzle atoms, and the kernel failed to compile (H200 GPU tests,
    2026-12-04, 65 x 4104 x 264); the space rejects it, naming why."""
    spec = _spec(1)
    space = ScheduleSpace(spec, H200, feasibility("gemm", H200))
    swapped = {**fit_to_space(space, decode_designs(spec)[0]), "tile_k": tile_k, "stages_ab": 5}
    _, validity = space.build(swapped)
    assert validity.ok == ok
    if not ok:
        assert "swizzle atom" in str(validity.rejections)


@pytest.mark.parametrize(("n", "second"), [(1280, "split_k"), (4096, "stream_k"),
                                           (14336, "wide"), (28672, "wide")])
def test_the_first_round_pairs_the_swapped_tile_with_what_the_weight_needs(
        n: int, second: str) -> None:
    """A search's first round measures two seeds: the swapped tile, then its stream-K twin
    where 64-row tiles leave most SMs idle (n = 1280: 20 tiles), else the 128-row tile."""
    first, next_one, *rest = decode_designs(_spec(1, n=n))
    assert first["swap_ab"] and first["tile_n"] == 64 and not first["stream_k"]
    assert first["stages_ab"] == 8
    if second == "split_k":  # 20 tiles: split-K over a cluster, its stream-K twin later
        assert next_one["split_k"] > 1 and next_one["swap_ab"]
        assert {**first, "stream_k": 1} in rest
    elif second == "stream_k":
        assert next_one == {**first, "stream_k": 1}
    else:
        assert next_one["tile_n"] == 128 and not next_one["stream_k"]
    assert {**first, "stages_ab": 12} in rest  # the deepest ring stays a seed


def test_random_points_are_drawn_among_the_viable_options() -> None:
    """``ScheduleSpace.sample`` (the cost model's random picks) draws each knob among the
    options its ``viable`` leaves, as the walk does: token tiles only swapped, deep rings
    only swapped, a swapped output of pingpong consumers stored by their threads."""
    import random

    space = ScheduleSpace(_spec(1), H200, feasibility("gemm", H200))
    rng = random.Random(3)
    points = [space.sample(rng) for _ in range(400)]
    for choices in points:
        swapped = choices.get("swap_ab", False)
        assert choices["tile_m"] >= 64 or swapped
        assert choices["stages_ab"] <= 6 or swapped
        if swapped and choices.get("consumer_split") == "pingpong":
            assert choices["map_store"] == "cuda_core"
    assert any(c.get("swap_ab") for c in points) and any(c["stages_ab"] > 6 for c in points)


@pytest.mark.parametrize(("m", "n", "paired"), [
    (128, 6144, True),    # the wave-fitted 64 x 96 (128 tiles), its weight tile shared
    (96, 6144, True),
    (256, 6144, True),    # four 64-row m tiles: two pairs
    (192, 8192, False),   # three 64-row m tiles: no pairs
    (128, 8192, False),   # the wave-fitted tile is 64 x 128, GEMM_DECODE_M_PAIR's own
])
def test_the_wave_fitted_tile_has_an_m_paired_twin_where_m_makes_two_tiles(
        m: int, n: int, paired: bool) -> None:
    """Past 64 tokens, where m makes an even number of the wave-fitted tile's m tiles, its
    second seed is its twin whose m tiles share each weight tile in pairs by multicast;
    it is a valid point of the space."""
    spec = _spec(m, n=n, k=4096)
    seeds = decode_designs(spec)
    fitted = wave_fitted(m, n, 132)
    assert seeds[0] == fitted
    twin = {**fitted, "cluster_size": 2, "cluster_axis": "m"}
    assert (seeds[1] == twin) == paired
    if paired:
        space = ScheduleSpace(spec, H200, feasibility("gemm", H200))
        sprogram, validity = space.build(fit_to_space(space, twin))
        assert validity.ok, validity.rejections
        assert sprogram.cluster is not None and sprogram.cluster.size == 2


@pytest.mark.parametrize(("m", "n", "fitted", "tied"), [
    (256, 8192, (64, 256), (128, 128)),   # cuBLAS's plan: 128 x 128 in pairs
    (256, 6144, (64, 192), (128, 96)),
    (200, 4096, (64, 128), (128, 64)),
])
def test_past_128_tokens_the_fitted_tile_s_peer_of_the_other_height_follows_it(
        m: int, n: int, fitted: tuple[int, int], tied: tuple[int, int]) -> None:
    """Where a tile of the other height fills the waves as well, it and its m-paired twin
    (two 128-row tiles sharing each weight tile) are the seeds after the fitted tile and
    its own pairs; both are valid points of the space, the pair a cluster of two along m."""
    spec = _spec(m, n=n, k=4096)
    seeds = decode_designs(spec)
    assert (seeds[0]["tile_m"], seeds[0]["tile_n"]) == fitted
    (peer,) = wave_tied(m, n, 132)
    assert (peer["tile_m"], peer["tile_n"]) == tied and peer["consumer_warpgroups"] == 2
    after = seeds.index(peer)
    assert after in (1, 2) and seeds[after + 1] == {**peer, "cluster_size": 2,
                                                    "cluster_axis": "m"}
    space = ScheduleSpace(spec, H200, feasibility("gemm", H200))
    for design in seeds[after:after + 2]:
        sprogram, validity = space.build(fit_to_space(space, design))
        assert validity.ok, validity.rejections
    assert sprogram.cluster is not None and sprogram.cluster.size == 2


@pytest.mark.parametrize(("m", "n"), [(128, 8192), (256, 7168), (256, 1280)])
def test_no_peer_is_seeded_up_to_128_tokens_or_where_none_fills_as_well(m: int, n: int) -> None:
    """Up to 128 tokens a 128-row tile holds every token (the every-token designs cover
    it); 64 x 224 tiles of 7168 rows make 128 and no 128-row tile does; few weight tiles
    lead with clustered stream-K."""
    seeds = decode_designs(_spec(m, n=n, k=8192))
    peers = wave_tied(m, n, 132)
    assert not peers or all(p not in seeds for p in peers)
