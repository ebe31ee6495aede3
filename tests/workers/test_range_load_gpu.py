"""``load`` of a RangeArtifact on a real GPU: two buckets of run-time-m GEMM kernels (the
warp-specialised design, and its stream-K variant with a workspace) planned at m = 16384,
n = k = 512, called at sizes on both sides of the bucket edge and at the range's ends,
repeated and interleaved, checked against ``torch.matmul`` (relative L2 error within the
fp16 bound) on fresh seeded random inputs; the sizes of a bucket share one compiled module;
CuPy arrays, a graph capture, and the registered op under ``torch.compile`` with dynamic m.

Run on an H200 with ``pytest tests/workers/test_range_load_gpu.py -m gpu``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from range_checks import errors_by_size, rel_l2

from codegen import render
from codegen.artifact import RangeArtifact, RangeBucket
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import plan_sprogram
from workers import RangeKernel, load

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")
M, N, K = 16384, 512, 512
EDGE = 255  # bucket 1..255: the warp-specialised kernel; 256..16384: its stream-K variant
BOUND = 1e-2
SIZES = (1, 17, 255, 300, 16383, 17, 300, 1, 16384, 256, 16383)


def _range() -> RangeArtifact:
    spec = GemmSpec(m=M, n=N, k=K, dtype="float16")
    kernels = [render(replace(plan_sprogram(spec, DEVICE, design), runtime_dims=("m",)), spec,
                      DEVICE)
               for design in (GEMM_WARP_SPECIALIZED, {**GEMM_WARP_SPECIALIZED, "stream_k": 1})]
    assert all(k.runtime_dims == ("m",) for k in kernels)
    return RangeArtifact(op="gemm", params={"m": {"min": 1, "max": M}, "n": N, "k": K,
                                            "dtype": "float16", "b_layout": "kn"},
                         dim="m", size_from=("a", 0),
                         buckets=(RangeBucket(1, EDGE, kernels[0]),
                                  RangeBucket(EDGE + 1, M, kernels[1])))


def test_a_range_kernel_matches_torch_at_every_size() -> None:
    import torch

    kernel = load(_range().to_json())
    assert isinstance(kernel, RangeKernel)
    gen = torch.Generator(device="cuda").manual_seed(11)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16, generator=gen)
    errors: dict[int | str, float] = dict(
        errors_by_size(kernel, b, SIZES, K, gen, lambda a, b: a @ b))
    # The same size twice on the same tensors, output passed by name.
    a = torch.randn(300, K, device="cuda", dtype=torch.float16, generator=gen)
    out = torch.empty(300, N, device="cuda", dtype=torch.float16)
    for _ in range(2):
        assert kernel(a, b, c=out) is out
        errors["300 by name"] = rel_l2(out, a @ b)
    torch.cuda.synchronize()
    assert all(error <= BOUND for error in errors.values()), errors
    small, large = kernel.kernel_for(1), kernel.kernel_for(16384)
    assert kernel.kernel_for(255).module is small.module and small.module.compiled
    assert kernel.kernel_for(300).module is large.module is kernel.kernel_for(256).module
    assert kernel.kernel_for(300).workspaces is large.workspaces


def test_cupy_arrays_and_a_captured_graph() -> None:
    """CuPy arrays pick their bucket as torch tensors do; a call inside
    ``torch.cuda.graph`` at a size new to a warmed bucket is captured and replays right."""
    import cupy
    import torch

    kernel = load(_range())
    rng = cupy.random.default_rng(5)
    b = rng.standard_normal((K, N), dtype=cupy.float32).astype(cupy.float16)
    for size in (17, 300):
        a = rng.standard_normal((size, K), dtype=cupy.float32).astype(cupy.float16)
        c = kernel(a, b)
        ref = cupy.matmul(a.astype(cupy.float32), b.astype(cupy.float32))
        error = float(cupy.linalg.norm(c.astype(cupy.float32) - ref) / cupy.linalg.norm(ref))
        assert c.shape == (size, N) and error <= BOUND

    tb = torch.randn(K, N, device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm both buckets outside the capture
        kernel(torch.randn(5, K, device="cuda", dtype=torch.float16), tb)
        kernel(torch.randn(1000, K, device="cuda", dtype=torch.float16), tb)
    torch.cuda.current_stream().wait_stream(side)
    ta = torch.randn(777, K, device="cuda", dtype=torch.float16)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = kernel(ta, tb)
    ta.copy_(torch.randn_like(ta))
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    assert rel_l2(captured, ta @ tb) <= BOUND


def test_the_registered_range_compiles_with_dynamic_shapes() -> None:
    """``pipetune.torch.register`` of a range: ``torch.compile(dynamic=True,
    fullgraph=True)`` traces it once for every m (the fake's output follows m)."""
    import torch

    import pipetune.torch

    gemm = pipetune.torch.register(_range(), name="gemm_range_test")
    model = torch.compile(lambda a, b: torch.relu(gemm(a, b)), dynamic=True, fullgraph=True)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    for size in (17, 300, 1000, 5):
        a = torch.randn(size, K, device="cuda", dtype=torch.float16)
        c = model(a, b)
        assert c.shape == (size, N)
        assert rel_l2(c, torch.relu(a @ b)) <= BOUND
