"""Swapped GEMM kernels whose transposed output is staged in shared memory with
``stmatrix.trans`` and stored by TMA, on a real GPU, with m at run time: a range of three
buckets (16-token tiles over 64 weight rows, 104-token tiles over 128, 88-token tiles over
256 in two row blocks a consumer, whose last 8-column group takes an ``.x2``), both B
layouts (n x k read K-major, k x n read MN-major), bf16, checked against
``torch.nn.functional.linear`` on fresh seeded random inputs at sizes that end inside a
tile, fill it, and span several token tiles.

Run on an H200 with ``pytest tests/workers/test_swap_tma_store_gpu.py -m gpu``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from range_checks import errors_by_size

from codegen import render
from codegen.artifact import RangeArtifact, RangeBucket
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space.designs import (
    GEMM_DECODE_SWAP,
    with_transposed_tma_store,
)
from scheduler_search.sprogram import plan_sprogram
from workers import load

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")
M, N, K = 2048, 3200, 1088
BOUND = 2e-2
EDGES = (32, 400)  # 1..32, 33..400, 401..2048
SIZES = (1, 7, 16, 32, 33, 104, 105, 400, 401, 479, 1000, 2048)
DESIGNS = (
    {**GEMM_DECODE_SWAP, "tile_m": 16},
    {**GEMM_DECODE_SWAP, "tile_m": 104, "tile_n": 128, "tile_k": 64,
     "consumer_warpgroups": 2, "stages_ab": 6},
    {**GEMM_DECODE_SWAP, "tile_m": 88, "tile_n": 256, "tile_k": 64,
     "consumer_warpgroups": 2, "stages_ab": 4},
)


def _range(layout: str) -> RangeArtifact:
    spec = GemmSpec(m=M, n=N, k=K, dtype="bfloat16", b_layout=layout)
    kernels = []
    for design in DESIGNS:
        sprogram = plan_sprogram(spec, DEVICE, with_transposed_tma_store(design))
        kernels.append(render(replace(sprogram, runtime_dims=("m",)), spec, DEVICE))
    assert all("stmatrix_x4_trans(" in k.source for k in kernels)
    assert "stmatrix_x2_trans(" in kernels[2].source
    lows = (1, EDGES[0] + 1, EDGES[1] + 1)
    highs = (EDGES[0], EDGES[1], M)
    return RangeArtifact(op="gemm", params={"m": {"min": 1, "max": M}, "n": N, "k": K,
                                            "dtype": "bfloat16", "b_layout": layout},
                         dim="m", size_from=("a", 0),
                         buckets=tuple(RangeBucket(low, high, kernel) for low, high, kernel
                                       in zip(lows, highs, kernels, strict=True)))


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_transposed_tma_stores_match_torch_at_every_size(layout: str) -> None:
    import torch

    kernel = load(_range(layout).to_json())
    gen = torch.Generator(device="cuda").manual_seed(21)
    shape = (N, K) if layout == "nk" else (K, N)
    b = torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)

    def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        weight = b if layout == "nk" else b.t()
        return torch.nn.functional.linear(a.float(), weight.float())

    errors = errors_by_size(kernel, b, SIZES, K, gen, reference)
    torch.cuda.synchronize()
    assert all(error <= BOUND for error in errors.values()), errors
