"""A range run's first candidates: the operator's design, the likeliest decode designs of
the range's own weight where the range reaches few tokens, then the range designs."""

from __future__ import annotations

import pytest

from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_range_spec, parse_spec
from scheduler_search.space import ScheduleSpace
from scheduler_search.space.designs import (
    DESIGNS,
    RANGE_DESIGNS,
    decode_designs,
    mid_range_designs,
    range_designs,
    swapped_wave_designs,
    swapped_wave_tile,
    with_transposed_tma_store,
)


def _gemm_range(low: int, high: int, n: int = 11200, k: int = 1664) -> object:
    return parse_range_spec("gemm", {"m": {"min": low, "max": high}, "n": n, "k": k,
                                     "dtype": "bfloat16", "b_layout": "nk"})


def test_a_range_reaching_few_tokens_starts_with_its_weights_decode_designs() -> None:
    range_spec = _gemm_range(1, 16384)
    designs = range_designs(range_spec)
    operator, ranged = list(DESIGNS["gemm"].values()), list(RANGE_DESIGNS["gemm"].values())
    assert designs[:1] == operator and designs[-len(ranged):] == ranged
    middle = [*mid_range_designs(11200, 1, 16384),
              *swapped_wave_designs(11200, 1, 16384)]
    decode = designs[1:-len(ranged) - len(middle)]
    assert designs[-len(ranged) - len(middle):-len(ranged)] == middle
    for tokens in (1, 16, 128):
        seeds = decode_designs(range_spec.exact(range_spec.at(tokens)))[:2]
        assert all(seed in decode for seed in seeds)
    assert len(decode) == len({tuple(sorted(d.items())) for d in decode})  # no repeats
    assert decode[0]["swap_ab"] and decode[0]["tile_m"] == 8 and decode[0]["tile_k"] == 128


def test_a_range_of_many_tokens_or_of_another_operator_has_no_decode_designs() -> None:
    many = range_designs(_gemm_range(1000, 16384))
    assert many == [*DESIGNS["gemm"].values(), *mid_range_designs(11200, 1000, 16384),
                    *swapped_wave_designs(11200, 1000, 16384),
                    *RANGE_DESIGNS["gemm"].values()]
    attention = parse_range_spec("attention", {
        "batch": 1, "heads": 8, "kv_heads": 8, "seq_q": {"min": 1, "max": 4096},
        "seq_kv": 4096, "head_dim": 128, "dtype": "float16"})
    assert range_designs(attention) == list(DESIGNS["attention"].values())


def test_a_narrow_range_takes_the_decode_designs_of_the_sizes_it_holds() -> None:
    range_spec = _gemm_range(100, 200)
    at_100 = decode_designs(range_spec.exact(range_spec.at(100)))[:2]
    at_128 = decode_designs(range_spec.exact(range_spec.at(128)))[:2]
    middle = [*mid_range_designs(11200, 100, 200),
              *swapped_wave_designs(11200, 100, 200)]
    decode = range_designs(range_spec)[1:-len(RANGE_DESIGNS["gemm"]) - len(middle)]
    assert all(d in decode for d in at_100 + at_128)


@pytest.mark.parametrize(("n", "low", "high", "tile"), [
    (11200, 400, 520, (128, 192)),   # 236 tiles: two waves of 128 x 192
    (1920, 2400, 2500, (192, 192)),  # 130 tiles: one wave of 192 x 192
])
def test_the_middle_of_a_range_leads_with_the_tile_fitted_to_its_weight(
        n: int, low: int, high: int, tile: tuple[int, int]) -> None:
    """The tile that leaves the busiest SM the least work (waves x area) at the range's
    middle sizes comes first: on an H200 these led 442 x 11200 x 1664 and 2484 x 1920 x
    1088, where the 128 x 256 design ran 1.26x and 1.3x longer."""
    first = mid_range_designs(n, low, high)[0]
    assert (first["tile_m"], first["tile_n"]) == tile
    assert first["consumer_warpgroups"] == first["tile_m"] // 64
    assert mid_range_designs(n, 1, 200) == []  # no middle sizes: no middle tiles


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize(("n", "k"), [(11200, 1664), (1920, 1088), (4096, 4096)])
def test_every_middle_tile_is_valid_with_its_ring(dtype: str, n: int, k: int) -> None:
    """The ring each middle design takes fits beside the output's staging: the space
    builds every one of them (a ring one stage deeper would not fit the 256-wide ones)."""
    device = get_device("h200")
    spec = parse_spec("gemm", {"m": 1024, "n": n, "k": k, "dtype": dtype, "b_layout": "nk"})
    space = ScheduleSpace(spec, device)
    for design in mid_range_designs(n, 256, 4096):
        _, validity = space.build(design)
        assert validity.ok, (design, validity.rejections)


@pytest.mark.parametrize(("m", "n", "tile"), [
    (260, 11200, (88, 256)),   # 3 token tiles x 44: one wave
    (442, 11200, (152, 128)),  # 3 x 88: two waves (152 over 256 rows holds too many)
    (780, 11200, (136, 256)),  # 6 x 44: two waves
    (478, 3200, (96, 128)),    # 5 x 25: one wave
])
def test_the_swapped_tile_fitted_to_the_waves_is_the_one_that_led_on_the_gpu(
        m: int, n: int, tile: tuple[int, int]) -> None:
    """On an H200 (2026-12-04, the fitted grid) these tiles led their shapes, at 0.90-1.05x
    cuBLAS where the range run's table had served them at 0.70-0.85."""
    assert swapped_wave_tile(m, n) == tile


def test_a_swapped_tile_holds_no_more_accumulators_than_a_consumer_thread_can() -> None:
    for m in range(64, 2048, 7):
        tile = swapped_wave_tile(m, 11200)
        if tile is not None:
            tokens, rows = tile
            assert tokens % 8 == 0 and tokens <= 256 and tokens * rows // 256 <= 136
            assert -(-m // tokens) * tokens - m < 8 * -(-m // tokens)  # no spare tile


def test_wave_fitted_designs_stage_their_store_only_where_the_ring_stays_deep() -> None:
    designs = swapped_wave_designs(11200, 1, 16384)
    for design in designs:
        assert design["consumer_warpgroups"] == 2 and design["swap_ab"]
        assert design["map_store"] == "cuda_core" or design["stages_ab"] >= 3
        if design["map_store"] == "cuda_core":  # its staged twin keeps 2 stages or fewer
            assert with_transposed_tma_store(design)["stages_ab"] < 3
    assert {d["map_store"] for d in designs} == {"tma", "cuda_core"}
