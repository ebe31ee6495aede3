"""Workload tensors: the per-operator launch contract and seeded random inputs.

The contract (names, shapes, roles, fixed dtypes) mirrors the table in
``codegen/artifact.py``. Inputs are realistic and never zero: GEMM and attention
operands are scaled standard normals; Mamba2 gets small positive ``dt``, a negative ``A``
per head folded into ``dA_cumsum`` (the cumulative sum over each chunk of ``dt * A``),
``cb`` computed as C·Bᵀ per chunk, and a standard-normal skip weight ``D`` per head (a
zero ``D`` would leave the chunk scan's ``D·x`` term unchecked). Everything is written
against an array module ``xp`` so the same code builds inputs on the GPU (CuPy) and in CPU
tests (NumPy).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from workers import _dtypes

FLOAT32 = "float32"
MAMBA2_OPS = ("mamba2_chunk_state", "mamba2_chunk_scan")
OPS = ("gemm", "attention", *MAMBA2_OPS)


@dataclass(frozen=True)
class TensorSpec:
    """One workload tensor as the operator contract defines it.

    ``dtypes`` lists the element types the contract allows; the artifact's TensorArg picks
    one of them (most tensors allow exactly one).
    """

    name: str
    shape: tuple[int, ...]
    dtypes: tuple[str, ...]
    role: str
    #: Relative-L2 bound of an output checked tighter than its inputs' dtypes allow.
    rel_error_bound: float | None = None

    @property
    def default_dtype(self) -> str:
        return self.dtypes[0]


def attention_shape(params: dict[str, Any], seq: int, heads: int) -> tuple[int, ...]:
    """q/k/v/o of attention: (batch, seq, heads, head_dim) for layout ``bshd`` (the default),
    (batch, heads, seq, head_dim) for ``bhsd``."""
    if params.get("layout", "bshd") == "bhsd":
        return (params["batch"], heads, seq, params["head_dim"])
    return (params["batch"], seq, heads, params["head_dim"])


#: The log-sum-exp is a per-row statistic in fp32: held to 1e-3 whatever the input dtype.
LSE_REL_ERROR_BOUND = 1e-3


def contract(op: str, params: dict[str, Any]) -> dict[str, TensorSpec]:
    """The tensors of ``op`` in launch-contract order, keyed by name."""
    dt = params["dtype"]
    if op == "gemm":
        m, n, k = params["m"], params["n"], params["k"]
        b_shape = (k, n) if params.get("b_layout", "kn") == "kn" else (n, k)
        specs = [
            TensorSpec("a", (m, k), (dt,), "input"),
            TensorSpec("b", b_shape, (dt,), "input"),
            TensorSpec("c", (m, n), (dt,), "output"),
        ]
    elif op == "attention":
        batch = params["batch"]
        q_shape = attention_shape(params, params["seq_q"], params["heads"])
        kv_shape = attention_shape(params, params["seq_kv"], params["kv_heads"])
        specs = [
            TensorSpec("q", q_shape, (dt,), "input"),
            TensorSpec("k", kv_shape, (dt,), "input"),
            TensorSpec("v", kv_shape, (dt,), "input"),
            TensorSpec("o", q_shape, (dt,), "output"),
            # log-sum-exp of each query row's scaled scores (natural log), as FlashAttention
            # returns it for the backward pass.
            TensorSpec("lse", (batch, params["heads"], params["seq_q"]), (FLOAT32,), "output",
                       rel_error_bound=LSE_REL_ERROR_BOUND),
        ]
    elif op in MAMBA2_OPS:
        specs = _mamba2_contract(op, params, dt)
    else:
        raise ValueError(f"unknown operator {op!r}")
    return {spec.name: spec for spec in specs}


def _mamba2_contract(op: str, params: dict[str, Any], dt: str) -> list[TensorSpec]:
    batch, seqlen = params["batch"], params["seqlen"]
    nheads, headdim = params["nheads"], params["headdim"]
    dstate, ngroups, chunk = params["dstate"], params["ngroups"], params["chunk_size"]
    nchunks = math.ceil(seqlen / chunk)
    per_chunk = (batch, nheads, nchunks, chunk)
    states = (batch, nchunks, nheads, headdim, dstate)
    x = TensorSpec("x", (batch, seqlen, nheads, headdim), (dt,), "input")
    dt_spec = TensorSpec("dt", per_chunk, (FLOAT32,), "input")
    da_spec = TensorSpec("dA_cumsum", per_chunk, (FLOAT32,), "input")
    if op == "mamba2_chunk_state":
        return [
            TensorSpec("b", (batch, seqlen, ngroups, dstate), (dt,), "input"),
            x,
            dt_spec,
            da_spec,
            TensorSpec("states", states, (FLOAT32,), "output"),
        ]
    return [
        TensorSpec("cb", (batch, nchunks, ngroups, chunk, chunk), (FLOAT32,), "input"),
        x,
        dt_spec,
        da_spec,
        TensorSpec("c", (batch, seqlen, ngroups, dstate), (dt,), "input"),
        # The spec's dtype first (what the chunk-state/state-passing step hands mamba_ssm's
        # scan), so a kernel that reads states through a tensor map and a peer agree on it.
        TensorSpec("states", states, _unique((dt, FLOAT32)), "input"),
        TensorSpec("D", (nheads,), (FLOAT32,), "input"),
        TensorSpec("out", (batch, seqlen, nheads, headdim), _unique((dt, FLOAT32)), "output"),
    ]


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def check_tensor_args(
    op: str, params: dict[str, Any], tensor_args: Iterable[Any]
) -> dict[str, str]:
    """Check an artifact's TensorArgs against the contract; return the dtype of each tensor.

    Tensors the artifact does not name keep the contract's default dtype (a kernel may
    ignore an input). Raises ``ValueError`` naming the first disagreement.
    """
    specs = contract(op, params)
    dtypes = {name: spec.default_dtype for name, spec in specs.items()}
    for arg in tensor_args:
        spec = specs.get(arg.name)
        if spec is None:
            raise ValueError(f"tensor {arg.name!r} is not part of the {op} contract")
        if tuple(arg.shape) != spec.shape:
            raise ValueError(
                f"tensor {arg.name!r} has shape {tuple(arg.shape)}, expected {spec.shape}"
            )
        if arg.dtype not in spec.dtypes:
            raise ValueError(
                f"tensor {arg.name!r} has dtype {arg.dtype}, expected one of {spec.dtypes}"
            )
        if arg.role != spec.role:
            raise ValueError(f"tensor {arg.name!r} has role {arg.role}, expected {spec.role}")
        dtypes[arg.name] = arg.dtype
    return dtypes


def build_inputs(
    xp: Any, op: str, params: dict[str, Any], dtypes: dict[str, str], seed: int
) -> dict[str, Any]:
    """Seeded random input tensors (in storage dtype) for every input of the contract."""
    rng = xp.random.default_rng(seed)
    specs = contract(op, params)

    def normal(name: str, scale: float) -> Any:
        spec = specs[name]
        values = rng.standard_normal(spec.shape, dtype=xp.float32) * xp.float32(scale)
        return _dtypes.from_float32(xp, values, dtypes[name])

    if op == "gemm":
        return {"a": normal("a", 0.5), "b": normal("b", 0.5)}
    if op == "attention":
        return {"q": normal("q", 1.0), "k": normal("k", 1.0), "v": normal("v", 1.0)}

    dt, da_cumsum = _mamba2_dt_and_cumsum(xp, rng, params)
    tensors = {"x": normal("x", 0.5), "dt": dt, "dA_cumsum": da_cumsum}
    if op == "mamba2_chunk_state":
        tensors["b"] = normal("b", 0.5)
        return tensors
    tensors["c"] = normal("c", 0.5)
    tensors["states"] = normal("states", 0.5)
    b_for_cb = rng.standard_normal(specs["c"].shape, dtype=xp.float32) * xp.float32(0.5)
    c32 = _dtypes.to_float32(xp, tensors["c"], dtypes["c"])
    tensors["cb"] = chunked_cb(xp, c32, b_for_cb, params["chunk_size"])
    # Drawn last, so the other tensors stay those of the same seed before D existed.
    tensors["D"] = normal("D", 1.0)
    return tensors


def _mamba2_dt_and_cumsum(xp: Any, rng: Any, params: dict[str, Any]) -> tuple[Any, Any]:
    """dt ~ U(0.01, 0.1) (zero past ``seqlen``) and its within-chunk cumsum of dt·A, A < 0."""
    batch, seqlen, nheads = params["batch"], params["seqlen"], params["nheads"]
    chunk = params["chunk_size"]
    nchunks = math.ceil(seqlen / chunk)
    dt = rng.random((batch, nheads, nchunks, chunk), dtype=xp.float32)
    dt = dt * xp.float32(0.09) + xp.float32(0.01)
    position = xp.arange(nchunks * chunk).reshape(nchunks, chunk)
    dt = xp.where(position < seqlen, dt, xp.float32(0.0)).astype(xp.float32)
    a_per_head = -(rng.random((nheads,), dtype=xp.float32) * xp.float32(1.5) + xp.float32(0.5))
    da_cumsum = xp.cumsum(dt * a_per_head[None, :, None, None], axis=-1).astype(xp.float32)
    return xp.ascontiguousarray(dt), xp.ascontiguousarray(da_cumsum)


def chunked_cb(xp: Any, c32: Any, b32: Any, chunk: int) -> Any:
    """cb[b, c, g, l, s] = Σ_n C[b, cL+l, g, n] · B[b, cL+s, g, n], in float32."""
    batch, seqlen, ngroups, dstate = c32.shape
    nchunks = math.ceil(seqlen / chunk)
    c_chunks = pad_seq(xp, c32, nchunks * chunk).reshape(batch, nchunks, chunk, ngroups, dstate)
    b_chunks = pad_seq(xp, b32, nchunks * chunk).reshape(batch, nchunks, chunk, ngroups, dstate)
    c_t = c_chunks.transpose(0, 1, 3, 2, 4)  # (batch, nchunks, ngroups, chunk, dstate)
    b_t = b_chunks.transpose(0, 1, 3, 4, 2)  # (batch, nchunks, ngroups, dstate, chunk)
    return xp.ascontiguousarray(xp.matmul(c_t, b_t), dtype=xp.float32)


def pad_seq(xp: Any, array: Any, length: int) -> Any:
    """Zero-pad axis 1 (the sequence) of ``array`` to ``length``."""
    missing = length - array.shape[1]
    if missing == 0:
        return array
    pad = xp.zeros((array.shape[0], missing, *array.shape[2:]), dtype=array.dtype)
    return xp.concatenate([array, pad], axis=1)
