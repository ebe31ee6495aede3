"""The calibration pipetune ships for the H200 (fitted on the GEMM suite's measurements)
and the simulated device that measures with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import calibrate
from scheduler_search.cost_model import (
    Calibration,
    Sample,
    estimate,
    fit_to_suite,
    shipped_calibration,
)
from scheduler_search.cost_model.shipped import shipped_entry
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.sprogram import plan_sprogram
from workers import Job, SimulatedDevice

ROOT = Path(__file__).resolve().parents[2]
H200 = get_device("sim:h200")


def _suite_cases() -> list[tuple[str, Sample]]:
    entry = shipped_entry(H200.name, "gemm")
    assert entry is not None
    return calibrate.suite_samples([ROOT / p for p in entry["sources"]], "h200")


def test_the_shipped_h200_calibration_reads_like_the_gpu_on_the_gemm_suite() -> None:
    """Every tuned kernel of the GEMM suite measured on an H200: the simulated latency of
    its schedule is within 10% of the measurement (the raw model is 15-36% fast)."""
    calibration = shipped_calibration(H200.name, "gemm")
    assert calibration is not None and not calibration.is_identity
    cases = _suite_cases()
    assert len(cases) >= 32
    raw_errors, errors = [], []
    for _, sample in cases:
        raw = estimate(sample.sprogram, sample.spec, H200).latency_us
        raw_errors.append(raw / sample.latency_us - 1)
        errors.append(calibration.predict_us(sample.sprogram, sample.spec, H200)
                      / sample.latency_us - 1)
    assert max(abs(e) for e in errors) <= 0.10, errors
    assert max(abs(e) for e in raw_errors) > 0.15  # what the calibration corrects


def test_the_simulated_device_measures_with_the_shipped_calibration() -> None:
    spec = parse_spec("gemm", {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"})
    _, sample = _suite_cases()[0]
    workload = {"op": "gemm", "params": spec.params()}
    job = Job(workload, schedule=sample.sprogram.to_dict())
    calibration = shipped_calibration(H200.name, "gemm")
    assert calibration is not None
    [result] = SimulatedDevice("sim:h200").measure([job])
    assert result.simulated
    assert result.latency_us == pytest.approx(
        calibration.predict_us(sample.sprogram, spec, H200))
    # A device without a shipped calibration measures with the analytic model.
    a100 = get_device("sim:a100")
    assert shipped_calibration(a100.name, "gemm") is None
    sprogram = plan_sprogram(spec, a100, {"tile_m": 128, "tile_n": 128, "tile_k": 32})
    [plain] = SimulatedDevice("sim:a100").measure([Job(workload, schedule=sprogram.to_dict())])
    assert plain.latency_us == pytest.approx(estimate(sprogram, spec, a100).latency_us)


def test_the_suite_fit_recovers_a_known_calibration() -> None:
    """Samples made by a known calibration (power terms and a data-type factor included)
    are fitted back to within a fraction of a percent."""
    truth = Calibration(unit_scale={"tensor_core": 0.9}, latency_scale=1.4,
                        dtype_scale={"float16": 1.05}, power_slowdown=0.3,
                        power_time_us=800.0)
    samples = []
    for _, sample in _suite_cases():
        latency = truth.predict_us(sample.sprogram, sample.spec, H200)
        samples.append(Sample(sample.sprogram, sample.spec, latency))
    fitted = fit_to_suite(samples, H200)
    for sample in samples:
        predicted = fitted.predict_us(sample.sprogram, sample.spec, H200)
        assert predicted == pytest.approx(sample.latency_us, rel=0.01)
    with pytest.raises(ValueError, match="no samples"):
        fit_to_suite([], H200)


def test_power_terms_round_trip_and_survive_a_merge() -> None:
    shipped = Calibration(latency_scale=1.5, dtype_scale={"float16": 1.05},
                          power_slowdown=0.5, power_time_us=3200.0, samples=38)
    assert Calibration.from_dict(json.loads(json.dumps(shipped.to_dict()))) == shipped
    refit = Calibration(unit_scale={"tma": 1.1}, latency_scale=1.3, samples=10)
    merged = shipped.merged(refit)
    assert merged.power_slowdown == 0.5 and merged.dtype_scale == {"float16": 1.05}
    assert not Calibration(power_slowdown=0.1).is_identity


def test_the_bench_script_writes_the_calibration_and_its_errors(tmp_path: Path) -> None:
    entry = shipped_entry(H200.name, "gemm")
    assert entry is not None
    out = tmp_path / "calibrations.json"
    sources = [str(ROOT / p) for p in entry["sources"]]
    assert calibrate.main([*sources, "--out", str(out)]) == 0
    written = json.loads(out.read_text())["devices"][H200.name]["gemm"]
    assert written["calibration"] == entry["calibration"]
    assert len(written["cases"]) == len(entry["cases"])
    assert written["worst_error"] == max(abs(c["error"]) for c in written["cases"]) <= 0.10
