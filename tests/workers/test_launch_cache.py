"""The loaded kernel's launch path without a GPU (a stand-in CuPy records launches): the
checks and the TMA descriptors are done once per argument signature, a repeated call only
launches, new pointers or shapes are packed (and checked) again, and tensors are passed as
device pointers (no DLPack exchange, which synchronises streams and breaks graph capture)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from launch_fakes import FakeArray, FakeCupy, FakeLaunch

from codegen import render
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import plan_sprogram
from workers import KernelArgumentError, load
from workers import kernels as kernels_module
from workers.launch import DriverLaunchError

DEVICE = get_device("h200")


@pytest.fixture
def cupy(monkeypatch: pytest.MonkeyPatch) -> FakeCupy:
    fake = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(kernels_module, "DriverLaunch",
                        lambda *args: FakeLaunch(fake, *args))
    return fake


@pytest.fixture
def encodes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    calls: list[tuple[str, int]] = []

    def encode(arg, data_ptr):
        calls.append((arg.name, data_ptr))
        return np.full(16, data_ptr, dtype=np.uint64)

    monkeypatch.setattr("workers.tensor_maps.encode_tensor_map", encode)
    return calls


def _kernel():
    spec = GemmSpec(m=256, n=512, k=128, dtype="float16")
    return load(render(plan_sprogram(spec, DEVICE, GEMM_WARP_SPECIALIZED), spec, DEVICE))


def test_a_repeated_call_only_launches(cupy: FakeCupy, encodes: list, monkeypatch) -> None:
    kernel = _kernel()
    a, b = FakeArray((256, 128), 0x7F0000000000), FakeArray((128, 512), 0x7F0000010000)
    c = FakeArray((256, 512), 0x7F0000020000)
    checks = []
    real_check = kernels_module.check_tensor
    monkeypatch.setattr(kernels_module, "check_tensor",
                        lambda expected, info: checks.append(expected.name) or real_check(
                            expected, info))
    for _ in range(3):
        assert kernel(a, b, c=c) is c
    assert len(cupy.launches) == 3
    assert sorted(set(checks)) == ["a", "b", "c"] and len(checks) == 6  # first call only
    maps = [arg for arg in kernel.artifact.args if arg.kind == "tensor_map"]
    assert len(encodes) == len(maps)  # descriptors encoded once
    assert cupy.launches[0][5] is cupy.launches[2][5]  # the packed arguments, reused
    function, grid, block, smem, stream, _ = cupy.launches[0]
    assert grid == tuple(kernel.artifact.grid) and block == tuple(kernel.artifact.block)
    assert smem == kernel.artifact.dynamic_smem_bytes
    assert (function, stream) == (0xF00D, 0x5)  # the loaded CUfunction, CuPy's stream


def test_new_pointers_or_bad_tensors_are_packed_and_checked_again(
    cupy: FakeCupy, encodes: list
) -> None:
    kernel = _kernel()
    a, b = FakeArray((256, 128), 0x7F0000000000), FakeArray((128, 512), 0x7F0000010000)
    kernel(a, b)
    kernel(a, b)  # a new output each call: its pointer is part of the signature
    a2 = FakeArray((256, 128), 0x7F0000200000)
    kernel(a2, b)
    assert len(cupy.launches) == 3 and cupy.allocated == 3
    assert ("a_map", 0x7F0000200000) in encodes
    with pytest.raises(KernelArgumentError, match="shape"):
        kernel(FakeArray((128, 128), 0x7F0000000000), b)
    assert len(cupy.launches) == 3  # nothing launched


def test_tensors_go_as_device_pointers(cupy: FakeCupy, encodes: list) -> None:
    """Pointer arguments (the kernels' plain tensor parameters) are 64-bit values."""
    spec = GemmSpec(m=256, n=512, k=128, dtype="float16")
    artifact = render(plan_sprogram(spec, DEVICE, {**GEMM_WARP_SPECIALIZED,
                                                   "map_store": "cuda_core"}), spec, DEVICE)
    kernel = load(artifact)
    c = FakeArray((256, 512), 0x7F0000020000)
    kernel(FakeArray((256, 128), 0x7F0000000000), FakeArray((128, 512), 0x7F0000010000), c=c)
    (*_, params), = cupy.launches
    pointers = [value for arg, value in zip(artifact.args, params.values, strict=True)
                if arg.kind == "tensor"]
    assert pointers == [np.uint64(0x7F0000020000)]
    assert all(isinstance(p, np.uint64) for p in pointers)


def test_the_device_is_entered_only_when_another_context_is_current(
    cupy: FakeCupy, encodes: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launch refused for another current context (CUDA_ERROR_INVALID_CONTEXT) is made
    again inside the tensors' device; any other refusal is an error, not retried."""
    kernel = _kernel()
    a, b = FakeArray((256, 128), 0x7F0000000000), FakeArray((128, 512), 0x7F0000010000)
    c = FakeArray((256, 512), 0x7F0000020000)
    kernel(a, b, c=c)  # the first call compiles and loads in the device's context
    entered = len(cupy.devices_entered)
    kernel(a, b, c=c)
    assert len(cupy.devices_entered) == entered  # launched as is: no switch
    cupy.results = [201]
    kernel(a, b, c=c)
    assert cupy.devices_entered[entered:] == [0] and len(cupy.launches) == 4
    cupy.results = [700]
    monkeypatch.setattr(kernels_module, "error_name", lambda result: f"CUresult {result}")
    with pytest.raises(DriverLaunchError, match="CUresult 700"):
        kernel(a, b, c=c)
