"""The SSD (Mamba2 chunked scan) reference: its five chunked stages give what a plain
token-by-token recurrence gives, whatever the chunk size, with upstream's semantics for
grouped B and C, D, the z gate, dt's bias, softplus and limits, initial and final states,
ragged last chunks and packed sequences (seq_idx)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from workers import ssd_reference
from workers.ssd_reference import (
    chunk_cb,
    chunk_cumsum,
    chunk_scan,
    chunk_states,
    ssd_dt,
    ssd_forward,
    state_passing,
)

HEADS, HEADDIM, DSTATE = 4, 8, 6


def _recurrence(x: Any, dt: Any, A: Any, B: Any, C: Any, D: Any = None, z: Any = None,
                dt_bias: Any = None, initial_states: Any = None, seq_idx: Any = None,
                dt_softplus: bool = False,
                dt_limit: tuple[float, float] = (0.0, math.inf)) -> tuple[Any, Any]:
    """The scan one token at a time in float64; the state restarts at zero where the
    sequence id changes, starting from initial_states under id 0."""
    batch, seqlen, nheads, headdim = x.shape
    groups = np.arange(nheads) // (nheads // B.shape[2])
    dt = dt + (0.0 if dt_bias is None else dt_bias)
    dt = np.clip(np.log1p(np.exp(dt)) if dt_softplus else dt, *dt_limit)
    out = np.zeros(x.shape)
    final = np.zeros((batch, nheads, headdim, B.shape[3]))
    for b in range(batch):
        state = np.zeros(final.shape[1:]) if initial_states is None else initial_states[b]
        current = 0
        for t in range(seqlen):
            if seq_idx is not None and seq_idx[b, t] != current:
                state, current = np.zeros(final.shape[1:]), seq_idx[b, t]
            step = dt[b, t][:, None, None]
            state = (np.exp(step * A[:, None, None]) * state
                     + step * x[b, t][:, :, None] * B[b, t][groups][:, None, :])
            out[b, t] = np.einsum("hpn,hn->hp", state, C[b, t][groups])
        final[b] = state
    if D is not None:
        out = out + x * (D[:, None] if D.ndim == 1 else D)
    return (out if z is None else out * z / (1.0 + np.exp(-z))), final


def _inputs(seed: int, seqlen: int, ngroups: int, D: str | None = None, z: bool = False,
            dt_bias: bool = False, initial_states: bool = False) -> dict[str, Any]:
    """Random float64 inputs, batch 2, with D per "head" or per "hp" (head, p) when asked,
    and the optional tensors named True. Raw dt is partly negative, so the default
    dt_limit's clamp at 0 matters."""
    rng = np.random.default_rng(seed)
    shape = (2, seqlen, HEADS, HEADDIM)
    inputs = {"x": rng.standard_normal(shape),
              "dt": rng.uniform(-0.3, 0.9, shape[:3]),
              "A": -rng.uniform(0.2, 1.5, HEADS),
              "B": rng.standard_normal((*shape[:2], ngroups, DSTATE)),
              "C": rng.standard_normal((*shape[:2], ngroups, DSTATE))}
    if D is not None:
        inputs["D"] = rng.standard_normal({"head": (HEADS,), "hp": (HEADS, HEADDIM)}[D])
    if z:
        inputs["z"] = rng.standard_normal(shape)
    if dt_bias:
        inputs["dt_bias"] = rng.uniform(-1.0, 0.5, HEADS)
    if initial_states:
        inputs["initial_states"] = rng.standard_normal((2, HEADS, HEADDIM, DSTATE))
    return inputs


def _packed(lengths_by_row: list[list[int]]) -> Any:
    """seq_idx (b, s) of rows packing sequences of these lengths, ids 0, 1, ... per row."""
    return np.array([np.repeat(np.arange(len(lengths)), lengths) for lengths in lengths_by_row],
                    dtype=np.int32)


CASES = {
    "one group, seqlen a multiple of the chunk": (
        _inputs(1, 64, 1), {}),
    "heads sharing 2 groups, D per head, z, ragged last chunk": (
        _inputs(2, 70, 2, D="head", z=True), {}),
    "D per (head, p), dt_bias, softplus, dt_limit, initial states": (
        _inputs(3, 53, 2, D="hp", dt_bias=True, initial_states=True),
        {"dt_softplus": True, "dt_limit": (0.1, 0.9)}),
    # Row 0: three sequences, one wholly inside a chunk; row 1: a boundary on a chunk edge.
    "packed sequences with every option": (
        {**_inputs(4, 70, 2, D="hp", z=True, dt_bias=True, initial_states=True),
         "seq_idx": _packed([[21, 9, 40], [32, 38]])},
        {"dt_softplus": True, "dt_limit": (0.05, 1.2)}),
}


@pytest.mark.parametrize("chunk_size", [16, 32])
@pytest.mark.parametrize("case", list(CASES))
def test_the_chunked_forward_is_the_token_by_token_recurrence(case: str, chunk_size: int) -> None:
    inputs, flags = CASES[case]
    out, final = ssd_forward(np, chunk_size=chunk_size, **inputs, **flags)
    want_out, want_final = _recurrence(**inputs, **flags)
    assert np.abs(want_out).max() > 0.1 and np.abs(want_final).max() > 0.1
    assert np.allclose(out, want_out, rtol=1e-9, atol=1e-10)
    assert np.allclose(final, want_final, rtol=1e-9, atol=1e-10)


def test_float32_inputs_give_float32_results_close_to_the_float64_recurrence() -> None:
    inputs, flags = CASES["packed sequences with every option"]
    as32 = {n: a.astype(np.float32) if a.dtype == np.float64 else a for n, a in inputs.items()}
    out, final = ssd_forward(np, chunk_size=16, **as32, **flags)
    want_out, want_final = _recurrence(**inputs, **flags)
    assert out.dtype == np.float32 and final.dtype == np.float32
    assert np.allclose(out, want_out, rtol=1e-4, atol=1e-4)
    assert np.allclose(final, want_final, rtol=1e-4, atol=1e-4)


def test_the_output_does_not_depend_on_the_chunk_size() -> None:
    inputs, flags = CASES["packed sequences with every option"]
    outs = [ssd_forward(np, chunk_size=size, **inputs, **flags) for size in (16, 32, 64)]
    for out, final in outs[1:]:
        assert np.allclose(out, outs[0][0], rtol=1e-10, atol=1e-12)
        assert np.allclose(final, outs[0][1], rtol=1e-10, atol=1e-12)


def test_initial_states_belong_to_the_sequence_with_id_0() -> None:
    """Upstream takes the id before the first chunk to be 0: a row whose ids start at 1
    ignores initial_states, one of all 0 is the unpacked scan from them."""
    inputs = _inputs(5, 40, 2, initial_states=True)
    no_init = {n: a for n, a in inputs.items() if n != "initial_states"}
    ones, zeros = np.ones((2, 40), np.int32), np.zeros((2, 40), np.int32)
    for seq_idx, same_as in ((ones, no_init), (zeros, inputs)):
        got = ssd_forward(np, chunk_size=16, seq_idx=seq_idx, **inputs)
        want = ssd_forward(np, chunk_size=16, **same_as)
        for g, w in zip(got, want, strict=True):
            assert np.allclose(g, w, rtol=1e-12, atol=1e-12)
    assert not np.allclose(ssd_forward(np, chunk_size=16, **no_init)[1],
                           ssd_forward(np, chunk_size=16, **inputs)[1])


def test_a_tail_with_a_negative_id_leaves_zero_final_states() -> None:
    """As upstream's chunk states, a chunk ending in a negative id contributes nothing to
    the state; the tokens before that tail are as in the recurrence."""
    inputs = _inputs(6, 50, 2, initial_states=True)
    seq_idx = np.concatenate([_packed([[20, 17], [37]]), np.full((2, 13), -1, np.int32)],
                             axis=1)
    out, final = ssd_forward(np, chunk_size=16, seq_idx=seq_idx, **inputs)
    want_out, _ = _recurrence(seq_idx=seq_idx, **inputs)
    assert np.allclose(out[:, :37], want_out[:, :37], rtol=1e-9, atol=1e-10)
    assert np.all(final == 0)


def test_dt_is_biased_softplused_then_clamped_by_default_at_zero() -> None:
    raw = np.array([[[-0.5, 0.3, 25.0]]], np.float32)
    assert np.array_equal(ssd_dt(np, raw), np.float32([[[0.0, 0.3, 25.0]]]))
    soft = ssd_dt(np, raw, dt_bias=np.float32([0.5, 0.0, 0.0]), dt_softplus=True,
                  dt_limit=(0.0, 30.0))
    assert soft.dtype == np.float32
    assert np.allclose(soft, [[[math.log(2.0), math.log1p(math.exp(0.3)), 25.0]]])
    assert np.allclose(ssd_dt(np, raw, dt_limit=(0.1, 1.0)), [[[0.1, 0.3, 1.0]]])


def test_each_stage_keeps_upstream_s_shapes() -> None:
    batch, seqlen, chunk_size, nchunks, ngroups = 2, 53, 16, 4, 2
    inputs = {n: a.astype(np.float32) for n, a in
              _inputs(7, seqlen, ngroups, D="hp", z=True, initial_states=True).items()}
    seq_idx = _packed([[30, 23], [53]])
    dt_chunked, dA_cumsum = chunk_cumsum(np, ssd_dt(np, inputs["dt"]), inputs["A"], chunk_size)
    assert dt_chunked.shape == dA_cumsum.shape == (batch, HEADS, nchunks, chunk_size)
    assert np.all(dt_chunked[:, :, -1, seqlen % chunk_size:] == 0)  # the ragged chunk's pad
    states = chunk_states(np, inputs["x"], inputs["B"], dt_chunked, dA_cumsum, seq_idx)
    assert states.shape == (batch, nchunks, HEADS, HEADDIM, DSTATE)
    prev, final = state_passing(np, states, dA_cumsum[..., -1], inputs["initial_states"],
                                seq_idx, chunk_size)
    assert prev.shape == states.shape and final.shape == (batch, HEADS, HEADDIM, DSTATE)
    assert np.array_equal(prev[:, 0], inputs["initial_states"])
    cb = chunk_cb(np, inputs["C"], inputs["B"], chunk_size, seq_idx)
    assert cb.shape == (batch, nchunks, ngroups, chunk_size, chunk_size)
    out = chunk_scan(np, cb, inputs["x"], dt_chunked, dA_cumsum, inputs["C"], prev,
                     inputs["D"], inputs["z"], seq_idx)
    assert out.shape == inputs["x"].shape
    assert all(a.dtype == np.float32 for a in (dA_cumsum, states, prev, final, cb, out))


def test_heads_not_a_multiple_of_groups_are_refused() -> None:
    inputs = _inputs(8, 20, 3)
    with pytest.raises(ValueError, match="g dividing h"):
        ssd_forward(np, chunk_size=16, **inputs)


def test_scanning_heads_in_blocks_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large inputs are scanned a few heads at a time: blocks of 3 of the 4 heads (the last
    one short) give the all-heads result."""
    inputs, flags = CASES["packed sequences with every option"]
    whole = ssd_forward(np, chunk_size=16, **inputs, **flags)
    nchunks = -(-inputs["x"].shape[1] // 16)
    monkeypatch.setattr(ssd_reference, "_BLOCK_ELEMENTS", 3 * nchunks * 16 * 16)
    blocked = ssd_forward(np, chunk_size=16, **inputs, **flags)
    for got, want in zip(blocked, whole, strict=True):
        assert np.array_equal(got, want)
