"""Attention that trains (``pipetune._attention_training``), on the CPU with PyTorch: the
tuned forward as an operator whose gradients are SDPA's in eager mode, the backward's
formulas under ``torch.compile(fullgraph=True)``, or a tuned backward kernel's where one
is registered; GQA and causal. A stand-in forward kernel computes (o, lse) as a tuned one
would. Skipped where PyTorch is not installed."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from pipetune import _attention_training as training  # noqa: E402


def _forward_kernel(calls: list[str]) -> Any:
    """(o, lse) of SDPA's math, as a tuned forward kernel returns them."""

    def run(q: Any, k: Any, v: Any) -> tuple[Any, Any]:
        calls.append("forward")
        group = q.shape[1] // k.shape[1]
        keys, values = (x.float().repeat_interleave(group, dim=1) for x in (k, v))
        scores = q.float() @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if CAUSAL[0]:
            hidden = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
            scores = scores.masked_fill(hidden, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
        return (torch.softmax(scores, dim=-1) @ values).to(q.dtype), lse

    run.artifact = SimpleNamespace(schedule_hash=f"forward-{len(training.KERNELS)}")
    return run


CAUSAL = [False]


def _inputs(dtype: Any = torch.float32, heads: int = 4, kv_heads: int = 2) -> list[Any]:
    generator = torch.Generator().manual_seed(5)
    shapes = [(2, heads, 24, 16), (2, kv_heads, 24, 16), (2, kv_heads, 24, 16)]
    return [torch.randn(s, generator=generator, dtype=torch.float32).to(dtype)
            .requires_grad_(True) for s in shapes]


def _sdpa_grads(q: Any, k: Any, v: Any, do: Any, causal: bool) -> tuple[Any, ...]:
    leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(
        *leaves, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    return torch.autograd.grad(out, leaves, do)


@pytest.mark.parametrize("causal", [False, True])
def test_eager_gradients_are_sdpa_s(causal: bool) -> None:
    CAUSAL[0] = causal
    calls: list[str] = []
    forward = training.register(_forward_kernel(calls))
    q, k, v = _inputs()
    o = training.attention(q, k, v, causal, forward, training.NO_KERNEL)
    do = torch.randn_like(o)
    o.backward(do)
    assert calls == ["forward"]
    for mine, theirs in zip((q.grad, k.grad, v.grad), _sdpa_grads(q, k, v, do, causal),
                            strict=True):
        assert torch.allclose(mine, theirs, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_the_formulas_are_sdpa_s_gradients(causal: bool) -> None:
    CAUSAL[0] = causal
    q, k, v = (x.detach() for x in _inputs())
    o, lse = _forward_kernel([])(q, k, v)
    do = torch.randn_like(o)
    mine = training.formulas(q, k, v, o, lse, do, causal)
    for a, b in zip(mine, _sdpa_grads(q, k, v, do, causal), strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    wrong = training.formulas(q, k, v, o, lse, do, not causal)
    assert not torch.allclose(wrong[0], mine[0], atol=1e-3)


def test_a_tuned_backward_kernel_gives_the_gradients_where_there_is_one() -> None:
    CAUSAL[0] = True
    calls: list[str] = []

    def backward_kernel(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any) -> tuple[Any, ...]:
        calls.append("backward")
        return training.formulas(q, k, v, o, lse, do, True)

    backward_kernel.artifact = SimpleNamespace(schedule_hash="backward-kernel")
    forward = training.register(_forward_kernel(calls))
    backward = training.register(backward_kernel)
    q, k, v = _inputs(heads=4, kv_heads=1)
    o = training.attention(q, k, v, True, forward, backward)
    do = torch.randn_like(o)
    o.backward(do)
    assert calls == ["forward", "backward"]
    for mine, theirs in zip((q.grad, k.grad, v.grad), _sdpa_grads(q, k, v, do, True),
                            strict=True):
        assert torch.allclose(mine, theirs, atol=1e-5, rtol=1e-4)


def test_compiled_with_the_whole_graph_it_trains_alike() -> None:
    """``torch.compile(fullgraph=True)`` traces the operators (fake implementations) and
    their autograd formula; its gradients are the eager ones."""
    CAUSAL[0] = False
    forward = training.register(_forward_kernel([]))
    training.operators()  # registered before the trace

    def step(q: Any, k: Any, v: Any) -> Any:
        return (training.attention(q, k, v, False, forward, training.NO_KERNEL) ** 2).sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    q, k, v = _inputs()
    compiled(q, k, v).backward()
    eager = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    step(*eager).backward()
    for mine, theirs in zip((q.grad, k.grad, v.grad), (x.grad for x in eager), strict=True):
        assert torch.allclose(mine, theirs, atol=1e-5, rtol=1e-4)
