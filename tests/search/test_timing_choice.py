"""Which timing method a workload gets: a CUDA graph's replay for short or memory-bound
workloads (decode GEMMs), per-launch events for long compute-bound ones; a run's
candidates and peers get the same method."""

from __future__ import annotations

import pytest

from scheduler_search.hardware import get_device
from scheduler_search.ops.attention import AttentionSpec
from scheduler_search.ops.gemm import GemmSpec
from scheduler_search.search import FINAL_TIMING, SEARCH_TIMING
from scheduler_search.search.presets import (
    EVENTS,
    GRAPH,
    MEMORY_BOUND_US,
    SHORT_US,
    roofline_us,
    timing_method,
)
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import plan_sprogram

H200 = get_device("h200")


def _gemm(m: int, n: int, k: int, dtype: str = "bfloat16") -> GemmSpec:
    return GemmSpec(m=m, n=n, k=k, dtype=dtype, b_layout="nk")


@pytest.mark.parametrize("m", [1, 16, 128, 256])
@pytest.mark.parametrize("n,k", [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 4096)])
def test_decode_gemms_are_timed_by_graph_replay(m: int, n: int, k: int) -> None:
    spec = _gemm(m, n, k)
    memory_us, compute_us = roofline_us(spec, H200)
    assert memory_us > compute_us or max(memory_us, compute_us) < SHORT_US
    assert timing_method(spec, H200) == GRAPH


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 28672, 8192)])
def test_large_compute_bound_gemms_keep_per_launch_events(shape: tuple[int, int, int]) -> None:
    spec = _gemm(*shape)
    memory_us, compute_us = roofline_us(spec, H200)
    assert compute_us > memory_us and compute_us > SHORT_US
    assert timing_method(spec, H200) == EVENTS


def test_roofline_reads_the_spec_and_the_device() -> None:
    """HBM time is the compulsory bytes over the bandwidth; the FP8 rate is twice bf16's."""
    spec = _gemm(1, 4096, 4096)
    memory_us, _ = roofline_us(spec, H200)
    assert memory_us == pytest.approx(spec.min_bytes() / (H200.mem_bandwidth_gbps * 1e3))
    _, bf16_us = roofline_us(_gemm(4096, 4096, 4096), H200)
    _, fp8_us = roofline_us(_gemm(4096, 4096, 4096, "float8_e4m3"), H200)
    assert fp8_us == pytest.approx(bf16_us / 2)


def test_long_memory_bound_workloads_keep_events() -> None:
    """Past MEMORY_BOUND_US a per-launch sample's overhead is lost in the kernel."""
    spec = _gemm(16, 65536, 32768)
    memory_us, compute_us = roofline_us(spec, H200)
    assert memory_us > MEMORY_BOUND_US and memory_us > compute_us
    assert timing_method(spec, H200) == EVENTS


def test_short_attention_is_timed_by_graph_replay() -> None:
    decode = AttentionSpec(batch=8, heads=32, kv_heads=8, seq_q=1, seq_kv=4096, head_dim=128,
                           causal=False, dtype="bfloat16")
    prefill = AttentionSpec(batch=4, heads=32, kv_heads=8, seq_q=8192, seq_kv=8192,
                            head_dim=128, causal=True, dtype="bfloat16")
    assert timing_method(decode, H200) == GRAPH
    assert timing_method(prefill, H200) == EVENTS


def test_policy_takes_the_workloads_method() -> None:
    decode, large = _gemm(1, 4096, 4096), _gemm(8192, 8192, 8192)
    for policy in (SEARCH_TIMING, FINAL_TIMING):
        assert policy.for_workload(decode, H200).method == GRAPH
        assert policy.for_workload(large, H200).method == EVENTS
        assert policy.for_workload(decode, H200).min_samples == policy.min_samples


def test_a_runs_kernel_and_peer_jobs_share_the_method() -> None:
    from service.runs.jobs import baseline_job, kernel_job

    for spec in (_gemm(1, 4096, 4096), _gemm(4096, 4096, 4096)):
        workload = {"op": "gemm", "params": spec.params()}
        sprogram = plan_sprogram(spec, H200, GEMM_WARP_SPECIALIZED)
        kernel = kernel_job(sprogram, spec, H200, workload, 0, SEARCH_TIMING)
        peer = baseline_job("cublas", workload, 0, timing_method(spec, H200))
        assert kernel.timing.method == peer.timing.method == timing_method(spec, H200)
