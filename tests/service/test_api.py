"""Every route against the app (httpx TestClient), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time

from fastapi.testclient import TestClient
from service_helpers import SMALL_GEMM, tune_body, wait_for

from service.db.models import SCHEMA_VERSION

ACCEPTANCE_GEMM = {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"}


def _events(client: TestClient, run_id: int) -> list[tuple[str, dict]]:
    """Read the run's event stream to its end."""
    events = []
    with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[len("data: "):])))
                if name == "end":
                    break
    return events


def test_tune_run_cache_trials_events(client: TestClient) -> None:
    """The acceptance walk: 202, progress events, succeeded, cached schedule, 200."""
    body = tune_body(ACCEPTANCE_GEMM, trials=64)
    response = client.post("/v1/tune", json=body)
    assert response.status_code == 202, response.text
    answer = response.json()
    assert answer["cached"] is False and answer["schedule"] is None
    run = answer["run"]
    assert response.headers["location"] == f"/v1/runs/{run['id']}"
    assert run["status"] in ("queued", "running") and run["device"] == "sim:h200"
    assert run["workload"]["op"] == "gemm" and run["workload"]["params"]["b_layout"] == "kn"
    assert run["budget"]["trials"] == 64 and run["simulated"] is True

    events = _events(client, run["id"])  # while it runs, to its end
    names = [name for name, _ in events]
    assert names[0] == "status" and names[-1] == "end"
    progress = [data["trials_done"] for name, data in events if name == "progress"]
    assert len(progress) >= 2 and progress == sorted(progress) and progress[-1] == 64
    assert sum(1 for name in names if name == "trial") >= 64

    done = wait_for(client, run["id"])
    assert done["status"] == "succeeded", done
    assert done["trials_done"] == 64 and done["stop_reason"] == "trials"
    best = done["best"]
    assert best["latency_us"] > 0 and best["simulated"] is True
    # The simulated winner's kernel is rendered (never run: its schedule is marked simulated).
    kernel = client.get(f"/v1/kernels/{best['kernel_hash']}")
    assert kernel.status_code == 200, kernel.text
    assert kernel.json()["schedule_hash"] == best["schedule_hash"]
    entry = kernel.json()["artifact"]["entry"]
    assert entry in client.get(f"/v1/kernels/{best['kernel_hash']}/source").text

    schedules = client.get("/v1/schedules", params={"op": "gemm"}).json()
    assert schedules["count"] == 1
    cached = schedules["data"][0]
    assert cached["schedule_hash"] == best["schedule_hash"] and cached["run_id"] == run["id"]
    assert cached["schedule"]["op"] == "gemm" and cached["choices"]

    # A cache hit answers in the same shape: the schedule, and the run that found it.
    again = client.post("/v1/tune", json=body)
    assert again.status_code == 200 and "location" not in again.headers
    assert again.json()["cached"] is True
    assert again.json()["schedule"]["schedule_hash"] == best["schedule_hash"]
    assert again.json()["run"]["id"] == run["id"] and again.json()["run"]["status"] == "succeeded"
    assert _events(client, again.json()["run"]["id"])[-1][1]["id"] == run["id"]

    trials = client.get(f"/v1/runs/{run['id']}/trials").json()
    statuses = [t["status"] for t in trials["data"]]
    assert trials["count"] == len(trials["data"]) and statuses.count("ok") == 64
    assert [t["number"] for t in trials["data"]] == list(range(trials["count"]))
    ok = [t for t in trials["data"] if t["status"] == "ok"]
    assert len({t["schedule_hash"] for t in ok}) == 64
    assert all(t["simulated"] and t["latency_us"] > 0 and t["params"] for t in ok)
    # Points the space rejects are counted on the run, never stored as trials.
    assert trials["count"] == done["trials_done"] == 64 and done["invalid"] >= 0
    assert not [t for t in trials["data"] if t["status"] == "invalid"]
    only_ok = client.get(f"/v1/runs/{run['id']}/trials", params={"status": "ok", "limit": 5})
    assert only_ok.json()["count"] == 64 and len(only_ok.json()["data"]) == 5


def test_identical_requests_share_a_queued_run_and_cancel(idle_client: TestClient) -> None:
    client = idle_client
    first = client.post("/v1/tune", json=tune_body())
    second = client.post("/v1/tune", json=tune_body(dict(reversed(list(SMALL_GEMM.items())))))
    assert first.status_code == second.status_code == 202
    assert first.json()["run"]["id"] == second.json()["run"]["id"]
    assert first.json()["run"]["status"] == "queued"
    other = client.post("/v1/tune", json=tune_body(device="sim:h100") | {"device": "sim:h100"})
    assert other.status_code == 202 and other.json()["run"]["id"] != first.json()["run"]["id"]

    runs = client.get("/v1/runs").json()
    assert runs["count"] == 2 and [r["id"] for r in runs["data"]] == sorted(
        [first.json()["run"]["id"], other.json()["run"]["id"]], reverse=True
    )
    assert client.get("/v1/runs", params={"status": "queued", "op": "gemm"}).json()["count"] == 2
    assert client.get("/v1/runs", params={"op": "attention"}).json()["count"] == 0

    run_id = first.json()["run"]["id"]
    cancelled = client.delete(f"/v1/runs/{run_id}")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert client.delete(f"/v1/runs/{run_id}").status_code == 409
    assert client.get("/v1/runs", params={"status": "cancelled"}).json()["count"] == 1
    # "auto" is a local GPU if there is one, else the simulated H200.
    auto = client.post("/v1/tune", json={"op": "gemm", "params": {**SMALL_GEMM, "m": 512}})
    assert auto.status_code == 202 and auto.json()["run"]["device"] == "sim:h200"
    assert auto.json()["run"]["budget"]["trials"] == 64  # the default budget
    # Cancelled is not active: the same request makes a new run.
    third = client.post("/v1/tune", json=tune_body())
    assert third.status_code == 202
    earlier = (run_id, other.json()["run"]["id"], auto.json()["run"]["id"])
    assert third.json()["run"]["id"] not in earlier


def test_cancel_acts_at_once_and_keeps_the_best(client: TestClient) -> None:
    run = client.post("/v1/tune", json=tune_body(trials=5000)).json()["run"]
    wait_for(client, run["id"], lambda r: r["trials_done"] >= 8)
    asked = time.monotonic()
    response = client.delete(f"/v1/runs/{run['id']}")
    assert response.status_code == 200 and response.json()["cancel_requested"] is True
    assert response.json()["status"] == "cancelled"  # at once, whatever the search does
    assert client.delete(f"/v1/runs/{run['id']}").status_code == 409
    # Its search stops and its best is stored within seconds (phase "done").
    done = wait_for(client, run["id"], lambda r: r["phase"] == "done", timeout_s=5.0)
    assert time.monotonic() - asked <= 5.0
    assert done["status"] == "cancelled" and done["stop_reason"] == "cancelled"
    assert done["best"] is not None and done["trials_done"] >= 8
    assert done["finished_at"] is not None
    trials = client.get(f"/v1/runs/{run['id']}/trials", params={"status": "ok"}).json()
    assert trials["count"] == done["trials_done"]
    # A cancelled run keeps its best: it is cached, and a tune answers with it.
    schedules = client.get("/v1/schedules").json()
    assert schedules["count"] == 1
    entry = schedules["data"][0]
    assert entry["run_id"] == run["id"]
    assert entry["schedule_hash"] == done["best"]["schedule_hash"]
    assert entry["kernel_hash"] == done["best"]["kernel_hash"] is not None
    hit = client.post("/v1/tune", json=tune_body(trials=5000))
    assert hit.status_code == 200 and hit.json()["run"]["status"] == "cancelled"


def test_warm_start_from_the_nearest_cached_shape(client: TestClient) -> None:
    first = client.post("/v1/tune", json=tune_body(trials=12)).json()["run"]
    assert wait_for(client, first["id"])["status"] == "succeeded"
    near = {**SMALL_GEMM, "m": 2048}
    second = client.post("/v1/tune", json=tune_body(near, trials=12)).json()["run"]
    assert wait_for(client, second["id"])["status"] == "succeeded"
    trials = client.get(f"/v1/runs/{second['id']}/trials").json()["data"]
    warm = [t for t in trials if t["source"] == "warm_start"]
    cached = client.get("/v1/schedules", params={"params": json.dumps(SMALL_GEMM)}).json()
    assert warm and warm[0]["params"]["tile_m"] == cached["data"][0]["choices"]["tile_m"]


def test_schedule_filters(client: TestClient) -> None:
    run = client.post("/v1/tune", json=tune_body(trials=8)).json()["run"]
    assert wait_for(client, run["id"])["status"] == "succeeded"
    get = client.get
    assert get("/v1/schedules", params={"op": "gemm", "device": "sim:h200"}).json()["count"] == 1
    assert get("/v1/schedules", params={"device": "sim:h100"}).json()["count"] == 0
    assert get("/v1/schedules", params={"op": "attention"}).json()["count"] == 0
    exact = {"op": "gemm", "params": json.dumps(SMALL_GEMM)}  # defaults filled in
    assert get("/v1/schedules", params=exact).json()["count"] == 1
    partial = {"params": json.dumps({"m": 1024})}
    assert get("/v1/schedules", params=partial).json()["count"] == 1
    other = {"params": json.dumps({"m": 2048})}
    assert get("/v1/schedules", params=other).json()["count"] == 0
    key = run["device_key"]
    assert get("/v1/schedules", params={"device": key}).json()["count"] == 1


def test_kernels_are_404_until_code_generation(client: TestClient) -> None:
    digest = "0" * 64
    for path in (f"/v1/kernels/{digest}", f"/v1/kernels/{digest}/source"):
        response = client.get(path)
        assert response.status_code == 404 and "not found" in response.json()["detail"]


def test_devices(client: TestClient) -> None:
    data = client.get("/v1/devices").json()
    names = {d["name"] for d in data["data"]}
    assert {"sim:h100", "sim:h200", "sim:a100"} <= names and data["count"] == len(data["data"])
    assert all(d["simulated"] and d["available"] for d in data["data"])
    run = client.post("/v1/tune", json=tune_body(trials=4)).json()["run"]
    wait_for(client, run["id"])
    h200 = next(d for d in client.get("/v1/devices").json()["data"] if d["name"] == "sim:h200")
    assert h200["known"] and h200["key"] == run["device_key"]
    assert h200["executor"] == "SimulatedDevice" and h200["capacity"] == 8


def test_health_metrics_openapi(client: TestClient) -> None:
    health = client.get("/healthz")
    assert health.status_code == 200
    assert health.json()["status"] == "ok" and health.json()["schema_version"] == SCHEMA_VERSION
    client.post("/v1/tune", json={"op": "nope", "params": {}})
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    assert 'pipetune_http_requests_total{method="GET",route="/healthz",status="200"}' in (
        metrics.text
    )
    assert 'pipetune_tune_requests_total{outcome="invalid"} 1.0' in metrics.text
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    for path in ("/v1/tune", "/v1/runs", "/v1/runs/{run_id}", "/v1/runs/{run_id}/trials",
                 "/v1/runs/{run_id}/events", "/v1/schedules", "/v1/kernels/{kernel_hash}",
                 "/v1/kernels/{kernel_hash}/source", "/v1/devices", "/healthz", "/metrics"):
        assert path in spec["paths"], path
    assert set(spec["paths"]["/v1/tune"]["post"]["responses"]) >= {"200", "202", "422"}
    assert spec["paths"]["/v1/runs/{run_id}"]["delete"]["operationId"] == "runs-cancel_run"


def test_unknown_run_is_404(client: TestClient) -> None:
    for method, path in (("GET", "/v1/runs/999"), ("GET", "/v1/runs/999/trials"),
                         ("GET", "/v1/runs/999/events"), ("DELETE", "/v1/runs/999")):
        response = client.request(method, path)
        assert response.status_code == 404 and response.json()["detail"] == "run 999 not found"
