"""Jobs and Measurements are plain, versioned, JSON-round-trippable data."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from codegen.artifact import KernelArtifact, WorkspaceArg
from workers import PROTOCOL_VERSION, Job, Measurement, MeasurementStatus, TimingConfig
from workers.protocol import summarize_samples
from workers.testing import gemm_tma_artifact

GEMM = {"op": "gemm", "params": {"m": 128, "n": 128, "k": 64, "dtype": "float16", "b_layout": "kn"}}


def test_status_values_and_is_ok() -> None:
    assert [s.value for s in MeasurementStatus] == [
        "ok",
        "compile_error",
        "launch_error",
        "wrong_result",
        "timeout",
        "crash",
    ]
    assert MeasurementStatus.OK.is_ok()
    assert not any(s.is_ok() for s in MeasurementStatus if s is not MeasurementStatus.OK)


def test_job_round_trips_through_json() -> None:
    job = Job(
        workload=GEMM,
        artifact=gemm_tma_artifact(GEMM["params"]),
        seed=3,
        timing=TimingConfig(min_samples=5, flush_l2=False),
        deadline_s=2.5,
    )
    data = json.loads(json.dumps(job.to_dict()))
    assert data["version"] == PROTOCOL_VERSION
    assert Job.from_dict(data) == job
    baseline = Job(workload=GEMM, baseline="cublas")
    assert Job.from_dict(json.loads(json.dumps(baseline.to_dict()))) == baseline
    assert baseline.label == "baseline:cublas"
    scheduled = Job(workload=GEMM, schedule={"op": "gemm", "tile": {"m": 128}}, seed=1)
    assert Job.from_dict(json.loads(json.dumps(scheduled.to_dict()))) == scheduled


def test_an_artifact_with_a_workspace_round_trips_through_json() -> None:
    tma = gemm_tma_artifact(GEMM["params"])
    artifact = dataclasses.replace(
        tma, args=(*tma.args[:3], WorkspaceArg("tile_counters", 32 << 20), *tma.args[3:]))
    assert KernelArtifact.from_dict(artifact.to_dict()) == artifact
    assert KernelArtifact.from_json(artifact.to_json()).args[3] == WorkspaceArg(
        "tile_counters", 32 << 20)
    job = Job(workload=GEMM, artifact=artifact)
    assert Job.from_dict(json.loads(json.dumps(job.to_dict()))) == job


def test_job_needs_exactly_one_kernel_and_a_plain_workload() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Job(workload=GEMM)
    with pytest.raises(ValueError, match="exactly one"):
        Job(workload=GEMM, artifact=gemm_tma_artifact(GEMM["params"]), baseline="cublas")
    with pytest.raises(ValueError, match="exactly one"):
        Job(workload=GEMM, schedule={"op": "gemm"}, baseline="cublas")
    with pytest.raises(ValueError, match="workload"):
        Job(workload={"op": "gemm"}, baseline="cublas")


def test_measurement_round_trips_through_json() -> None:
    ok = Measurement.from_samples(
        [3.0, 1.0, 2.0, 10.0],
        rel_error=1e-4,
        error_bound=1e-2,
        compile_ms=50.0,
        registers=96,
        spill_bytes=0,
        smem_bytes=8192,
        device_index=1,
    )
    assert ok.status is MeasurementStatus.OK
    assert ok.latency_us == 2.5 and ok.min_us == 1.0 and ok.max_us == 10.0
    assert Measurement.from_json(ok.to_json()) == ok
    bad = Measurement(MeasurementStatus.WRONG_RESULT, rel_error=math.nan, error="NaN output")
    text = bad.to_json()
    json.loads(text, parse_constant=_reject_non_json)  # strict JSON: no bare NaN
    back = Measurement.from_json(text)
    assert back.status is MeasurementStatus.WRONG_RESULT and math.isnan(back.rel_error)
    assert not back.simulated


def _reject_non_json(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")


def test_other_protocol_versions_are_rejected() -> None:
    data = Measurement(MeasurementStatus.CRASH).to_dict()
    data["version"] = PROTOCOL_VERSION + 1
    with pytest.raises(ValueError, match="version"):
        Measurement.from_dict(data)


def test_summarize_samples() -> None:
    stats = summarize_samples([1.0, 2.0, 3.0, 4.0, 5.0])
    assert stats == {"latency_us": 3.0, "iqr_us": 2.0, "min_us": 1.0, "max_us": 5.0}
    assert summarize_samples([7.0])["iqr_us"] == 0.0
    with pytest.raises(ValueError):
        summarize_samples([])


def test_timing_method_round_trips_and_is_checked() -> None:
    graph = Job(workload=GEMM, baseline="cublas", timing=TimingConfig(method="graph"))
    assert Job.from_dict(json.loads(json.dumps(graph.to_dict()))).timing.method == "graph"
    assert Job.from_dict({**graph.to_dict(), "timing": {}}).timing.method == "events"
    with pytest.raises(ValueError, match="timing method 'replay'"):
        TimingConfig(method="replay")
    measured = Measurement.from_samples([10.0, 11.0, 12.0], timing_method="graph")
    assert Measurement.from_json(measured.to_json()).timing_method == "graph"
    assert Measurement.from_dict({"status": "ok"}).timing_method is None


def test_copies_for_cold_l2_exceed_twice_the_l2_within_the_cap() -> None:
    from workers.graph_timing import MAX_COPIES, copies_for_cold_l2

    l2 = 60 << 20
    for weight in (32 << 20, 7 << 20, 1 << 20, 200 << 20):
        copies = copies_for_cold_l2(weight, l2)
        assert copies >= 2
        assert copies * weight > 2 * l2 or copies == MAX_COPIES
        assert (copies - 2) * weight <= 2 * l2  # no more than one copy past the bound
    assert copies_for_cold_l2(1024, l2) == MAX_COPIES
