"""The dashboard's formatting helpers."""

from __future__ import annotations

from service.dashboard.views import (
    duration_text,
    latency_text,
    matches_shape,
    shape_text,
    speedup_text,
    vendor_baseline_us,
)

GEMM = {"m": 4096, "n": 2048, "k": 512, "dtype": "float16", "b_layout": "kn"}
ATTENTION = {"batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 4096, "seq_kv": 4096,
             "head_dim": 128, "causal": True, "dtype": "bfloat16"}


def test_shape_text() -> None:
    assert shape_text("gemm", GEMM) == "m=4096 n=2048 k=512 · fp16 · kn"
    # As PostgreSQL's JSONB hands them back (keys by length, then alphabetically).
    assert shape_text("gemm", dict(sorted(GEMM.items(), key=lambda kv: (len(kv[0]), kv[0])))) \
        == "m=4096 n=2048 k=512 · fp16 · kn"
    assert shape_text("attention", ATTENTION) == (
        "batch=1 heads=32 kv_heads=8 seq_q=4096 seq_kv=4096 head_dim=128 · bf16 · causal"
    )


def test_numbers() -> None:
    assert latency_text(None) == "—" and latency_text(6.6473) == "6.65 µs"
    assert latency_text(1234.5) == "1.234 ms"
    assert duration_text(None) == "—" and duration_text(4.25) == "4.2 s"
    assert duration_text(125) == "2 min 05 s" and duration_text(3 * 3600 + 65) == "3 h 01 min"
    assert speedup_text(10.0, None) == "—" and speedup_text(None, 5.0) == "—"
    assert speedup_text(8.0, 10.0) == "1.25×"


def test_matches_shape() -> None:
    assert matches_shape("m=4096", "gemm", GEMM) and matches_shape("4096 fp16", "gemm", GEMM)
    assert matches_shape("M=4096 K=512", "gemm", GEMM)
    assert not matches_shape("m=2048", "gemm", GEMM) and not matches_shape("bf16", "gemm", GEMM)
    assert matches_shape("causal kv_heads=8", "attention", ATTENTION)
    assert not matches_shape("m=4096", "attention", ATTENTION)


def test_vendor_baseline() -> None:
    from types import SimpleNamespace

    assert vendor_baseline_us(SimpleNamespace()) is None  # a schema without baselines
    gpu = SimpleNamespace(baseline="cublas", baseline_latency_us=12.0)
    assert vendor_baseline_us(gpu) == 12.0
    assert speedup_text(10.0, vendor_baseline_us(gpu)) == "1.20×"
