"""Stream-K GEMMs called as users call them (``workers.load`` on torch tensors): the
same bits on every call (the parts are summed in block order, and the tile counts are
back at zero after each launch) and close to ``torch.matmul``.

Run on an H200 with ``pytest tests/codegen/test_stream_k_gpu.py -m gpu``.
"""

from __future__ import annotations

import pytest

from codegen import render
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import plan_sprogram
from workers import load

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")

#: Fewer tiles than SMs (every tile split among 4-5 blocks), one past every tile with
#: two waves shared out, the suite's square shape.
CASES = [
    ((128, 8192, 8192), {"tile_n": 128}),
    ((4000, 6000, 2000), {"stream_k": 2}),
    ((4096, 4096, 4096), {}),
]


@pytest.mark.parametrize(("shape", "choices"), CASES, ids=lambda v: str(v))
def test_stream_k_gives_the_same_bits_on_every_call(shape: tuple, choices: dict) -> None:
    import torch

    m, n, k = shape
    spec = parse_spec("gemm", {"m": m, "n": n, "k": k, "dtype": "bfloat16", "b_layout": "nk"})
    design = {**GEMM_WARP_SPECIALIZED, "persistent": True, "stream_k": 1, **choices}
    kernel = load(render(plan_sprogram(spec, DEVICE, design), spec, DEVICE))
    generator = torch.Generator(device="cuda").manual_seed(5)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=generator)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=generator)
    first = kernel(a, b).clone()
    for _ in range(3):
        assert torch.equal(kernel(a, b), first)
    reference = a.float() @ b.float().t()
    error = (first.float() - reference).norm() / reference.norm()
    assert error.item() < 1e-2
