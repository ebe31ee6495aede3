"""SimulatedDevice: cost-model latencies, flagged simulated, deterministic unless noisy."""

from __future__ import annotations

from typing import Any

import pytest

from workers import Job, MeasurementStatus, SimulatedDevice
from workers.testing import gemm_tiled_artifact

GEMM = {"m": 256, "n": 256, "k": 128, "dtype": "float16", "b_layout": "kn"}
WORKLOAD = {"op": "gemm", "params": GEMM}


def _by_tile(schedule: dict[str, Any], workload: dict[str, Any], device: Any) -> float:
    return float(schedule["tile"]["m"])


def test_measures_schedules_with_the_estimator_and_flags_simulated() -> None:
    device = SimulatedDevice(capacity=3, estimator=_by_tile)
    assert device.capacity() == 3
    jobs = [Job(WORKLOAD, schedule={"tile": {"m": m}}) for m in (64, 128)]
    results = device.measure(jobs)
    assert [r.latency_us for r in results] == [64.0, 128.0]
    assert all(r.simulated and r.status.is_ok() and r.samples_us for r in results)


def test_deterministic_without_noise_and_seeded_with_it() -> None:
    job = Job(WORKLOAD, schedule={"tile": {"m": 100}})
    plain = SimulatedDevice(estimator=_by_tile)
    assert {plain.measure_one(job).latency_us for _ in range(3)} == {100.0}
    noisy = [SimulatedDevice(noise=0.05, seed=7, estimator=_by_tile) for _ in range(2)]
    first = [noisy[0].measure_one(job).latency_us for _ in range(4)]
    assert first == [noisy[1].measure_one(job).latency_us for _ in range(4)]
    assert len(set(first)) > 1


def test_failures_are_statuses() -> None:
    def broken(schedule: dict[str, Any], workload: dict[str, Any], device: Any) -> float:
        raise RuntimeError("deadlock")

    device = SimulatedDevice(estimator=broken)
    result = device.measure_one(Job(WORKLOAD, schedule={}))
    assert result.status is MeasurementStatus.LAUNCH_ERROR and "deadlock" in result.error
    artifact = device.measure_one(Job(WORKLOAD, artifact=gemm_tiled_artifact(GEMM)))
    assert artifact.status is MeasurementStatus.LAUNCH_ERROR and artifact.simulated


def test_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        SimulatedDevice(capacity=0)
    with pytest.raises(ValueError):
        SimulatedDevice(noise=-1)
