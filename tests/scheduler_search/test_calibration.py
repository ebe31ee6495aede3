"""Calibration of the cost model from measurements, on fake measurements with a known
truth (the analytic model with the tensor cores 1.3x slower and TMA 0.8x, times 1.6)."""

from __future__ import annotations

import math

import pytest
from schedule_samples import sample_schedules

from scheduler_search.cost_model import (
    Calibration,
    MeasuredTimings,
    Sample,
    estimate,
    fit_calibration,
    spearman,
)
from scheduler_search.hardware import get_device
from scheduler_search.hardware.model import UnitKind
from scheduler_search.ops.gemm import GemmSpec

DEVICE = get_device("h200")
TRUTH = MeasuredTimings(unit_scale={UnitKind.TENSOR_CORE: 1.3, UnitKind.TMA: 0.8})
LEVEL = 1.6


def _samples(shape: tuple[int, int, int], count: int, seed: int) -> list[Sample]:
    spec = GemmSpec(m=shape[0], n=shape[1], k=shape[2], dtype="float16")
    return [
        Sample(p, spec, estimate(p, spec, DEVICE, TRUTH).latency_us * LEVEL)
        for p in sample_schedules(spec, DEVICE, count, seed=seed)
    ]


@pytest.fixture(scope="module")
def fitted() -> tuple[Calibration, list[Sample]]:
    train = _samples((4096, 4096, 4096), 24, seed=1) + _samples((8192, 2048, 1024), 12, seed=2)
    calibration = fit_calibration(train, DEVICE, time_limit_s=60)
    assert calibration is not None
    return calibration, train


def test_fit_finds_the_slower_tensor_cores_and_the_level(fitted) -> None:
    calibration, train = fitted
    assert calibration.samples == len(train)
    assert calibration.unit_scale["tensor_core"] > 1.1
    assert calibration.log_rmse_after < calibration.log_rmse_before / 2
    assert calibration.latency_scale == pytest.approx(LEVEL, rel=0.25)


def test_calibrated_predictions_rank_unseen_shapes_better(fitted) -> None:
    calibration, _ = fitted
    held_out = _samples((2048, 6144, 3072), 20, seed=3)
    truth = [s.latency_us for s in held_out]
    raw = [estimate(s.sprogram, s.spec, DEVICE).latency_us for s in held_out]
    calibrated = [calibration.predict_us(s.sprogram, s.spec, DEVICE) for s in held_out]

    def log_error(predicted):
        return max(abs(math.log(t / p)) for t, p in zip(truth, predicted, strict=True))

    assert log_error(calibrated) < log_error(raw) / 3
    assert spearman(calibrated, truth) >= spearman(raw, truth)


def test_round_trip_merge_and_too_few_samples(fitted) -> None:
    calibration, train = fitted
    again = Calibration.from_dict(calibration.to_dict())
    assert again == calibration and not again.is_identity and Calibration().is_identity
    doubled = calibration.merged(calibration)
    assert doubled.samples == 2 * calibration.samples
    assert doubled.unit_scale == pytest.approx(calibration.unit_scale)
    older = Calibration(unit_scale={"tensor_core": 1.0}, samples=calibration.samples)
    mixed = older.merged(calibration)
    assert 1.0 < mixed.unit_scale["tensor_core"] < calibration.unit_scale["tensor_core"]
    assert fit_calibration(train[:3], DEVICE) is None


def test_spearman() -> None:
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1], [1])) and math.isnan(spearman([1, 1], [1, 2]))
