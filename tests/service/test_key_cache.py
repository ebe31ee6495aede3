"""Key lookups are cached briefly (issue 42, item 5): keyed requests do not each query the
keys table, a key revoked in this process is refused at once, and one revoked by another
process (``pipetune keys revoke``) within the cache's lifetime."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, event, text

from service.auth import issue
from service.core.config import Settings
from service.db import keys as keys_repo
from service.db.repositories import session_scope
from service.main import create_app

#: Seconds a looked-up key is trusted in these tests.
CACHE_S = 0.5


def _key(client: TestClient, *scopes: str) -> tuple[int, dict[str, str]]:
    issued = issue()
    with session_scope(client.app.state.db.sessions) as session:
        key = keys_repo.create_key(session, name="cached", scopes=scopes or ("read",),
                                   issued=issued)
    return key.id, {"Authorization": f"Bearer {issued.token}"}


@contextmanager
def _key_queries(client: TestClient) -> Iterator[list[str]]:
    """The SQL statements that read the keys table while the block runs."""
    seen: list[str] = []

    def watch(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "pipetune_api_keys" in statement:
            seen.append(statement)

    db = client.app.state.db
    engines = {db.engine, db.read_engine}
    for engine in engines:
        event.listen(engine, "before_cursor_execute", watch)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", watch)


@pytest.fixture
def locked(settings: Settings) -> Iterator[TestClient]:
    cached = settings.model_copy(update={"require_auth": True, "key_cache_s": CACHE_S})
    with TestClient(create_app(cached, run_background=False)) as client:
        yield client


def test_keyed_requests_do_not_each_query_the_keys_table(locked: TestClient) -> None:
    _, header = _key(locked)
    requests = 20
    with _key_queries(locked) as queries:
        started = time.monotonic()
        for _ in range(requests):
            assert locked.get("/v1/runs", headers=header).status_code == 200
        seconds = time.monotonic() - started
    # One lookup per cache lifetime at most (and the first).
    assert len(queries) <= 1 + int(seconds / CACHE_S), (len(queries), seconds)
    assert len(queries) < requests


def test_a_key_revoked_in_this_process_is_refused_at_once(locked: TestClient) -> None:
    key_id, header = _key(locked)
    assert locked.get("/v1/runs", headers=header).status_code == 200  # now cached
    with session_scope(locked.app.state.db.sessions) as session:
        keys_repo.revoke_key(session, key_id=key_id)
    assert locked.get("/v1/runs", headers=header).status_code == 401


def test_a_key_revoked_elsewhere_is_refused_within_the_cache_lifetime(
        locked: TestClient, settings: Settings) -> None:
    key_id, header = _key(locked)
    assert locked.get("/v1/runs", headers=header).status_code == 200  # now cached
    other_process = create_engine(settings.database_url)
    try:
        with other_process.begin() as connection:
            connection.execute(text("UPDATE pipetune_api_keys SET revoked_at = "
                                    "CURRENT_TIMESTAMP WHERE id = :id"), {"id": key_id})
    finally:
        other_process.dispose()
    revoked = time.monotonic()
    while locked.get("/v1/runs", headers=header).status_code == 200:
        assert time.monotonic() - revoked < CACHE_S + 0.25, "revoked key still accepted"
        time.sleep(0.02)
    assert locked.get("/v1/runs", headers=header).status_code == 401


def test_a_wrong_secret_is_never_served_from_the_cache(locked: TestClient) -> None:
    _, header = _key(locked)
    assert locked.get("/v1/runs", headers=header).status_code == 200
    forged = {"Authorization": header["Authorization"][:-4] + "AAAA"}  # same prefix
    assert locked.get("/v1/runs", headers=forged).status_code == 401


def test_no_cache_when_its_lifetime_is_zero(settings: Settings) -> None:
    uncached = settings.model_copy(update={"require_auth": True, "key_cache_s": 0.0})
    with TestClient(create_app(uncached, run_background=False)) as client:
        _, header = _key(client)
        with _key_queries(client) as queries:
            for _ in range(3):
                assert client.get("/v1/runs", headers=header).status_code == 200
        assert len(queries) == 3
