"""Nothing is lost on restart: a run left by a stopped or killed server is resumed, or
marked interrupted, with its trials kept."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from service_helpers import SMALL_GEMM, tune_body, wait_for

from service.core.config import Settings
from service.main import create_app


def _ok_hashes(client: TestClient | httpx.Client, run_id: int) -> list[str]:
    data = client.get(f"/v1/runs/{run_id}/trials", params={"status": "ok"}).json()["data"]
    return [t["schedule_hash"] for t in data]


@pytest.mark.parametrize("policy", ["resume", "interrupt"])
def test_graceful_stop_then_start(settings: Settings, policy: str) -> None:
    with TestClient(create_app(settings)) as client:
        run = client.post("/v1/tune", json=tune_body(trials=40)).json()["run"]
        wait_for(client, run["id"], lambda r: r["trials_done"] >= 8)
    # Stopped mid-run: the run is left "running" with no owner.
    restarted = settings.model_copy(update={"on_restart": policy})
    with TestClient(create_app(restarted)) as client:
        before = client.get(f"/v1/runs/{run['id']}/trials").json()["count"]
        done = wait_for(client, run["id"])
        trials = client.get(f"/v1/runs/{run['id']}/trials").json()
        assert trials["count"] >= before > 0
        assert [t["number"] for t in trials["data"]] == list(range(trials["count"]))
        hashes = _ok_hashes(client, run["id"])
        assert len(hashes) == len(set(hashes)) == done["trials_done"]
        if policy == "resume":
            assert done["status"] == "succeeded" and done["attempts"] == 2
            assert done["trials_done"] == 40
        else:
            assert done["status"] == "interrupted" and "interrupted" in done["error"]
            assert 8 <= done["trials_done"] < 40 and done["best"] is not None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def _server(
    database_url: str, tmp_path: Path, policy: str
) -> Iterator[tuple[subprocess.Popen, httpx.Client]]:
    """``pipetune serve`` in a subprocess on a free port, with a client, until exit; the
    client's ``log_path`` is the server's output."""
    port = _free_port()
    env = {**os.environ, "PIPETUNE_ON_RESTART": policy, "PIPETUNE_DATA_DIR": str(tmp_path),
           "PIPETUNE_HEARTBEAT_S": "0.5"}
    log = open(tmp_path / f"server-{port}.log", "w")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port),
         "--database-url", database_url, "--log-level", "warning"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    client.log_path = tmp_path / f"server-{port}.log"  # type: ignore[attr-defined]
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if client.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                log.flush()
                raise AssertionError((tmp_path / f"server-{port}.log").read_text())
            time.sleep(0.2)
        yield process, client
    finally:
        client.close()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                _kill_9(process)
        log.close()


def _kill_9(process: subprocess.Popen) -> None:
    """SIGKILL the server and its search workers at once (its process group): nothing
    of it shuts down, as when the machine loses it."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _long_gemm(m: int) -> dict:
    """A tune that runs for minutes on the simulated device (a large space, many distinct
    latencies), so that it is still running when its server is killed."""
    return tune_body({**SMALL_GEMM, "m": m, "n": 4096, "k": 4096}, trials=5000)


def _wait(client: httpx.Client, run_id: int, done: Callable[[dict], bool],
          timeout_s: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        run = client.get(f"/v1/runs/{run_id}").json()
        if done(run):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.2)


@pytest.mark.slow
def test_kill_9_during_a_run(database_url: str, tmp_path: Path) -> None:
    # 1. A killed server's run is marked interrupted by the next one; trials are kept.
    with _server(database_url, tmp_path, "interrupt") as (process, client):
        run = client.post("/v1/tune", json=_long_gemm(8192)).json()["run"]
        _wait(client, run["id"], lambda r: r["trials_done"] >= 16)
        _kill_9(process)
    with _server(database_url, tmp_path, "interrupt") as (_, client):
        # Its worker process recovers it (marks it interrupted) soon after starting.
        seen = _wait(client, run["id"], lambda r: r["status"] != "running", timeout_s=30)
        assert seen["status"] == "interrupted", seen
        hashes = _ok_hashes(client, run["id"])
        assert len(hashes) >= 16 and len(hashes) == len(set(hashes))

        # 2. ... or resumed: the run goes on from its trials, none measured twice.
        other = client.post("/v1/tune", json=_long_gemm(16384)).json()["run"]
        assert other["status"] in ("queued", "running")
        _wait(client, other["id"], lambda r: r["trials_done"] >= 16)
    # (stopped with SIGTERM here: the next start resumes "running" runs either way)
    with _server(database_url, tmp_path, "resume") as (process, client):
        resumed = _wait(client, other["id"], lambda r: r["attempts"] >= 2)
        assert resumed["status"] == "running"
        # The server said where its database and dashboard are, and logged the resume.
        log = client.log_path.read_text()
        assert f"pipetune: dashboard {str(client.base_url).rstrip('/')}/" in log, log
        assert "pipetune: database " in log, log
        assert f"run {other['id']}: owner " in log and "resuming it" in log, log
        before = len(_ok_hashes(client, other["id"]))
        _wait(client, other["id"], lambda r: r["trials_done"] >= before + 8)
        _kill_9(process)
    with _server(database_url, tmp_path, "resume") as (_, client):
        again = _wait(client, other["id"], lambda r: r["attempts"] >= 3)
        hashes = _ok_hashes(client, other["id"])
        assert len(hashes) >= before + 8 and len(hashes) == len(set(hashes))
        cancelled = client.delete(f"/v1/runs/{other['id']}")
        assert cancelled.status_code == 200, (again, cancelled.text)
        final = _wait(client, other["id"], lambda r: r["status"] != "running")
        assert final["status"] == "cancelled"
