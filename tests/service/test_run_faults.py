"""Runs survive a brief database fault (writes retried, the run queued again up to an
attempt cap, then failed saying why) and resume from their trials with
``POST /v1/runs/{id}/resume`` (issue 16, item 4). Faults are injected by wrapping the
repository's writes, not by stopping the database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from service_helpers import tune_body, wait_for

from service.core.config import Settings
from service.db import repositories as repo
from service.main import create_app

_FAST_RETRIES = {"db_retry_attempts": 3, "db_retry_max_wait_s": 0.01, "max_run_attempts": 2}


@pytest.fixture
def faulty(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings.model_copy(update=_FAST_RETRIES))) as client:
        yield client


def _failing(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[int]:
    """Make ``repositories.add_trials`` raise a StorageError ``failures`` times (-1:
    always); the calls made, counted."""
    real, calls = repo.add_trials, [0]

    def add_trials(session, **kwargs):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if failures < 0 or calls[0] <= failures:
            raise repo.StorageError("database error: OperationalError: server closed the "
                                    "connection unexpectedly")
        return real(session, **kwargs)

    monkeypatch.setattr(repo, "add_trials", add_trials)
    return calls


def test_a_brief_fault_is_retried_and_the_run_succeeds(
        faulty: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _failing(monkeypatch, failures=2)
    run = faulty.post("/v1/tune", json=tune_body(trials=16)).json()["run"]
    done = wait_for(faulty, run["id"])
    assert done["status"] == "succeeded" and done["attempts"] == 1 and done["error"] is None
    assert calls[0] > 2 and done["trials_done"] == 16


def test_a_lasting_fault_requeues_then_fails_saying_why_and_resume_continues(
        faulty: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    _failing(monkeypatch, failures=-1)
    run = faulty.post("/v1/tune", json=tune_body(trials=16)).json()["run"]
    failed = wait_for(faulty, run["id"])
    assert failed["status"] == "failed" and failed["attempts"] == 2
    assert "database unavailable" in failed["error"] and "resume" in failed["error"]
    monkeypatch.undo()  # the database is back
    resumed = faulty.post(f"/v1/runs/{run['id']}/resume")
    assert resumed.status_code == 202
    assert resumed.json()["attempts"] <= 1  # counted from 0 again (it may be claimed already)
    done = wait_for(faulty, run["id"])
    assert done["status"] == "succeeded" and done["trials_done"] == 16 and done["error"] is None


def test_resume_continues_a_cancelled_run_from_its_trials(client: TestClient) -> None:
    run = client.post("/v1/tune", json=tune_body(trials=40)).json()["run"]
    wait_for(client, run["id"], lambda r: r["trials_done"] >= 8)
    client.delete(f"/v1/runs/{run['id']}")
    stopped = wait_for(client, run["id"], lambda r: r["phase"] == "done")
    assert stopped["status"] == "cancelled" and stopped["trials_done"] < 40
    again = client.post(f"/v1/runs/{run['id']}/resume", json={"budget": {"trials": 8}})
    assert again.status_code == 202
    assert again.json()["budget"]["trials"] == stopped["trials_done"] + 8
    done = wait_for(client, run["id"])
    assert done["status"] == "succeeded" and done["trials_done"] == stopped["trials_done"] + 8
    trials = client.get(f"/v1/runs/{run['id']}/trials", params={"status": "ok"}).json()
    hashes = [t["schedule_hash"] for t in trials["data"]]
    assert len(hashes) == len(set(hashes))  # none measured twice
    refused = client.post(f"/v1/runs/{run['id']}/resume")
    assert refused.status_code == 409 and refused.json()["detail"][0]["field"] == "run_id"
    assert client.post("/v1/runs/999999/resume").status_code == 404


def test_resume_refuses_an_active_run(idle_client: TestClient) -> None:
    run = idle_client.post("/v1/tune", json=tune_body()).json()["run"]
    refused = idle_client.post(f"/v1/runs/{run['id']}/resume")
    assert refused.status_code == 409 and "queued" in refused.json()["detail"][0]["msg"]
    bad = idle_client.post(f"/v1/runs/{run['id']}/resume", json={"budget": {"trials": 0}})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "budget.trials"
