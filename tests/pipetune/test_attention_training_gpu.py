"""Attention that trains, on a GPU: ``DropIns.attention`` with a tuned forward kernel
(generated here, FlashAttention-3's design, bhsd as SDPA takes it) gives SDPA's gradients
(no tuned backward is cached: SDPA's backward), and a small transformer block trained with
it tracks the same block trained with SDPA from the same seed (issue 49, items 4 and 5).

Run with ``pytest tests/pipetune -m gpu``; skipped without a GPU."""

from __future__ import annotations

from typing import Any

import pytest
from gpu import cuda_device_visible

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not cuda_device_visible(), reason="needs a CUDA GPU")]

SHAPE = {"batch": 2, "heads": 8, "kv_heads": 2, "seq_q": 256, "seq_kv": 256, "head_dim": 64}


def _drop_ins(causal: bool) -> Any:
    """Drop-ins whose cache holds the forward kernel of SHAPE (bf16, bhsd) alone."""
    import pipetune.torch as pt
    from codegen import render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from scheduler_search.space.designs import FLASH_ATTENTION_3
    from scheduler_search.sprogram import plan_sprogram

    params = {**SHAPE, "causal": causal, "dtype": "bfloat16", "layout": "bhsd"}
    spec = parse_spec("attention", params)
    device = get_device("h200")
    artifact = render(plan_sprogram(spec, device, {**FLASH_ATTENTION_3, "tile_q": 128}),
                      spec, device).to_dict()
    wanted = spec.params()
    return pt.DropIns(lookup=lambda op, p, _: artifact if op == "attention" and p == wanted
                      else None)


@pytest.mark.parametrize("causal", [False, True])
def test_tuned_attention_gives_sdpa_s_gradients(causal: bool) -> None:
    import torch

    drop = _drop_ins(causal)
    generator = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (torch.randn((SHAPE["batch"], h, SHAPE["seq_q"], SHAPE["head_dim"]),
                           generator=generator, device="cuda", dtype=torch.bfloat16)
               for h in (SHAPE["heads"], SHAPE["kv_heads"], SHAPE["kv_heads"]))
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    o = drop.attention(*leaves, is_causal=causal)
    assert o.grad_fn is not None
    do = torch.randn_like(o)
    o.backward(do)
    reference = [x.clone().requires_grad_(True) for x in (q, k, v)]
    expected = torch.nn.functional.scaled_dot_product_attention(
        *reference, is_causal=causal, enable_gqa=True)
    expected.backward(do)
    assert (o.float() - expected.float()).norm() / expected.float().norm() < 2e-2
    for mine, theirs in zip(leaves, reference, strict=True):
        error = (mine.grad.float() - theirs.grad.float()).norm() / theirs.grad.float().norm()
        assert error < 3e-2


def test_a_block_trained_with_it_tracks_sdpa() -> None:
    """Twenty Adam steps of an attention + MLP block from one seed, pipetune's attention
    against SDPA's: the losses fall, the first step's loss (forward only) is SDPA's within
    1%, and every later one is as near SDPA's as SDPA's own math backend is (bf16 training
    drifts apart from rounding alone: the loss nears zero and Adam scales small gradient
    differences up), with a 5% floor."""
    from torch.nn.attention import SDPBackend

    drop = _drop_ins(causal=True)
    losses = {name: _train(drop.attention if name == "pipetune" else _sdpa,
                           SDPBackend.MATH if name == "math" else None)
              for name in ("pipetune", "sdpa", "math")}
    mine, theirs, math_ = losses["pipetune"], losses["sdpa"], losses["math"]
    assert mine[-1] < mine[0], losses
    assert abs(mine[0] - theirs[0]) <= 0.01 * theirs[0], losses
    for step, (a, b, c) in enumerate(zip(mine, theirs, math_, strict=True)):
        assert abs(a - b) <= max(0.05 * b, 2 * abs(c - b)), (step, losses)


def _train(attend: Any, backend: Any) -> list[float]:
    """The losses of twenty Adam steps of the block from seed 11, SDPA restricted to
    ``backend`` when one is named."""
    import contextlib

    import torch
    from torch.nn.attention import sdpa_kernel

    torch.manual_seed(11)
    block = _block(SHAPE["heads"], SHAPE["kv_heads"], SHAPE["head_dim"]).cuda().bfloat16()
    optimiser = torch.optim.Adam(block.parameters(), lr=1e-3)
    data = torch.randn(SHAPE["batch"], SHAPE["seq_q"], block.width, device="cuda",
                       dtype=torch.bfloat16)
    trace = []
    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        for _ in range(20):
            optimiser.zero_grad()
            loss = ((block(data, attend) - data) ** 2).float().mean()
            loss.backward()
            optimiser.step()
            trace.append(loss.item())
    return trace


def _sdpa(q: Any, k: Any, v: Any, *, is_causal: bool) -> Any:
    import torch

    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal,
                                                            enable_gqa=True)


def _block(heads: int, kv_heads: int, head_dim: int) -> Any:
    """A pre-norm attention + MLP block (GQA), its attention call given to ``forward``
    (a module class made here: PyTorch is imported only where the test runs)."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.width = heads * head_dim
            self.norm = torch.nn.LayerNorm(self.width)
            self.qkv = torch.nn.Linear(self.width, (heads + 2 * kv_heads) * head_dim)
            self.out = torch.nn.Linear(self.width, self.width)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(self.width, 2 * self.width),
                                           torch.nn.GELU(),
                                           torch.nn.Linear(2 * self.width, self.width))

        def forward(self, x: Any, attend: Any) -> Any:
            batch, seq, _ = x.shape
            q, k, v = self.qkv(self.norm(x)).split(
                [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
            q, k, v = (t.view(batch, seq, -1, head_dim).transpose(1, 2).contiguous()
                       for t in (q, k, v))
            o = attend(q, k, v, is_causal=True).transpose(1, 2).reshape(batch, seq, -1)
            x = x + self.out(o)
            return x + self.mlp(x)

    return Block()
