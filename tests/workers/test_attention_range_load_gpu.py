"""``load`` of a self-attention RangeArtifact on a real GPU: two buckets of kernels taking
seq_q and seq_kv at run time (the FlashAttention-3 design, persistent with st.global
stores, and its tile_kv 64 variant) planned at seq 2048, seq_kv tied to seq_q, called at
seq 128, 200 (first bucket) and 1000 (second), causal and not, checked against PyTorch's
``scaled_dot_product_attention`` (o) and the log-sum-exp of the scaled scores (lse) on
seeded random inputs in PyTorch's layout (bhsd, GQA); and the registered op under
``torch.compile`` with a dynamic length.

Run on an H200 with ``pytest tests/workers/test_attention_range_load_gpu.py -m gpu``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from codegen import render
from codegen.artifact import RangeArtifact, RangeBucket
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.space.designs import FLASH_ATTENTION_3
from scheduler_search.sprogram import plan_sprogram
from workers import KernelArgumentError, RangeKernel, load

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")
BOTH = ("seq_q", "seq_kv")
B, H, HKV, D, HIGH, EDGE = 2, 16, 4, 128, 2048, 511
#: The FlashAttention-3 design as a range run plans it: persistent, st.global stores.
DESIGN = {**FLASH_ATTENTION_3, "persistent": True, "map_store": "cuda_core"}
SIZES = (128, 200, 1000, 200, 128)
#: Relative L2 error of o in fp16 and of the fp32 log-sum-exp (the spec's bound).
O_BOUND, LSE_BOUND = 1e-2, 1e-3


def _fixed(causal: bool) -> dict:
    return {"batch": B, "heads": H, "kv_heads": HKV, "head_dim": D, "causal": causal,
            "dtype": "float16", "layout": "bhsd"}


def _range(causal: bool) -> RangeArtifact:
    spec = parse_spec("attention", {**_fixed(causal), "seq_q": HIGH, "seq_kv": HIGH})
    kernels = [render(replace(plan_sprogram(spec, DEVICE, {**DESIGN, **choices}),
                              runtime_dims=BOTH), spec, DEVICE)
               for choices in ({"tile_kv": 64, "stages_k": 3, "stages_v": 3}, {})]
    assert all(k.runtime_dims == BOTH for k in kernels)
    seq = {"min": 128, "max": HIGH}
    return RangeArtifact(op="attention", params={**_fixed(causal), "seq_q": seq, "seq_kv": seq},
                         dim="seq_q", size_from=("q", 2), tied=(("seq_kv", "k", 2),),
                         buckets=(RangeBucket(128, EDGE, kernels[0]),
                                  RangeBucket(EDGE + 1, HIGH, kernels[1])))


def _rel_l2(out, ref) -> float:
    import torch

    out, ref = out.float(), ref.float()
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


def _reference(q, k, v, causal: bool):
    """o by PyTorch's SDPA (k and v repeated per query head), lse of the scaled scores."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    k, v = (t.repeat_interleave(H // HKV, dim=1) for t in (k, v))
    o = scaled_dot_product_attention(q, k, v, is_causal=causal)
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(D)
    if causal:
        seq = q.shape[2]
        mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return o, torch.logsumexp(scores, dim=-1)


def _qkv(seq: int, gen):
    import torch

    def make(heads: int):
        return torch.randn(B, heads, seq, D, device="cuda", dtype=torch.float16, generator=gen)

    return make(H), make(HKV), make(HKV)


@pytest.mark.parametrize("causal", [False, True])
def test_a_self_attention_range_matches_sdpa_at_every_length(causal: bool) -> None:
    import torch

    kernel = load(_range(causal).to_json())
    assert isinstance(kernel, RangeKernel)
    gen = torch.Generator(device="cuda").manual_seed(7)
    errors = {}
    for seq in SIZES:
        q, k, v = _qkv(seq, gen)
        o, lse = kernel(q, k, v)
        assert o.shape == (B, H, seq, D) and lse.shape == (B, H, seq)
        ref_o, ref_lse = _reference(q, k, v, causal)
        errors[seq] = max(errors.get(seq, (0.0, 0.0)),
                          (_rel_l2(o, ref_o), _rel_l2(lse, ref_lse)))
    torch.cuda.synchronize()
    assert all(o <= O_BOUND and lse <= LSE_BOUND for o, lse in errors.values()), errors
    assert kernel.kernel_for(128).module is kernel.kernel_for(200).module
    assert kernel.kernel_for(1000).module is not kernel.kernel_for(128).module
    q, k, v = _qkv(200, gen)
    with pytest.raises(KernelArgumentError, match="ties seq_kv to seq_q"):
        kernel(q, k[:, :, :100], v[:, :, :100])


def test_the_registered_range_compiles_with_a_dynamic_length() -> None:
    """``pipetune.torch.register`` of the range: ``torch.compile(dynamic=True,
    fullgraph=True)`` traces it for every length (the fake's o and lse follow seq)."""
    import torch

    import pipetune.torch

    attention = pipetune.torch.register(_range(False), name="attention_range_test")
    model = torch.compile(lambda q, k, v: attention(q, k, v)[0] * 2, dynamic=True,
                          fullgraph=True)
    gen = torch.Generator(device="cuda").manual_seed(3)
    for seq in (200, 1000, 128):
        q, k, v = _qkv(seq, gen)
        o = model(q, k, v)
        assert o.shape == (B, H, seq, D)
        assert _rel_l2(o, 2 * _reference(q, k, v, False)[0]) <= O_BOUND
