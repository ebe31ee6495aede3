"""A range run's first candidates: the operator's design, the likeliest decode designs of
the range's own weight where the range reaches few tokens, then the range designs."""

from __future__ import annotations

from scheduler_search.ops import parse_range_spec
from scheduler_search.space.designs import (
    DESIGNS,
    RANGE_DESIGNS,
    decode_designs,
    range_designs,
)


def _gemm_range(low: int, high: int, n: int = 11200, k: int = 1664) -> object:
    return parse_range_spec("gemm", {"m": {"min": low, "max": high}, "n": n, "k": k,
                                     "dtype": "bfloat16", "b_layout": "nk"})


def test_a_range_reaching_few_tokens_starts_with_its_weights_decode_designs() -> None:
    range_spec = _gemm_range(1, 16384)
    designs = range_designs(range_spec)
    operator, ranged = list(DESIGNS["gemm"].values()), list(RANGE_DESIGNS["gemm"].values())
    assert designs[:1] == operator and designs[-len(ranged):] == ranged
    decode = designs[1:-len(ranged)]
    for tokens in (1, 16, 128):
        seeds = decode_designs(range_spec.exact(range_spec.at(tokens)))[:2]
        assert all(seed in decode for seed in seeds)
    assert len(decode) == len({tuple(sorted(d.items())) for d in decode})  # no repeats
    assert decode[0]["swap_ab"] and decode[0]["tile_m"] == 8 and decode[0]["tile_k"] == 128


def test_a_range_of_many_tokens_or_of_another_operator_has_no_decode_designs() -> None:
    many = range_designs(_gemm_range(1000, 16384))
    assert many == [*DESIGNS["gemm"].values(), *RANGE_DESIGNS["gemm"].values()]
    attention = parse_range_spec("attention", {
        "batch": 1, "heads": 8, "kv_heads": 8, "seq_q": {"min": 1, "max": 4096},
        "seq_kv": 4096, "head_dim": 128, "dtype": "float16"})
    assert range_designs(attention) == list(DESIGNS["attention"].values())


def test_a_narrow_range_takes_the_decode_designs_of_the_sizes_it_holds() -> None:
    range_spec = _gemm_range(100, 200)
    at_100 = decode_designs(range_spec.exact(range_spec.at(100)))[:2]
    at_128 = decode_designs(range_spec.exact(range_spec.at(128)))[:2]
    decode = range_designs(range_spec)[1:-len(RANGE_DESIGNS["gemm"])]
    assert all(d in decode for d in at_100 + at_128)
