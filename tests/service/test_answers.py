"""Cache-hit tunes and lists of the cache are answered from remembered bytes while the
rows they were built from read the same, and rebuilt as soon as any column of those rows
changes (no clock involved), on SQLite and PostgreSQL."""

from __future__ import annotations

import socket

import pytest
from fastapi.testclient import TestClient
from service_helpers import tune_body, wait_for
from sqlalchemy import create_engine, update

from service.api.answers import AnswerMemo
from service.db import repositories as repo
from service.db import stamps
from service.db.models import RunModel, ScheduleModel


def test_the_memo_answers_only_for_the_stamp_it_was_given() -> None:
    memo = AnswerMemo(max_answers=2)
    memo.put("a", (1, "x"), b"first")
    assert memo.get("a", (1, "x")) == b"first"
    assert memo.get("a", (2, "x")) is None  # the rows changed: rebuild
    assert memo.get("b", (1, "x")) is None
    memo.put("b", 1, b"b")
    memo.get("a", (1, "x"))  # a is now the most recently used
    memo.put("c", 1, b"c")  # over the bound: b goes
    assert memo.get("b", 1) is None and memo.get("a", (1, "x")) == b"first" and len(memo) == 2


def _write(client: TestClient, statement: object) -> None:
    with repo.session_scope(client.app.state.db.sessions) as session:
        session.execute(statement)


def test_a_cache_hit_is_reused_until_its_schedule_or_run_row_changes(
    client: TestClient,
) -> None:
    run = client.post("/v1/tune", json=tune_body(trials=8)).json()["run"]
    wait_for(client, run["id"])
    first = client.post("/v1/tune", json=tune_body(trials=8))
    second = client.post("/v1/tune", json=tune_body(trials=8))
    assert first.status_code == second.status_code == 200
    assert first.content == second.content and len(client.app.state.answers) == 1
    # A column changes without updated_at (a clock would not notice): a new answer.
    _write(client, update(ScheduleModel).values(latency_us=1.25))
    changed = client.post("/v1/tune", json=tune_body(trials=8)).json()
    assert changed["cached"] is True and changed["schedule"]["latency_us"] == 1.25
    _write(client, update(RunModel).where(RunModel.id == run["id"]).values(attempts=7))
    assert client.post("/v1/tune", json=tune_body(trials=8)).json()["run"]["attempts"] == 7
    # force and extend never take a remembered answer.
    forced = client.post("/v1/tune", json=tune_body(trials=8, force=True))
    assert forced.status_code == 202
    wait_for(client, forced.json()["run"]["id"])


def test_a_list_of_the_cache_is_reused_until_a_cached_schedule_changes(
    client: TestClient,
) -> None:
    wait_for(client, client.post("/v1/tune", json=tune_body(trials=8)).json()["run"]["id"])
    before = client.get("/v1/schedules")
    assert before.content == client.get("/v1/schedules").content
    (entry,) = before.json()["data"]
    _write(client, update(ScheduleModel).values(latency_us=entry["latency_us"] / 2))
    (after,) = client.get("/v1/schedules").json()["data"]
    assert after["latency_us"] == entry["latency_us"] / 2
    # Other filters are other answers, each checked against the same rows.
    assert client.get("/v1/schedules", params={"op": "attention"}).json()["count"] == 0
    assert client.get("/v1/schedules", params={"op": "gemm"}).json()["count"] == 1


def test_a_stamp_that_cannot_be_read_is_a_storage_error(tmp_path) -> None:
    """Stamps run on the driver's connection: its errors still become the API's 503
    (StorageError), whether the server refuses the connection or the table is missing."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engines = [create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{port}/test"),
               create_engine(f"sqlite:///{tmp_path / 'empty.db'}")]
    for engine in engines:
        with pytest.raises(repo.StorageError, match="database unavailable"):
            stamps.schedules_stamp(engine)
        with pytest.raises(repo.StorageError):
            stamps.cache_hit_stamp(engine, workload_key="w", device_key="d")
        engine.dispose()
