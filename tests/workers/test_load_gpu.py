"""``workers.load`` on a real GPU: a generated kernel run by a user on torch tensors and on
CuPy arrays, checked against ``torch.matmul`` / ``cupy.matmul`` (relative L2 error within
the fp16 / bf16 bound), on fresh seeded random inputs, both B layouts; a kernel's workspace
allocated zeroed once and kept across calls and graph replays.

Run on an H200 with ``pytest tests/workers/test_load_gpu.py -m gpu``.
"""

from __future__ import annotations

import pytest

from codegen import render
from codegen.artifact import KernelArtifact, TensorArg, WorkspaceArg
from scheduler_search.hardware import get_device
from scheduler_search.ops import workload_tensors
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import plan_sprogram
from workers import KernelArgumentError, load
from workers.testing import gemm_source

pytestmark = pytest.mark.gpu

DEVICE = get_device("h200")
BOUND = {"float16": 1e-2, "bfloat16": 2e-2}

#: Counts its launches in its workspace: c[0] is the count before the launch.
COUNTER_BODY = r"""
extern "C" __global__ void count_launches(unsigned short* c, unsigned int* counters) {
  if (threadIdx.x == 0) c[0] = float_to_elem((float)atomicAdd(counters, 1u));
}
"""
COUNTER_GEMM = {"m": 16, "n": 16, "k": 16, "dtype": "float16", "b_layout": "kn"}


def _counter_artifact() -> KernelArtifact:
    """A kernel taking the GEMM's output and a workspace (its inputs unread)."""
    c = next(TensorArg(t.name, t.dtype, t.shape, t.role)
             for t in workload_tensors("gemm", COUNTER_GEMM) if t.role == "output")
    return KernelArtifact(
        op="gemm", params=COUNTER_GEMM, schedule_hash="handwritten-counter",
        source=gemm_source(COUNTER_BODY, COUNTER_GEMM), entry="count_launches",
        grid=(1, 1, 1), block=(32, 1, 1), dynamic_smem_bytes=0,
        args=(c, WorkspaceArg("counters", 32 << 20)))


def _artifact(m: int, n: int, k: int, dtype: str, layout: str):
    spec = GemmSpec(m=m, n=n, k=k, dtype=dtype, b_layout=layout)
    return render(plan_sprogram(spec, DEVICE, GEMM_WARP_SPECIALIZED), spec, DEVICE)


def _rel_l2(out, ref) -> float:
    import torch

    out, ref = out.float(), ref.float()
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_tensors_match_torch_matmul(dtype: str, layout: str) -> None:
    import torch

    m, n, k = 2048, 1536, 1024
    kernel = load(_artifact(m, n, k, dtype, layout).to_json())
    torch_dtype = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(m, k, device="cuda", dtype=torch_dtype, generator=gen)
    b_shape = (k, n) if layout == "kn" else (n, k)
    b = torch.randn(*b_shape, device="cuda", dtype=torch_dtype, generator=gen)
    c = kernel(a, b)
    assert isinstance(c, torch.Tensor) and c.shape == (m, n) and c.dtype == torch_dtype
    ref = a @ (b if layout == "kn" else b.t())
    torch.cuda.synchronize()
    assert _rel_l2(c, ref) <= BOUND[dtype]
    # New inputs, output passed by name, same kernel object (descriptors re-encoded).
    a2 = torch.randn_like(a)
    out = torch.empty(m, n, device="cuda", dtype=torch_dtype)
    assert kernel(a2, b, c=out) is out
    torch.cuda.synchronize()
    assert _rel_l2(out, a2 @ (b if layout == "kn" else b.t())) <= BOUND[dtype]


def test_cupy_arrays_match_cupy_matmul() -> None:
    import cupy

    m, n, k = 1024, 2048, 512
    kernel = load(_artifact(m, n, k, "float16", "kn").to_dict())
    rng = cupy.random.default_rng(3)
    a = rng.standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16)
    b = rng.standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
    c = kernel(a, b)
    assert isinstance(c, cupy.ndarray) and c.shape == (m, n)
    ref = cupy.matmul(a.astype(cupy.float32), b.astype(cupy.float32))
    error = float(cupy.linalg.norm(c.astype(cupy.float32) - ref) / cupy.linalg.norm(ref))
    assert error <= BOUND["float16"]


def test_wrong_tensors_are_refused_before_launch() -> None:
    import torch

    kernel = load(_artifact(1024, 1024, 512, "float16", "kn"))
    a = torch.randn(1024, 512, device="cuda", dtype=torch.float16)
    with pytest.raises(KernelArgumentError, match="shape"):
        kernel(a, torch.randn(1024, 1024, device="cuda", dtype=torch.float16))
    with pytest.raises(KernelArgumentError, match="dtype float32"):
        kernel(a.float(), torch.randn(512, 1024, device="cuda", dtype=torch.float16))
    with pytest.raises(KernelArgumentError, match="contiguous"):
        kernel(torch.randn(512, 1024, device="cuda", dtype=torch.float16).t(),
               torch.randn(512, 1024, device="cuda", dtype=torch.float16))
    with pytest.raises(KernelArgumentError, match="host memory"):
        kernel(a.cpu(), torch.randn(512, 1024, device="cuda", dtype=torch.float16))


def test_a_captured_graph_replays_what_an_eager_call_computes() -> None:
    """A call inside ``torch.cuda.graph`` is captured (nothing on the launch path
    synchronises or allocates outside torch), and the replay, on new inputs copied into
    the captured ones, equals an eager call."""
    import torch

    m, n, k = 1024, 1024, 512
    kernel = load(_artifact(m, n, k, "float16", "kn"))
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        kernel(a, b)  # warm-up: compiles and packs outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = kernel(a, b)
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    eager = kernel(a, b)
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)
    assert _rel_l2(eager, a @ b) <= BOUND["float16"]


def test_the_registered_op_compiles_with_fullgraph() -> None:
    """``pipetune.torch.register``: a module calling the op compiles with
    ``torch.compile(fullgraph=True)`` (the fake implementation traces it) and gives what
    eager gives."""
    import torch

    import pipetune.torch

    m, n, k = 512, 1024, 256
    gemm = pipetune.torch.register(_artifact(m, n, k, "bfloat16", "nk"), name="gemm_test")

    def model(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(gemm(a, b)) * 2.0

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(model, fullgraph=True)
    assert torch.equal(compiled(a, b), model(a, b))
    assert _rel_l2(model(a, b), torch.relu(a @ b.t()) * 2.0) <= BOUND["bfloat16"]


def test_a_workspace_starts_zeroed_and_persists_across_calls_on_cupy_arrays() -> None:
    import cupy

    kernel = load(_counter_artifact())
    a = cupy.zeros((16, 16), dtype=cupy.float16)
    b = cupy.zeros((16, 16), dtype=cupy.float16)
    assert [float(kernel(a, b)[0, 0]) for _ in range(2)] == [0.0, 1.0]


def test_torch_calls_and_graph_replays_share_one_workspace() -> None:
    """The workspace's pointer is packed once: a captured launch counts on the same one."""
    import torch

    kernel = load(_counter_artifact())
    a = torch.zeros(16, 16, device="cuda", dtype=torch.float16)
    b = torch.zeros(16, 16, device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        assert [float(kernel(a, b)[0, 0]) for _ in range(2)] == [0.0, 1.0]
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = kernel(a, b)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    assert float(captured[0, 0]) == 3.0
    assert float(kernel(a, b)[0, 0]) == 4.0
