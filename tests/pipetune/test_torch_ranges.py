"""``pipetune.torch`` with tuned ranges, without a GPU (stand-in tensors, torch and
launches): a drop-in finds the range holding a GEMM's m once per (n, k, dtype, layout,
GPU) and dispatches later calls of other m through it without asking again; a size the
range misses goes to the exact lookup, then to PyTorch; ``register`` of a range gives an
op whose fake outputs follow the input's m.

The range's kernels are hand-made launch contracts (``range_samples``: no kernel text is
compiled or run): ``LoadedKernel.__call__`` stands in for the launch and records the size
it was bound to.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from range_samples import FIXED, FakeTensor, K, N, range_dict

import pipetune.torch as pt
from codegen.artifact import RangeArtifact
from workers import LoadedKernel, RangeKernel


@pytest.fixture
def torch_calls(monkeypatch: pytest.MonkeyPatch) -> list:
    calls: list = []
    fake = SimpleNamespace(matmul=lambda a, b: calls.append(("matmul", a.shape)) or "torch")
    monkeypatch.setitem(sys.modules, "torch", fake)
    return calls


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list:
    """Each launch as (the schedule's first letter, the size the kernel is bound to)."""
    made: list = []
    monkeypatch.setattr(LoadedKernel, "__call__", lambda self, *tensors: made.append(
        (self.artifact.schedule_hash[0], self.artifact.params["m"])) or "tuned")
    return made


def _gemm(drop: pt.DropIns, m: int):
    return drop.gemm(FakeTensor((m, K)), FakeTensor((K, N)))


def test_a_range_is_found_once_and_dispatches_every_m(torch_calls, launches) -> None:
    range_asks, exact_asks = [], []

    def range_lookup(op, params, device):
        range_asks.append((op, params, device))
        return range_dict()

    drop = pt.DropIns(lookup=lambda *a: exact_asks.append(a), range_lookup=range_lookup)
    sizes = [300, 1, 64, 65, 4096, 300, 17]
    assert [_gemm(drop, m) for m in sizes] == ["tuned"] * len(sizes)
    assert range_asks == [("gemm", {"m": 300, **FIXED}, 0)]  # once, with the exact params
    assert not exact_asks and not torch_calls
    assert launches == [("b", 300), ("a", 1), ("a", 64), ("b", 65), ("b", 4096), ("b", 300),
                        ("a", 17)]
    (kernel,) = next(iter(drop._ranges.values()))
    assert isinstance(kernel, RangeKernel) and sorted(kernel._kernels) == [1, 17, 64, 65, 300,
                                                                           4096]


def test_another_n_is_another_range_lookup(torch_calls, launches) -> None:
    asks = []
    drop = pt.DropIns(lookup=lambda *a: None,
                      range_lookup=lambda op, params, device: asks.append(params["n"]) or (
                          range_dict() if params["n"] == N else None))
    assert _gemm(drop, 8) == "tuned"
    assert drop.gemm(FakeTensor((8, K)), FakeTensor((K, 1024))) == "torch"
    assert drop.gemm(FakeTensor((9, K)), FakeTensor((K, 1024))) == "torch"
    assert asks == [N, 1024]  # a miss is remembered for the fixed workload too


def test_a_size_outside_the_range_goes_to_the_exact_lookup_then_to_torch(
    torch_calls, launches, monkeypatch
) -> None:
    range_asks, exact_asks = [], []

    def range_lookup(op, params, device):
        range_asks.append(params["m"])
        return range_dict(high=4096) if params["m"] <= 4096 else None

    def lookup(op, params, device):
        exact_asks.append(params["m"])
        return {"exact": params["m"]} if params["m"] == 5000 else None

    drop = pt.DropIns(lookup=lookup, range_lookup=range_lookup)
    exact = []
    load = pt.load
    monkeypatch.setattr(pt, "load", lambda artifact: (
        lambda *t: exact.append(artifact) or "exact") if "exact" in artifact else load(artifact))
    assert _gemm(drop, 100) == "tuned"
    assert _gemm(drop, 5000) == "exact" and _gemm(drop, 5000) == "exact"
    assert _gemm(drop, 9000) == "torch" and _gemm(drop, 9000) == "torch"
    assert _gemm(drop, 200) == "tuned"
    # The range was asked for at 100, and again once for each size it misses.
    assert range_asks == [100, 5000, 9000] and exact_asks == [5000, 9000]
    assert exact == [{"exact": 5000}] * 2 and torch_calls == [("matmul", (9000, K))] * 2


def test_a_second_range_holds_the_sizes_the_first_misses(torch_calls, launches) -> None:
    def range_lookup(op, params, device):
        return range_dict(1, 64, 4096) if params["m"] <= 4096 else range_dict(4097, 8000, 16384)

    drop = pt.DropIns(lookup=lambda *a: pytest.fail("no exact lookup"),
                      range_lookup=range_lookup)
    for m in (10, 10000, 20, 16384, 4097):
        assert _gemm(drop, m) == "tuned"
    assert [len(r) for r in drop._ranges.values()] == [2]
    assert launches == [("a", 10), ("b", 10000), ("a", 20), ("b", 16384), ("a", 4097)]


def test_given_only_an_exact_lookup_no_range_is_asked_for(torch_calls, launches,
                                                          monkeypatch) -> None:
    monkeypatch.setattr(pt.DropIns, "_range_lookup_local",
                        lambda *a: pytest.fail("the local cache was asked"))
    drop = pt.DropIns(lookup=lambda *a: None)
    assert _gemm(drop, 64) == "torch"


class FakeOp:
    """What ``torch.library.custom_op`` returns: the op, and its fake once registered."""

    def __init__(self, qualname: str, schema: str, fn) -> None:
        self.qualname, self.schema, self.fn, self.fake = qualname, schema, fn, None

    def register_fake(self, fake):
        self.fake = fake
        return fake

    def __call__(self, *tensors):
        return self.fn(*tensors)


def test_register_a_range_gives_outputs_that_follow_m(monkeypatch, launches) -> None:
    library = SimpleNamespace(custom_op=lambda qualname, mutates_args, schema: (
        lambda fn: FakeOp(qualname, schema, fn)))
    fake_torch = SimpleNamespace(
        library=library, float16="f16",
        empty=lambda shape, dtype, device: SimpleNamespace(shape=shape, dtype=dtype,
                                                           device=device))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    data = range_dict()
    op = pt.register(data)
    assert op.qualname == f"pipetune::gemm_range_{RangeArtifact.from_dict(data).hash[:12]}"
    assert op.schema == "(Tensor a, Tensor b) -> Tensor"
    for m in (1, 300, 4096):
        out = op.fake(FakeTensor((m, K)), FakeTensor((K, N)))
        assert (out.shape, out.dtype) == ((m, N), "f16")
    assert op(FakeTensor((300, K)), FakeTensor((K, N))) == "tuned"
    assert launches == [("b", 300)]
    assert pt.register(data, name="mine").qualname == "pipetune::mine"
