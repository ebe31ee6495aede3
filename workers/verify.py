"""fp32 references per operator and the relative-L2 check.

References are written against an array module ``xp`` (CuPy on the worker, NumPy in CPU
tests) and take float32 copies of the very inputs the kernel saw, so the only error left
is the kernel's own arithmetic. Large problems are processed one batch element (and, for
attention, a few heads) at a time to bound the temporary memory.

Semantics:
  - gemm: ``c = a · b`` (``b`` given as (n, k) for ``b_layout="nk"``); on the GPU this is
    cuBLAS through ``cupy.matmul``; with an epilogue ``c = act(scale · a·b + bias) +
    residual``, ``gelu`` the exact one (erf), ``gelu_tanh`` its tanh form, ``silu`` x·σ(x);
    8-bit inputs (widened exactly) have their product times ``scale_a · scale_b`` first.
  - attention: ``o = softmax(q·kᵀ / sqrt(d), masked) · v`` per head, and per query row
    ``lse = log Σ_j exp(q·k_j / sqrt(d))`` over its unmasked keys; query head ``h`` reads
    kv head ``h // (heads / kv_heads)``; causal masks key ``j > i`` (top-left aligned);
    8-bit q, k, v are each times their per-tensor scale first.
  - attention_backward: dq, dk, dv (:mod:`workers.backward_reference`).
  - Mamba2, as ``mamba_ssm``'s ``_chunk_state_fwd`` / ``_chunk_scan_fwd``, group
    ``g(h) = h // (nheads / ngroups)``:
      states[b,c,h,p,n] = Σ_l B[b,cL+l,g,n] · x[b,cL+l,h,p]
                          · exp(dA[b,h,c,L−1] − dA[b,h,c,l]) · dt[b,h,c,l]
      with ``pass_states``, states[b,c] is the state entering chunk c: r_0 = initial_states
      (or 0), r_(c+1) = exp(dA[b,h,c,L−1]) · r_c + (chunk c's own state), final_states = r_C
      out[b,cL+l,h,p] = exp(dA[b,h,c,l]) · Σ_n C[b,cL+l,g,n] · states[b,c,h,p,n]
                        + Σ_{s≤l} cb[b,c,g,l,s] · exp(dA[b,h,c,l] − dA[b,h,c,s])
                          · dt[b,h,c,s] · x[b,cL+s,h,p]
                        + D[h] · x[b,cL+l,h,p]   (D[h,p] with ``d_per_channel``)
      and with ``z``, out times z · sigmoid(z); with ``seq_idx``, nothing crosses a
      sequence boundary (:mod:`workers.ssd_reference`: ``chunk_states``, ``state_passing``,
      ``chunk_scan``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from workers import _dtypes
from workers.backward_reference import attention_backward
from workers.inputs import pad_seq
from workers.ssd_reference import chunk_cb, chunk_scan, chunk_states, state_passing

# Largest fp32 score block (heads x seq_q x seq_kv) materialised at once by the attention
# reference.
_ATTENTION_BLOCK_ELEMENTS = 1 << 28


#: ``reference(xp, params, inputs32)``: an operator's fp32 outputs by contract name.
Reference = Callable[[Any, dict[str, Any], dict[str, Any]], dict[str, Any]]


def _gemm(xp: Any, params: dict[str, Any], inputs32: dict[str, Any]) -> dict[str, Any]:
    c = gemm_reference(xp, inputs32["a"], inputs32["b"], params.get("b_layout", "kn"))
    if "scale_a" in inputs32:  # 8-bit inputs: per-tensor scales, then the epilogue
        c = c * (inputs32["scale_a"][0] * inputs32["scale_b"][0])
    return {"c": epilogue_reference(xp, c, params.get("epilogue") or {}, inputs32)}


def _attention(xp: Any, params: dict[str, Any], inputs32: dict[str, Any]) -> dict[str, Any]:
    # The reference works on (batch, seq, heads, head_dim); bhsd tensors are views of it.
    heads_second = params.get("layout", "bshd") == "bhsd"
    # 8-bit inputs: each times its per-tensor scale, in fp32.
    scaled = {n: inputs32[n] * inputs32[f"{n}_scale"][0] if f"{n}_scale" in inputs32
              else inputs32[n] for n in "qkv"}
    q, k, v = (scaled[n].transpose(0, 2, 1, 3) if heads_second else scaled[n] for n in "qkv")
    o, lse = attention_reference(xp, q, k, v, bool(params["causal"]))
    return {"o": o.transpose(0, 2, 1, 3) if heads_second else o, "lse": lse}


def _chunk_state(xp: Any, params: dict[str, Any], inputs32: dict[str, Any]) -> dict[str, Any]:
    seq_idx = inputs32.get("seq_idx")
    b, x, dt, da = (inputs32[n] for n in ("b", "x", "dt", "dA_cumsum"))
    if seq_idx is None:
        states = chunk_state_reference(xp, b, x, dt, da)
    else:
        states = chunk_states(xp, x, b, dt, da, seq_idx)
    if not params.get("pass_states"):
        return {"states": states}
    entering, final = state_passing(
        xp, states, inputs32["dA_cumsum"][:, :, :, -1], inputs32.get("initial_states"),
        seq_idx, params["chunk_size"])
    return {"states": entering, "final_states": final}


def _chunk_scan(xp: Any, params: dict[str, Any], inputs32: dict[str, Any]) -> dict[str, Any]:
    seq_idx = inputs32.get("seq_idx")
    cb = (inputs32["cb"] if "cb" in inputs32 else  # else computed in the tile, from b
          chunk_cb(xp, inputs32["c"], inputs32["b"], params["chunk_size"], seq_idx))
    return {"out": chunk_scan(
        xp, cb, inputs32["x"], inputs32["dt"], inputs32["dA_cumsum"],
        inputs32["c"], inputs32["states"], inputs32["D"], inputs32.get("z"), seq_idx)}


#: Operator -> its fp32 reference (:func:`register_reference` adds one).
REFERENCES: dict[str, Reference] = {
    "gemm": _gemm,
    "attention": _attention,
    "attention_backward": attention_backward,
    "mamba2_chunk_state": _chunk_state,
    "mamba2_chunk_scan": _chunk_scan,
}


def register_reference(op: str, reference_fn: Reference) -> None:
    """Make ``reference_fn`` the fp32 reference of operator ``op`` (a new operator
    registers its own; a second registration of one replaces it)."""
    REFERENCES[op] = reference_fn


def reference(
    xp: Any, op: str, params: dict[str, Any], inputs32: dict[str, Any]
) -> dict[str, Any]:
    """The fp32 outputs of ``op`` (by contract name) for float32 ``inputs32``."""
    if op not in REFERENCES:
        raise ValueError(f"no reference for operator {op!r}")
    return REFERENCES[op](xp, params, inputs32)


def gemm_reference(xp: Any, a: Any, b: Any, b_layout: str) -> Any:
    return xp.matmul(a, b if b_layout == "kn" else b.T)


def epilogue_reference(xp: Any, acc: Any, epilogue: dict[str, Any],
                       inputs32: dict[str, Any]) -> Any:
    """A GEMM's fused epilogue on its fp32 product ``acc`` (see the module docstring)."""
    out = acc * xp.float32(epilogue.get("scale", 1.0))
    if epilogue.get("bias"):
        out = out + inputs32["bias"][None, :]
    act = epilogue.get("act", "none")
    if act == "relu":
        out = xp.maximum(out, xp.float32(0.0))
    elif act == "gelu":
        out = out * xp.float32(0.5) * (xp.float32(1.0) + _erf(xp, out / xp.float32(math.sqrt(2))))
    elif act == "gelu_tanh":
        inner = xp.float32(math.sqrt(2 / math.pi)) * (out + xp.float32(0.044715) * out ** 3)
        out = xp.float32(0.5) * out * (xp.float32(1.0) + xp.tanh(inner))
    elif act == "silu":
        out = out / (xp.float32(1.0) + xp.exp(-out))
    if epilogue.get("residual"):
        out = out + inputs32["residual"]
    return out.astype(xp.float32)


def _erf(xp: Any, x: Any) -> Any:
    """The error function elementwise: CuPy's, or ``math.erf`` over a NumPy array."""
    if xp.__name__ == "cupy":
        from cupyx.scipy.special import erf

        return erf(x)
    return xp.vectorize(math.erf, otypes=[xp.float32])(x)


def attention_reference(xp: Any, q: Any, k: Any, v: Any, causal: bool) -> tuple[Any, Any]:
    """q (B, Sq, H, D), k / v (B, Skv, KVH, D) -> o (B, Sq, H, D) and the log-sum-exp of
    each row's scaled scores, lse (B, H, Sq), all float32."""
    batch, seq_q, heads, head_dim = q.shape
    seq_kv, kv_heads = k.shape[1], k.shape[2]
    group = heads // kv_heads
    scale = xp.float32(1.0 / math.sqrt(head_dim))
    kv_of_head = xp.arange(heads) // group
    heads_per_block = max(1, min(heads, _ATTENTION_BLOCK_ELEMENTS // max(1, seq_q * seq_kv)))
    out = xp.empty_like(q)
    lse = xp.empty((batch, heads, seq_q), dtype=xp.float32)
    if causal:
        masked = xp.arange(seq_kv)[None, :] > xp.arange(seq_q)[:, None]
    for b in range(batch):
        for h0 in range(0, heads, heads_per_block):
            hs = slice(h0, min(heads, h0 + heads_per_block))
            qh = q[b, :, hs].transpose(1, 0, 2)  # (h, Sq, D)
            kh = k[b][:, kv_of_head[hs]].transpose(1, 2, 0)  # (h, D, Skv)
            vh = v[b][:, kv_of_head[hs]].transpose(1, 0, 2)  # (h, Skv, D)
            scores = xp.matmul(qh, kh) * scale
            if causal:
                scores = xp.where(masked[None], xp.float32(-xp.inf), scores)
            row_max = scores.max(axis=-1, keepdims=True)
            weights = xp.exp(scores - row_max)
            row_sum = weights.sum(axis=-1, keepdims=True)
            lse[b, hs] = (row_max + xp.log(row_sum))[..., 0]
            out[b, :, hs] = xp.matmul(weights / row_sum, vh).transpose(1, 0, 2)
    return out, lse


def chunk_state_reference(xp: Any, b_in: Any, x: Any, dt: Any, da_cumsum: Any) -> Any:
    """b (B, S, G, N), x (B, S, H, P), dt / dA_cumsum (B, H, C, L) -> states (B, C, H, P, N)."""
    batch, _, ngroups, dstate = b_in.shape
    nheads, headdim = x.shape[2], x.shape[3]
    nchunks, chunk = dt.shape[2], dt.shape[3]
    heads_per_group = nheads // ngroups
    states = xp.empty((batch, nchunks, nheads, headdim, dstate), dtype=xp.float32)
    for bi in range(batch):
        x_c = pad_seq(xp, x[bi : bi + 1], nchunks * chunk)[0].reshape(
            nchunks, chunk, nheads, headdim
        )
        b_c = pad_seq(xp, b_in[bi : bi + 1], nchunks * chunk)[0].reshape(
            nchunks, chunk, ngroups, dstate
        )
        decay = xp.exp(da_cumsum[bi, :, :, -1:] - da_cumsum[bi]) * dt[bi]  # (H, C, L)
        weighted_x = x_c * decay.transpose(1, 2, 0)[..., None]  # (C, L, H, P)
        for g in range(ngroups):
            hs = slice(g * heads_per_group, (g + 1) * heads_per_group)
            # (C, h, P, L) @ (C, 1, L, N) -> (C, h, P, N)
            states[bi, :, hs] = xp.matmul(
                weighted_x[:, :, hs].transpose(0, 2, 3, 1), b_c[:, None, :, g]
            )
    return states


def rel_l2_error(xp: Any, out32: Any, ref32: Any) -> float:
    """‖out − ref‖ / ‖ref‖ accumulated in float64; NaN if ``out`` has a non-finite value."""
    if not bool(xp.isfinite(out32).all()):
        return float("nan")
    diff = (out32 - ref32).ravel()
    ref = ref32.ravel()
    num = float(xp.sqrt(xp.sum(diff * diff, dtype=xp.float64)))
    den = float(xp.sqrt(xp.sum(ref * ref, dtype=xp.float64)))
    return num / den if den > 0 else num


def error_bound(dtypes: dict[str, str]) -> float:
    """The loosest per-dtype bound among the tensors a kernel touches."""
    return max(_dtypes.REL_ERROR_BOUND[d] for d in dtypes.values())


def error_bounds(specs: dict[str, Any], dtypes: dict[str, str]) -> dict[str, float]:
    """Each output's bound: its own where the contract sets one, else the loosest of the
    dtypes of the inputs and that output."""
    inputs = [dtypes[n] for n, s in specs.items() if s.role == "input"]
    bounds = {}
    for name, spec in specs.items():
        if spec.role == "output":
            loosest = max(_dtypes.REL_ERROR_BOUND[d] for d in (*inputs, dtypes[name]))
            bounds[name] = spec.rel_error_bound or loosest
    return bounds
