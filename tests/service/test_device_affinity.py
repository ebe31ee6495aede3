"""Device affinity: a process claims only the runs of devices it can measure, and a queued
run that no live process serves says so, on SQLite and PostgreSQL.

The topology of docker-compose.yml, in one process: an API container's worker that sees
no GPU (it serves the simulated devices) and a GPU host's process (it serves those and
its GPU) share one database. Before, any process took the oldest queued run, so a
``cuda:0`` run could be claimed by the GPU-less one and fail there.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from service_helpers import wait_for

import migrations
from service.core.config import Settings
from service.core.db import Database
from service.db import processes
from service.db import repositories as repo
from service.db.models import RunStatus
from service.runs import devices
from service.runs.devices import served_device_keys, simulated
from service.runs.executors import ExecutorRegistry
from service.runs.manager import RunManager
from service.schemas import RunPublic

GPU_KEY = "f" * 64  # a GPU of a kind this host does not have


def _queue(db: Database, *, device_key: str, name: str, kind: str, m: int) -> int:
    """A queued GEMM run on the device ``device_key``."""
    with repo.session_scope(db.sessions) as session:
        device = repo.get_or_create_device(session, key=device_key, name=name, kind=kind,
                                           simulated=kind == "simulated", identity={})
        workload = repo.get_or_create_workload(
            session, key=f"gemm-{m}", op="gemm",
            params={"m": m, "n": 256, "k": 256, "dtype": "float16", "b_layout": "kn"})
        run, _ = repo.create_run(session, workload=workload, device=device, budget_trials=4,
                                 budget_seconds=None, patience=None, seed=0)
        return run.id


@pytest.fixture
def db(settings: Settings) -> Iterator[Database]:
    database = Database(settings.database_url)
    migrations.upgrade(database.url, engine=database.engine)
    yield database
    database.dispose()


def test_a_process_claims_only_the_runs_of_its_devices(db: Database) -> None:
    sim = simulated("sim:h200").key
    gpu_run = _queue(db, device_key=GPU_KEY, name="cuda:0", kind="cuda", m=128)
    sim_run = _queue(db, device_key=sim, name="sim:h200", kind="simulated", m=256)
    with repo.session_scope(db.sessions) as session:
        # The GPU-less process passes over the older GPU run and takes its own.
        claimed = repo.claim_next_queued(session, owner="api-worker", device_keys={sim})
        assert claimed is not None and claimed.id == sim_run
        assert repo.claim_next_queued(session, owner="api-worker", device_keys={sim}) is None
        # The GPU host's process takes the GPU run.
        claimed = repo.claim_next_queued(session, owner="gpu-host", device_keys={sim, GPU_KEY})
        assert claimed is not None and claimed.id == gpu_run


def test_processes_register_their_devices_and_leave(db: Database, settings: Settings) -> None:
    executors = ExecutorRegistry.from_settings(settings)
    manager = RunManager(db, settings, executors, device_keys=frozenset({GPU_KEY}))
    stale_after_s = settings.stale_after_s
    manager.start()
    try:
        with repo.session_scope(db.sessions) as session:
            assert processes.served_keys(session, stale_after_s=stale_after_s) == {GPU_KEY}
    finally:
        manager.close()
        executors.close()
    with repo.session_scope(db.sessions) as session:
        assert processes.served_keys(session, stale_after_s=stale_after_s) == set()
    assert simulated("sim:h200").key in served_device_keys()  # what a process finds itself


def test_a_gpu_that_cannot_be_probed_is_not_served_and_the_process_still_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class BrokenProbe:
        def count(self) -> int:
            return 1

        def fingerprint(self, index: int) -> dict:
            raise RuntimeError("driver failure")

        def properties(self, index: int) -> dict:
            raise RuntimeError("driver failure")

    previous = devices.set_gpu_probe(BrokenProbe())  # type: ignore[arg-type]
    try:
        keys = served_device_keys()
    finally:
        devices.set_gpu_probe(previous)
    assert keys == {simulated(f"sim:{short}").key for short in devices.CATALOG}


def test_a_queued_run_no_live_process_serves_says_what_it_waits_for(
    client: TestClient, settings: Settings
) -> None:
    db: Database = client.app.state.db
    waiting_run = _queue(db, device_key=GPU_KEY, name="cuda:0", kind="cuda", m=128)
    shown = client.get(f"/v1/runs/{waiting_run}").json()
    assert shown["status"] == "queued"
    assert shown["waiting"].startswith("waiting for a device of this kind")
    assert "cuda:0" in shown["waiting"]
    listed = {r["id"]: r for r in client.get("/v1/runs").json()["data"]}
    assert listed[waiting_run]["waiting"] == shown["waiting"]
    page = client.get(f"/runs/{waiting_run}").text  # the dashboard's run page says it too
    assert 'id="run-waiting"' in page and "waiting for a device of this kind" in page
    # The app's own manager serves the simulated devices: their runs run, never wait.
    sim_run = _queue(db, device_key=simulated("sim:h200").key, name="sim:h200",
                     kind="simulated", m=256)
    assert wait_for(client, sim_run)["status"] == RunStatus.SUCCEEDED.value
    assert client.get(f"/v1/runs/{waiting_run}").json()["status"] == "queued"
    # Once a live process serves the device, the run no longer says it waits.
    with repo.session_scope(db.sessions) as session:
        processes.register(session, owner="gpu-host", device_keys=[GPU_KEY])
    assert client.get(f"/v1/runs/{waiting_run}").json()["waiting"] is None
    assert 'id="run-waiting"' not in client.get(f"/runs/{waiting_run}").text
    with repo.session_scope(db.sessions) as session:
        run = repo.get_run(session, run_id=waiting_run)
        assert RunPublic.of(run).waiting is None  # not checked without the live keys
