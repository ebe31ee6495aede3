"""fp32 reference of the attention backward: dq, dk, dv from q, k, v, the forward's o and
log-sum-exp and dO, as a kernel computes them (the softmax recomputed from lse, the
forward's o read for ``D = rowsum(dO o)``), one batch element and a few heads at a time.

Per query head h (its kv head ``h // group``), with ``scale = 1 / sqrt(d)``:
``P = exp(q kᵀ scale - lse)`` (zero where causal masks key j > query i),
``dv += Pᵀ dO``, ``dP = dO vᵀ``, ``dS = P (dP - rowsum(dO o))``, ``dq = dS k scale``,
``dk += dSᵀ q scale``; a kv head's dk and dv sum its group's query heads.
"""

from __future__ import annotations

import math
from typing import Any

#: Largest fp32 score block (heads x seq_q x seq_kv) materialised at once.
_BLOCK_ELEMENTS = 1 << 26


def attention_backward_reference(xp: Any, q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any,
                                 causal: bool) -> tuple[Any, Any, Any]:
    """q, o, do (B, Sq, H, D), k, v (B, Skv, KVH, D), lse (B, H, Sq) -> dq (B, Sq, H, D),
    dk, dv (B, Skv, KVH, D), all float32."""
    batch, seq_q, heads, head_dim = q.shape
    seq_kv, kv_heads = k.shape[1], k.shape[2]
    group = heads // kv_heads
    scale = xp.float32(1.0 / math.sqrt(head_dim))
    dq = xp.zeros(q.shape, dtype=xp.float32)
    dk = xp.zeros(k.shape, dtype=xp.float32)
    dv = xp.zeros(v.shape, dtype=xp.float32)
    masked = (xp.arange(seq_kv)[None, :] > xp.arange(seq_q)[:, None]) if causal else None
    block = max(1, min(heads, _BLOCK_ELEMENTS // max(1, seq_q * seq_kv)))
    for b in range(batch):
        for h0 in range(0, heads, block):
            hs = list(range(h0, min(heads, h0 + block)))
            kv_of = [h // group for h in hs]
            qh, oh, doh = (x[b][:, hs].transpose(1, 0, 2) for x in (q, o, do))  # (h, Sq, D)
            kh, vh = (x[b][:, kv_of].transpose(1, 0, 2) for x in (k, v))  # (h, Skv, D)
            scores = xp.matmul(qh, kh.transpose(0, 2, 1)) * scale
            p = xp.exp(scores - lse[b, hs][..., None])
            if masked is not None:
                p = xp.where(masked[None], xp.float32(0.0), p)
            dp = xp.matmul(doh, vh.transpose(0, 2, 1))
            delta = (doh * oh).sum(axis=-1, keepdims=True)
            ds = p * (dp - delta)
            dq[b][:, hs] = (xp.matmul(ds, kh) * scale).transpose(1, 0, 2)
            dk_h = xp.matmul(ds.transpose(0, 2, 1), qh) * scale  # (h, Skv, D)
            dv_h = xp.matmul(p.transpose(0, 2, 1), doh)
            for i, kv in enumerate(kv_of):
                dk[b][:, kv] += dk_h[i]
                dv[b][:, kv] += dv_h[i]
    return dq, dk, dv


def attention_backward(xp: Any, params: dict[str, Any],
                       inputs32: dict[str, Any]) -> dict[str, Any]:
    """The operator's reference over its contract's tensors (bhsd ones as views)."""
    heads_second = params.get("layout", "bshd") == "bhsd"
    q, k, v, o, do = (inputs32[n].transpose(0, 2, 1, 3) if heads_second else inputs32[n]
                      for n in ("q", "k", "v", "o", "do"))
    dq, dk, dv = attention_backward_reference(xp, q, k, v, o, inputs32["lse"], do,
                                              bool(params["causal"]))
    if heads_second:
        dq, dk, dv = (x.transpose(0, 2, 1, 3) for x in (dq, dk, dv))
    return {"dq": dq, "dk": dk, "dv": dv}
