"""Operator specs: strict validation, workload keys, tensors and flop counts.

Expectations come from docs/architecture.md ("The model"), the tensor contract in
``codegen/artifact.py`` and the suites of docs/benchmarks.md, never from printing the code's
output.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
from pydantic import ValidationError

from scheduler_search.hardware import A10, A100_SXM, CATALOG, H100_SXM, H200, L40S, RTX_4090
from scheduler_search.ops import (
    OPERATORS,
    AttentionSpec,
    GemmSpec,
    Mamba2ChunkScanSpec,
    Mamba2ChunkStateSpec,
    OperatorSpec,
    SpecError,
    parse_spec,
)
from scheduler_search.ops.suites import GEMM_SHAPES, suites

GEMM = {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16", "b_layout": "kn"}
ATTENTION = {
    "batch": 1,
    "heads": 32,
    "kv_heads": 8,
    "seq_q": 2048,
    "seq_kv": 2048,
    "head_dim": 128,
    "causal": False,
    "dtype": "float16",
}
MAMBA2 = {
    "batch": 1,
    "seqlen": 1024,
    "nheads": 80,
    "headdim": 64,
    "dstate": 128,
    "ngroups": 1,
    "chunk_size": 256,
    "dtype": "float16",
}
VALID: dict[str, dict[str, Any]] = {
    "gemm": GEMM,
    "attention": ATTENTION,
    "attention_backward": {**ATTENTION, "layout": "bshd", "deterministic": False},
    "mamba2_chunk_scan": MAMBA2,
    "mamba2_chunk_state": MAMBA2,
}
OPS = tuple(VALID)
MAMBA_OPS = ("mamba2_chunk_scan", "mamba2_chunk_state")

#: Fields without a default (docs/architecture.md, "The model").
REQUIRED: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),
    "attention": ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim"),
    "attention_backward": ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim"),
    **{
        op: ("batch", "seqlen", "nheads", "headdim", "dstate", "ngroups", "chunk_size")
        for op in MAMBA_OPS
    },
}
INT_FIELDS = REQUIRED
DTYPE_FIELDS = {op: ("dtype",) for op in OPS}

#: One valid change per field: every one must move the workload key.
ATTENTION_CHANGED: dict[str, Any] = {"batch": 2, "heads": 64, "kv_heads": 16, "seq_q": 2049,
                                     "seq_kv": 2049, "head_dim": 64, "causal": True,
                                     "dtype": "bfloat16"}
CHANGED: dict[str, dict[str, Any]] = {
    "gemm": {"m": 4097, "n": 4104, "k": 4104, "dtype": "bfloat16", "b_layout": "nk"},
    "attention": ATTENTION_CHANGED,
    "attention_backward": {**ATTENTION_CHANGED, "layout": "bhsd", "deterministic": True},
    **{
        op: {
            "batch": 2,
            "seqlen": 2048,
            "nheads": 160,
            "headdim": 128,
            "dstate": 64,
            "ngroups": 2,
            "chunk_size": 128,
            "dtype": "bfloat16",
        }
        for op in MAMBA_OPS
    },
}


def with_(op: str, **changes: Any) -> dict[str, Any]:
    """The valid params of ``op`` with ``changes`` applied."""
    return {**VALID[op], **changes}


def errors_of(op: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    with pytest.raises(ValidationError) as info:
        parse_spec(op, params)
    return info.value.errors()


def only_error(op: str, params: dict[str, Any]) -> dict[str, Any]:
    errors = errors_of(op, params)
    assert len(errors) == 1, errors
    return errors[0]


# --- 1. every bad field gives an error that names it ---------------------------------


def test_operator_table_lists_the_four_ops() -> None:
    assert set(OPERATORS) == set(OPS)
    for op, spec in OPERATORS.items():
        assert spec.op == op


@pytest.mark.parametrize("op", OPS)
def test_valid_params_parse(op: str) -> None:
    spec = parse_spec(op, VALID[op])
    assert isinstance(spec, OPERATORS[op])
    assert spec.op == op


@pytest.mark.parametrize(("op", "field"), [(op, field) for op in OPS for field in REQUIRED[op]])
def test_missing_field_is_named(op: str, field: str) -> None:
    params = dict(VALID[op])
    del params[field]
    error = only_error(op, params)
    assert error["loc"] == (field,)
    assert error["type"] == "missing"


@pytest.mark.parametrize(
    ("op", "field", "default"),
    [("gemm", "dtype", "float16"), ("gemm", "b_layout", "kn"), ("attention", "causal", False)]
    + [(op, "dtype", "float16") for op in ("attention", *MAMBA_OPS)],
)
def test_optional_field_takes_its_default(op: str, field: str, default: Any) -> None:
    params = dict(VALID[op])
    del params[field]
    assert getattr(parse_spec(op, params), field) == default


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("extra", ["bogus", "op", "M", "tile"])
def test_unknown_field_is_named(op: str, extra: str) -> None:
    error = only_error(op, {**VALID[op], extra: 1})
    assert error["loc"] == (extra,)
    assert error["type"] == "extra_forbidden"


def _wrong_types(value: int) -> list[Any]:
    # Strings, floats (even integral ones), bools, lists and None are never coerced.
    return [str(value), float(value), True, False, [value], None, {"value": value}]


@pytest.mark.parametrize(
    ("op", "field", "bad"),
    [
        (op, field, bad)
        for op in OPS
        for field in INT_FIELDS[op]
        for bad in _wrong_types(VALID[op][field])
    ],
    ids=repr,
)
def test_int_field_of_wrong_type_is_named(op: str, field: str, bad: Any) -> None:
    error = only_error(op, with_(op, **{field: bad}))
    assert error["loc"] == (field,)
    assert error["type"] == "int_type"
    assert "integer" in error["msg"]


@pytest.mark.parametrize("bad", ["true", 1, 0, 1.0, None, [True]], ids=repr)
def test_causal_of_wrong_type_is_named(bad: Any) -> None:
    error = only_error("attention", with_("attention", causal=bad))
    assert error["loc"] == ("causal",)
    assert "boolean" in error["msg"]


@pytest.mark.parametrize(
    ("epilogue", "loc", "kind"),
    [({"act": "tanh"}, ("epilogue", "act"), "literal_error"),
     ({"bias": "yes"}, ("epilogue", "bias"), "bool_type"),
     ({"scale": float("inf")}, ("epilogue", "scale"), "finite_number"),
     ({"scale": "2"}, ("epilogue", "scale"), "float_type"),
     ({"clamp": 6}, ("epilogue", "clamp"), "extra_forbidden"),
     ("gelu", ("epilogue",), "model_type")],
    ids=["act", "bias", "scale-inf", "scale-str", "extra", "not-an-object"])
def test_a_bad_epilogue_names_its_field(epilogue: Any, loc: tuple[str, ...], kind: str) -> None:
    error = only_error("gemm", with_("gemm", epilogue=epilogue))
    assert error["loc"] == loc and error["type"] == kind, error


def test_a_gemm_epilogue_adds_its_tensors_and_changes_the_peers() -> None:
    plain = parse_spec("gemm", GEMM)
    fused = parse_spec("gemm", with_("gemm", epilogue={"bias": True, "act": "gelu",
                                                       "residual": True, "scale": 2}))
    assert [t.name for t in plain.tensors()] == ["a", "b", "c"]
    shapes = {t.name: (t.shape, t.dtype, t.role) for t in fused.tensors()}
    m, n = GEMM["m"], GEMM["n"]
    assert shapes["bias"] == ((n,), "float16", "input")
    assert shapes["residual"] == ((m, n), "float16", "input")
    assert fused.params()["epilogue"] == {"scale": 2.0, "bias": True, "act": "gelu",
                                          "residual": True}
    assert "epilogue" not in plain.params()
    assert (plain.run_baseline(), plain.run_peers()) == ("cublas", ())
    graph = fused.build_graph({"m": 128, "n": 128, "k": 64})
    assert [t.name for t in graph.stasks][-2:] == ["epilogue", "store"]
    assert fused.epilogue.describe() == "2·acc + bias, gelu, + residual"


@pytest.mark.parametrize(("params", "baseline", "peers"), [
    # cuBLASLt fuses the whole epilogue (scale as its alpha): its call is the baseline.
    ({"epilogue": {"bias": True, "act": "gelu_tanh"}}, "cublaslt_epilogue", ("torch_epilogue",)),
    ({"epilogue": {"bias": True, "act": "relu", "scale": 2.0}}, "cublaslt_epilogue",
     ("torch_epilogue",)),
    ({"epilogue": {"bias": True}, "dtype": "bfloat16"}, "cublaslt_epilogue", ("torch_epilogue",)),
    # It fuses the bias, not the rest: the unfused sequence, with the partly fused one beside.
    ({"epilogue": {"bias": True, "residual": True}}, "torch_epilogue", ("cublaslt_epilogue",)),
    ({"epilogue": {"bias": True, "act": "gelu"}}, "torch_epilogue", ("cublaslt_epilogue",)),
    # Nothing for it to fuse, or an output type addmm does not write.
    ({"epilogue": {"act": "gelu_tanh", "residual": True}}, "torch_epilogue", ()),
    ({"epilogue": {"bias": True}, "dtype": "bfloat16", "out_dtype": "float16"}, "torch_epilogue",
     ()),
    ({"epilogue": {"bias": True, "act": "gelu_tanh"}, "dtype": "float8_e4m3", "b_layout": "nk"},
     "torch_epilogue", ()),
], ids=["bias-gelu_tanh", "bias-relu-scale", "bias", "bias-residual", "bias-gelu-erf",
        "gelu_tanh-residual", "fp16-out", "fp8"])
def test_the_gemm_baseline_is_cublaslts_fused_epilogue_where_it_has_one(
        params: dict[str, Any], baseline: str, peers: tuple[str, ...]) -> None:
    spec = parse_spec("gemm", with_("gemm", **params))
    assert (spec.run_baseline(), spec.run_peers()) == (baseline, peers)


@pytest.mark.parametrize("bad", ["false", 0, None], ids=repr)
def test_states_in_fp32_of_wrong_type_is_named(bad: Any) -> None:
    error = only_error("mamba2_chunk_state", with_("mamba2_chunk_state", states_in_fp32=bad))
    assert error["loc"] == ("states_in_fp32",)
    assert "boolean" in error["msg"]


def test_chunk_state_writes_states_in_fp32_or_in_the_inputs_dtype() -> None:
    params = {**MAMBA2, "dtype": "bfloat16"}
    default = parse_spec("mamba2_chunk_state", params)
    half = parse_spec("mamba2_chunk_state", {**params, "states_in_fp32": False})
    states = {s.name: s for s in default.tensors()}["states"]
    assert states.dtype == "float32" and default.states_dtype == "float32"
    assert {s.name: s for s in half.tensors()}["states"].dtype == "bfloat16"
    assert default.min_bytes() - half.min_bytes() == states.size_bytes // 2
    assert default.workload_key() != half.workload_key()
    assert "states_in_fp32" not in default.params() and half.params()["states_in_fp32"] is False
    assert half.build_graph({"p": 64, "n": 128, "l": 64}).tensors["states"].dtype == "bfloat16"


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    "bad", ["float32", "fp16", "bf16", "FLOAT16", "half", "float8", "", 16, None], ids=repr
)
def test_dtype_outside_fp16_bf16_is_named(op: str, bad: Any) -> None:
    error = only_error(op, with_(op, dtype=bad))
    assert error["loc"] == ("dtype",)
    assert "float16" in error["msg"] and "bfloat16" in error["msg"]


@pytest.mark.parametrize("op", [op for op in OPS if op not in ("gemm", "attention")])
def test_only_gemm_and_attention_take_8_bit_floats(op: str) -> None:
    error = only_error(op, with_(op, dtype="float8_e4m3"))
    assert error["loc"] == ("dtype",)


def test_attention_takes_e4m3_alone_of_the_8_bit_floats() -> None:
    error = only_error("attention", with_("attention", dtype="float8_e5m2"))
    assert error["loc"] == ("dtype",) and "float8_e4m3" in error["msg"]


@pytest.mark.parametrize("bad", ["tn", "KN", "mk", "", 0, None], ids=repr)
def test_gemm_b_layout_outside_kn_nk_is_named(bad: Any) -> None:
    error = only_error("gemm", with_("gemm", b_layout=bad))
    assert error["loc"] == ("b_layout",)
    assert "'kn'" in error["msg"] and "'nk'" in error["msg"]


@pytest.mark.parametrize(
    ("op", "field", "bad"),
    [(op, field, bad) for op in OPS for field in INT_FIELDS[op] for bad in (0, -1, -4096)],
)
def test_int_field_below_range_is_named(op: str, field: str, bad: int) -> None:
    error = only_error(op, with_(op, **{field: bad}))
    assert error["loc"] == (field,)
    assert error["type"] == "greater_than_equal"
    assert str(error["ctx"]["ge"]) in error["msg"]


@pytest.mark.parametrize(("op", "field"), [(op, field) for op in OPS for field in INT_FIELDS[op]])
def test_int_field_above_range_is_named(op: str, field: str) -> None:
    # 2**40 is beyond any sane extent and beyond 32-bit index math in a kernel.
    error = only_error(op, with_(op, **{field: 2**40}))
    assert error["loc"] == (field,)
    assert error["type"] == "less_than_equal"
    assert str(error["ctx"]["le"]) in error["msg"]


@pytest.mark.parametrize("field", ["m", "n", "k"])
def test_gemm_dim_limit_is_2_pow_20(field: str) -> None:
    small = {"m": 8, "n": 8, "k": 8}
    assert getattr(parse_spec("gemm", {**small, field: 2**20}), field) == 2**20
    error = only_error("gemm", {**small, field: 2**20 + 1})
    assert error["loc"] == (field,)
    assert "1048576" in error["msg"]


@pytest.mark.parametrize(
    ("field", "bad"),
    [("head_dim", 8), ("head_dim", 272), ("headdim", 8), ("dstate", 1024), ("chunk_size", 8)],
)
def test_mma_dims_have_range_limits(field: str, bad: int) -> None:
    op = "attention" if field == "head_dim" else "mamba2_chunk_scan"
    assert only_error(op, with_(op, **{field: bad}))["loc"] == (field,)


# 16-byte TMA row alignment: fp16/bf16 rows must hold a multiple of 8 elements.


@pytest.mark.parametrize("b_layout", ["kn", "nk"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("k", [4001, 4004, 4002, 7])
def test_gemm_k_must_give_16_byte_rows(k: int, dtype: str, b_layout: str) -> None:
    errors = errors_of("gemm", with_("gemm", k=k, dtype=dtype, b_layout=b_layout))
    assert {e["loc"] for e in errors} == {("k",)}
    message = errors[0]["msg"]
    assert str(k) in message and "16" in message and "multiple of 8" in message


def test_gemm_misaligned_k_with_nk_is_reported_once() -> None:
    errors = errors_of("gemm", with_("gemm", k=4001, b_layout="nk"))
    assert [e["loc"] for e in errors] == [("k",)]


@pytest.mark.parametrize("n", [4004, 4001, 6002, 12])
def test_gemm_n_must_give_16_byte_rows_when_b_is_kn(n: int) -> None:
    error = only_error("gemm", with_("gemm", n=n, b_layout="kn"))
    assert error["loc"] == ("n",)
    assert str(n) in error["msg"] and "16" in error["msg"]


@pytest.mark.parametrize("n", [4004, 4001, 6002, 12])
def test_gemm_n_is_free_when_b_is_nk(n: int) -> None:
    # b's rows hold k elements in the nk layout; n is then only a row count.
    assert parse_spec("gemm", with_("gemm", n=n, b_layout="nk")).n == n


@pytest.mark.parametrize("m", [4001, 1, 3000, 2**20 - 1])
def test_gemm_m_is_never_a_row_length(m: int) -> None:
    assert parse_spec("gemm", with_("gemm", m=m, n=64, k=64)).m == m


@pytest.mark.parametrize("op", MAMBA_OPS)
@pytest.mark.parametrize(("field", "bad"), [("headdim", 72), ("headdim", 40), ("dstate", 120)])
def test_mamba_headdim_and_dstate_must_be_multiples_of_16(op: str, field: str, bad: int) -> None:
    error = only_error(op, with_(op, **{field: bad}))
    assert error["loc"] == (field,)
    assert str(bad) in error["msg"] and "multiple of 16" in error["msg"]


@pytest.mark.parametrize(("heads", "kv_heads"), [(32, 7), (32, 64), (30, 4), (1, 2)])
def test_attention_heads_must_divide_into_kv_groups(heads: int, kv_heads: int) -> None:
    error = only_error("attention", with_("attention", heads=heads, kv_heads=kv_heads))
    assert error["loc"] == ("kv_heads",)
    assert str(heads) in error["msg"] and str(kv_heads) in error["msg"]
    assert "divisible" in error["msg"]


@pytest.mark.parametrize(("heads", "kv_heads"), [(32, 32), (32, 8), (32, 1), (7, 7)])
def test_attention_gqa_and_mha_groupings_are_valid(heads: int, kv_heads: int) -> None:
    spec = parse_spec("attention", with_("attention", heads=heads, kv_heads=kv_heads))
    assert (spec.heads, spec.kv_heads) == (heads, kv_heads)


@pytest.mark.parametrize("head_dim", [72, 100, 24, 136])
def test_attention_head_dim_must_be_a_multiple_of_16(head_dim: int) -> None:
    error = only_error("attention", with_("attention", head_dim=head_dim))
    assert error["loc"] == ("head_dim",)
    assert str(head_dim) in error["msg"] and "multiple of 16" in error["msg"]


@pytest.mark.parametrize("head_dim", [16, 32, 64, 96, 128, 192, 256])
def test_attention_head_dims_multiple_of_16_are_valid(head_dim: int) -> None:
    assert parse_spec("attention", with_("attention", head_dim=head_dim)).head_dim == head_dim


@pytest.mark.parametrize("op", MAMBA_OPS)
@pytest.mark.parametrize(("seqlen", "chunk_size"), [(1000, 256), (4096 + 128, 256), (100, 64)])
def test_mamba_seqlen_must_be_whole_chunks(op: str, seqlen: int, chunk_size: int) -> None:
    error = only_error(op, with_(op, seqlen=seqlen, chunk_size=chunk_size))
    assert error["loc"] == ("seqlen",)
    assert str(seqlen) in error["msg"] and str(chunk_size) in error["msg"]


@pytest.mark.parametrize("op", MAMBA_OPS)
@pytest.mark.parametrize(("nheads", "ngroups"), [(80, 3), (80, 160), (7, 2)])
def test_mamba_nheads_must_divide_into_groups(op: str, nheads: int, ngroups: int) -> None:
    error = only_error(op, with_(op, nheads=nheads, ngroups=ngroups))
    assert error["loc"] == ("ngroups",)
    assert str(nheads) in error["msg"] and str(ngroups) in error["msg"]


@pytest.mark.parametrize("op", MAMBA_OPS)
@pytest.mark.parametrize("chunk_size", [48, 96, 192, 640])
def test_mamba_chunk_size_must_be_a_power_of_two(op: str, chunk_size: int) -> None:
    # seqlen a multiple of chunk_size, so only the power-of-two rule fails.
    error = only_error(op, with_(op, seqlen=chunk_size * 4, chunk_size=chunk_size))
    assert error["loc"] == ("chunk_size",)
    assert str(chunk_size) in error["msg"] and "power of two" in error["msg"]


@pytest.mark.parametrize("op", MAMBA_OPS)
def test_every_cross_field_problem_is_reported_at_once(op: str) -> None:
    params = with_(op, seqlen=1000, chunk_size=48, nheads=80, ngroups=3, headdim=72, dstate=120)
    locs = {e["loc"] for e in errors_of(op, params)}
    assert locs == {("seqlen",), ("ngroups",), ("chunk_size",), ("headdim",), ("dstate",)}


@pytest.mark.parametrize(
    ("op", "params", "field"),
    [
        ("gemm", {"m": 2**19, "n": 2**20, "k": 4096}, "n"),
        ("gemm", {"m": 2**20, "n": 2**19, "k": 4096}, "m"),
        ("gemm", {"m": 2**17, "n": 2**17, "k": 2**20}, "k"),
        (
            "attention",
            {**ATTENTION, "batch": 64, "seq_q": 2**20, "seq_kv": 2**19},
            "seq_q",
        ),
        (
            "attention",
            {**ATTENTION, "batch": 64, "seq_q": 2**19, "seq_kv": 2**20},
            "seq_kv",
        ),
        ("mamba2_chunk_scan", {**MAMBA2, "batch": 64, "seqlen": 2**22}, "seqlen"),
        ("mamba2_chunk_state", {**MAMBA2, "batch": 64, "seqlen": 2**22}, "seqlen"),
        ("mamba2_chunk_state", {**MAMBA2, "batch": 65536, "seqlen": 2**14}, "batch"),
    ],
)
def test_absurd_footprint_is_reported_on_the_largest_field(
    op: str, params: dict[str, Any], field: str
) -> None:
    error = only_error(op, params)
    assert error["loc"] == (field,)
    assert "GiB" in error["msg"] and "memory" in error["msg"]
    assert H200.name in error["msg"]  # the largest known device


def test_absurd_square_gemm_is_rejected_on_a_largest_field() -> None:
    error = only_error("gemm", {"m": 2**20, "n": 2**20, "k": 4096})
    assert error["loc"] in {("m",), ("n",)}


@pytest.mark.parametrize("op", ["conv", "Gemm", "", "mamba2", "attention_bwd"])
def test_unknown_operator_is_a_spec_error_on_op(op: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(op, {"m": 1})
    assert info.value.field == "op"
    assert repr(op) in str(info.value)
    for known in OPS:  # the message lists the choices
        assert known in str(info.value)


@pytest.mark.parametrize("params", [[1, 2], None, "m=1", 7], ids=repr)
def test_params_that_are_not_a_mapping_are_rejected(params: Any) -> None:
    with pytest.raises(ValidationError):
        parse_spec("gemm", params)


@pytest.mark.parametrize("op", OPS)
def test_specs_are_frozen(op: str) -> None:
    spec = parse_spec(op, VALID[op])
    first = next(iter(REQUIRED[op]))
    with pytest.raises(ValidationError):
        setattr(spec, first, 1)


# Valid suite shapes (docs/benchmarks.md) all validate and fit an H200.

SUITE: list[tuple[str, dict[str, Any]]] = suites()


def _suite_id(case: tuple[str, dict[str, Any]]) -> str:
    op, params = case
    return op + "-" + "-".join(str(v) for v in params.values())


@pytest.mark.parametrize(("op", "params"), SUITE, ids=[_suite_id(case) for case in SUITE])
def test_benchmark_suite_shapes_validate_and_fit_an_h200(op: str, params: dict[str, Any]) -> None:
    spec = parse_spec(op, params)
    assert params.items() <= spec.params().items()  # plus the defaults it leaves out
    spec.check_fits(H200)


# --- 2. workload keys ------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
def test_key_does_not_depend_on_param_order(op: str) -> None:
    forward = parse_spec(op, VALID[op])
    backward = parse_spec(op, dict(reversed(list(VALID[op].items()))))
    assert forward.workload_key() == backward.workload_key()
    assert forward.canonical_json() == backward.canonical_json()


@pytest.mark.parametrize("op", OPS)
def test_key_is_the_same_with_defaults_implicit_or_explicit(op: str) -> None:
    implicit = {k: v for k, v in VALID[op].items() if k in REQUIRED[op]}
    assert implicit != VALID[op]
    assert parse_spec(op, implicit).workload_key() == parse_spec(op, VALID[op]).workload_key()


@pytest.mark.parametrize("op", OPS)
def test_key_changes_with_every_param(op: str) -> None:
    keys = {"base": parse_spec(op, VALID[op]).workload_key()}
    for field, value in CHANGED[op].items():
        assert value != VALID[op][field]
        keys[field] = parse_spec(op, with_(op, **{field: value})).workload_key()
    assert set(CHANGED[op]) == set(VALID[op])  # every field is exercised
    assert len(set(keys.values())) == len(keys), keys


@pytest.mark.parametrize("op", OPS)
def test_key_is_sha256_hex_of_canonical_json(op: str) -> None:
    spec = parse_spec(op, VALID[op])
    key = spec.workload_key()
    assert re.fullmatch(r"[0-9a-f]{64}", key)
    assert key == hashlib.sha256(spec.canonical_json().encode()).hexdigest()
    assert key == spec.workload_key()


def test_op_name_is_part_of_the_key() -> None:
    scan = parse_spec("mamba2_chunk_scan", MAMBA2)
    state = parse_spec("mamba2_chunk_state", MAMBA2)
    assert scan.params() == state.params()  # states_in_fp32 left out at its default
    assert scan.workload_key() != state.workload_key()


def _assert_sorted_everywhere(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert keys == sorted(keys), keys
    return dict(pairs)


@pytest.mark.parametrize("op", OPS)
def test_canonical_json_has_sorted_keys_and_no_whitespace(op: str) -> None:
    text = parse_spec(op, VALID[op]).canonical_json()
    assert not re.search(r"\s", text)
    decoded = json.loads(text, object_pairs_hook=_assert_sorted_everywhere)
    assert decoded == {"op": op, "params": parse_spec(op, VALID[op]).params()}
    assert VALID[op].items() <= decoded["params"].items()  # plus the defaults left out


@pytest.mark.parametrize("op", OPS)
def test_spec_round_trips_through_model_dump_and_json(op: str) -> None:
    spec = parse_spec(op, VALID[op])
    again = parse_spec(op, spec.model_dump())
    assert again == spec
    assert again.workload_key() == spec.workload_key()
    # As an API request body arrives: through JSON text.
    from_json = parse_spec(op, json.loads(json.dumps(spec.params())))
    assert from_json.workload_key() == spec.workload_key()


# --- 3. spec facts -----------------------------------------------------------------------


def _tensor_table(spec: OperatorSpec) -> dict[str, tuple[tuple[int, ...], str, str]]:
    return {t.name: (t.shape, t.dtype, t.role) for t in spec.tensors()}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gemm_tensors_follow_the_artifact_contract(dtype: str) -> None:
    kn = GemmSpec(m=4000, n=6000, k=2000, dtype=dtype, b_layout="kn")
    nk = GemmSpec(m=4000, n=6000, k=2000, dtype=dtype, b_layout="nk")
    assert _tensor_table(kn) == {
        "a": ((4000, 2000), dtype, "input"),
        "b": ((2000, 6000), dtype, "input"),
        "c": ((4000, 6000), dtype, "output"),
    }
    assert _tensor_table(nk)["b"] == ((6000, 2000), dtype, "input")
    assert [t.name for t in kn.tensors()] == ["a", "b", "c"]
    assert kn.tensors()[0].size_bytes == 4000 * 2000 * 2


def test_attention_tensors_follow_the_artifact_contract() -> None:
    spec = AttentionSpec(
        batch=2, heads=32, kv_heads=8, seq_q=3000, seq_kv=1024, head_dim=64, dtype="bfloat16"
    )
    q_shape, kv_shape = (2, 3000, 32, 64), (2, 1024, 8, 64)
    assert _tensor_table(spec) == {
        "q": (q_shape, "bfloat16", "input"),
        "k": (kv_shape, "bfloat16", "input"),
        "v": (kv_shape, "bfloat16", "input"),
        "o": (q_shape, "bfloat16", "output"),
        "lse": ((2, 32, 3000), "float32", "output"),
    }
    sdpa = spec.model_copy(update={"layout": "bhsd"})
    assert _tensor_table(sdpa)["q"] == ((2, 32, 3000, 64), "bfloat16", "input")
    assert _tensor_table(sdpa)["k"] == ((2, 8, 1024, 64), "bfloat16", "input")


MAMBA_SMALL = {
    "batch": 2,
    "seqlen": 1024,
    "nheads": 8,
    "headdim": 64,
    "dstate": 128,
    "ngroups": 2,
    "chunk_size": 256,
    "dtype": "bfloat16",
}


def test_chunk_state_tensors_follow_the_artifact_contract() -> None:
    spec = Mamba2ChunkStateSpec(**MAMBA_SMALL)
    per_chunk = (2, 8, 4, 256)  # batch, nheads, nchunks, chunk_size
    assert _tensor_table(spec) == {
        "b": ((2, 1024, 2, 128), "bfloat16", "input"),
        "x": ((2, 1024, 8, 64), "bfloat16", "input"),
        "dt": (per_chunk, "float32", "input"),
        "dA_cumsum": (per_chunk, "float32", "input"),
        "states": ((2, 4, 8, 64, 128), "float32", "output"),
    }


def test_chunk_scan_tensors_follow_the_artifact_contract() -> None:
    spec = Mamba2ChunkScanSpec(**MAMBA_SMALL)
    table = _tensor_table(spec)
    per_chunk = (2, 8, 4, 256)
    assert list(table) == ["cb", "x", "dt", "dA_cumsum", "c", "states", "D", "out"]
    assert table["cb"] == ((2, 4, 2, 256, 256), "float32", "input")
    assert table["x"] == ((2, 1024, 8, 64), "bfloat16", "input")
    assert table["dt"] == (per_chunk, "float32", "input")
    assert table["dA_cumsum"] == (per_chunk, "float32", "input")
    assert table["c"] == ((2, 1024, 2, 128), "bfloat16", "input")
    assert table["states"][0] == (2, 4, 8, 64, 128)
    assert table["states"][2] == "input"
    assert table["D"] == ((8,), "float32", "input")
    assert table["out"] == ((2, 1024, 8, 64), "bfloat16", "output")


@pytest.mark.parametrize("op", OPS)
def test_inputs_come_before_outputs_and_bytes_add_up(op: str) -> None:
    spec = parse_spec(op, VALID[op])
    roles = [t.role for t in spec.tensors()]
    assert "output" in roles
    assert roles == sorted(roles, key=lambda r: r == "output")
    total = 0
    for tensor in spec.tensors():
        count = 1
        for extent in tensor.shape:
            count *= extent
        total += count * (4 if tensor.dtype == "float32" else 2)
    assert spec.min_bytes() == total
    assert spec.footprint_bytes() >= spec.min_bytes()


@pytest.mark.parametrize(("m", "n", "k"), GEMM_SHAPES)
def test_gemm_flops_are_2mnk(m: int, n: int, k: int) -> None:
    assert GemmSpec(m=m, n=n, k=k).flops() == 2 * m * n * k


@pytest.mark.parametrize("seq", [1, 2, 512, 3000, 8192])
def test_causal_attention_does_s_plus_1_over_2s_of_the_work(seq: int) -> None:
    params = {**ATTENTION, "seq_q": seq, "seq_kv": seq}
    full = AttentionSpec(**params).flops()
    causal = AttentionSpec(**{**params, "causal": True}).flops()
    assert full == 4 * 1 * 32 * seq * seq * 128
    assert causal / full == pytest.approx((seq + 1) / (2 * seq), rel=1e-12)


@pytest.mark.parametrize(("seq_q", "seq_kv"), [(5, 3), (3, 5), (4, 4), (7, 1), (1, 7)])
def test_causal_attention_counts_top_left_aligned_pairs(seq_q: int, seq_kv: int) -> None:
    # Query i sees keys 0..i (top-left aligned, as PyTorch SDPA), 2 matmuls, 2 flops per MAC.
    pairs = sum(1 for i in range(seq_q) for j in range(seq_kv) if j <= i)
    spec = AttentionSpec(
        batch=2, heads=4, kv_heads=2, seq_q=seq_q, seq_kv=seq_kv, head_dim=16, causal=True
    )
    assert spec.flops() == 4 * 2 * 4 * pairs * 16


def test_chunk_state_flops_count_one_mma_per_step() -> None:
    spec = Mamba2ChunkStateSpec(**MAMBA_SMALL)
    # states[p,n] = Σ_l x[l,p] w[l] b[l,n]: headdim x dstate MACs per step, per head.
    assert spec.flops() == 2 * 2 * 8 * 1024 * 64 * 128


def test_chunk_scan_flops_count_state_term_and_causal_intra_chunk_term() -> None:
    small = {**MAMBA_SMALL, "seqlen": 64, "chunk_size": 16, "headdim": 16, "dstate": 32}
    spec = Mamba2ChunkScanSpec(**small)
    nchunks = 64 // 16
    per_chunk = 0
    for l in range(16):  # noqa: E741 - the module docstring's index names
        for _p in range(16):
            per_chunk += 2 * 32  # Σ_n c[l,n] states[p,n]
            per_chunk += 2 * (l + 1)  # Σ_{s<=l} cb[l,s] ... x[s,p]
            per_chunk += 2  # + D[h] x[l,p]
    assert spec.flops() == 2 * 8 * nchunks * per_chunk


@pytest.mark.parametrize("op", OPS)
def test_flops_are_positive(op: str) -> None:
    assert parse_spec(op, VALID[op]).flops() > 0


def test_check_fits_rejects_what_exceeds_an_a100_but_fits_an_h200() -> None:
    # a: 2**35 elements (64 GiB), b: 2**29 (1 GiB), c: 2**34 (32 GiB) -> 97 GiB in fp16.
    spec = GemmSpec(m=2**20, n=2**14, k=2**15)
    assert spec.footprint_bytes() == 97 * 2**30
    spec.check_fits(H200)
    for device in (A100_SXM, H100_SXM):
        with pytest.raises(SpecError) as info:
            spec.check_fits(device)
        assert info.value.field == "params"
        assert device.name in str(info.value)
        assert "97.0 GiB" in str(info.value)


@pytest.mark.parametrize("device", CATALOG.values(), ids=CATALOG.keys())
@pytest.mark.parametrize(("op", "params"), [
    ("gemm", {"m": 128, "n": 4096, "k": 4096, "dtype": "float8_e5m2", "b_layout": "nk"}),
    ("attention", {"batch": 1, "heads": 8, "kv_heads": 8, "seq_q": 512, "seq_kv": 512,
                   "head_dim": 128, "causal": False, "dtype": "float8_e4m3"}),
])
def test_8_bit_floats_are_refused_where_the_tensor_cores_cannot_multiply_them(
        device, op: str, params: dict[str, Any]) -> None:
    """GEMMs wherever mma multiplies 8-bit floats (sm_89, sm_90); attention, whose FP8
    kernel is written for the warpgroup MMA, on Hopper alone."""
    spec = parse_spec(op, params)
    if device in (H200, H100_SXM) or (op == "gemm" and device in (L40S, RTX_4090)):
        spec.check_fits(device)
        return
    assert device in (A100_SXM, A10, L40S, RTX_4090) or device.arch == "sm_86"
    with pytest.raises(SpecError) as info:
        spec.check_fits(device)
    assert info.value.field == "dtype"
    assert params["dtype"] in str(info.value) and device.name in str(info.value)


def test_check_fits_accepts_a_small_workload_everywhere() -> None:
    spec = GemmSpec(m=128, n=128, k=128)
    for device in (A100_SXM, H100_SXM, H200):
        spec.check_fits(device)
