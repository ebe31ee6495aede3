"""A fleet of several Ray nodes on this machine, each on its own loopback address, through
the service on PostgreSQL: nodes started as ``pipetune node start`` plans them, offering two
simulated kinds of GPU (H100 on 127.0.0.2 and 127.0.0.3, A100 on 127.0.0.4); every run's
actors live on nodes of its kind; a node killed mid-run does not stop the run (its chunk
goes to the other H100 node), no trial is recorded twice and the winner equals that of the
same run without the loss; the node started again, its actor returns.

The head runs with short health checks (a lost node is seen in about 1.5 s, not 15 s).
Skipped without Ray's command line; takes about a minute.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import fresh_database
from fastapi.testclient import TestClient
from service_helpers import SMALL_GEMM, service_settings, wait_for

from service.commands.node import NodePlan, plan_nodes
from service.core.db import Database
from service.db import fleet as fleet_db
from service.db import repositories as repo
from service.main import create_app
from service.runs import fleet

ray = pytest.importorskip("ray")
#: Ray's command line: on PATH, or beside this interpreter (a venv used without activating).
RAY = shutil.which("ray") or shutil.which("ray", path=str(Path(sys.executable).parent))
pytestmark = pytest.mark.skipif(RAY is None, reason="Ray's command line is not installed")

#: Every Ray process of the test cluster: no token, no telemetry, fast health checks.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_DISABLE_USAGE_STATS": "1",
           "RAY_health_check_initial_delay_ms": "0", "RAY_health_check_period_ms": "500",
           "RAY_health_check_timeout_ms": "500", "RAY_health_check_failure_threshold": "3"}
NODES = (("h100", "127.0.0.2"), ("h100", "127.0.0.3"), ("a100", "127.0.0.4"))
TRIALS = 48


def _ray(*args: str) -> str:
    done = subprocess.run([RAY, *args], env={**os.environ, **RAY_ENV}, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout + done.stderr


def _node_plans(address: str) -> list[NodePlan]:
    """The launcher's own plan, one simulated GPU per node."""
    plans = []
    for catalog, ip in NODES:
        entry = fleet.simulated_entry(catalog, 1)
        plans += plan_nodes(address, [ip], [(entry, [])], ["--num-cpus=1"])
    return plans


def _kill_node(ip: str) -> None:
    """SIGKILL the raylet of the Ray node at ``ip`` and every process under it (its
    workers, the actors among them), as when the node's machine goes away."""
    killed = _kill_trees(lambda argv: _raylet_of(argv, {ip}))
    assert killed, f"no raylet of {ip}"


def _raylet_of(argv: list[str], ips: set[str]) -> bool:
    """Whether ``argv`` is the raylet of a node at one of ``ips``."""
    return "raylet" in argv[0] and any(a.split("=", 1)[-1] in ips for a in argv[1:]
                                       if a.startswith("--node_ip_address="))


def _kill_trees(roots: Callable[[list[str]], bool]) -> int:
    """SIGKILL each process whose argv ``roots`` picks, and its descendants; how many.
    (``ray stop`` would stop every Ray instance of the machine, other tests' too.)"""
    parents: dict[int, int] = {}
    picked = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        parents[int(pid)] = int(stat.rsplit(")", 1)[1].split()[1])
        if argv[0] and roots(argv):
            picked.add(int(pid))
    doomed = set(picked)
    while grown := {p for p, parent in parents.items() if parent in doomed} - doomed:
        doomed |= grown
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(picked)


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # Ray's socket paths must stay short
    os.environ.update(RAY_ENV)
    out = _ray("start", "--head", "--port=0", "--num-cpus=1", "--include-dashboard=false",
               f"--temp-dir={temp}")
    address = re.search(r"--address='([^']+)'", out).group(1)
    plans = _node_plans(address)
    try:
        for plan in plans:
            _ray(*plan.command[1:])
        ray.init(address=address, log_to_driver=False, configure_logging=False)
        yield {"address": address, "plans": plans}
    finally:
        ray.shutdown()
        ips = {ip for _, ip in NODES}
        _kill_trees(lambda argv: any(temp in a for a in argv) or _raylet_of(argv, ips))
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def settings(tmp_path: Path, cluster: dict[str, Any]) -> Iterator[Any]:
    with fresh_database("postgresql", tmp_path) as url:
        db = Database(url)
        import migrations

        migrations.upgrade(db.url, engine=db.engine)
        with repo.session_scope(db.sessions) as session:
            for plan in cluster["plans"]:
                fleet_db.register_node(session, node=plan.node, entries=[plan.entry])
        db.dispose()
        yield service_settings(url, tmp_path).model_copy(
            update={"executor": "ray", "ray_address": cluster["address"], "seed": 7})


def _fleet(client: TestClient) -> dict[str, dict[str, Any]]:
    return {d["identity"]["catalog"]: d for d in client.get("/v1/devices").json()["data"]
            if d["kind"] == "fleet"}


def _tune(client: TestClient, device: str, **extra: Any) -> int:
    answer = client.post("/v1/tune", json={"op": "gemm", "params": SMALL_GEMM, "device": device,
                                           "budget": {"trials": TRIALS}, **extra})
    assert answer.status_code == 202, answer.text
    return answer.json()["run"]["id"]


def _finished(client: TestClient, run_id: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    run = wait_for(client, run_id, timeout_s=240)
    assert run["status"] == "succeeded", run
    trials = client.get(f"/v1/runs/{run_id}/trials", params={"limit": 1000}).json()["data"]
    numbers = [t["number"] for t in trials]
    assert len(numbers) == len(set(numbers)) == TRIALS  # nothing recorded twice
    return run, trials


def test_runs_live_on_their_nodes_and_survive_a_lost_node(settings: Any,
                                                          cluster: dict[str, Any]) -> None:
    with TestClient(create_app(settings)) as client:
        devices = _fleet(client)
        assert {c: d["available"] for c, d in devices.items()} == {"h100": True, "a100": True}
        h100, a100 = devices["h100"], devices["a100"]
        reference, _ = _finished(client, _tune(client, h100["name"]))
        _finished(client, _tune(client, a100["name"]))
        registry = client.app.state.executors
        pools = {c: registry.get(fleet.resolve(d["name"], lambda: _registered(settings)))
                 for c, d in devices.items()}
        assert sorted(pools["h100"].actor_nodes()) == ["127.0.0.2", "127.0.0.3"]
        assert pools["a100"].actor_nodes() == ["127.0.0.4"]

        again = _tune(client, h100["name"], force=True)
        deadline = time.monotonic() + 120
        while not client.get(f"/v1/runs/{again}/trials").json()["data"]:
            assert time.monotonic() < deadline, "the forced run measured nothing"
            time.sleep(0.05)
        _kill_node("127.0.0.2")
        at_loss = len(client.get(f"/v1/runs/{again}/trials", params={"limit": 1000}).json()[
            "data"])
        assert 0 < at_loss < TRIALS  # the node was lost mid-run
        run, _ = _finished(client, again)
        assert run["best"]["schedule_hash"] == reference["best"]["schedule_hash"]
        assert pools["h100"].actor_nodes() == ["127.0.0.3"]

        lost = next(p for p in cluster["plans"] if p.node == "127.0.0.2")
        _ray(*lost.command[1:])
        deadline = time.monotonic() + 60
        while sorted(pools["h100"].actor_nodes()) != ["127.0.0.2", "127.0.0.3"]:
            assert time.monotonic() < deadline, "the actor did not return with its node"
            time.sleep(0.5)


def _registered(settings: Any) -> list[fleet_db.FleetDevice]:
    db = Database(settings.database_url)
    try:
        with repo.session_scope(db.sessions) as session:
            return fleet_db.fleet_devices(session)
    finally:
        db.dispose()
