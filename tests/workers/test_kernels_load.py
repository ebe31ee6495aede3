"""``workers.load``: artifacts in every form it takes, and its argument checks, with fake
arrays (no GPU: the checks run before CuPy is imported)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from codegen import render
from scheduler_search.hardware import get_device
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import plan_sprogram
from workers import KernelArgumentError, LoadedKernel, load
from workers.kernels import describe_tensor

DEVICE = get_device("h200")


def _artifact(layout: str = "kn", dtype: str = "float16"):
    spec = GemmSpec(m=256, n=512, k=128, dtype=dtype, b_layout=layout)
    return render(plan_sprogram(spec, DEVICE, GEMM_WARP_SPECIALIZED), spec, DEVICE)


class FakeCupyArray:
    """Looks like a CuPy array to ``describe_tensor``."""

    def __init__(self, shape, dtype="float16", contiguous=True, ptr=0x7F0000000000):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.flags = SimpleNamespace(c_contiguous=contiguous)
        self.data = SimpleNamespace(ptr=ptr)
        self.strides = tuple(int(np.prod(self.shape[i + 1:])) * self.dtype.itemsize
                             for i in range(len(self.shape)))
        self.device = SimpleNamespace(id=0)
        self.__cuda_array_interface__ = {"shape": self.shape}


def test_load_takes_artifacts_dicts_json_and_the_api_body() -> None:
    artifact = _artifact()
    body = {"hash": artifact.hash, "schedule_hash": artifact.schedule_hash,
            "artifact": artifact.to_dict()}
    forms = [artifact, artifact.to_dict(), artifact.to_json(), artifact.to_json().encode(),
             body, json.dumps(body)]
    for form in forms:
        kernel = load(form)
        assert isinstance(kernel, LoadedKernel) and kernel.artifact == artifact
    assert [t.describe() for t in kernel.expected] == [
        "a (256x128 float16)", "b (128x512 float16)", "c (256x512 float16)"]
    assert "gemm" in repr(kernel) and artifact.schedule_hash[:12] in repr(kernel)
    with pytest.raises(ValueError, match="not a KernelArtifact"):
        load("{not json")
    with pytest.raises(ValueError, match="missing field"):
        load({"op": "gemm"})
    with pytest.raises(TypeError, match="takes a KernelArtifact"):
        load(42)


def test_contract_follows_the_b_layout_and_dtype() -> None:
    kernel = load(_artifact(layout="nk", dtype="bfloat16"))
    assert [(t.name, t.shape, t.dtype, t.role) for t in kernel.expected] == [
        ("a", (256, 128), "bfloat16", "input"),
        ("b", (512, 128), "bfloat16", "input"),
        ("c", (256, 512), "bfloat16", "output"),
    ]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, r"missing input tensor\(s\) \['a', 'b'\]; expected a \(256x128 float16\)"),
        (("A",), {}, r"missing input tensor\(s\) \['b'\]"),
        (("A", "B", "C"), {}, "takes 2 input tensor"),
        (("A", "B"), {"d": "D"}, "unknown tensor 'd'"),
        (("A", "B"), {"a": "A"}, "'a' given twice"),
    ],
)
def test_binding_errors_say_what_the_kernel_takes(args, kwargs, message) -> None:
    kernel = load(_artifact())
    names = {"A": FakeCupyArray((256, 128)), "B": FakeCupyArray((128, 512)),
             "C": FakeCupyArray((256, 512)), "D": FakeCupyArray((1,))}
    with pytest.raises(KernelArgumentError, match=message):
        kernel(*(names[a] for a in args), **{k: names[v] for k, v in kwargs.items()})


@pytest.mark.parametrize(
    ("a", "message"),
    [
        (FakeCupyArray((256, 128), dtype="float32"), "a: dtype float32, the kernel was tuned "
                                                     "for float16"),
        (FakeCupyArray((128, 256)), r"a: shape \(128, 256\), the kernel was tuned for "
                                    r"\(256, 128\)"),
        (FakeCupyArray((256, 128), contiguous=False), "a: must be contiguous and row-major"),
        (FakeCupyArray((256, 128), ptr=0x7F0000000008), "not 16-byte aligned"),
        (np.zeros((256, 128), dtype=np.float16), "a: is in host memory"),
        ([[0.0]], "expected a CuPy array or a torch tensor, got list"),
    ],
)
def test_tensor_errors_are_clear_and_nothing_is_launched(a, message) -> None:
    kernel = load(_artifact())
    with pytest.raises(KernelArgumentError, match=message):
        kernel(a, FakeCupyArray((128, 512)))
    assert not kernel.module.compiled  # never compiled, never launched


def test_output_passed_by_name_is_checked_too() -> None:
    kernel = load(_artifact())
    with pytest.raises(KernelArgumentError, match=r"c: shape \(256, 256\)"):
        kernel(FakeCupyArray((256, 128)), FakeCupyArray((128, 512)),
               c=FakeCupyArray((256, 256)))


def test_bfloat16_kernels_take_uint16_bits_from_cupy() -> None:
    kernel = load(_artifact(dtype="bfloat16"))
    with pytest.raises(KernelArgumentError, match="a uint16 array of bfloat16 bits"):
        kernel(FakeCupyArray((256, 128), dtype="float16"), FakeCupyArray((128, 512), "uint16"))
    info = describe_tensor(FakeCupyArray((2, 2), dtype="uint16"))
    assert info.dtype == "uint16" and info.on_device and info.kind == "cupy"


def test_fp8_kernels_take_scales_and_bytes_and_write_bfloat16() -> None:
    kernel = load(_artifact(layout="nk", dtype="float8_e4m3"))
    assert [(t.name, t.shape, t.dtype, t.role) for t in kernel.expected] == [
        ("a", (256, 128), "float8_e4m3", "input"),
        ("b", (512, 128), "float8_e4m3", "input"),
        ("scale_a", (1,), "float32", "input"),
        ("scale_b", (1,), "float32", "input"),
        ("c", (256, 512), "bfloat16", "output"),
    ]
    scales = (FakeCupyArray((1,), "float32"), FakeCupyArray((1,), "float32"))
    with pytest.raises(KernelArgumentError, match="dtype float16, the kernel was tuned for "
                                                  "float8_e4m3"):
        kernel(FakeCupyArray((256, 128), dtype="float16"), FakeCupyArray((512, 128), "uint8"),
               *scales)


def test_torch_like_tensors_are_described_from_their_attributes() -> None:
    class Tensor:  # what describe_tensor reads of a torch tensor
        __module__ = "torch"
        shape = (4, 8)
        dtype = "torch.bfloat16"
        device = SimpleNamespace(type="cuda")

        def is_contiguous(self) -> bool:
            return True

        def data_ptr(self) -> int:
            return 4096

    info = describe_tensor(Tensor())
    assert (info.dtype, info.shape, info.kind, info.on_device) == ("bfloat16", (4, 8), "torch",
                                                                   True)
