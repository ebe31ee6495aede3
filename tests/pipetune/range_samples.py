"""Hand-made range artifacts for tests without a GPU: GEMM launch contracts that take m at
run time (pointers to a, b and c, an ``M`` scalar, their size slots), with no kernel text
to compile."""

from __future__ import annotations

from dataclasses import asdict
from types import SimpleNamespace

from codegen.artifact import (
    KernelArtifact,
    RangeArtifact,
    RangeBucket,
    ScalarArg,
    SizeSlot,
    TensorArg,
)
from scheduler_search.ops import workload_tensors

N, K = 512, 256
FIXED = {"n": N, "k": K, "dtype": "float16", "b_layout": "kn"}


def runtime_m_kernel(m: int, name: str) -> KernelArtifact:
    """A launch contract taking m at run time: pointers to a, b and c, and ``M``."""
    params = {"m": m, **FIXED}
    args = [TensorArg(t.name, t.dtype, t.shape, t.role) for t in workload_tensors("gemm", params)]
    slots = [SizeSlot("m", "a", "shape", 0), SizeSlot("m", "c", "shape", 0),
             SizeSlot("m", "M", "value")]
    return KernelArtifact(op="gemm", params=params, schedule_hash=name * 64, source=f"// {name}",
                          entry="gemm", grid=(132, 1, 1), block=(384, 1, 1),
                          dynamic_smem_bytes=0, args=(*args, ScalarArg("M", "int32", m)),
                          extra={"size_slots": [asdict(s) for s in slots]})


def range_dict(low: int = 1, edge: int = 64, high: int = 4096) -> dict:
    """A GEMM range over m in ``low..high``: buckets ``low..edge`` (schedule ``a...``) and
    ``edge+1..high`` (schedule ``b...``), as ``RangeArtifact.to_dict`` gives it."""
    return RangeArtifact(
        op="gemm", params={"m": {"min": low, "max": high}, **FIXED}, dim="m",
        size_from=("a", 0),
        buckets=(RangeBucket(low, edge, runtime_m_kernel(edge, "a")),
                 RangeBucket(edge + 1, high, runtime_m_kernel(high, "b")))).to_dict()


#: A self-attention workload in PyTorch's layout (what the SDPA drop-in asks for).
ATTENTION = {"batch": 1, "heads": 8, "kv_heads": 2, "head_dim": 64, "causal": False,
             "dtype": "float16", "layout": "bhsd"}
BOTH = ("seq_q", "seq_kv")


def runtime_seq_kernel(seq: int, name: str) -> KernelArtifact:
    """A launch contract taking seq_q and seq_kv at run time: pointers to q, k, v, o and
    lse (their sequence axes as size slots), ``SEQ_Q`` and ``SEQ_KV``."""
    params = {**ATTENTION, "seq_q": seq, "seq_kv": seq}
    args = [TensorArg(t.name, t.dtype, t.shape, t.role)
            for t in workload_tensors("attention", params)]
    slots = [SizeSlot("seq_q", name_, "shape", 2) for name_ in ("q", "o", "lse")]
    slots += [SizeSlot("seq_kv", name_, "shape", 2) for name_ in ("k", "v")]
    slots += [SizeSlot(dim, dim.upper(), "value") for dim in BOTH]
    scalars = [ScalarArg(dim.upper(), "int32", seq) for dim in BOTH]
    return KernelArtifact(op="attention", params=params, schedule_hash=name * 64,
                          source=f"// {name}", entry="attention", grid=(132, 1, 1),
                          block=(384, 1, 1), dynamic_smem_bytes=0, args=(*args, *scalars),
                          extra={"size_slots": [asdict(s) for s in slots]})


def attention_range_dict(low: int = 128, edge: int = 511, high: int = 2048) -> dict:
    """A self-attention range (seq_kv tied to seq_q) over ``low..high``: buckets
    ``low..edge`` (schedule ``a...``) and ``edge+1..high`` (``b...``)."""
    seq = {"min": low, "max": high}
    return RangeArtifact(
        op="attention", params={**ATTENTION, "seq_q": seq, "seq_kv": seq}, dim="seq_q",
        size_from=("q", 2), tied=(("seq_kv", "k", 2),),
        buckets=(RangeBucket(low, edge, runtime_seq_kernel(edge, "a")),
                 RangeBucket(edge + 1, high, runtime_seq_kernel(high, "b")))).to_dict()


class FakeTensor:
    """What the drop-ins read of a CUDA tensor: shape, dtype, device, layout."""

    def __init__(self, shape, dtype="float16"):
        self.shape = tuple(shape)
        self.dtype = f"torch.{dtype}"
        self.device = SimpleNamespace(type="cuda", index=0)

    def dim(self) -> int:
        return len(self.shape)

    def is_contiguous(self) -> bool:
        return True
