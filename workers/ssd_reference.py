"""fp32 reference of Mamba2's SSD forward, ``mamba_chunk_scan_combined`` of ``mamba_ssm``,
stage by stage as its Triton kernels compute it, against an array module ``xp`` (NumPy or
CuPy). The scan it chunks is, per head h (its group ``h // (nheads // ngroups)``) and
token t: ``state_t = exp(dt_t A_h) state_{t-1} + dt_t x_t ⊗ B_t``,
``y_t = C_t · state_t + D x_t``, then ``y_t * silu(z_t)`` when z is given.

Shapes: x (b, s, h, p), dt (b, s, h), A (h,), B and C (b, s, g, n), D (h,) or (h, p),
z like x, dt_bias (h,), initial_states (b, h, p, n), seq_idx (b, s) integer sequence ids.
Chunked tensors are (b, h, c, L) for dt and dA_cumsum, with c = ceil(s / L) chunks of
L = chunk_size tokens; the ragged last chunk is padded with tokens that add nothing
(dt 0, x, B, C zero), as upstream's masked loads read them.

seq_idx packs several sequences in a row: the state restarts from zero where the id
changes, and ``initial_states`` belongs to the sequence with id 0 at the row's start
(upstream's kernels take the id before the first chunk to be 0). The final states are those
after the row's last token, so of its last sequence only.

Results keep the inputs' float dtype (float32 from the caller; float64 works too).
"""

from __future__ import annotations

import math
from typing import Any

#: Largest intra-chunk score block (chunks x heads x L x L) materialised at once.
_BLOCK_ELEMENTS = 1 << 25

#: Above it upstream's softplus passes dt through unchanged (and so does this one).
_SOFTPLUS_THRESHOLD = 20.0


def ssd_dt(xp: Any, dt: Any, dt_bias: Any = None, dt_softplus: bool = False,
           dt_limit: tuple[float, float] = (0.0, math.inf)) -> Any:
    """dt (b, s, h) -> the step sizes the scan uses, (b, s, h): plus dt_bias, softplus'd,
    then clamped to dt_limit. Upstream clamps always, so the default limit (0, inf) turns
    negative steps into 0."""
    if dt_bias is not None:
        dt = dt + dt_bias
    if dt_softplus:
        below = xp.minimum(dt, _SOFTPLUS_THRESHOLD)  # keeps exp finite in the unused branch
        dt = xp.where(dt <= _SOFTPLUS_THRESHOLD, xp.log1p(xp.exp(below)), dt)
    return xp.minimum(xp.maximum(dt, dt_limit[0]), dt_limit[1])


def _chunked(xp: Any, a: Any, chunk_size: int, fill: float = 0) -> Any:
    """(b, s, ...) -> (b, c, L, ...), the ragged last chunk padded with ``fill``."""
    batch, seqlen = a.shape[:2]
    nchunks = -(-seqlen // chunk_size)
    padded = xp.full((batch, nchunks * chunk_size, *a.shape[2:]), fill, dtype=a.dtype)
    padded[:, :seqlen] = a
    return padded.reshape((batch, nchunks, chunk_size, *a.shape[2:]))


def _seq_at_chunk_ends(xp: Any, seq_idx: Any, chunk_size: int) -> Any:
    """seq_idx (b, s) -> (b, c): the id of each chunk's last real token."""
    seqlen = seq_idx.shape[1]
    nchunks = -(-seqlen // chunk_size)
    last = xp.minimum(xp.arange(1, nchunks + 1) * chunk_size, seqlen) - 1
    return seq_idx[:, last]


def _seq_before_chunks(xp: Any, ends: Any) -> Any:
    """Chunk-end ids (b, c) -> the id just before each chunk (b, c): the previous chunk's
    last token's, 0 before the first (so initial_states go to sequence 0)."""
    start = xp.zeros((ends.shape[0], 1), dtype=ends.dtype)
    return xp.concatenate([start, ends[:, :-1]], axis=1)


def _group_of_heads(xp: Any, nheads: int, ngroups: int) -> Any:
    """(h,) group index of each head: consecutive heads share a group of B and C."""
    return xp.arange(nheads) // (nheads // ngroups)


def chunk_cumsum(xp: Any, dt: Any, A: Any, chunk_size: int) -> tuple[Any, Any]:
    """Processed dt (b, s, h), A (h,) -> (dt_chunked, dA_cumsum), both (b, h, c, L):
    the steps by chunk (0 past s) and the running sum of dt A within each chunk, the log
    of the decay from the chunk's start to each token. Past s it stays at the last token's."""
    dt_chunked = _chunked(xp, dt, chunk_size).transpose(0, 3, 1, 2)
    return dt_chunked, xp.cumsum(dt_chunked * A[:, None, None], axis=-1)


def chunk_states(xp: Any, x: Any, B: Any, dt_chunked: Any, dA_cumsum: Any,
                 seq_idx: Any = None) -> Any:
    """-> states (b, c, h, p, n): each chunk's own inputs decayed to its last token,
    ``sum_l exp(dA_last - dA_l) dt_l x_l ⊗ B_l``; with seq_idx only the tokens of the
    sequence that chunk ends in (none when that id is negative, as upstream)."""
    batch, _, nheads, headdim = x.shape
    nchunks, chunk_size = dt_chunked.shape[2:]
    groups = _group_of_heads(xp, nheads, B.shape[2])
    # min(., 0) mirrors upstream's guard; a no-op when A <= 0 and dt >= 0.
    weight = xp.exp(xp.minimum(dA_cumsum[..., -1:] - dA_cumsum, 0.0)) * dt_chunked
    if seq_idx is not None:
        ends = _seq_at_chunk_ends(xp, seq_idx, chunk_size)[..., None]
        same = (_chunked(xp, seq_idx, chunk_size, fill=-1) == ends) & (ends >= 0)
        weight = xp.where(same[:, None], weight, 0.0)
    x_c, b_c = _chunked(xp, x, chunk_size), _chunked(xp, B, chunk_size)
    states = xp.zeros((batch, nchunks, nheads, headdim, B.shape[3]), dtype=x.dtype)
    for b in range(batch):  # one batch element's weighted x at a time
        xw = x_c[b] * weight[b].transpose(1, 2, 0)[..., None]  # (c, L, h, p)
        bh = b_c[b][:, :, groups].transpose(0, 2, 1, 3)  # (c, h, L, n)
        states[b] = xp.matmul(xw.transpose(0, 2, 3, 1), bh)
    return states


def state_passing(xp: Any, states: Any, dA_chunk_last: Any, initial_states: Any = None,
                  seq_idx: Any = None, chunk_size: int | None = None) -> tuple[Any, Any]:
    """Chunk states (b, c, h, p, n), each chunk's total log decay (b, h, c) ->
    (prev_states (b, c, h, p, n): the state entering each chunk, initial_states or zero
    for the first; final_states (b, h, p, n): after the last chunk). With seq_idx (needs
    chunk_size) the carried state is dropped where a chunk ends in another sequence than
    the one before it."""
    scale = xp.exp(dA_chunk_last)
    if seq_idx is not None:
        ends = _seq_at_chunk_ends(xp, seq_idx, chunk_size)
        scale = xp.where((ends == _seq_before_chunks(xp, ends))[:, None], scale, 0.0)
    running = (xp.zeros_like(states[:, 0]) if initial_states is None
               else initial_states.astype(states.dtype))
    prev_states = xp.zeros_like(states)
    for c in range(states.shape[1]):  # sequential: each chunk starts from the one before
        prev_states[:, c] = running
        running = scale[:, :, c, None, None] * running + states[:, c]
    return prev_states, running


def chunk_cb(xp: Any, C: Any, B: Any, chunk_size: int, seq_idx: Any = None) -> Any:
    """C, B (b, s, g, n) -> cb (b, c, g, L, L): ``C_l · B_m`` within each chunk, all l, m
    (chunk_scan masks the causal half); zero across sequences when seq_idx is given."""
    c_c = _chunked(xp, C, chunk_size).transpose(0, 1, 3, 2, 4)  # (b, c, g, L, n)
    b_c = _chunked(xp, B, chunk_size).transpose(0, 1, 3, 4, 2)  # (b, c, g, n, L)
    cb = xp.matmul(c_c, b_c)
    if seq_idx is not None:
        ids = _chunked(xp, seq_idx, chunk_size, fill=-1)
        same = ids[..., :, None] == ids[..., None, :]  # (b, c, L, L)
        cb = xp.where(same[:, :, None], cb, 0.0)
    return cb


def _scan_heads(xp: Any, cb: Any, x: Any, dt: Any, dA: Any, inter_decay: Any, C: Any,
                prev_states: Any, groups: Any) -> Any:
    """One batch element, a block of hb heads: cb (c, g, L, L), x (c, L, hb, p),
    dt, dA, inter_decay (hb, c, L), C (c, L, g, n), prev_states (c, hb, p, n) ->
    the output before D and z, (c, L, hb, p)."""
    chunk_size = cb.shape[-1]
    causal = xp.arange(chunk_size)[:, None] >= xp.arange(chunk_size)[None, :]
    dA_c = dA.transpose(1, 0, 2)  # (c, hb, L)
    decay = xp.exp(xp.minimum(dA_c[..., :, None] - dA_c[..., None, :], 0.0))
    scores = cb[:, groups] * decay * dt.transpose(1, 0, 2)[..., None, :]
    scores = xp.where(causal, scores, 0.0)
    intra = xp.matmul(scores, x.transpose(0, 2, 1, 3))  # (c, hb, L, p)
    c_h = C[:, :, groups].transpose(0, 2, 1, 3)  # (c, hb, L, n)
    inter = xp.matmul(c_h, prev_states.transpose(0, 1, 3, 2))
    inter = inter * inter_decay.transpose(1, 0, 2)[..., None]
    return (intra + inter).transpose(0, 2, 1, 3)


def _silu(xp: Any, z: Any) -> Any:
    """z sigmoid(z), with exp of a non-positive argument only (no overflow)."""
    e = xp.exp(-xp.abs(z))
    return z * xp.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def chunk_scan(xp: Any, cb: Any, x: Any, dt_chunked: Any, dA_cumsum: Any, C: Any,
               prev_states: Any, D: Any = None, z: Any = None, seq_idx: Any = None) -> Any:
    """-> out (b, s, h, p): per token, the earlier tokens of its chunk (causal, decayed
    ``exp(dA_l - dA_m) dt_m``) plus ``C_l · prev_state`` decayed by ``exp(dA_l)`` (kept only
    for tokens still in the sequence the previous chunk ended in), plus ``D x``; times
    ``silu(z)`` when z is given (after D, as upstream)."""
    batch, seqlen, nheads, headdim = x.shape
    nchunks, chunk_size = dt_chunked.shape[2:]
    groups = _group_of_heads(xp, nheads, C.shape[2])
    inter_decay = xp.exp(dA_cumsum)
    if seq_idx is not None:
        before = _seq_before_chunks(xp, _seq_at_chunk_ends(xp, seq_idx, chunk_size))
        same = _chunked(xp, seq_idx, chunk_size, fill=-1) == before[..., None]
        inter_decay = xp.where(same[:, None], inter_decay, 0.0)
    x_c, c_c = _chunked(xp, x, chunk_size), _chunked(xp, C, chunk_size)
    block = max(1, min(nheads, _BLOCK_ELEMENTS // (nchunks * chunk_size * chunk_size)))
    out = xp.zeros(x.shape, dtype=x.dtype)
    for b in range(batch):
        for h0 in range(0, nheads, block):
            hs = slice(h0, min(nheads, h0 + block))
            y = _scan_heads(xp, cb[b], x_c[b][:, :, hs], dt_chunked[b, hs], dA_cumsum[b, hs],
                            inter_decay[b, hs], c_c[b], prev_states[b][:, hs], groups[hs])
            out[b, :, hs] = y.reshape(nchunks * chunk_size, -1, headdim)[:seqlen]
    if D is not None:
        out = out + x * (D[:, None] if D.ndim == 1 else D)
    return out if z is None else out * _silu(xp, z)


def _check_shapes(x: Any, dt: Any, A: Any, B: Any, C: Any, D: Any, z: Any) -> None:
    """Upstream's shape contract, as a ValueError rather than a wrong answer."""
    batch, seqlen, nheads, headdim = x.shape
    ngroups = B.shape[2]
    if (dt.shape != (batch, seqlen, nheads) or A.shape != (nheads,) or C.shape != B.shape
            or B.shape[:2] != (batch, seqlen) or nheads % ngroups
            or (D is not None and D.shape not in ((nheads,), (nheads, headdim)))
            or (z is not None and z.shape != x.shape)):
        raise ValueError("SSD shapes disagree: x (b, s, h, p), dt (b, s, h), A (h,), "
                         "B and C (b, s, g, n) with g dividing h, D (h,) or (h, p), z like x")


def ssd_forward(xp: Any, x: Any, dt: Any, A: Any, B: Any, C: Any, chunk_size: int,
                D: Any = None, z: Any = None, dt_bias: Any = None, initial_states: Any = None,
                seq_idx: Any = None, dt_softplus: bool = False,
                dt_limit: tuple[float, float] = (0.0, math.inf)) -> tuple[Any, Any]:
    """``mamba_chunk_scan_combined``'s forward -> (out (b, s, h, p), final_states
    (b, h, p, n)), through upstream's five stages."""
    _check_shapes(x, dt, A, B, C, D, z)
    dt_chunked, dA_cumsum = chunk_cumsum(xp, ssd_dt(xp, dt, dt_bias, dt_softplus, dt_limit),
                                         A, chunk_size)
    states = chunk_states(xp, x, B, dt_chunked, dA_cumsum, seq_idx)
    prev_states, final_states = state_passing(xp, states, dA_cumsum[..., -1], initial_states,
                                              seq_idx, chunk_size)
    cb = chunk_cb(xp, C, B, chunk_size, seq_idx)
    out = chunk_scan(xp, cb, x, dt_chunked, dA_cumsum, C, prev_states, D, z, seq_idx)
    return out, final_states
