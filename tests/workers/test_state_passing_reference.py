"""The chunk state fused with the state passing, as the workers check it: the states
entering each chunk and the final state equal a step-by-step recurrence of the SSM state,
h_t = exp(dt_t A) h_(t-1) + dt_t x_t B_tᵀ, from given initial states (NumPy, float64)."""

from __future__ import annotations

import numpy as np

from workers.verify import reference

BATCH, CHUNKS, CHUNK, HEADS, GROUPS, HEADDIM, DSTATE = 2, 3, 8, 4, 2, 5, 6


def _inputs(rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
    seqlen = CHUNKS * CHUNK
    dt = rng.uniform(0.01, 0.2, (BATCH, HEADS, CHUNKS, CHUNK))
    a = -rng.uniform(0.5, 2.0, HEADS)
    inputs = {
        "b": rng.standard_normal((BATCH, seqlen, GROUPS, DSTATE)),
        "x": rng.standard_normal((BATCH, seqlen, HEADS, HEADDIM)),
        "dt": dt,
        "dA_cumsum": np.cumsum(dt * a[None, :, None, None], axis=-1),
        "initial_states": rng.standard_normal((BATCH, HEADS, HEADDIM, DSTATE)),
    }
    return {k: v.astype(np.float32) for k, v in inputs.items()}, a


def _recurrence(inputs: dict[str, np.ndarray], a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The state before each chunk's first step, and after the last step."""
    h = inputs["initial_states"].astype(np.float64)
    entering = np.zeros((BATCH, CHUNKS, HEADS, HEADDIM, DSTATE))
    for t in range(CHUNKS * CHUNK):
        c, position = divmod(t, CHUNK)
        if position == 0:
            entering[:, c] = h
        dt = inputs["dt"][:, :, c, position].astype(np.float64)  # (B, H)
        b = np.repeat(inputs["b"][:, t], HEADS // GROUPS, axis=1)  # (B, H, N)
        x = inputs["x"][:, t]  # (B, H, P)
        h = (np.exp(dt * a)[..., None, None] * h
             + (dt[..., None] * x)[..., None] * b[:, :, None, :])
    return entering, h


def test_states_entering_each_chunk_and_the_final_state_follow_the_recurrence() -> None:
    inputs, a = _inputs(np.random.default_rng(4))
    params = {"batch": BATCH, "seqlen": CHUNKS * CHUNK, "nheads": HEADS, "headdim": HEADDIM,
              "dstate": DSTATE, "ngroups": GROUPS, "chunk_size": CHUNK, "pass_states": True,
              "initial_states": True}
    out = reference(np, "mamba2_chunk_state", params, inputs)
    entering, final = _recurrence(inputs, a)
    np.testing.assert_allclose(out["states"], entering, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(out["final_states"], final, rtol=2e-4, atol=2e-4)
    # The first chunk is entered with the initial states, not zeros.
    assert np.abs(out["states"][:, 0]).max() > 0.5
    # Without the state passing, the same call gives each chunk's own state alone.
    alone = reference(np, "mamba2_chunk_state", {**params, "pass_states": False}, inputs)
    assert set(alone) == {"states"}
    assert not np.allclose(alone["states"][:, 1], out["states"][:, 2])
