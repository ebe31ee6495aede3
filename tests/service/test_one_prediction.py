"""One predicted latency for a simulated schedule (issue 42, item 7): the simulated device
measures with the calibration pipetune ships (sim:h200 GEMMs), and ``pipetune space`` and
the run page's timeline used the analytic cost model alone (151 us against a run's
201 us for the same 4096^3 GEMM). Now all three give the same figure for one schedule,
and say it is calibrated; on SQLite and PostgreSQL."""

from __future__ import annotations

from fastapi.testclient import TestClient
from service_helpers import wait_for

from service.commands.space import space_report
from workers import Job, SimulatedDevice

GEMM = {"m": 512, "n": 512, "k": 512, "dtype": "float16"}
#: A slice of the space, so the test ranks in a second.
SLICE = {"tile_m": 128, "tile_n": 128, "tile_k": 64}


def test_space_reports_what_the_simulated_device_measures() -> None:
    extra = [arg for name, value in GEMM.items() for arg in (f"--{name}", str(value))]
    report = space_report("gemm", extra, "sim:h200", top=2, fixed=SLICE)
    assert report["calibrated"] is True
    workload = {"op": "gemm", "params": report["params"]}
    with SimulatedDevice("sim:h200") as device:
        measured = device.measure([Job(workload, schedule=entry["schedule"])
                                   for entry in report["top"]])
    for entry, result in zip(report["top"], measured, strict=True):
        assert entry["latency_us"] == round(result.latency_us, 3)


def test_the_timeline_predicts_the_runs_simulated_latency(client: TestClient) -> None:
    body = {"op": "gemm", "params": GEMM, "device": "sim:h200", "budget": {"trials": 4}}
    run = wait_for(client, client.post("/v1/tune", json=body).json()["run"]["id"])
    run_id = run["id"]
    timeline = client.get(f"/v1/runs/{run_id}/timeline").json()
    assert timeline["calibrated"] is True
    assert abs(timeline["predicted_us"] - run["best"]["latency_us"]) < 1e-6 * run["best"][
        "latency_us"]
