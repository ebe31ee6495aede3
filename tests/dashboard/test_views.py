"""The dashboard's formatting helpers."""

from __future__ import annotations

from types import SimpleNamespace

from service.dashboard.operators import operator_text
from service.dashboard.views import (
    Progress,
    RangeBucketRow,
    duration_text,
    key_choices_text,
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


def test_range_shapes_and_buckets() -> None:
    assert shape_text("gemm", {**GEMM, "m": {"min": 1, "max": 16384}}) \
        == "m=1..16384 n=2048 k=512 · fp16 · kn"
    assert shape_text("gemm", {**GEMM, "m": [16, 300]}).startswith("m={16,300} n=2048")
    assert key_choices_text({"tile_n": 128, "tile_m": 64, "stages_ab": 4, "swap_ab": True,
                             "persistent": True}) == "tile m64 n128 · stages_ab 4 · swap_ab"
    assert key_choices_text({"order": "serial"}) == "—"
    bucket = RangeBucketRow.of({
        "low": 1, "high": 64, "loss": 1.01234, "schedule_hash": "a" * 64, "kernel_hash": None,
        "choices": {"tile_m": 64}, "latencies_us": {"1": 6.5, "2048": 22.25},
        "retimed_us": {"1": 6.25}})
    assert bucket.loss == "1.012" and bucket.all_choices == "tile_m=64"
    assert bucket.latencies == {1: ("6.50 µs", "6.25 µs", True), 2048: ("22.25 µs", "", False)}


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
    assert vendor_baseline_us(SimpleNamespace()) is None  # a schema without baselines
    gpu = SimpleNamespace(baseline="cublas", baseline_latency_us=12.0)
    assert vendor_baseline_us(gpu) == 12.0
    assert speedup_text(10.0, vendor_baseline_us(gpu)) == "1.20×"


def _run(status: str = "running", done: int = 8, trials: int = 10_000,
         seconds: float | None = None) -> SimpleNamespace:
    return SimpleNamespace(status=status, trials_done=done, budget_trials=trials,
                           budget_seconds=seconds)


def test_progress_by_trials_time_or_both() -> None:
    by_trials = Progress.of(_run(trials=32), elapsed_s=5.0, max_trials=10_000)
    assert by_trials.text == "8/32 trials" and by_trials.pct == 25.0
    assert by_trials.seconds_budget is None
    # Seconds alone store the server's trial cap: shown by time, never as 8/10000 trials.
    by_time = Progress.of(_run(seconds=60.0), elapsed_s=15.0, max_trials=10_000)
    assert by_time.text == "8 trials · 15.0 s / 1 min 00 s" and by_time.pct == 25.0
    assert by_time.trials_budget is None
    # Both: the budget that runs out first fills the bar.
    both = Progress.of(_run(trials=16, seconds=60.0), elapsed_s=6.0, max_trials=10_000)
    assert both.text == "8/16 trials · 6.0 s / 1 min 00 s" and both.pct == 50.0
    queued = Progress.of(_run(status="queued", done=0, seconds=60.0), None, 10_000)
    assert queued.pct == 0.0 and queued.text == "0 trials · 0.0 s / 1 min 00 s"
    assert Progress.of(_run("succeeded", seconds=60.0), 20.0, 10_000).pct == 100.0


def test_operator_text() -> None:
    gemm, scan = operator_text("gemm"), operator_text("mamba2_chunk_scan")
    assert gemm.baseline == "cuBLAS" and "load_a" in gemm.timeline
    assert scan.title == "Mamba2 chunk scan" and scan.baseline == "mamba_ssm"
    assert "load_a" not in scan.timeline and "mma_x" in scan.timeline
    assert "mma_qk" in operator_text("attention").timeline
    assert operator_text("unknown_op").baseline is None
