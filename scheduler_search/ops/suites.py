"""The benchmark suites of docs/benchmarks.md, as operator params.

One home for the shapes that tests, benchmarks and compile samples all walk.
"""

from __future__ import annotations

from typing import Any

Params = dict[str, Any]

#: GEMM (m, n, k): square, LLM projections, a skinny m, and one shape no tile divides.
GEMM_SHAPES: tuple[tuple[int, int, int], ...] = (
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (8192, 14336, 4096),
    (8192, 4096, 14336),
    (8192, 6144, 4096),
    (8192, 28672, 8192),
    (128, 8192, 8192),
    (4000, 6000, 2000),
)
DTYPES: tuple[str, ...] = ("float16", "bfloat16")

#: Mamba2 fields shared by every case; (batch, seqlen) varies.
MAMBA2_BASE: Params = {
    "nheads": 80,
    "headdim": 64,
    "dstate": 128,
    "ngroups": 1,
    "chunk_size": 256,
    "dtype": "float16",
}
MAMBA2_SIZES: tuple[tuple[int, int], ...] = ((1, 1024), (1, 16384), (8, 4096), (64, 4096))


#: One workload per operator: the shapes the schedule model's acceptance names, used by
#: the CLI examples and the tests (GEMM 4096^3, GQA causal attention at 4096, Mamba2 at
#: batch 8 x 4096).
_ATTENTION_REFERENCE: Params = {"batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 4096,
                                "seq_kv": 4096, "head_dim": 128, "causal": True}
REFERENCE_WORKLOADS: dict[str, Params] = {
    "gemm": {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"},
    "attention": dict(_ATTENTION_REFERENCE),
    "attention_backward": dict(_ATTENTION_REFERENCE),
    "mamba2_chunk_scan": {**MAMBA2_BASE, "batch": 8, "seqlen": 4096},
    "mamba2_chunk_state": {**MAMBA2_BASE, "batch": 8, "seqlen": 4096},
}


def gemm_suite() -> list[Params]:
    """Every GEMM shape in fp16 and bf16, B in both layouts."""
    return [
        {"m": m, "n": n, "k": k, "dtype": dtype, "b_layout": layout}
        for m, n, k in GEMM_SHAPES
        for dtype in DTYPES
        for layout in ("kn", "nk")
    ]


def attention_suite() -> list[Params]:
    """head_dim 128 with GQA (8 kv heads) and MHA, batch 1 and 8, three lengths, causal
    or not; plus head_dim 64 at batch 8, 16 heads, 4096; plus length 3000 (no tile fits)."""
    cases = [
        {
            "batch": batch,
            "heads": 32,
            "kv_heads": kv_heads,
            "seq_q": seq,
            "seq_kv": seq,
            "head_dim": 128,
            "causal": causal,
            "dtype": dtype,
        }
        for dtype in DTYPES
        for kv_heads in (8, 32)
        for batch in (1, 8)
        for seq in (512, 2048, 8192)
        for causal in (False, True)
    ]
    for dtype in DTYPES:
        for causal in (False, True):
            common = {"causal": causal, "dtype": dtype}
            cases.append(
                {
                    "batch": 8,
                    "heads": 16,
                    "kv_heads": 16,
                    "seq_q": 4096,
                    "seq_kv": 4096,
                    "head_dim": 64,
                    **common,
                }
            )
            cases.append(
                {
                    "batch": 1,
                    "heads": 32,
                    "kv_heads": 8,
                    "seq_q": 3000,
                    "seq_kv": 3000,
                    "head_dim": 128,
                    **common,
                }
            )
    return cases


def mamba2_suite() -> list[Params]:
    """The chunk scan and chunk state cases (the same params serve both operators)."""
    return [{**MAMBA2_BASE, "batch": b, "seqlen": s} for b, s in MAMBA2_SIZES]


def suites() -> list[tuple[str, Params]]:
    """Every (op, params) case of every suite."""
    cases = [("gemm", p) for p in gemm_suite()]
    cases += [("attention", p) for p in attention_suite()]
    cases += [(op, p) for op in ("mamba2_chunk_scan", "mamba2_chunk_state") for p in mamba2_suite()]
    return cases
