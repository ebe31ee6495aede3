"""A fleet of several Ray nodes on this machine, each on its own loopback address, through
the service on PostgreSQL: nodes started as ``pipetune node start`` plans them, offering two
simulated kinds of GPU (H100 on 127.0.W.2 and 127.0.W.3, A100 on 127.0.W.4, W the xdist
worker); every run's actors live on nodes of its kind; a node killed mid-run does not stop
the run (its chunk goes to the other H100 node), no trial is recorded twice and the winner
equals that of the same run without the loss; the node started again, its actor returns.

The cluster is ``workers.ray_cluster.LoopbackCluster`` (short health checks: a lost node
is seen in about 1.5 s); a second test kills a run manager (another Ray driver, a
``pipetune worker``) mid-run and another resumes its run. Skipped without Ray's command
line; takes about 40 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from service_databases import fresh_database
from service_helpers import SMALL_GEMM, service_settings, wait_for

from service.commands.node import NodePlan, plan_nodes
from service.core.db import Database
from service.db import fleet as fleet_db
from service.db import repositories as repo
from service.main import create_app
from service.runs import fleet
from workers.ray_cluster import LoopbackCluster, ray_command

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(ray_command() is None,
                                 reason="Ray's command line is not installed")]

#: Each pytest-xdist worker's cluster on loopback addresses of its own (127.0.W.N): a
#: node is killed by its address, and two workers' clusters must not share one.
_SUBNET = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
H100_A, H100_B, A100 = (f"127.0.{_SUBNET}.{host}" for host in (2, 3, 4))
NODES = (("h100", H100_A), ("h100", H100_B), ("a100", A100))
TRIALS = 48


def _node_plans(address: str) -> list[NodePlan]:
    """The launcher's own plan, one simulated GPU per node."""
    plans = []
    for catalog, ip in NODES:
        entry = fleet.simulated_entry(catalog, 1)
        plans += plan_nodes(address, [ip], [(entry, [])], ["--num-cpus=1"])
    return plans


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    loopback = LoopbackCluster()
    plans = _node_plans(loopback.address)
    try:
        for plan in plans:
            loopback.add_node(plan.command)
        ray.init(address=loopback.address, log_to_driver=False, configure_logging=False)
        yield {"address": loopback.address, "plans": plans, "cluster": loopback}
    finally:
        ray.shutdown()
        loopback.close()


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
    trials = client.get(f"/v1/runs/{run_id}/trials", params={"limit": 1000}).json()["data"]
    assert run["status"] == "succeeded", (run["error"], run["stop_reason"])
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
        dispatch = _fleet(client)["h100"]["dispatch"]  # what the actors' round trips cost
        assert dispatch["chunks"] > 0 and dispatch["round_trip_s"] >= dispatch["actor_s"]
        registry = client.app.state.executors
        pools = {c: registry.get(fleet.resolve(d["name"], lambda: _registered(settings)))
                 for c, d in devices.items()}
        assert sorted(pools["h100"].actor_nodes()) == [H100_A, H100_B]
        assert pools["a100"].actor_nodes() == [A100]

        again = _tune(client, h100["name"], force=True)
        deadline = time.monotonic() + 120
        while not client.get(f"/v1/runs/{again}/trials").json()["data"]:
            assert time.monotonic() < deadline, "the forced run measured nothing"
            time.sleep(0.05)
        cluster["cluster"].kill_node(H100_A)
        at_loss = len(client.get(f"/v1/runs/{again}/trials", params={"limit": 1000}).json()[
            "data"])
        assert 0 < at_loss < TRIALS  # the node was lost mid-run
        run, _ = _finished(client, again)
        assert run["best"]["schedule_hash"] == reference["best"]["schedule_hash"]
        assert pools["h100"].actor_nodes() == [H100_B]

        lost = next(p for p in cluster["plans"] if p.node == H100_A)
        cluster["cluster"].add_node(lost.command)
        deadline = time.monotonic() + 60
        while sorted(pools["h100"].actor_nodes()) != [H100_A, H100_B]:
            assert time.monotonic() < deadline, "the actor did not return with its node"
            time.sleep(0.5)


def _registered(settings: Any) -> list[fleet_db.FleetDevice]:
    db = Database(settings.database_url)
    try:
        with repo.session_scope(db.sessions) as session:
            return fleet_db.fleet_devices(session)
    finally:
        db.dispose()


def _run_manager(settings: Any, directory: Path) -> subprocess.Popen:
    """A ``pipetune worker`` driving the fleet (another Ray driver on the same cluster)."""
    env = {**os.environ, "PIPETUNE_DATA_DIR": str(directory),
           "PIPETUNE_EXECUTOR": "ray", "PIPETUNE_RAY_ADDRESS": settings.ray_address,
           "PIPETUNE_HEARTBEAT_S": "0.5", "PIPETUNE_STALE_AFTER_S": "3", "PIPETUNE_SEED": "7"}
    return subprocess.Popen([sys.executable, "-m", "service.cli", "worker", "--database-url",
                             settings.database_url, "--log-level", "warning"], env=env)


def test_a_killed_run_managers_run_is_resumed_by_another(settings: Any, tmp_path: Path) -> None:
    with TestClient(create_app(settings, run_background=False)) as api:  # no searches here
        managers = [_run_manager(settings, tmp_path / "first")]
        try:
            run_id = _tune(api, _fleet(api)["a100"]["name"])
            deadline = time.monotonic() + 120
            while not api.get(f"/v1/runs/{run_id}/trials").json()["data"]:
                assert time.monotonic() < deadline, "the first run manager measured nothing"
                time.sleep(0.05)
            managers[0].kill()
            managers[0].wait(30)
            at_loss = len(api.get(f"/v1/runs/{run_id}/trials",
                                  params={"limit": 1000}).json()["data"])
            assert 0 < at_loss < TRIALS  # killed mid-run
            managers.append(_run_manager(settings, tmp_path / "second"))
            _finished(api, run_id)  # resumed: every trial once
        finally:
            for manager in managers:
                manager.kill()
                manager.wait(30)
