"""``load`` of a RangeArtifact without a GPU (a stand-in CuPy records compiles and
launches): a call's size picks its bucket, at every bucket edge, and sizes outside the
range are refused before anything is launched; each size's kernel is the bucket's bound to
that size (the ``M`` scalar, the a / c tensor maps' extents); the sizes of one bucket share
one compiled module and one workspace; the kernels kept per size are bounded.

The range kernels here are hand-made: exact GEMM kernels given a run-time ``M`` and the
size slots a run-time-m kernel records (``extra["size_slots"]``), so the dispatch is
checked whatever the kernel text does with ``M``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, replace

import numpy as np
import pytest
from launch_fakes import FakeArray, FakeCupy, FakeLaunch

from codegen import render
from codegen.artifact import (
    KernelArtifact,
    RangeArtifact,
    RangeBucket,
    ScalarArg,
    SizeSlot,
    TensorArg,
    TensorMapArg,
)
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import plan_sprogram
from workers import KernelArgumentError, LoadedKernel, RangeKernel, load
from workers import kernels as kernels_module
from workers.kernels import as_artifact

DEVICE = get_device("h200")
N, K = 512, 256
#: Bucket ends: 1..64 (a small-tile kernel), 65..4096 (a stream-K kernel, with a workspace).
LOW, EDGE, HIGH = 1, 64, 4096


def with_runtime_m(artifact: KernelArtifact) -> KernelArtifact:
    """``artifact`` taking m at run time: an ``M`` scalar, and the size slots of ``M``,
    of the a and c tensor maps' outermost extent (innermost first, so the last) and of a
    c pointer's rows."""
    slots = []
    for arg in artifact.args:
        if isinstance(arg, TensorMapArg) and arg.tensor in ("a", "c"):
            slots.append(SizeSlot("m", arg.name, "global_dims", len(arg.global_dims) - 1))
        elif isinstance(arg, TensorArg) and arg.name == "c":
            slots.append(SizeSlot("m", arg.name, "shape", 0))
    slots.append(SizeSlot("m", "M", "value"))
    return replace(artifact, args=(*artifact.args, ScalarArg("M", "int32", artifact.params["m"])),
                   extra={**artifact.extra, "size_slots": [asdict(s) for s in slots]})


def _kernel(m: int, design: dict) -> KernelArtifact:
    spec = GemmSpec(m=m, n=N, k=K, dtype="float16")
    return with_runtime_m(render(plan_sprogram(spec, DEVICE, design), spec, DEVICE))


def range_artifact() -> RangeArtifact:
    small = _kernel(EDGE, GEMM_WARP_SPECIALIZED)
    large = _kernel(HIGH, {**GEMM_WARP_SPECIALIZED, "stream_k": 1})
    return RangeArtifact(
        op="gemm", params={"m": {"min": LOW, "max": HIGH}, "n": N, "k": K, "dtype": "float16",
                           "b_layout": "kn"},
        dim="m", size_from=("a", 0),
        buckets=(RangeBucket(LOW, EDGE, small), RangeBucket(EDGE + 1, HIGH, large, 1.02)))


RANGE = range_artifact()
SMALL, LARGE = (b.kernel for b in RANGE.buckets)


@pytest.fixture
def cupy(monkeypatch: pytest.MonkeyPatch) -> FakeCupy:
    fake = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(kernels_module, "DriverLaunch", lambda *args: FakeLaunch(fake, *args))
    return fake


@pytest.fixture
def encodes(monkeypatch: pytest.MonkeyPatch) -> list[TensorMapArg]:
    """The tensor maps encoded (each a descriptor holding its address)."""
    calls: list[TensorMapArg] = []

    def encode(arg, data_ptr):
        calls.append(arg)
        return np.full(16, data_ptr, dtype=np.uint64)

    monkeypatch.setattr("workers.tensor_maps.encode_tensor_map", encode)
    return calls


def _inputs(m: int, base: int = 0x7F0000000000) -> tuple[FakeArray, FakeArray]:
    return FakeArray((m, K), base), FakeArray((K, N), base + 0x10000000)


def _launched(cupy: FakeCupy, artifact: KernelArtifact) -> dict:
    """The last launch's parameters by argument name."""
    *_, params = cupy.launches[-1]
    return dict(zip((a.name for a in artifact.args), params.values, strict=True))


def test_load_takes_a_range_in_every_form() -> None:
    body = {"id": 3, "artifact": RANGE.to_dict()}
    for form in (RANGE, RANGE.to_dict(), RANGE.to_json(), RANGE.to_json().encode(), body,
                 json.dumps(body)):
        kernel = load(form)
        assert isinstance(kernel, RangeKernel) and kernel.artifact == RANGE
    assert isinstance(load(SMALL.to_dict()), LoadedKernel)  # an exact kernel as before
    assert [t.describe() for t in kernel.expected] == [
        "a (m x 256 float16)", "b (256x512 float16)", "c (m x 512 float16)"]
    assert kernel.expected[2].shape_at(300) == (300, 512)
    text = repr(kernel)
    assert "m in 1..4096" in text and "1..64: " + SMALL.schedule_hash[:12] in text
    assert "size from a.shape[0]" in text
    with pytest.raises(ValueError, match="a RangeArtifact, not a KernelArtifact"):
        as_artifact(RANGE.to_dict())
    with pytest.raises(ValueError, match="contiguous"):
        load({**RANGE.to_dict(), "buckets": RANGE.to_dict()["buckets"][1:] * 2})


@pytest.mark.parametrize(("size", "bucket"), [(LOW, 0), (2, 0), (EDGE, 0), (EDGE + 1, 1),
                                              (300, 1), (HIGH - 1, 1), (HIGH, 1)])
def test_a_call_launches_its_bucket_bound_to_its_size(cupy, encodes, size, bucket) -> None:
    kernel = load(RANGE)
    c = kernel(*_inputs(size))
    artifact = RANGE.buckets[bucket].kernel
    assert c.shape == (size, N)
    bound = kernel.kernel_for(size).artifact
    assert bound.schedule_hash == artifact.schedule_hash and bound.params["m"] == size
    (function, grid, block, smem, stream, _), = cupy.launches
    assert (grid, block, smem) == (artifact.grid, artifact.block, artifact.dynamic_smem_bytes)
    assert (function, stream) == (0xF00D, 0x5)
    assert _launched(cupy, bound)["M"] == np.int32(size)
    assert kernel.bucket_of(size) is RANGE.buckets[bucket]


@pytest.mark.parametrize("size", [0, HIGH + 1, 100_000])
def test_sizes_outside_the_range_are_refused_before_anything_is_launched(cupy, size) -> None:
    kernel = load(RANGE)
    message = rf"a.shape\[0\] = {size}: m={size} is outside the tuned range 1..4096"
    with pytest.raises(KernelArgumentError, match=message):
        kernel(*_inputs(size))
    with pytest.raises(KernelArgumentError, match=message):
        kernel.kernel_for(size)
    assert not cupy.launches and not cupy.compiled


def test_the_size_is_read_by_position_or_by_name(cupy, encodes) -> None:
    kernel = load(RANGE)
    a, b = _inputs(17)
    c = FakeArray((17, N), 0x7F0000200000)
    assert kernel(a=a, b=b).shape == (17, N)
    assert kernel(b=b, a=a, c=c) is c
    assert kernel(a, b, c=c) is c
    assert len(cupy.launches) == 3 and list(kernel._kernels) == [17]
    with pytest.raises(KernelArgumentError, match=r"missing input tensor\(s\) \['a'\]; "
                                                  r"expected a \(m x 256 float16\)"):
        kernel(b=b)
    with pytest.raises(KernelArgumentError, match="a: expected a CuPy array or a torch tensor"):
        kernel([[1.0]], b)
    with pytest.raises(KernelArgumentError, match=r"b: shape \(256, 256\)"):
        kernel(a, FakeArray((K, K), 0x7F0000300000))  # the size's kernel checks the rest


def test_a_size_is_bound_in_the_m_scalar_and_the_a_and_c_tensor_maps(cupy, encodes) -> None:
    kernel = load(RANGE)
    bound = kernel.kernel_for(300).artifact
    args = {a.name: a for a in bound.args}
    assert args["M"].value == 300
    assert args["a_map"].global_dims == (K, 300) and args["c_map"].global_dims == (N, 300)
    planned = {a.name: a for a in LARGE.args}
    assert args["b_map"] == planned["b_map"] and args["sk_workspace"] == planned["sk_workspace"]
    for name in ("a_map", "c_map"):  # only the extent moves
        assert replace(args[name], global_dims=planned[name].global_dims) == planned[name]
    assert (bound.source, bound.entry, bound.grid) == (LARGE.source, LARGE.entry, LARGE.grid)
    assert [t.shape for t in kernel.kernel_for(300).expected] == [(300, K), (K, N), (300, N)]
    kernel(*_inputs(300))
    assert {(e.name, e.global_dims) for e in encodes} == {
        ("a_map", (K, 300)), ("b_map", planned["b_map"].global_dims), ("c_map", (N, 300))}
    assert _launched(cupy, bound)["M"] == np.int32(300)


def test_the_sizes_of_a_bucket_share_one_module_and_one_workspace(cupy, encodes) -> None:
    kernel = load(RANGE)
    for size in (1, 17, 64, 65, 300, 4096, 17, 300):
        kernel(*_inputs(size))
    assert cupy.compiled == [SMALL.source, LARGE.source]  # one compile per bucket
    assert kernel.kernel_for(1).module is kernel.kernel_for(64).module
    assert kernel.kernel_for(65).module is kernel.kernel_for(4096).module
    assert kernel.kernel_for(1).module is not kernel.kernel_for(65).module
    assert cupy.zeroed == [LARGE.args[3].bytes]  # the stream-K workspace, zeroed once
    workspaces = {_launched_at(cupy, i, LARGE)["sk_workspace"] for i in (3, 4, 5, 7)}
    assert len(workspaces) == 1
    assert {launch[0] for launch in cupy.launches} == {0xF00D}


def _launched_at(cupy: FakeCupy, index: int, artifact: KernelArtifact) -> dict:
    *_, params = cupy.launches[index]
    return dict(zip((a.name for a in artifact.args), params.values, strict=True))


def test_a_repeated_size_only_launches(cupy, encodes, monkeypatch) -> None:
    kernel = load(RANGE)
    a, b = _inputs(300)
    c = FakeArray((300, N), 0x7F0000200000)
    made = []
    real_init = LoadedKernel.__init__
    monkeypatch.setattr(LoadedKernel, "__init__",
                        lambda self, *args, **kw: made.append(1) or real_init(self, *args, **kw))
    for _ in range(3):
        kernel(a, b, c=c)
    assert len(made) == 1 and len(encodes) == 3  # one bound kernel, its maps encoded once
    assert cupy.launches[0][5] is cupy.launches[2][5]  # the packed arguments, reused


def test_the_kernels_kept_per_size_are_bounded_least_recently_called_first(cupy,
                                                                           encodes) -> None:
    kernel = RangeKernel(RANGE, sizes_kept=3)
    for size in (1, 2, 3):
        kernel(*_inputs(size))
    kernel(*_inputs(1))  # 1 is now the most recent: 2 goes first
    kernel(*_inputs(70))
    assert list(kernel._kernels) == [3, 1, 70]
    kernel(*_inputs(2))  # made again: no new compile
    assert list(kernel._kernels) == [1, 70, 2]
    assert cupy.compiled == [SMALL.source, LARGE.source]
    with pytest.raises(ValueError, match="sizes_kept"):
        RangeKernel(RANGE, sizes_kept=0)


def test_two_loads_of_one_kernel_share_its_compiled_module(cupy, encodes) -> None:
    first, second = load(SMALL), load(SMALL.to_json())
    assert first.module is second.module and not first.module.compiled
    first(*_inputs(EDGE))
    second(*_inputs(EDGE))
    assert cupy.compiled == [SMALL.source] and first.module.compiled


def test_a_bucket_kernel_specialised_to_one_size_serves_only_it(cupy, encodes) -> None:
    exact = render(plan_sprogram(GemmSpec(m=EDGE, n=N, k=K, dtype="float16"), DEVICE,
                                 GEMM_WARP_SPECIALIZED), GemmSpec(m=EDGE, n=N, k=K,
                                                                  dtype="float16"), DEVICE)
    ranged = replace(RANGE, buckets=(RangeBucket(EDGE, EDGE, exact), RANGE.buckets[1]))
    kernel = load(ranged)
    assert kernel(*_inputs(EDGE)).shape == (EDGE, N)
    assert kernel(*_inputs(EDGE + 1)).shape == (EDGE + 1, N)
    with pytest.raises(KernelArgumentError, match=r"outside the tuned range 64\.\.4096"):
        kernel(*_inputs(EDGE - 1))


def test_covers_says_whether_a_workload_falls_in_the_range() -> None:
    kernel = load(RANGE)
    exact = {"m": 300, "n": N, "k": K, "dtype": "float16", "b_layout": "kn"}
    assert kernel.covers(exact) and kernel.covers({**exact, "m": HIGH})
    assert not kernel.covers({**exact, "m": HIGH + 1}) and not kernel.covers({**exact, "m": 0})
    assert not kernel.covers({**exact, "n": 1024})
    assert not kernel.covers({**exact, "b_layout": "nk"})
