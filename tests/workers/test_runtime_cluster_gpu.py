"""Run-time-m GEMM kernels in clusters along m on a real GPU: pairs of m tiles sharing
each weight slice by TMA multicast, with the tiles along m counted in whole clusters, so
an odd count's last block takes the last rows again. Two buckets (64 x 128 tiles in
pairs, 128 x 192 ones in pairs) planned at m = 4096, n = 1920, k = 1088, B stored n x k,
bf16, called at sizes with odd and even tile counts and at the ends, checked against
``torch.nn.functional.linear`` (relative L2 error within the bf16 bound) on fresh seeded
random inputs.

Run on an H200 with ``pytest tests/workers/test_runtime_cluster_gpu.py -m gpu``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from range_checks import errors_by_size

from codegen import render
from codegen.artifact import RangeArtifact, RangeBucket
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space.designs import GEMM_DECODE_M_PAIR, GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import plan_sprogram
from workers import load

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")
M, N, K = 4096, 1920, 1088
EDGE = 200  # 1..200: 64 x 128 tiles in pairs; 201..4096: 128 x 192 tiles in pairs
BOUND = 2e-2
#: Tiles along m at each size: 1, 2, 3, 4 (pairs of 64-row tiles), then 2, 3, 4, 9, 32.
SIZES = (1, 65, 129, 200, 201, 333, 512, 1111, 4096, 65, 333)
PAIRED = (
    {**GEMM_DECODE_M_PAIR, "stream_k": 0},
    {**GEMM_WARP_SPECIALIZED, "tile_n": 192, "stages_ab": 4, "stream_k": 0,
     "cluster_size": 2, "cluster_axis": "m"},
)


def _range() -> RangeArtifact:
    spec = GemmSpec(m=M, n=N, k=K, dtype="bfloat16", b_layout="nk")
    kernels = [render(replace(plan_sprogram(spec, DEVICE, design), runtime_dims=("m",)),
                      spec, DEVICE) for design in PAIRED]
    assert all("CLUSTER = 2" in k.source for k in kernels)
    return RangeArtifact(op="gemm", params={"m": {"min": 1, "max": M}, "n": N, "k": K,
                                            "dtype": "bfloat16", "b_layout": "nk"},
                         dim="m", size_from=("a", 0),
                         buckets=(RangeBucket(1, EDGE, kernels[0]),
                                  RangeBucket(EDGE + 1, M, kernels[1])))


def test_clusters_along_a_run_time_m_match_torch_at_every_size() -> None:
    import torch

    kernel = load(_range().to_json())
    gen = torch.Generator(device="cuda").manual_seed(12)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=gen)
    errors = errors_by_size(kernel, b, SIZES, K, gen,
                            lambda a, b: torch.nn.functional.linear(a.float(), b.float()))
    torch.cuda.synchronize()
    assert all(error <= BOUND for error in errors.values()), errors
