"""Every path that queues again, resumes or cancels a run checks that the key owns it or
is an admin (issue 42, item 4): ``extend`` used to queue another key's finished run
again, which ``/resume`` refuses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from service_helpers import SMALL_GEMM, tune_body

from service.auth import issue
from service.core.config import Settings
from service.db import keys as keys_repo
from service.db import repositories as repo
from service.db.models import RunStatus
from service.main import create_app

#: A range request (a range run) beside the exact one: both extend through POST /v1/tune.
RANGE = {"m": {"min": 1, "max": 4096}, "n": 1024, "k": 1024, "dtype": "float16"}


@pytest.fixture
def locked(settings: Settings) -> Iterator[TestClient]:
    """An app that requires keys, whose runs stay queued."""
    with TestClient(create_app(settings.model_copy(update={"require_auth": True}),
                               run_background=False)) as client:
        yield client


def _header(client: TestClient, name: str, scope: str) -> dict[str, str]:
    issued = issue()
    with repo.session_scope(client.app.state.db.sessions) as session:
        keys_repo.create_key(session, name=name, scopes=[scope], issued=issued)
    return {"Authorization": f"Bearer {issued.token}"}


def _end(client: TestClient, run_id: int, status: str, header: dict[str, str]) -> None:
    """End a queued run: cancelled by its owner, or succeeded as a search would end it."""
    if status == "cancelled":
        assert client.delete(f"/v1/runs/{run_id}", headers=header).status_code == 200
        return
    with repo.session_scope(client.app.state.db.sessions) as session:
        assert repo.finish_run(session, run_id=run_id, status=RunStatus(status))


def _refused(answer: Any, run_id: int) -> None:
    assert answer.status_code == 403, answer.text
    (item,) = answer.json()["detail"]
    assert item["type"] == "forbidden" and f"run {run_id} belongs to another" in item["msg"]


@pytest.mark.parametrize("params", [SMALL_GEMM, RANGE], ids=["exact", "range"])
@pytest.mark.parametrize("status", ["cancelled", "succeeded"])
def test_extend_of_another_keys_run_is_403_as_resume_is(
        locked: TestClient, params: dict[str, Any], status: str) -> None:
    owner = _header(locked, "owner", "tune")
    other = _header(locked, "other", "tune")
    admin = _header(locked, "admin", "admin")
    run_id = locked.post("/v1/tune", json=tune_body(params), headers=owner).json()["run"]["id"]
    _end(locked, run_id, status, owner)
    extend = tune_body(params, trials=8, extend=True)

    _refused(locked.post("/v1/tune", json=extend, headers=other), run_id)
    _refused(locked.post(f"/v1/runs/{run_id}/resume", headers=other), run_id)
    run = locked.get(f"/v1/runs/{run_id}", headers=other).json()
    assert run["status"] == status  # not queued again

    for allowed in (owner, admin):
        extended = locked.post("/v1/tune", json=extend, headers=allowed)
        assert extended.status_code == 202, extended.text
        assert extended.json()["run"]["id"] == run_id
        assert extended.json()["run"]["status"] == "queued"
        _refused(locked.delete(f"/v1/runs/{run_id}", headers=other), run_id)
        _end(locked, run_id, status, owner)


def test_extend_joins_another_keys_active_run_and_starts_a_run_of_its_own(
        locked: TestClient) -> None:
    owner = _header(locked, "owner", "tune")
    other = _header(locked, "other", "tune")
    active = locked.post("/v1/tune", json=tune_body(), headers=owner).json()["run"]
    joined = locked.post("/v1/tune", json=tune_body(extend=True), headers=other)
    assert joined.status_code == 202 and joined.json()["run"]["id"] == active["id"]
    assert joined.json()["run"]["key_id"] == active["key_id"]
    fresh = locked.post("/v1/tune", json=tune_body({**SMALL_GEMM, "m": 512}, extend=True),
                        headers=other)
    assert fresh.status_code == 202 and fresh.json()["run"]["key_id"] != active["key_id"]
