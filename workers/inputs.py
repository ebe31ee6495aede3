"""Seeded random inputs of a workload, drawn as its tensor contract says.

Each input's ``InputInit`` (``scheduler_search/ops/_contract.py``) names its law and the
operator spec sets it; here is the drawing, one function per kind. All draws come from one
generator seeded by the job, in the contract's draw order, so a seed gives the same inputs
on every worker. Everything is written against an array module ``xp`` so the same code
builds inputs on the GPU (CuPy) and in CPU tests (NumPy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from scheduler_search.ops import TensorSpec
from workers import _dtypes
from workers.contract import contract

#: A draw's float32 values: (xp, generator, the tensor, the inputs drawn so far in storage
#: dtype, every tensor's dtype) -> array of the tensor's shape.
Draw = Callable[[Any, Any, TensorSpec, dict[str, Any], dict[str, str]], Any]


def build_inputs(
    xp: Any,
    op: str,
    params: dict[str, Any],
    dtypes: dict[str, str],
    seed: int,
    tensors: Iterable[TensorSpec] | None = None,
) -> dict[str, Any]:
    """Seeded random tensors (in storage dtype) for every input of the contract (a job's
    ``tensors``, else the operator spec's), each in the dtype ``dtypes`` names."""
    rng = xp.random.default_rng(seed)
    inputs = [t for t in contract(op, params, tensors).values() if t.role == "input"]
    drawn: dict[str, Any] = {}
    for spec in sorted(inputs, key=lambda t: t.init.draw):  # stable: ties in argument order
        values = _DRAWS[spec.init.kind](xp, rng, spec, drawn, dtypes)
        drawn[spec.name] = _dtypes.from_float32(xp, values, dtypes[spec.name])
    return {t.name: drawn[t.name] for t in inputs}


def _normal(xp: Any, rng: Any, spec: TensorSpec, drawn: dict[str, Any],
            dtypes: dict[str, str]) -> Any:
    """A standard normal times ``scale``."""
    return rng.standard_normal(spec.shape, dtype=xp.float32) * xp.float32(spec.init.scale)


def _uniform_init(xp: Any, rng: Any, spec: TensorSpec, drawn: dict[str, Any],
                  dtypes: dict[str, str]) -> Any:
    """Uniform in [low, high)."""
    return _uniform(xp, rng, spec.shape, spec.init.low, spec.init.high)


def _time_step(xp: Any, rng: Any, spec: TensorSpec, drawn: dict[str, Any],
               dtypes: dict[str, str]) -> Any:
    """Δt ~ U(low, high) per (chunk, position) on the last two axes, zero past ``length``."""
    init = spec.init
    steps = _uniform(xp, rng, spec.shape, init.low, init.high)
    if init.length is None:
        return steps
    nchunks, chunk = spec.shape[-2:]
    position = xp.arange(nchunks * chunk).reshape(nchunks, chunk)
    return xp.where(position < init.length, steps, xp.float32(0.0)).astype(xp.float32)


def _decay_cumsum(xp: Any, rng: Any, spec: TensorSpec, drawn: dict[str, Any],
                  dtypes: dict[str, str]) -> Any:
    """The within-chunk cumulative sum of Δt·A (Δt the input ``source``), with one
    A ~ -U(low, high) per head (axis 1)."""
    init = spec.init
    steps = _dtypes.to_float32(xp, drawn[init.source], dtypes[init.source])
    a_per_head = -_uniform(xp, rng, (spec.shape[1],), init.low, init.high)
    a = a_per_head.reshape((1, -1) + (1,) * (len(spec.shape) - 2))
    return xp.cumsum(steps * a, axis=-1).astype(xp.float32)


def _chunk_gram(xp: Any, rng: Any, spec: TensorSpec, drawn: dict[str, Any],
                dtypes: dict[str, str]) -> Any:
    """C·Bᵀ per chunk: C the input ``source`` as the kernel reads it, B a standard normal
    times ``scale`` of C's shape."""
    init = spec.init
    b32 = rng.standard_normal(drawn[init.source].shape, dtype=xp.float32)
    b32 = b32 * xp.float32(init.scale)
    c32 = _dtypes.to_float32(xp, drawn[init.source], dtypes[init.source])
    return chunked_cb(xp, c32, b32, spec.shape[-1])


def _sequence_ids(xp: Any, rng: Any, spec: TensorSpec, drawn: dict[str, Any],
                  dtypes: dict[str, str]) -> Any:
    """Ids of up to ``high`` sequences packed in each row: boundaries at a multiple of
    ``length`` (a chunk's start, when the row holds a second chunk) and at positions drawn
    anywhere; a row's ids count its boundaries so far."""
    batch, seqlen = spec.shape
    chunk, count = spec.init.length or seqlen, max(1, int(spec.init.high))
    # Integers from uniform floats (the generator's integer draws differ between NumPy
    # and CuPy): starts in [1, seqlen), and the first on a chunk start in [1, nchunks).
    starts = xp.floor(_uniform(xp, rng, (batch, count - 1), 1.0, float(max(2, seqlen))))
    if seqlen > chunk and count > 1:
        chunks = xp.floor(_uniform(xp, rng, (batch,), 1.0, float(-(-seqlen // chunk))))
        starts[:, 0] = chunk * chunks
    position = xp.arange(seqlen)[None, :, None]
    return (position >= starts[:, None, :]).sum(axis=-1).astype(xp.float32)


def _uniform(xp: Any, rng: Any, shape: tuple[int, ...], low: float, high: float) -> Any:
    return rng.random(shape, dtype=xp.float32) * xp.float32(high - low) + xp.float32(low)


#: How each kind of ``InputInit`` is drawn.
def _attention_forward(xp: Any, rng: Any, spec: TensorSpec, drawn: dict[str, Any],
                       dtypes: dict[str, str]) -> Any:
    """The forward's o (rounded to its dtype by the caller) or fp32 lse of the drawn q, k,
    v as the kernel reads them (their rounded values): no draw from ``rng``."""
    from workers.verify import attention_reference

    names = spec.init.source.split(",")
    q, k, v = (_dtypes.to_float32(xp, drawn[n], dtypes[n]) for n in names)
    if spec.init.heads_second:
        q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    o, lse = attention_reference(xp, q, k, v, spec.init.causal)
    if spec.init.kind == "attention_lse":
        return lse
    return o.transpose(0, 2, 1, 3) if spec.init.heads_second else o


_DRAWS: dict[str, Draw] = {
    "normal": _normal,
    "uniform": _uniform_init,
    "time_step": _time_step,
    "decay_cumsum": _decay_cumsum,
    "chunk_gram": _chunk_gram,
    "attention_o": _attention_forward,
    "attention_lse": _attention_forward,
    "sequence_ids": _sequence_ids,
}


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
