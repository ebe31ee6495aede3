"""The references and input builders, on NumPy, against naive float64 loops."""

from __future__ import annotations

import math

import naive_refs
import numpy as np
import pytest

from codegen.artifact import TensorArg
from workers import _dtypes
from workers.contract import check_tensor_args, contract
from workers.inputs import build_inputs
from workers.verify import error_bound, error_bounds, reference, rel_l2_error

MAMBA_PARAMS = {
    "batch": 2,
    "seqlen": 12,  # not a multiple of the chunk: the last chunk is ragged
    "nheads": 4,
    "headdim": 3,
    "dstate": 5,
    "ngroups": 2,
    "chunk_size": 8,
    "dtype": "float16",
}


def _inputs32(op: str, params: dict, seed: int = 0) -> tuple[dict, dict]:
    dtypes = {name: spec.default_dtype for name, spec in contract(op, params).items()}
    tensors = build_inputs(np, op, params, dtypes, seed)
    return {n: _dtypes.to_float32(np, t, dtypes[n]) for n, t in tensors.items()}, dtypes


@pytest.mark.parametrize("b_layout", ["kn", "nk"])
def test_gemm_reference_matches_naive_loop(b_layout: str) -> None:
    params = {"m": 5, "n": 7, "k": 9, "dtype": "bfloat16", "b_layout": b_layout}
    inputs, _ = _inputs32("gemm", params)
    (got,) = reference(np, "gemm", params, inputs).values()
    want = naive_refs.gemm(inputs["a"].astype(np.float64), inputs["b"].astype(np.float64), b_layout)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _naive_epilogue(x: float, bias: float, residual: float, epilogue: dict) -> float:
    """One output element's epilogue, in float64, from the formulas."""
    y = x * epilogue.get("scale", 1.0) + bias
    act = epilogue.get("act", "none")
    if act == "relu":
        y = max(y, 0.0)
    elif act == "gelu":
        y = 0.5 * y * (1.0 + math.erf(y / math.sqrt(2.0)))
    elif act == "gelu_tanh":
        y = 0.5 * y * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y ** 3)))
    elif act == "silu":
        y = y / (1.0 + math.exp(-y))
    return y + residual


@pytest.mark.parametrize("act", ["none", "relu", "gelu", "gelu_tanh", "silu"])
def test_gemm_epilogue_reference_matches_the_formulas(act: str) -> None:
    epilogue = {"bias": True, "act": act, "residual": True, "scale": -0.75}
    params = {"m": 5, "n": 8, "k": 9, "dtype": "float16", "epilogue": epilogue}
    inputs, _ = _inputs32("gemm", params)
    assert set(inputs) == {"a", "b", "bias", "residual"}
    (got,) = reference(np, "gemm", params, inputs).values()
    product = naive_refs.gemm(inputs["a"].astype(np.float64), inputs["b"].astype(np.float64),
                              "kn")
    want = np.array([[_naive_epilogue(product[i, j], float(inputs["bias"][j]),
                                      float(inputs["residual"][i, j]), epilogue)
                      for j in range(8)] for i in range(5)])
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "seq_q", "seq_kv", "causal"),
    [(4, 2, 5, 5, True), (4, 4, 3, 6, False), (6, 2, 6, 4, True), (2, 1, 4, 4, False)],
)
def test_attention_reference_matches_naive_loop(
    heads: int, kv_heads: int, seq_q: int, seq_kv: int, causal: bool
) -> None:
    params = {
        "batch": 2,
        "heads": heads,
        "kv_heads": kv_heads,
        "seq_q": seq_q,
        "seq_kv": seq_kv,
        "head_dim": 8,
        "causal": causal,
        "dtype": "float16",
    }
    inputs, _ = _inputs32("attention", params)
    got = reference(np, "attention", params, inputs)
    q, k, v = (inputs[n].astype(np.float64) for n in "qkv")
    o, lse = naive_refs.attention(q, k, v, causal)
    assert got["lse"].shape == (2, heads, seq_q)
    np.testing.assert_allclose(got["o"], o, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["lse"], lse, rtol=1e-5, atol=1e-5)


def test_chunk_state_reference_matches_naive_loop() -> None:
    inputs, _ = _inputs32("mamba2_chunk_state", MAMBA_PARAMS)
    got = reference(np, "mamba2_chunk_state", MAMBA_PARAMS, inputs)["states"]
    f64 = {n: t.astype(np.float64) for n, t in inputs.items()}
    want = naive_refs.chunk_state(f64["b"], f64["x"], f64["dt"], f64["dA_cumsum"])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("ngroups", "seqlen", "dtype"),
    [(1, 12, "float16"), (2, 12, "float16"), (4, 16, "bfloat16")],
)
def test_chunk_scan_reference_matches_naive_loop(ngroups: int, seqlen: int, dtype: str) -> None:
    params = {**MAMBA_PARAMS, "ngroups": ngroups, "seqlen": seqlen, "dtype": dtype}
    inputs, _ = _inputs32("mamba2_chunk_scan", params)
    got = reference(np, "mamba2_chunk_scan", params, inputs)["out"]
    f64 = {n: t.astype(np.float64) for n, t in inputs.items()}
    want = naive_refs.chunk_scan(
        f64["cb"], f64["x"], f64["dt"], f64["dA_cumsum"], f64["c"], f64["states"], f64["D"]
    )
    assert got.shape == (2, seqlen, 4, 3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_chunk_scan_skip_term_is_d_of_the_head_times_x() -> None:
    inputs, _ = _inputs32("mamba2_chunk_scan", MAMBA_PARAMS)
    with_d = reference(np, "mamba2_chunk_scan", MAMBA_PARAMS, inputs)["out"]
    without = reference(np, "mamba2_chunk_scan", MAMBA_PARAMS,
                        {**inputs, "D": np.zeros_like(inputs["D"])})["out"]
    skip = with_d - without
    np.testing.assert_allclose(skip, inputs["D"][:, None] * inputs["x"], rtol=1e-5, atol=1e-6)
    # Each head has its own weight, and it matters against the rest of the output.
    assert len(set(inputs["D"].tolist())) == MAMBA_PARAMS["nheads"]
    assert np.linalg.norm(skip) > 0.1 * np.linalg.norm(without)


def test_mamba2_inputs_are_realistic() -> None:
    inputs, _ = _inputs32("mamba2_chunk_scan", MAMBA_PARAMS)
    dt, da = inputs["dt"].reshape(2, 4, -1), inputs["dA_cumsum"]
    valid = dt[:, :, : MAMBA_PARAMS["seqlen"]]
    assert valid.min() >= 0.01 and valid.max() <= 0.1
    assert np.all(dt[:, :, MAMBA_PARAMS["seqlen"] :] == 0)  # padding adds nothing
    assert np.all(np.diff(da, axis=-1) <= 0) and np.all(da < 0)  # A < 0: decaying
    assert inputs["dt"].dtype == np.float32 and inputs["dA_cumsum"].dtype == np.float32
    # cb is C·Bᵀ per chunk, with the B that produced it unknown: check its structure.
    assert inputs["cb"].shape == (2, 2, 2, 8, 8)
    assert np.all(inputs["cb"][:, 1, :, 4:, :] == 0)  # rows past seqlen in the last chunk
    assert inputs["D"].shape == (4,) and inputs["D"].dtype == np.float32
    assert np.all(inputs["D"] != 0)


def test_chunk_scan_contract_lists_tensors_in_spec_order() -> None:
    from scheduler_search.ops import parse_spec

    params = {**MAMBA_PARAMS, "seqlen": 32, "headdim": 16, "dstate": 16, "chunk_size": 16}
    specs = contract("mamba2_chunk_scan", params)
    spec_tensors = parse_spec("mamba2_chunk_scan", params).tensors()
    assert list(specs) == [t.name for t in spec_tensors] == [
        "cb", "x", "dt", "dA_cumsum", "c", "states", "D", "out"]
    for t in spec_tensors:
        assert (specs[t.name].shape, specs[t.name].default_dtype, specs[t.name].role) == (
            tuple(t.shape), t.dtype, t.role), t.name
    assert specs["D"].dtypes == ("float32",) and specs["D"].shape == (4,)


@pytest.mark.parametrize(
    ("op", "params"),
    [
        ("gemm", {"m": 8, "n": 4, "k": 16, "dtype": "float16", "b_layout": "nk"}),
        (
            "attention",
            {
                "batch": 1,
                "heads": 2,
                "kv_heads": 1,
                "seq_q": 4,
                "seq_kv": 4,
                "head_dim": 8,
                "causal": True,
                "dtype": "bfloat16",
            },
        ),
        ("mamba2_chunk_state", MAMBA_PARAMS),
        ("mamba2_chunk_scan", MAMBA_PARAMS),
    ],
)
def test_inputs_follow_contract_and_are_never_zero(op: str, params: dict) -> None:
    specs = contract(op, params)
    dtypes = {name: spec.default_dtype for name, spec in specs.items()}
    first = build_inputs(np, op, params, dtypes, seed=7)
    again = build_inputs(np, op, params, dtypes, seed=7)
    other = build_inputs(np, op, params, dtypes, seed=8)
    assert set(first) == {n for n, s in specs.items() if s.role == "input"}
    for name, tensor in first.items():
        assert tensor.shape == specs[name].shape
        assert tensor.dtype == _dtypes.storage_dtype(np, dtypes[name])
        assert np.count_nonzero(tensor) > tensor.size // 2, name
        np.testing.assert_array_equal(tensor, again[name])  # seeded
        assert not np.array_equal(tensor, other[name])


def test_bfloat16_round_trip_and_nan_poison() -> None:
    values = np.array([1.0, -2.5, 3.140625, 1e-3, 65504.0], dtype=np.float32)
    stored = _dtypes.from_float32(np, values, "bfloat16")
    assert stored.dtype == np.uint16
    back = _dtypes.to_float32(np, stored, "bfloat16")
    np.testing.assert_allclose(back, values, rtol=2**-8)
    assert back[0] == 1.0 and back[1] == -2.5
    _dtypes.fill_nan(stored, "bfloat16")
    assert np.isnan(_dtypes.to_float32(np, stored, "bfloat16")).all()


@pytest.mark.parametrize(("dtype", "largest", "smallest"),
                         [("float8_e4m3", 448.0, 2.0 ** -9), ("float8_e5m2", 57344.0, 2.0 ** -16)])
def test_8_bit_floats_round_to_the_nearest_code_and_back(dtype: str, largest: float,
                                                         smallest: float) -> None:
    codes = np.arange(256, dtype=np.uint8)
    values = _dtypes.to_float32(np, codes, dtype)
    finite = np.isfinite(values)
    assert values[finite].max() == largest and values[finite & (values > 0)].min() == smallest
    assert values[0x38 if dtype == "float8_e4m3" else 0x3C] == 1.0
    # Every finite value is its own nearest code (+0 and -0 both read back as 0).
    again = _dtypes.to_float32(np, _dtypes.from_float32(np, values[finite], dtype), dtype)
    np.testing.assert_array_equal(again, values[finite])
    # Nearest (1 + step / 3: down), ties to the even code (1 + step / 2: down to 1.0;
    # 1 + 3 step / 2: up to 1 + 2 step), out of range saturates.
    step = 2.0 ** -3 if dtype == "float8_e4m3" else 2.0 ** -2
    cases = np.array([1 + step / 3, 1 + step / 2, 1 + 3 * step / 2, 1e6, -1e6],
                     dtype=np.float32)
    got = _dtypes.to_float32(np, _dtypes.from_float32(np, cases, dtype), dtype)
    np.testing.assert_array_equal(got, [1.0, 1.0, 1 + 2 * step, largest, -largest])
    stored = np.zeros(4, dtype=np.uint8)
    _dtypes.fill_nan(stored, dtype)
    assert np.isnan(_dtypes.to_float32(np, stored, dtype)).all()


def test_fp8_gemm_reference_scales_the_exact_product() -> None:
    params = {"m": 5, "n": 8, "k": 16, "dtype": "float8_e4m3", "b_layout": "nk",
              "epilogue": {"bias": True, "act": "relu"}}
    inputs, dtypes = _inputs32("gemm", params)
    assert dtypes["c"] == dtypes["bias"] == "bfloat16" and dtypes["scale_a"] == "float32"
    assert 0.5 <= inputs["scale_a"][0] < 2.0 and 0.5 <= inputs["scale_b"][0] < 2.0
    (got,) = reference(np, "gemm", params, inputs).values()
    product = naive_refs.gemm(inputs["a"].astype(np.float64), inputs["b"].astype(np.float64),
                              "nk") * float(inputs["scale_a"][0]) * float(inputs["scale_b"][0])
    want = np.maximum(product + inputs["bias"][None, :], 0.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("out_dtype", "bound"), [("bfloat16", 2e-2), ("float16", 1e-2)])
def test_fp8_gemm_outputs_are_held_to_their_output_types_bound(out_dtype: str,
                                                               bound: float) -> None:
    """The 8-bit inputs are exact in the reference, so the bound is the 16-bit output's
    (the worker checks every FP8 kernel with these bounds)."""
    params = {"m": 4, "n": 16, "k": 32, "dtype": "float8_e5m2", "b_layout": "nk",
              "out_dtype": out_dtype, "epilogue": {"residual": True}}
    specs = contract("gemm", params)
    dtypes = {name: spec.default_dtype for name, spec in specs.items()}
    assert dtypes["a"] == "float8_e5m2" and dtypes["c"] == out_dtype
    assert error_bounds(specs, dtypes) == {"c": bound}


def test_rel_error_and_bounds() -> None:
    ref = np.ones((4, 4), dtype=np.float32)
    assert rel_l2_error(np, ref, ref) == 0.0
    assert rel_l2_error(np, ref * 1.01, ref) == pytest.approx(0.01, rel=1e-4)
    poisoned = ref.copy()
    poisoned[0, 0] = np.nan
    assert np.isnan(rel_l2_error(np, poisoned, ref))
    assert error_bound({"a": "float16", "c": "float16"}) == 1e-2
    assert error_bound({"x": "bfloat16", "dt": "float32"}) == 2e-2


def test_attention_log_sum_exp_is_held_to_its_own_bound() -> None:
    params = {"batch": 1, "heads": 2, "kv_heads": 1, "seq_q": 3, "seq_kv": 3, "head_dim": 8,
              "causal": False, "dtype": "bfloat16"}
    specs = contract("attention", params)
    dtypes = {name: spec.default_dtype for name, spec in specs.items()}
    assert error_bounds(specs, dtypes) == {"o": 2e-2, "lse": 1e-3}
    gemm = {"m": 2, "n": 2, "k": 2, "dtype": "float16"}
    gemm_specs = contract("gemm", gemm)
    assert error_bounds(gemm_specs, {n: s.default_dtype for n, s in gemm_specs.items()}) == {
        "c": 1e-2}


def test_check_tensor_args_names_the_disagreement() -> None:
    params = {"m": 8, "n": 4, "k": 16, "dtype": "float16", "b_layout": "kn"}
    good = [
        TensorArg("a", "float16", (8, 16), "input"),
        TensorArg("c", "float16", (8, 4), "output"),
    ]
    assert check_tensor_args("gemm", params, good)["a"] == "float16"
    with pytest.raises(ValueError, match="'b' has shape"):
        check_tensor_args("gemm", params, [TensorArg("b", "float16", (4, 16), "input")])
    with pytest.raises(ValueError, match="dtype"):
        check_tensor_args("gemm", params, [TensorArg("a", "bfloat16", (8, 16), "input")])
    with pytest.raises(ValueError, match="not part of"):
        check_tensor_args("gemm", params, [TensorArg("z", "float16", (1,), "input")])
    scan = check_tensor_args(
        "mamba2_chunk_scan",
        MAMBA_PARAMS,
        [TensorArg("states", "float16", (2, 2, 4, 3, 5), "input")],
    )
    assert scan["states"] == "float16" and scan["out"] == "float16"


def test_an_operator_registers_its_own_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """References are a registry: a new operator adds one without touching this module,
    and an operator without one is refused by name."""
    from workers import verify

    monkeypatch.setattr(verify, "REFERENCES", dict(verify.REFERENCES))
    with pytest.raises(ValueError, match="toy_scale"):
        reference(np, "toy_scale", {}, {"x": np.ones(3, np.float32)})
    verify.register_reference(
        "toy_scale", lambda xp, params, inputs: {"y": inputs["x"] * params["factor"]})
    out = reference(np, "toy_scale", {"factor": 3.0}, {"x": np.arange(3, dtype=np.float32)})
    assert out["y"].tolist() == [0.0, 3.0, 6.0]


def test_chunk_scan_gate_and_per_channel_skip_follow_mamba_ssm() -> None:
    """z: the output (scan plus D x) times z sigmoid(z); d_per_channel: D[h, p] x[l, p]."""
    params = {**MAMBA_PARAMS, "z": True, "d_per_channel": True}
    inputs, _ = _inputs32("mamba2_chunk_scan", params)
    assert inputs["D"].shape == (MAMBA_PARAMS["nheads"], MAMBA_PARAMS["headdim"])
    assert inputs["z"].shape == inputs["x"].shape and np.abs(inputs["z"]).max() > 0
    got = reference(np, "mamba2_chunk_scan", params, inputs)["out"]
    ungated = reference(np, "mamba2_chunk_scan", {**params, "z": False},
                        {n: t for n, t in inputs.items() if n != "z"})["out"]
    z = inputs["z"].astype(np.float64)
    np.testing.assert_allclose(got, ungated * z / (1 + np.exp(-z)), rtol=1e-5, atol=1e-6)
    without = reference(np, "mamba2_chunk_scan", params,
                        {**inputs, "D": np.zeros_like(inputs["D"])})["out"]
    np.testing.assert_allclose(got - without, inputs["D"] * inputs["x"] * z / (1 + np.exp(-z)),
                               rtol=1e-4, atol=1e-6)


PACKED = {**MAMBA_PARAMS, "seqlen": 32, "seq_idx": True}


def test_sequence_ids_pack_sequences_one_starting_on_a_chunk() -> None:
    tensors = build_inputs(np, "mamba2_chunk_state", PACKED,
                           {n: s.default_dtype for n, s in contract(
                               "mamba2_chunk_state", PACKED).items()}, seed=4)
    ids = tensors["seq_idx"]
    assert ids.dtype == np.int32 and ids.shape == (2, 32)
    steps = np.diff(ids, axis=1)
    assert (ids[:, 0] == 0).all() and set(np.unique(steps)) <= {0, 1}
    chunk = PACKED["chunk_size"]
    for row in ids:
        starts = np.flatnonzero(np.diff(row)) + 1
        assert any(s % chunk == 0 for s in starts)  # a boundary on a chunk's start
    assert ids.max() >= 1


@pytest.mark.parametrize("pass_states", [False, True])
def test_chunk_states_forget_what_came_before_their_sequence(pass_states: bool) -> None:
    """Changing x before the last sequence of a row changes nothing of that row's final
    state (pass_states) or of its last chunk's own state; without seq_idx the final state
    does change."""
    params = {**PACKED, "pass_states": pass_states}
    inputs, _ = _inputs32("mamba2_chunk_state", params, seed=6)
    ids, chunk = inputs["seq_idx"], PACKED["chunk_size"]
    changed = {**inputs, "x": inputs["x"].copy()}
    for b in range(2):
        last_start = int(np.flatnonzero(ids[b] == ids[b, -1])[0])
        changed["x"][b, :last_start] += 1.0
    name = "final_states" if pass_states else "states"
    pick = (lambda t: t) if pass_states else (lambda t: t[:, -1])
    for packed, same in ((True, True), *(((False, False),) if pass_states else ())):
        p = params if packed else {**params, "seq_idx": False}
        given = inputs if packed else {n: v for n, v in inputs.items() if n != "seq_idx"}
        edited = changed if packed else {n: v for n, v in changed.items() if n != "seq_idx"}
        before = pick(reference(np, "mamba2_chunk_state", p, given)[name])
        after = pick(reference(np, "mamba2_chunk_state", p, edited)[name])
        assert np.allclose(before, after) == same
    assert chunk * 4 == PACKED["seqlen"]


def test_chunk_scan_state_term_stops_at_a_sequence_boundary() -> None:
    """A chunk's entering state reaches its rows of the sequence the previous chunk ended
    in, and none of the rows after a boundary inside the chunk."""
    inputs, _ = _inputs32("mamba2_chunk_scan", PACKED, seed=8)
    ids, chunk = inputs["seq_idx"], PACKED["chunk_size"]
    bumped = {**inputs, "states": inputs["states"] + 1.0}
    moved = (reference(np, "mamba2_chunk_scan", PACKED, bumped)["out"]
             != reference(np, "mamba2_chunk_scan", PACKED, inputs)["out"]).any(axis=(2, 3))
    before = np.concatenate([np.zeros((2, 1)), ids[:, chunk - 1::chunk][:, :-1]], axis=1)
    expected = ids == np.repeat(before, chunk, axis=1)
    np.testing.assert_array_equal(moved, expected)
    assert not expected.all()
