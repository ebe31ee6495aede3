"""The cache as users manage it through ``POST /v1/tune``: ``force`` re-tunes a cached
workload, ``extend`` continues its newest run's study with more budget; both answer in
the one shape of a tune, on SQLite and PostgreSQL."""

from __future__ import annotations

import optuna
from fastapi.testclient import TestClient
from service_helpers import tune_body, wait_for

from service.core.config import Settings


def _tuned(client: TestClient, trials: int = 8, **extra: object) -> dict:
    """A finished run of the small GEMM (posted with ``extra`` fields)."""
    response = client.post("/v1/tune", json=tune_body(trials=trials, **extra))
    assert response.status_code == 202, response.text
    assert response.json()["cached"] is False and response.json()["schedule"] is None
    return wait_for(client, response.json()["run"]["id"])


def test_force_starts_a_new_run_on_a_cache_hit(client: TestClient) -> None:
    first = _tuned(client)
    assert first["status"] == "succeeded"
    hit = client.post("/v1/tune", json=tune_body(trials=8))
    assert hit.status_code == 200 and hit.json()["run"]["id"] == first["id"]
    forced = client.post("/v1/tune", json=tune_body(trials=8, force=True))
    assert forced.status_code == 202 and forced.json()["cached"] is False
    second = wait_for(client, forced.json()["run"]["id"])
    assert second["id"] != first["id"] and second["status"] == "succeeded"
    # The cache keeps the faster of the two runs' winners.
    (entry,) = client.get("/v1/schedules").json()["data"]
    faster = min(first, second, key=lambda run: run["best"]["latency_us"])
    assert entry["latency_us"] == faster["best"]["latency_us"]
    assert entry["run_id"] == faster["id"]


def test_extend_continues_the_newest_runs_study(client: TestClient, settings: Settings) -> None:
    first = _tuned(client, trials=8)
    assert first["trials_done"] == 8
    extended = client.post("/v1/tune", json=tune_body(trials=6, extend=True))
    assert extended.status_code == 202, extended.text
    assert extended.headers["location"] == f"/v1/runs/{first['id']}"
    run = extended.json()["run"]
    assert run["id"] == first["id"] and run["status"] in ("queued", "running")
    assert run["budget"]["trials"] == 14 and run["finished_at"] is None
    done = wait_for(client, first["id"])
    assert done["status"] == "succeeded" and done["trials_done"] == 14
    assert done["best"]["latency_us"] <= first["best"]["latency_us"]
    # The earlier trials counted: none was measured again, the study holds them all.
    ok = client.get(f"/v1/runs/{first['id']}/trials", params={"status": "ok"}).json()["data"]
    hashes = [t["schedule_hash"] for t in ok]
    assert len(hashes) == 14 and len(set(hashes)) == 14
    study = optuna.load_study(study_name=f"pipetune-run-{first['id']}",
                              storage=settings.database_url)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) >= 14
    (entry,) = client.get("/v1/schedules").json()["data"]
    assert entry["latency_us"] == done["best"]["latency_us"]


def test_extend_without_a_run_starts_one_and_joins_an_active_one(idle_client: TestClient) -> None:
    started = idle_client.post("/v1/tune", json=tune_body(trials=8, extend=True))
    assert started.status_code == 202 and started.json()["run"]["budget"]["trials"] == 8
    again = idle_client.post("/v1/tune", json=tune_body(trials=8, extend=True))
    assert again.json()["run"]["id"] == started.json()["run"]["id"]
    forced = idle_client.post("/v1/tune", json=tune_body(trials=8, force=True))
    assert forced.json()["run"]["id"] == started.json()["run"]["id"]


def test_extend_a_cancelled_run_resumes_it(client: TestClient) -> None:
    started = client.post("/v1/tune", json=tune_body(trials=5000)).json()["run"]
    wait_for(client, started["id"], lambda r: r["trials_done"] >= 8)
    client.delete(f"/v1/runs/{started['id']}")
    stopped = wait_for(client, started["id"], lambda r: r["phase"] == "done", timeout_s=5.0)
    extended = client.post("/v1/tune", json=tune_body(trials=4, extend=True))
    assert extended.status_code == 202 and extended.json()["run"]["id"] == started["id"]
    done = wait_for(client, started["id"])
    assert done["status"] == "succeeded" and done["cancel_requested"] is False
    assert done["trials_done"] == stopped["trials_done"] + 4


def test_force_and_extend_together_are_a_422_naming_extend(idle_client: TestClient) -> None:
    response = idle_client.post("/v1/tune", json=tune_body(force=True, extend=True))
    assert response.status_code == 422
    (item,) = response.json()["detail"]
    assert item["field"] == "extend" and "force" in item["msg"]
    wrong = idle_client.post("/v1/tune", json=tune_body(force="yes"))
    assert wrong.status_code == 422 and wrong.json()["detail"][0]["field"] == "force"
