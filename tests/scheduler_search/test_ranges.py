"""Specs over ranges of sizes: validated like exact specs, errors naming the field; an
exact size inside a range is one of its workloads; sizes sampled log-uniformly."""

from __future__ import annotations

import math
import statistics

import pytest

from scheduler_search.ops import (
    SpecError,
    is_range_params,
    parse_range_spec,
    parse_spec,
    runtime_dims,
)

GEMM = {"n": 4096, "k": 4096, "dtype": "float16"}
ATTENTION = {"batch": 1, "heads": 32, "kv_heads": 8, "head_dim": 128, "causal": True,
             "dtype": "bfloat16"}


def test_a_gemm_over_a_range_of_m_holds_every_size_between() -> None:
    spec = parse_range_spec("gemm", {"m": {"min": 1, "max": 16384}, **GEMM})
    assert spec.ranges["m"].low == 1 and spec.ranges["m"].high == 16384
    assert spec.contains({"m": 300, **GEMM})
    assert not spec.contains({"m": 16385, **GEMM})
    assert not spec.contains({"m": 300, **GEMM, "n": 1024})  # another fixed parameter
    assert spec.exact({"m": 17}) == parse_spec("gemm", {"m": 17, **GEMM})
    assert spec.params() == {**GEMM, "m": {"min": 1, "max": 16384}}


def test_a_list_of_sizes_holds_only_those() -> None:
    spec = parse_range_spec("gemm", {"m": [300, 1, 64, 7], **GEMM})
    assert spec.ranges["m"].listed == (1, 7, 64, 300)
    assert spec.contains({"m": 64, **GEMM}) and not spec.contains({"m": 65, **GEMM})
    assert spec.sample(8) == [{"m": 1}, {"m": 7}, {"m": 64}, {"m": 300}]
    with pytest.raises(SpecError) as error:
        spec.exact({"m": 65})
    assert error.value.field == "m"


SEQ = {"min": 128, "max": 16384}


@pytest.mark.parametrize("value", [SEQ, [128, 200, 1000, 16384]])
def test_attention_with_both_lengths_given_one_range_is_one_tied_axis(value: object) -> None:
    """Self-attention's prefill: seq_q = seq_kv = seq over a range; every size sets both."""
    spec = parse_range_spec("attention", {**ATTENTION, "seq_q": value, "seq_kv": value})
    assert spec.dims == ("seq_q", "seq_kv") and spec.dim == "seq_q"
    assert spec.at(300) == {"seq_q": 300, "seq_kv": 300}
    assert list(spec.corners()) == [spec.at(128), spec.at(16384)]
    sizes = spec.sample(5, seed=2)
    assert len(sizes) >= 4 and all(s["seq_q"] == s["seq_kv"] for s in sizes)
    assert [s["seq_q"] for s in sizes] == sorted({s["seq_q"] for s in sizes})
    assert spec.contains({**ATTENTION, "seq_q": 1000, "seq_kv": 1000})
    assert not spec.contains({**ATTENTION, "seq_q": 1000, "seq_kv": 128})  # not tied
    assert spec.exact(spec.at(1000)) == parse_spec("attention", {
        **ATTENTION, "seq_q": 1000, "seq_kv": 1000})
    with pytest.raises(SpecError) as error:
        spec.exact({"seq_q": 1000, "seq_kv": 16384})
    assert error.value.field == "seq_kv"
    assert spec.params() == {**ATTENTION, "seq_q": value, "seq_kv": value}


@pytest.mark.parametrize("dim", ["seq_q", "seq_kv"])
def test_attention_takes_one_sequence_length_as_a_range(dim: str) -> None:
    other = "seq_kv" if dim == "seq_q" else "seq_q"
    spec = parse_range_spec("attention", {**ATTENTION, dim: SEQ, other: 512})
    assert spec.dims == (dim,) and spec.at(300) == {dim: 300}
    assert spec.contains({**ATTENTION, dim: 300, other: 512})
    assert not spec.contains({**ATTENTION, dim: 300, other: 300})


@pytest.mark.parametrize("seq_kv", [{"min": 128, "max": 8192}, [128, 16384],
                                    {"min": 1, "max": 16384}])
def test_attention_lengths_given_different_ranges_are_refused(seq_kv: object) -> None:
    with pytest.raises(SpecError) as error:
        parse_range_spec("attention", {**ATTENTION, "seq_q": SEQ, "seq_kv": seq_kv})
    assert error.value.field == "seq_kv"
    assert "one range axis" in str(error.value) and "same range" in str(error.value)


def test_a_gemm_range_is_its_one_dimension() -> None:
    spec = parse_range_spec("gemm", {"m": {"min": 1, "max": 64}, **GEMM})
    assert spec.dims == ("m",) and spec.at(7) == {"m": 7}
    assert list(spec.corners()) == [{"m": 1}, {"m": 64}]


@pytest.mark.parametrize(("params", "field", "words"), [
    ({"m": {"min": 64, "max": 8}, **GEMM}, "m.min", "greater than max"),
    ({"m": {"min": 0, "max": 8}, **GEMM}, "m.min", "not an integer"),
    ({"m": {"min": 1, "max": "8"}, **GEMM}, "m.max", "not an integer"),
    ({"m": {"min": 1, "max": True}, **GEMM}, "m.max", "not an integer"),
    ({"m": {"low": 1, "high": 8}, **GEMM}, "m", '{"min"'),
    ({"m": [], **GEMM}, "m", "at least one"),
    ({"m": [4, 4], **GEMM}, "m", "more than once"),
    ({"m": [4, -1], **GEMM}, "m.1", "not an integer"),
    ({"m": list(range(1, 300)), **GEMM}, "m", "at most"),
    ({"m": 128, "n": {"min": 1, "max": 8}, "k": 64}, "n", "dimensions that can: m"),
    ({"m": {"min": 1, "max": 64}, "n": 4096, "k": 4099}, "k", "(at m=1)"),
    ({"m": 64, **GEMM}, "m", "no dimension"),
])
def test_a_bad_range_is_refused_naming_its_field(params: dict, field: str, words: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_range_spec("gemm", params)
    assert error.value.field == field and words in str(error.value), str(error.value)


def test_the_largest_corner_is_checked_like_an_exact_spec() -> None:
    """A range whose largest size needs more memory than any device is refused there."""
    with pytest.raises(SpecError) as error:
        parse_range_spec("gemm", {"m": {"min": 1, "max": 1_000_000}, "n": 65536,
                                  "k": 65536, "dtype": "float16"})
    assert error.value.field == "m" and "device memory" in str(error.value)
    assert "m=1000000" in str(error.value)


def test_operators_without_run_time_sizes_take_no_range() -> None:
    assert runtime_dims("mamba2_chunk_scan") == ()
    params = {"batch": 8, "seqlen": {"min": 256, "max": 4096}, "nheads": 80, "headdim": 64,
              "dstate": 128, "chunk_size": 256}
    with pytest.raises(SpecError) as error:
        parse_range_spec("mamba2_chunk_scan", params)
    assert error.value.field == "seqlen" and "none" in str(error.value)
    assert is_range_params(params) and not is_range_params({"m": 1})


def test_sizes_are_drawn_log_uniformly_with_both_ends() -> None:
    spec = parse_range_spec("gemm", {"m": {"min": 1, "max": 16384}, **GEMM})
    sizes = [s["m"] for s in spec.sample(64, seed=5)]
    assert sizes[0] == 1 and sizes[-1] == 16384 and sizes == sorted(set(sizes))
    # Half of them below the range's geometric middle (128), not below its linear one.
    middle = math.sqrt(16384)
    assert 0.3 < sum(s < middle for s in sizes) / len(sizes) < 0.7
    assert statistics.median(sizes) < 16384 / 8
    assert spec.sample(64, seed=5) == spec.sample(64, seed=5)
    assert spec.sample(64, seed=5) != spec.sample(64, seed=6)


def test_a_small_range_is_sampled_whole() -> None:
    spec = parse_range_spec("gemm", {"m": {"min": 3, "max": 6}, **GEMM})
    assert [s["m"] for s in spec.sample(8)] == [3, 4, 5, 6]


def test_a_nested_object_is_a_fixed_parameter_not_a_range() -> None:
    """A GEMM's epilogue is an object of its own fields: fixed, checked at the corners."""
    spec = parse_range_spec("gemm", {"m": {"min": 1, "max": 64}, **GEMM,
                                     "epilogue": {"bias": True, "act": "gelu"}})
    assert spec.fixed["epilogue"] == {"bias": True, "act": "gelu"} and set(spec.ranges) == {"m"}
    with pytest.raises(SpecError) as caught:
        parse_range_spec("gemm", {"m": {"min": 1, "max": 64}, **GEMM,
                                  "epilogue": {"min": 1, "max": 2}})
    assert caught.value.field == "epilogue"
