"""The graph-replay timing method on a real device: it ranks kernels of known different
bandwidth, and the worker's figure for a decode GEMM agrees with a graph replay of the
user's own call (``pipetune.load``) within 5%.

Run on an H200 with ``pytest tests/workers -m gpu``; skipped where CuPy sees no GPU.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

from codegen import render
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space.designs import GEMM_SWAP_NARROW
from scheduler_search.sprogram import plan_sprogram
from workers import Job, LocalGpuPool, ParallelCompiler, TimingConfig, load
from workers.graph_timing import copies_for_cold_l2, time_graph_replays

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")
GRAPH = TimingConfig(warmup_launches=2, warmup_ms=0.0, min_samples=20, min_time_ms=0.0,
                     method="graph")
#: Reads ``words`` 16-byte words with ``blockDim.x * gridDim.x`` threads: the bandwidth a
#: launch reaches grows with its grid while the bytes stay the same.
SUM_SOURCE = r"""
extern "C" __global__ void strided_sum(const uint4* __restrict__ src, float* out, long long words) {
  float acc = 0.f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < words;
       i += (long long)gridDim.x * blockDim.x) {
    uint4 v = src[i];
    acc += __uint_as_float(v.x & 0x3f800000u) + __uint_as_float(v.w & 0x3f800000u);
  }
  if (acc == 12345.f) out[0] = acc;  // keeps the loads; never true for these inputs
}
"""


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGpuPool]:
    cache: Path = tmp_path_factory.mktemp("cubins")
    with LocalGpuPool(compiler=ParallelCompiler(cache_dir=cache),
                      codegen_version="test") as executor:
        yield executor


def test_copies_exceed_twice_the_l2() -> None:
    import cupy

    l2_bytes = cupy.cuda.Device().attributes["L2CacheSize"]
    weight = 4096 * 4096 * 2
    copies = copies_for_cold_l2(weight, l2_bytes)
    assert copies * weight > 2 * l2_bytes
    assert (copies - 1) * weight <= 2 * l2_bytes + weight


def test_graph_method_ranks_kernels_by_bandwidth() -> None:
    """The same 32 MB read by a full grid and by one of 8 blocks: the wide launch reads
    in a fraction of the narrow one's time, and the method sees it at once (both kernels
    run under the ~18 us that a per-launch sample costs)."""
    import cupy

    kernel = cupy.RawKernel(SUM_SOURCE, "strided_sum")
    words = (32 << 20) // 16
    l2_bytes = cupy.cuda.Device().attributes["L2CacheSize"]
    copies = [cupy.random.default_rng(i).integers(1, 1 << 30, size=words * 4, dtype=cupy.int32)
              for i in range(copies_for_cold_l2(words * 16, l2_bytes))]
    out = cupy.zeros(1, dtype=cupy.float32)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]

    def launches(blocks: int) -> list:
        return [lambda c=c: kernel((blocks,), (512,), (c, out, cupy.int64(words)))
                for c in copies]

    wide = statistics.median(time_graph_replays(launches(4 * sms), GRAPH))
    narrow = statistics.median(time_graph_replays(launches(8), GRAPH))
    assert narrow > 3 * wide
    # The wide launch reads from HBM at most at its peak (~4.8 TB/s on an H200): the
    # copies did not let it read from the L2.
    assert words * 16 / wide / 1e6 < 5.0


def test_worker_figure_agrees_with_a_replay_of_the_users_call(pool: LocalGpuPool) -> None:
    """A decode GEMM (1 x 4096 x 4096 bf16, weight n x k): the worker's graph figure and a
    CUDA graph of the loaded kernel's calls over weight copies larger than the L2."""
    import torch

    spec = GemmSpec(m=1, n=4096, k=4096, dtype="bfloat16", b_layout="nk")
    artifact = render(plan_sprogram(spec, DEVICE, GEMM_SWAP_NARROW), spec, DEVICE)
    job = Job({"op": "gemm", "params": spec.params()}, artifact=artifact, timing=GRAPH)
    measured = pool.measure([job])[0]
    assert measured.status.value == "ok", measured.error
    assert measured.timing_method == "graph"

    kernel = load(artifact.to_json())
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    a = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    weights = [torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
               for _ in range(copies_for_cold_l2(4096 * 4096 * 2, l2_bytes))]
    replays = []
    for _ in range(3):
        graph_us = _replay_per_call_us(torch, [lambda w=w: kernel(a, w) for w in weights])
        replays.append(graph_us)
    user_us = statistics.median(replays)
    assert measured.latency_us == pytest.approx(user_us, rel=0.05)


def _replay_per_call_us(torch, calls: list, cycles: int = 16) -> float:
    for call in calls:
        call()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.graph(graph, stream=stream):
        for i in range(cycles * len(calls)):
            calls[i % len(calls)]()
    graph.replay()
    torch.cuda.synchronize()
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / (cycles * len(calls))
