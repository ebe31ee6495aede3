"""Queue quotas hold under concurrent requests (issue 42, item 1): many requests of one
key at the same instant queue no more runs than ``key_max_active_runs`` allows, nor than
``max_queued_runs``, on SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fastapi.testclient import TestClient
from service_helpers import SMALL_GEMM, tune_body

from service.auth import issue
from service.core.config import Settings
from service.db import keys as keys_repo
from service.db.repositories import session_scope
from service.main import create_app

#: Concurrent requests per test: as many as the report of the race (issue 42) sent.
REQUESTS = 30


@pytest.fixture
def quota_client(settings: Settings) -> Iterator[TestClient]:
    """An app whose runs stay queued, with a key quota of 4 and a queue bound of 6."""
    bounded = settings.model_copy(update={"key_max_active_runs": 4, "max_queued_runs": 6})
    with TestClient(create_app(bounded, run_background=False)) as client:
        yield client


def _header(client: TestClient, name: str) -> dict[str, str]:
    issued = issue()
    with session_scope(client.app.state.db.sessions) as session:
        keys_repo.create_key(session, name=name, scopes=["tune"], issued=issued)
    return {"Authorization": f"Bearer {issued.token}"}


def _at_once(calls: list[Callable[[], httpx.Response]]) -> list[httpx.Response]:
    """Make ``calls`` from threads released together (each request in the app's own
    thread pool, so their database transactions overlap)."""
    start = threading.Barrier(len(calls))

    def call(index: int) -> httpx.Response:
        start.wait()
        return calls[index]()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(call, range(len(calls))))


def _new_run(client: TestClient, index: int, header: dict[str, str]) -> httpx.Response:
    """A request that would queue a run of its own (a workload no other request has)."""
    body = tune_body({**SMALL_GEMM, "m": 128 * (index + 1)})
    return client.post("/v1/tune", json=body, headers=header)


def _outcome(answers: list[httpx.Response]) -> Counter[object]:
    """How many answers were 202, and how many 429 by the quota their body names."""
    counted: Counter[object] = Counter()
    for answer in answers:
        if answer.status_code == 429:
            assert int(answer.headers["Retry-After"]) > 0
            counted[answer.json()["detail"][0]["field"]] += 1
        else:
            counted[answer.status_code] += 1
    return counted


def _queued(client: TestClient) -> int:
    return client.get("/v1/runs", params={"status": "queued"}).json()["count"]


def test_key_quota_holds_under_concurrent_tunes(quota_client: TestClient) -> None:
    header = _header(quota_client, "eager")
    answers = _at_once([lambda i=i: _new_run(quota_client, i, header) for i in range(REQUESTS)])
    assert _outcome(answers) == {202: 4, "key_max_active_runs": REQUESTS - 4}
    assert _queued(quota_client) == 4


def test_queue_bound_holds_under_concurrent_tunes(quota_client: TestClient) -> None:
    headers = [_header(quota_client, f"key{n}") for n in range(REQUESTS // 3)]
    answers = _at_once([lambda i=i: _new_run(quota_client, i, headers[i % len(headers)])
                        for i in range(REQUESTS)])
    assert _outcome(answers) == {202: 6, "max_queued_runs": REQUESTS - 6}
    assert _queued(quota_client) == 6


def test_key_quota_holds_under_concurrent_resumes(quota_client: TestClient) -> None:
    header = _header(quota_client, "resumer")
    run_ids = []
    for index in range(12):  # twelve cancelled runs of the key, one at a time
        run = _new_run(quota_client, index, header).json()["run"]
        assert quota_client.delete(f"/v1/runs/{run['id']}", headers=header).status_code == 200
        run_ids.append(run["id"])
    answers = _at_once([lambda r=r: quota_client.post(f"/v1/runs/{r}/resume", headers=header)
                        for r in run_ids])
    assert _outcome(answers) == {202: 4, "key_max_active_runs": 8}
    assert _queued(quota_client) == 4


def test_concurrent_requests_for_one_workload_join_its_run_at_the_quota(
        quota_client: TestClient) -> None:
    """A key one run below its quota sends the same new workload many times at once: the
    first queues the run, every other joins it (a join is never refused), none is a 429."""
    header = _header(quota_client, "joiner")
    for index in range(3):
        assert _new_run(quota_client, index, header).status_code == 202
    # The workload's row exists (a cancelled run), so nothing else orders the requests.
    cancelled = _new_run(quota_client, 99, header).json()["run"]["id"]
    assert quota_client.delete(f"/v1/runs/{cancelled}", headers=header).status_code == 200
    answers = _at_once([lambda: _new_run(quota_client, 99, header) for _ in range(REQUESTS)])
    assert _outcome(answers) == {202: REQUESTS}
    assert len({answer.json()["run"]["id"] for answer in answers}) == 1
    assert _queued(quota_client) == 4
