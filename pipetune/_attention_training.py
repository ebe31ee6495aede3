"""Attention that trains: the tuned forward as a custom operator with a registered autograd
formula, whose backward is the tuned backward kernel where the cache holds one.

Two ``torch.library`` operators, registered once per process:

- ``pipetune::attention_forward(q, k, v, causal, forward, backward) -> (o, lse)`` runs the
  tuned forward kernel named by ``forward`` (a key of the kernels registered here) and
  keeps ``o`` and ``lse`` for the backward;
- ``pipetune::attention_backward(q, k, v, o, lse, do, causal, backward) -> (dq, dk, dv)``
  runs the tuned backward kernel ``backward`` names, or, without one, the backward's
  formulas in fp32 query block by query block (the softmax recomputed from ``lse``).

In eager mode a missing backward kernel is SDPA's instead: the forward recomputed by
``scaled_dot_product_attention`` under autograd and differentiated (its fused backward,
faster than the formulas); traced by ``torch.compile`` it is the opaque operator above.
Both operators have fake implementations, so ``torch.compile(fullgraph=True)`` traces
them, and they allocate nothing the caller keeps, so CUDA graphs capture them. Tensors
are (batch, heads, seq, head_dim), as SDPA takes them; k and v may have fewer heads (GQA).
"""

from __future__ import annotations

import math
from typing import Any

from pipetune._kernel_registry import KERNELS, NO_KERNEL, register

#: fp32 scores materialised at once by the formulas (heads x query block x keys).
_BLOCK_ELEMENTS = 1 << 26


def attention(q: Any, k: Any, v: Any, causal: bool, forward: str, backward: str) -> Any:
    """``o`` of the tuned forward ``forward`` (a key of :data:`KERNELS`), differentiable:
    its gradients from the tuned backward ``backward`` (or :data:`NO_KERNEL`)."""
    forward_op = (_OPERATORS or operators())[0]
    return forward_op(q, k, v, causal, forward, backward)[0]


#: The registered operators (a plain global, which a ``torch.compile`` trace reads).
_OPERATORS: list[Any] = []


def operators() -> tuple[Any, Any]:
    """The two operators, registered on first use (before ``torch.compile`` traces a
    caller: registering inside a trace is refused)."""
    if not _OPERATORS:
        _OPERATORS.extend(_register())
    return _OPERATORS[0], _OPERATORS[1]


def _register() -> tuple[Any, Any]:
    import torch

    @torch.library.custom_op("pipetune::attention_forward", mutates_args=(), schema=(
        "(Tensor q, Tensor k, Tensor v, bool causal, str forward, str backward) "
        "-> (Tensor, Tensor)"))
    def forward_op(q: Any, k: Any, v: Any, causal: bool, forward: str,
                   backward: str) -> tuple[Any, Any]:
        o, lse = KERNELS[forward](q, k, v)[:2]
        return o, lse

    @forward_op.register_fake
    def _(q: Any, k: Any, v: Any, causal: bool, forward: str, backward: str) -> Any:
        return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)

    @torch.library.custom_op("pipetune::attention_backward", mutates_args=(), schema=(
        "(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor do, bool causal, "
        "str backward) -> (Tensor, Tensor, Tensor)"))
    def backward_op(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, causal: bool,
                    backward: str) -> tuple[Any, Any, Any]:
        if backward != NO_KERNEL:
            dq, dk, dv = KERNELS[backward](q, k, v, o, lse, do)[:3]
            return dq, dk, dv
        return formulas(q, k, v, o, lse, do, causal)

    @backward_op.register_fake
    def _(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, causal: bool,
          backward: str) -> Any:
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, Any]) -> None:
        q, k, v, causal, _, backward = inputs
        ctx.save_for_backward(q, k, v, *output)
        ctx.causal, ctx.backward = causal, backward

    def gradients(ctx: Any, do: Any, _dlse: Any) -> tuple[Any, ...]:
        q, k, v, o, lse = ctx.saved_tensors
        do = do.contiguous()
        if ctx.backward == NO_KERNEL and not torch.compiler.is_compiling():
            dq, dk, dv = sdpa_gradients(q, k, v, do, ctx.causal)
        else:
            dq, dk, dv = backward_op(q, k, v, o, lse, do, ctx.causal, ctx.backward)
        return dq, dk, dv, None, None, None

    forward_op.register_autograd(gradients, setup_context=setup_context)
    return forward_op, backward_op


def sdpa_gradients(q: Any, k: Any, v: Any, do: Any, causal: bool) -> tuple[Any, Any, Any]:
    """SDPA's gradients of ``(q, k, v)`` for ``do``: its forward again, differentiated."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    with torch.enable_grad():
        leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]
        out = scaled_dot_product_attention(*leaves, is_causal=causal,
                                           enable_gqa=k.shape[1] != q.shape[1])
        dq, dk, dv = torch.autograd.grad(out, leaves, do)
    return dq, dk, dv


def formulas(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any,
             causal: bool) -> tuple[Any, Any, Any]:
    """dq, dk, dv by the backward's formulas in fp32 (the softmax from ``lse``), a block of
    queries at a time; a kv head's dk and dv sum its group's query heads."""
    import torch

    batch, heads, seq_q, head_dim = q.shape
    kv_heads, seq_kv = k.shape[1], k.shape[2]
    group = heads // kv_heads
    scale = 1.0 / math.sqrt(head_dim)
    keys, values = (x.float().repeat_interleave(group, dim=1) for x in (k, v))
    dq = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    dk = torch.zeros(keys.shape, dtype=torch.float32, device=q.device)
    dv = torch.zeros_like(dk)
    block = max(1, _BLOCK_ELEMENTS // max(1, batch * heads * seq_kv))
    for start in range(0, seq_q, block):
        rows = slice(start, min(seq_q, start + block))
        qb, ob, dob = (x[:, :, rows].float() for x in (q, o, do))
        p = torch.exp(qb @ keys.transpose(-1, -2) * scale - lse[:, :, rows, None])
        if causal:
            hidden = (torch.arange(seq_kv, device=q.device)[None, :]
                      > torch.arange(rows.start, rows.stop, device=q.device)[:, None])
            p = p.masked_fill(hidden, 0.0)
        dv += p.transpose(-1, -2) @ dob
        ds = p * (dob @ values.transpose(-1, -2) - (dob * ob).sum(-1, keepdim=True))
        dq[:, :, rows] = ds @ keys * scale
        dk += ds.transpose(-1, -2) @ qb * scale
    shape = (batch, kv_heads, group, seq_kv, head_dim)
    return (dq.to(q.dtype), dk.view(shape).sum(2).to(k.dtype), dv.view(shape).sum(2).to(v.dtype))


__all__ = ["KERNELS", "NO_KERNEL", "attention", "formulas", "operators", "register",
           "sdpa_gradients"]
