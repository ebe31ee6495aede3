"""The attention backward's fp32 reference and its inputs: its dq, dk, dv are the
gradients of sum(o * dO) (central differences of the forward reference, in float64);
causal masks and grouped heads (dk, dv summed over a group) included; the inputs o and lse
a worker draws are the forward's of its q, k, v in either layout."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler_search.ops import parse_spec
from workers import _dtypes
from workers.backward_reference import attention_backward_reference
from workers.contract import contract
from workers.inputs import build_inputs
from workers.verify import attention_reference, reference


def _loss(q: Any, k: Any, v: Any, do: Any, causal: bool) -> float:
    o, _ = attention_reference(np, q, k, v, causal)
    return float((o * do).sum())


def _numerical(name: str, tensors: dict[str, Any], causal: bool, eps: float = 1e-4) -> Any:
    """d sum(o dO) / d tensors[name], by central differences, element by element."""
    grad = np.zeros_like(tensors[name])
    for index in np.ndindex(*tensors[name].shape):
        for sign in (1, -1):
            moved = {n: t.copy() for n, t in tensors.items()}
            moved[name][index] += sign * eps
            grad[index] += sign * _loss(moved["q"], moved["k"], moved["v"], moved["do"], causal)
    return grad / (2 * eps)


@pytest.mark.parametrize("causal", [False, True])
def test_the_reference_is_the_gradient_of_the_forward(causal: bool) -> None:
    rng = np.random.default_rng(7)
    # 4 query heads over 2 kv heads: dk and dv sum a group's two query heads.
    tensors = {"q": rng.standard_normal((1, 5, 4, 8)), "k": rng.standard_normal((1, 6, 2, 8)),
               "v": rng.standard_normal((1, 6, 2, 8)), "do": rng.standard_normal((1, 5, 4, 8))}
    o, lse = attention_reference(np, tensors["q"], tensors["k"], tensors["v"], causal)
    dq, dk, dv = attention_backward_reference(np, tensors["q"], tensors["k"], tensors["v"], o,
                                              lse.astype(np.float64), tensors["do"], causal)
    for name, analytic in (("q", dq), ("k", dk), ("v", dv)):
        numerical = _numerical(name, tensors, causal)
        assert np.allclose(analytic, numerical, rtol=1e-4, atol=1e-6), name


def test_a_wrong_gradient_is_caught() -> None:
    """The check has teeth: dv with the probabilities' transpose left out differs."""
    rng = np.random.default_rng(3)
    tensors = {n: rng.standard_normal((1, 4, 2, 8)) for n in ("q", "k", "v", "do")}
    o, lse = attention_reference(np, tensors["q"], tensors["k"], tensors["v"], False)
    _, _, dv = attention_backward_reference(np, tensors["q"], tensors["k"], tensors["v"], o,
                                            lse.astype(np.float64), tensors["do"], False)
    assert not np.allclose(dv, tensors["do"].sum(axis=1, keepdims=True), atol=1e-3)
    assert np.allclose(dv, _numerical("v", tensors, False), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_the_drawn_o_and_lse_are_the_forward_s_of_the_drawn_q_k_v(layout: str) -> None:
    params = parse_spec("attention_backward", {
        "batch": 2, "heads": 4, "kv_heads": 2, "seq_q": 24, "seq_kv": 40, "head_dim": 16,
        "causal": True, "dtype": "bfloat16", "layout": layout}).params()
    specs = contract("attention_backward", params)
    dtypes = {name: spec.default_dtype for name, spec in specs.items()}
    inputs = build_inputs(np, "attention_backward", params, dtypes, seed=11)
    as32 = {n: _dtypes.to_float32(np, x, dtypes[n]) for n, x in inputs.items()}
    forward = reference(np, "attention", {**params, "dtype": "bfloat16"},
                        {n: as32[n] for n in "qkv"})
    assert np.allclose(as32["lse"], forward["lse"], rtol=1e-6)
    assert np.allclose(as32["o"], forward["o"], atol=1e-2)  # o rounded to bf16
    assert np.abs(as32["do"]).max() > 0 and not np.allclose(as32["do"], as32["q"])
    grads = reference(np, "attention_backward", params, as32)
    assert {n: g.shape for n, g in grads.items()} == {
        "dq": specs["dq"].shape, "dk": specs["dk"].shape, "dv": specs["dv"].shape}
