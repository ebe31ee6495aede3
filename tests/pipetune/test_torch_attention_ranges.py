"""``pipetune.torch`` with a tuned self-attention range, without a GPU (stand-in tensors,
torch and launches): the SDPA drop-in finds the range holding ``seq_q = seq_kv`` once per
fixed workload and runs every later length through it, while lengths that differ go to
the exact lookup, then to PyTorch; ``register`` of the range gives an op whose fake
``(o, lse)`` follow the query length; 8-bit q, k, v bring their scales."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from range_samples import ATTENTION, FakeTensor, attention_range_dict, runtime_seq_kernel

import pipetune.torch as pt
from codegen.artifact import RangeArtifact
from workers import LoadedKernel

H, HKV, D = ATTENTION["heads"], ATTENTION["kv_heads"], ATTENTION["head_dim"]


def _qkv(seq_q: int, seq_kv: int | None = None) -> tuple[FakeTensor, ...]:
    seq_kv = seq_q if seq_kv is None else seq_kv
    return (FakeTensor((1, H, seq_q, D)), FakeTensor((1, HKV, seq_kv, D)),
            FakeTensor((1, HKV, seq_kv, D)))


@pytest.fixture
def torch_calls(monkeypatch: pytest.MonkeyPatch) -> list:
    calls: list = []
    functional = SimpleNamespace(scaled_dot_product_attention=lambda q, k, v, **kw: calls.append(
        (q.shape[2], k.shape[2])) or "torch")
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace())
    monkeypatch.setitem(sys.modules, "torch.nn", SimpleNamespace(functional=functional))
    monkeypatch.setitem(sys.modules, "torch.nn.functional", functional)
    return calls


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list:
    """Each launch as (the schedule's first letter, seq_q and seq_kv bound)."""
    made: list = []

    def launch(self, *tensors):
        params = self.artifact.params
        made.append((self.artifact.schedule_hash[0], params["seq_q"], params["seq_kv"]))
        return ("o", "lse")

    monkeypatch.setattr(LoadedKernel, "__call__", launch)
    return made


def test_the_drop_in_runs_every_equal_length_through_the_tied_range(torch_calls,
                                                                    launches) -> None:
    range_asks, exact_asks = [], []

    def range_lookup(op, params, device):
        range_asks.append((params["seq_q"], params["seq_kv"]))
        return attention_range_dict() if params["seq_q"] == params["seq_kv"] else None

    drop = pt.DropIns(lookup=lambda *a: exact_asks.append(a), range_lookup=range_lookup)
    for seq in (300, 128, 511, 512, 2048, 300):
        assert drop.attention(*_qkv(seq)) == "o"
    assert range_asks == [(300, 300)] and not exact_asks and not torch_calls
    assert launches == [("b" if s > 511 else "a", s, s) for s in (300, 128, 511, 512, 2048, 300)]
    # Lengths that differ are not the range's: the exact lookup, then PyTorch's SDPA.
    assert drop.attention(*_qkv(300, 1000)) == "torch"
    assert len(exact_asks) == 1 and torch_calls == [(300, 1000)]


def test_register_a_tied_range_gives_outputs_that_follow_the_length(monkeypatch,
                                                                    launches) -> None:
    library = SimpleNamespace(custom_op=lambda qualname, mutates_args, schema: (
        lambda fn: SimpleNamespace(qualname=qualname, schema=schema, fn=fn,
                                   register_fake=lambda fake: setattr(ops, "fake", fake))))
    ops = SimpleNamespace()
    fake_torch = SimpleNamespace(
        library=library, float16="f16", float32="f32",
        empty=lambda shape, dtype, device: SimpleNamespace(shape=shape, dtype=dtype))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    data = attention_range_dict()
    op = pt.register(data)
    assert op.qualname == f"pipetune::attention_range_{RangeArtifact.from_dict(data).hash[:12]}"
    assert op.schema == "(Tensor q, Tensor k, Tensor v) -> (Tensor, Tensor)"
    for seq in (128, 1000, 2048):
        q, k, v = _qkv(seq)
        q.device = SimpleNamespace(type="cuda", index=0)
        o, lse = ops.fake(q, k, v)
        assert (o.shape, o.dtype) == ((1, H, seq, D), "f16")
        assert (lse.shape, lse.dtype) == ((1, H, seq), "f32")
    assert op.fn(*_qkv(1000)) == ("o", "lse") and launches == [("b", 1000, 1000)]


def test_8_bit_attention_passes_its_scales_or_widens_them_for_pytorch(monkeypatch) -> None:
    """float8_e4m3fn q, k, v: a tuned FP8 kernel gets the three scales after them; without
    one, PyTorch's SDPA runs on bf16 copies times the scales; no scales is a ValueError."""
    seen: list = []

    class Scaled(FakeTensor):
        name = ""

        def to(self, dtype):
            copy = Scaled(self.shape, "bfloat16")
            copy.name = self.name
            return copy

        def __mul__(self, scale):
            seen.append(scale.name)
            return self

    sdpa: list = []
    functional = SimpleNamespace(scaled_dot_product_attention=lambda q, k, v, **kw: sdpa.append(
        (q.dtype, kw["enable_gqa"])) or "torch")
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(bfloat16="bfloat16"))
    monkeypatch.setitem(sys.modules, "torch.nn", SimpleNamespace(functional=functional))
    monkeypatch.setitem(sys.modules, "torch.nn.functional", functional)
    monkeypatch.setattr(LoadedKernel, "__call__", lambda self, *tensors: (len(tensors), "lse"))
    q, k, v = (Scaled(t.shape, "float8_e4m3fn") for t in _qkv(256))
    scales = []
    for name in ("q_scale", "k_scale", "v_scale"):
        scales.append(Scaled((1,), "float32"))
        scales[-1].name = name
    asked: list = []

    def lookup(op, params, device):
        asked.append(params["dtype"])
        return runtime_seq_kernel(256, "a").to_dict() if len(asked) == 1 else None

    drop = pt.DropIns(lookup=lookup, range_lookup=lambda *a: None)
    assert drop.attention(q, k, v, scales=tuple(scales)) == 6  # q, k, v and their scales
    other = pt.DropIns(lookup=lookup, range_lookup=lambda *a: None)
    assert other.attention(q, k, v, scales=tuple(scales)) == "torch"
    assert seen == ["q_scale", "k_scale", "v_scale"] and sdpa == [("torch.bfloat16", True)]
    assert asked == ["float8_e4m3", "float8_e4m3"]
    with pytest.raises(ValueError, match="scales"):
        other.attention(q, k, v)
