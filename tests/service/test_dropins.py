"""``pipetune.torch``'s drop-ins without a GPU (stand-in tensors and torch): a cached
workload runs the tuned kernel, looked up once per workload; a miss runs PyTorch's op and,
with ``tune_on_miss``, is tuned once, after which the next call runs the tuned kernel; a
transposed B is recognised as the ``nk`` layout and handed over as its row-major matrix."""

from __future__ import annotations

import sys
import time
from types import SimpleNamespace

import pytest

import pipetune.torch as pt


class FakeTensor:
    def __init__(self, shape, dtype="float16", transposed_of=None):
        self.shape = tuple(shape)
        self.dtype = f"torch.{dtype}"
        self.device = SimpleNamespace(type="cuda", index=0)
        self._transposed_of = transposed_of

    def dim(self) -> int:
        return len(self.shape)

    def is_contiguous(self) -> bool:
        return self._transposed_of is None

    def t(self) -> FakeTensor:
        if self._transposed_of is not None:
            return self._transposed_of
        return FakeTensor(self.shape[::-1], self.dtype.removeprefix("torch."), self)


@pytest.fixture
def torch_calls(monkeypatch: pytest.MonkeyPatch) -> list:
    calls: list = []
    fake = SimpleNamespace(matmul=lambda a, b: calls.append(("matmul", a, b)) or "torch")
    monkeypatch.setitem(sys.modules, "torch", fake)
    return calls


@pytest.fixture
def loaded(monkeypatch: pytest.MonkeyPatch) -> list:
    """``load`` stands in for the GPU: the kernel records what it is called with."""
    calls: list = []

    def load(artifact):
        return lambda *tensors: calls.append((artifact["hash"], tensors)) or "tuned"

    monkeypatch.setattr(pt, "load", load)
    return calls


def test_a_cached_workload_runs_the_tuned_kernel_looked_up_once(torch_calls, loaded) -> None:
    lookups = []

    def lookup(op, params, device):
        lookups.append((op, params, device))
        return {"hash": "k1"}

    drop = pt.DropIns(lookup=lookup)
    a, b = FakeTensor((256, 128)), FakeTensor((128, 512))
    assert [drop.gemm(a, b) for _ in range(3)] == ["tuned"] * 3
    assert lookups == [("gemm", {"m": 256, "n": 512, "k": 128, "dtype": "float16",
                                 "b_layout": "kn"}, 0)]
    assert len(loaded) == 3 and not torch_calls


def test_a_transposed_b_is_the_nk_layout(torch_calls, loaded) -> None:
    seen = []
    drop = pt.DropIns(lookup=lambda op, params, device: seen.append(params) or {"hash": "k"})
    b_rows = FakeTensor((512, 128))  # N x K, row-major
    a = FakeTensor((256, 128))
    assert drop.gemm(a, b_rows.t()) == "tuned"
    assert seen[0]["b_layout"] == "nk" and seen[0]["n"] == 512
    assert loaded[0][1][1] is b_rows  # the kernel reads the row-major N x K matrix


def test_a_miss_falls_back_and_is_tuned_for_the_next_call(torch_calls, loaded) -> None:
    cache: dict = {}
    tunes = []

    def tuner(op, params, device):
        tunes.append(op)
        cache["gemm"] = {"hash": "fresh"}

    drop = pt.DropIns(lookup=lambda op, params, device: cache.get(op), tuner=tuner,
                      tune_on_miss=True)
    a, b = FakeTensor((64, 64)), FakeTensor((64, 64))
    assert drop.gemm(a, b) == "torch" and torch_calls
    deadline = time.monotonic() + 5
    while drop._tuning or tunes == []:  # the background tune
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert drop.gemm(a, b) == "tuned" and loaded[0][0] == "fresh"
    assert tunes == ["gemm"]


def test_unsupported_tensors_go_to_torch(torch_calls, loaded) -> None:
    drop = pt.DropIns(lookup=lambda *a: pytest.fail("no lookup for an unsupported call"))
    assert drop.gemm(FakeTensor((64, 64), "float32"), FakeTensor((64, 64), "float32")) == "torch"
    assert drop.gemm(FakeTensor((64, 64)), FakeTensor((64, 64), "bfloat16")) == "torch"
