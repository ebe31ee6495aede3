"""``load`` of a self-attention RangeArtifact without a GPU (the stand-in CuPy of
``launch_fakes``): seq_kv tied to seq_q, so a call reads the length from ``q``, requires
``k`` to have as many positions, picks the length's bucket and launches its kernel bound
to both lengths (the ``SEQ_Q`` and ``SEQ_KV`` scalars, the tensor maps' extents); it
returns ``(o, lse)`` shaped by the length. The kernels are the code generator's, taking
both lengths at run time, planned at the range's top (2048)."""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pytest
from launch_fakes import FakeArray, FakeCupy, FakeLaunch

from codegen import render
from codegen.artifact import RangeArtifact, RangeBucket
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.space.designs import FLASH_ATTENTION_3
from scheduler_search.sprogram import plan_sprogram
from workers import KernelArgumentError, RangeKernel, load
from workers import kernels as kernels_module

DEVICE = get_device("h200")
BOTH = ("seq_q", "seq_kv")
B, H, HKV, D, HIGH, EDGE = 1, 8, 2, 128, 2048, 511
FIXED = {"batch": B, "heads": H, "kv_heads": HKV, "head_dim": D, "causal": True,
         "dtype": "float16", "layout": "bshd"}
#: The FlashAttention-3 design as a range run plans it: persistent, st.global stores.
DESIGN = {**FLASH_ATTENTION_3, "persistent": True, "map_store": "cuda_core"}


def _kernel(**choices: object):
    spec = parse_spec("attention", {**FIXED, "seq_q": HIGH, "seq_kv": HIGH})
    sprogram = replace(plan_sprogram(spec, DEVICE, {**DESIGN, **choices}), runtime_dims=BOTH)
    return render(sprogram, spec, DEVICE)


def tied_range() -> RangeArtifact:
    """128..511: a tile_kv 64 kernel; 512..2048: the design's."""
    seq = {"min": 128, "max": HIGH}
    return RangeArtifact(
        op="attention", params={**FIXED, "seq_q": seq, "seq_kv": seq}, dim="seq_q",
        size_from=("q", 1), tied=(("seq_kv", "k", 1),),
        buckets=(RangeBucket(128, EDGE, _kernel(tile_kv=64, stages_k=3, stages_v=3)),
                 RangeBucket(EDGE + 1, HIGH, _kernel(), 1.01)))


RANGE = tied_range()


@pytest.fixture
def cupy(monkeypatch: pytest.MonkeyPatch) -> FakeCupy:
    fake = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(kernels_module, "DriverLaunch", lambda *args: FakeLaunch(fake, *args))
    monkeypatch.setattr("workers.tensor_maps.encode_tensor_map",
                        lambda arg, data_ptr: np.full(16, data_ptr, dtype=np.uint64))
    return fake


def _qkv(seq_q: int, seq_kv: int | None = None) -> tuple[FakeArray, FakeArray, FakeArray]:
    seq_kv = seq_q if seq_kv is None else seq_kv
    base = 0x7F0000000000
    return (FakeArray((B, seq_q, H, D), base), FakeArray((B, seq_kv, HKV, D), base + (1 << 28)),
            FakeArray((B, seq_kv, HKV, D), base + (2 << 28)))


def _scalars(cupy: FakeCupy, kernel: RangeKernel, size: int) -> dict[str, int]:
    """The size scalars of the last launch."""
    artifact = kernel.kernel_for(size).artifact
    *_, params = cupy.launches[-1]
    values = dict(zip((a.name for a in artifact.args), params.values, strict=True))
    return {name: int(values[name]) for name in ("SEQ_Q", "SEQ_KV")}


def test_the_tied_artifact_round_trips_and_a_gemm_range_keeps_its_json() -> None:
    data = RANGE.to_dict()
    assert data["tied"] == [["seq_kv", "k", 1]]
    assert RangeArtifact.from_dict(data) == RANGE and RANGE.dims == BOTH
    untied = replace(RANGE, tied=())
    assert "tied" not in untied.to_dict()
    bound = RANGE.kernel_at(300)
    assert bound.params["seq_q"] == bound.params["seq_kv"] == 300


@pytest.mark.parametrize(("size", "bucket"), [(128, 0), (200, 0), (EDGE, 0), (EDGE + 1, 1),
                                              (1000, 1), (HIGH, 1)])
def test_a_call_launches_its_bucket_bound_to_both_lengths(cupy, size: int,
                                                          bucket: int) -> None:
    kernel = load(RANGE.to_json())
    assert isinstance(kernel, RangeKernel)
    o, lse = kernel(*_qkv(size))
    assert o.shape == (B, size, H, D) and lse.shape == (B, H, size)
    assert kernel.bucket_of(size) is kernel.artifact.buckets[bucket]
    bound = kernel.kernel_for(size).artifact
    assert bound == RANGE.buckets[bucket].kernel.at_sizes({"seq_q": size, "seq_kv": size})
    assert _scalars(cupy, kernel, size) == {"SEQ_Q": size, "SEQ_KV": size}
    (_, grid, block, _, _, _), = cupy.launches
    assert (grid, block) == (RANGE.buckets[bucket].kernel.grid, RANGE.buckets[bucket].kernel.block)


def test_k_of_another_length_is_refused_before_anything_is_launched(cupy) -> None:
    kernel = load(RANGE)
    with pytest.raises(KernelArgumentError, match=r"k.shape\[1\] = 1000, q.shape\[1\] = 300: "
                                                  r".*ties seq_kv to seq_q"):
        kernel(*_qkv(300, 1000))
    q, k, v = _qkv(300, 1000)
    with pytest.raises(KernelArgumentError, match="ties seq_kv"):
        kernel(q=q, k=k, v=v)
    with pytest.raises(KernelArgumentError, match=r"seq_q=4096 is outside the tuned range"):
        kernel(*_qkv(4096))
    assert not cupy.launches and not cupy.compiled


def test_the_range_covers_equal_lengths_only_and_describes_its_tie() -> None:
    kernel = load(RANGE)
    exact = {**FIXED, "seq_q": 300, "seq_kv": 300}
    assert kernel.covers(exact)
    assert not kernel.covers({**exact, "seq_kv": 301})
    assert not kernel.covers({**exact, "seq_q": 4096, "seq_kv": 4096})
    assert not kernel.covers({**exact, "causal": False})
    text = repr(kernel)
    assert "attention seq_q = seq_kv in 128..2048" in text and "size from q.shape[1]" in text
    assert [t.shape_at(300) for t in kernel.outputs] == [(B, 300, H, D), (B, H, 300)]
    assert [t.shape_at(300) for t in kernel.inputs][1] == (B, 300, HKV, D)
