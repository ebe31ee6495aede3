"""Naive float64 loops that spell out each operator's definition, for tiny shapes."""

from __future__ import annotations

import math

import numpy as np


def gemm(a: np.ndarray, b: np.ndarray, b_layout: str) -> np.ndarray:
    m, k = a.shape
    n = b.shape[1] if b_layout == "kn" else b.shape[0]
    out = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            for kk in range(k):
                out[i, j] += a[i, kk] * (b[kk, j] if b_layout == "kn" else b[j, kk])
    return out


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(o, lse): the output, and log Σ exp(score) per (batch, head, query row)."""
    batch, seq_q, heads, head_dim = q.shape
    seq_kv, kv_heads = k.shape[1], k.shape[2]
    out = np.zeros(q.shape)
    lse = np.zeros((batch, heads, seq_q))
    for b in range(batch):
        for h in range(heads):
            g = h // (heads // kv_heads)
            for i in range(seq_q):
                keys = [j for j in range(seq_kv) if not (causal and j > i)]
                scores = [
                    sum(q[b, i, h, d] * k[b, j, g, d] for d in range(head_dim))
                    / math.sqrt(head_dim)
                    for j in keys
                ]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = sum(weights)
                lse[b, h, i] = top + math.log(total)
                for d in range(head_dim):
                    out[b, i, h, d] = (
                        sum(w * v[b, j, g, d] for w, j in zip(weights, keys, strict=True)) / total
                    )
    return out, lse


def chunk_state(b_in: np.ndarray, x: np.ndarray, dt: np.ndarray, da: np.ndarray) -> np.ndarray:
    batch, seqlen, ngroups, dstate = b_in.shape
    nheads, headdim = x.shape[2], x.shape[3]
    nchunks, chunk = dt.shape[2], dt.shape[3]
    states = np.zeros((batch, nchunks, nheads, headdim, dstate))
    for bi in range(batch):
        for c in range(nchunks):
            for h in range(nheads):
                g = h // (nheads // ngroups)
                for pos in range(chunk):
                    t = c * chunk + pos
                    if t >= seqlen:
                        continue
                    w = math.exp(da[bi, h, c, chunk - 1] - da[bi, h, c, pos]) * dt[bi, h, c, pos]
                    for p in range(headdim):
                        for n in range(dstate):
                            states[bi, c, h, p, n] += b_in[bi, t, g, n] * x[bi, t, h, p] * w
    return states


def chunk_scan(
    cb: np.ndarray,
    x: np.ndarray,
    dt: np.ndarray,
    da: np.ndarray,
    c_in: np.ndarray,
    states: np.ndarray,
    d_skip: np.ndarray,
) -> np.ndarray:
    """``mamba_ssm``'s ``_chunk_scan_fwd(cb, x, dt, dA_cumsum, C, states, D=d_skip)``."""
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = c_in.shape[2], c_in.shape[3]
    chunk = dt.shape[3]
    out = np.zeros(x.shape)
    for bi in range(batch):
        for t in range(seqlen):
            c, pos = divmod(t, chunk)
            for h in range(nheads):
                g = h // (nheads // ngroups)
                for p in range(headdim):
                    inter = sum(c_in[bi, t, g, n] * states[bi, c, h, p, n] for n in range(dstate))
                    value = math.exp(da[bi, h, c, pos]) * inter
                    for s in range(pos + 1):
                        value += (
                            cb[bi, c, g, pos, s]
                            * math.exp(da[bi, h, c, pos] - da[bi, h, c, s])
                            * dt[bi, h, c, s]
                            * x[bi, c * chunk + s, h, p]
                        )
                    out[bi, t, h, p] = value + d_skip[h] * x[bi, t, h, p]
    return out


def cb_from(c_in: np.ndarray, b_in: np.ndarray, chunk: int) -> np.ndarray:
    batch, seqlen, ngroups, dstate = c_in.shape
    nchunks = math.ceil(seqlen / chunk)
    cb = np.zeros((batch, nchunks, ngroups, chunk, chunk))
    for bi in range(batch):
        for c in range(nchunks):
            for g in range(ngroups):
                for pos in range(chunk):
                    for s in range(chunk):
                        tl, ts = c * chunk + pos, c * chunk + s
                        if tl < seqlen and ts < seqlen:
                            cb[bi, c, g, pos, s] = sum(
                                c_in[bi, tl, g, n] * b_in[bi, ts, g, n] for n in range(dstate)
                            )
    return cb
