"""A service you can expose: load queues instead of deadlocking, bodies and values are
bounded, event streams share one reader per run, a lost database is noticed, and answers
carry no host names (on SQLite and PostgreSQL where a database is involved)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient
from service_helpers import tune_body

from service.api.guards import RequestGuard
from service.core.config import Settings
from service.core.db import Database
from service.db import repositories as repo
from service.main import create_app
from service.runs import events
from service.runs.events import EventHub, StreamsFull


def _queued_run(client: TestClient) -> int:
    response = client.post("/v1/tune", json=tune_body())
    assert response.status_code == 202, response.text
    return response.json()["run"]["id"]


def test_concurrent_reads_queue_instead_of_deadlocking(settings: Settings) -> None:
    """More requests than threads and pooled connections at once (the audit's deadlock:
    64 requests, 40 threads, 15 connections) all answer, and quickly."""
    settings = settings.model_copy(update={"api_threads": 4})
    with TestClient(create_app(settings, run_background=False)) as client:
        run_id = _queued_run(client)
        paths = ["/v1/runs", f"/v1/runs/{run_id}", "/v1/schedules", "/v1/devices",
                 f"/v1/runs/{run_id}/trials"]

        async def burst() -> list[int]:
            transport = httpx.ASGITransport(app=client.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                statuses: list[int] = []

                async def get(path: str) -> None:
                    statuses.append((await http.get(path)).status_code)

                async with anyio.create_task_group() as tasks:
                    for index in range(64):
                        tasks.start_soon(get, paths[index % len(paths)])
                return statuses

        started = time.monotonic()
        statuses = client.portal.call(burst)
        assert statuses == [200] * 64
        assert time.monotonic() - started < 10
        engine = client.app.state.db.read_engine
        assert engine.pool.size() == 4 + settings.max_concurrent_runs + 4


def test_a_streamed_body_over_the_limit_is_413(idle_client: TestClient) -> None:
    def chunks():  # no Content-Length: sent chunked
        for _ in range(40):
            yield b"x" * 65_536

    response = idle_client.post("/v1/tune", content=chunks(),
                                headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["detail"][0]["field"] == "body"
    small = idle_client.post("/v1/tune", content=iter([b'{"op":', b'"gemm"}']),
                             headers={"content-type": "application/json"})
    assert small.status_code == 422 and small.json()["detail"][0]["field"] == "params"


def test_a_body_not_sent_in_time_is_408() -> None:
    async def never_app(scope, receive, send):  # the guard answers before the app
        raise AssertionError("reached the app")

    guard = RequestGuard(never_app, max_body=1024, body_timeout_s=0.05)
    sent: list[dict] = []

    async def receive() -> dict:
        await anyio.sleep(10)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/tune", "query_string": b"",
             "headers": [(b"content-type", b"application/json"), (b"content-length", b"9")],
             "app": SimpleNamespace(state=SimpleNamespace())}
    started = time.monotonic()
    anyio.run(guard, scope, receive, send)
    assert sent[0]["status"] == 408 and time.monotonic() - started < 2


def test_last_event_id_must_be_a_trial_number(idle_client: TestClient) -> None:
    run_id = _queued_run(idle_client)
    for bad in ("abc", "-1", "1e3", "99999999999", "\u0661"):
        response = idle_client.get(f"/v1/runs/{run_id}/events",
                                   headers={"Last-Event-ID": bad.encode()})
        assert response.status_code == 422, (bad, response.text)
        assert response.json()["detail"][0]["field"] == "last-event-id"


def test_event_streams_past_the_cap_are_429(idle_client: TestClient) -> None:
    run_id = _queued_run(idle_client)
    hub: EventHub = idle_client.app.state.events
    hub.open_streams = hub.max_streams  # as if that many were open
    try:
        response = idle_client.get(f"/v1/runs/{run_id}/events")
    finally:
        hub.open_streams = 0
    assert response.status_code == 429 and response.headers["retry-after"]


def test_one_reader_per_run_whatever_the_watchers(
    idle_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """60 watchers of a run: one database read per poll, each watcher gets every event,
    a watcher past the cap is refused, and the feed ends with its last watcher."""
    run_id = _queued_run(idle_client)
    db: Database = idle_client.app.state.db
    reads: list[int] = []
    snapshot = events._snapshot
    monkeypatch.setattr(events, "_snapshot", lambda *a: (reads.append(1), snapshot(*a))[1])

    async def watch_all() -> list[list[str]]:
        async with EventHub(db, max_streams=60, poll_s=0.05).running() as hub:
            feeds = [await hub.open(run_id) for _ in range(60)]
            with pytest.raises(StreamsFull):
                await hub.open(run_id)
            streams = [feed.watch(-1, keepalive_s=0.05) for feed in feeds]
            firsts = [[await s.__anext__() for _ in range(2)] for s in streams]
            await anyio.sleep(0.3)  # a few polls
            for stream, feed in zip(streams, feeds, strict=True):
                await stream.aclose()
                hub.release(feed)
            await anyio.sleep(0.2)
            assert hub.open_streams == 0 and not hub._feeds
            return firsts

    firsts = anyio.run(watch_all)
    # The first update goes out as one chunk: the status, then the progress.
    assert all(f[0].startswith(":") and "event: status" in f[1] and "event: progress" in f[1]
               and f[1].index("event: status") < f[1].index("event: progress") for f in firsts)
    assert 2 <= len(reads) <= 12  # polls of one reader, not 60 readers'


def test_watchers_are_woken_a_group_per_pass_of_the_event_loop() -> None:
    """The watchers of an update are woken in WAKE_GROUPS groups, a pass of the event
    loop apart: another task (a health probe's request) runs between the groups instead
    of after every stream's send (with 500 streams its p99 went from 62 to 40 ms)."""
    import anyio.lowlevel

    feed = events.RunFeed(1)
    groups = [feed.changed(g) for g in range(events.WAKE_GROUPS)]
    seen: list[int] = []

    async def other_request() -> None:
        for _ in range(events.WAKE_GROUPS):
            seen.append(sum(e.is_set() for e in groups))
            await anyio.lowlevel.checkpoint()

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(feed.wake)
            tasks.start_soon(other_request)

    anyio.run(main)
    assert all(e.is_set() for e in groups)  # every group woken
    assert seen == sorted(seen) and 0 < seen[0] < seen[-1] <= events.WAKE_GROUPS
    assert feed.changed(0) is not groups[0]  # the next update has its own events


def test_healthz_queries_the_database_at_most_once_a_second_while_it_answers(
    idle_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.api.routes import health

    queries: list[int] = []
    query = health._query
    monkeypatch.setattr(health, "_query", lambda db: (queries.append(1), query(db))[1])
    health._last_ok.clear()
    answers = [idle_client.get("/healthz") for _ in range(5)]
    assert all(a.status_code == 200 and a.json()["schema_version"] for a in answers)
    assert len(queries) == 1
    monkeypatch.setattr(health, "PROBE_REUSE_S", 0.0)
    idle_client.get("/healthz")
    assert len(queries) == 2


def test_event_streams_of_a_missing_run_are_404(idle_client: TestClient) -> None:
    assert idle_client.get("/v1/runs/424242/events").status_code == 404
    assert idle_client.app.state.events.open_streams == 0


def test_a_deleted_or_replaced_sqlite_file_is_503_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "pipetune.db"
    settings = Settings(database_url=f"sqlite:///{path}", data_dir=tmp_path)
    with TestClient(create_app(settings, run_background=False)) as client:
        assert client.get("/healthz").status_code == 200
        path.unlink()
        health = client.get("/healthz")
        assert health.status_code == 503 and "deleted" in health.json()["database"]
        refused = client.post("/v1/tune", json=tune_body())
        assert refused.status_code == 503 and "deleted" in refused.json()["detail"]
        path.write_bytes(b"")  # another file in its place
        assert "replaced" in client.get("/healthz").json()["database"]
        assert client.delete("/v1/runs/1").status_code == 503


def test_an_unreachable_postgresql_is_reported() -> None:
    from service.api.routes.health import _probe

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    db = Database(f"postgresql+psycopg://postgres@127.0.0.1:{port}/test")
    try:
        schema, database = anyio.run(_probe, db)
        assert anyio.run(_probe, db) == (schema, database)  # a failure is never reused
    finally:
        db.dispose()
    assert schema is None and database.startswith("unavailable")


def test_the_database_url_can_come_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "url"
    secret.write_text("postgres://pipetune:s3cret@db/pipetune\n")
    settings = Settings(database_url_file=secret, data_dir=tmp_path)
    assert settings.database_url == "postgresql+psycopg://pipetune:s3cret@db/pipetune"
    from service.cli import build_parser

    args = build_parser().parse_args(["serve", "--database-url-file", str(secret)])
    assert args.database_url_file == secret and args.database_url is None


def test_answers_name_no_host_or_process(client: TestClient, settings: Settings) -> None:
    run_id = _queued_run(client)
    owner = f"{socket.gethostname()}:{4242}:0123abcd"
    db: Database = client.app.state.db
    with repo.session_scope(db.sessions) as session:
        run = repo.get_run(session, run_id=run_id)
        run.error = f"interrupted: the process running it ({owner}) stopped"
    error = client.get(f"/v1/runs/{run_id}").json()["error"]
    assert error == "interrupted: the process running it stopped"
    assert repo.redact_owner(f"gone ({owner})") == "gone"


def _serve_with(protocol: type, app: Any) -> tuple[Any, threading.Thread, int]:
    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, port=port, http=protocol, log_level="error",
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return server, thread, port


def _protocols() -> list[type]:
    from service.commands._uvicorn import HeaderTimeoutH11Protocol, HeaderTimeoutProtocol

    return list(dict.fromkeys((HeaderTimeoutProtocol, HeaderTimeoutH11Protocol)))


@pytest.mark.parametrize("protocol", _protocols(), ids=lambda p: p.__name__)
def test_uvicorn_drops_a_client_that_never_finishes_its_headers(protocol: type) -> None:
    class Quick(protocol):  # type: ignore[valid-type, misc]
        header_timeout_s = 0.2

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    server, thread, port = _serve_with(Quick, app)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as slow:
            slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
            started = time.monotonic()
            assert slow.recv(1024) == b""  # closed by the server
            assert time.monotonic() - started < 2
        with socket.create_connection(("127.0.0.1", port), timeout=3) as quick:
            quick.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert quick.recv(1024).startswith(b"HTTP/1.1 204")
            time.sleep(0.4)  # idle between requests: the next headers' deadline expires
            assert quick.recv(1024) == b""
    finally:
        server.should_exit = True
        thread.join(5)


def test_serve_answers_kept_alive_requests_whole_with_one_write_each() -> None:
    """The protocol serve runs joins a response's header and body writes: two requests on
    one connection get two complete answers (a 1 MB body too, through flow control)."""
    from service.commands._uvicorn import HeaderTimeoutProtocol, uvicorn_options

    assert issubclass(uvicorn_options()["http"], HeaderTimeoutProtocol)
    big = b"x" * (1 << 20)

    async def app(scope, receive, send):
        body = big if scope["path"] == "/big" else b"small"
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    server, thread, port = _serve_with(HeaderTimeoutProtocol, app)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            for path, body in (("/", b"small"), ("/big", big), ("/", b"small")):
                conn.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                received = b""
                while b"\r\n\r\n" not in received:
                    received += conn.recv(65536)
                head, _, rest = received.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200")
                while len(rest) < len(body):
                    rest += conn.recv(1 << 20)
                assert rest == body
    finally:
        server.should_exit = True
        thread.join(5)
