"""Fleet devices without GPUs: ``pipetune node start`` groups a host's GPUs by fingerprint
(one Ray node each) and registers them; the API lists the fleet and takes ``fleet:...``
names (a queued run says that no process measures the fleet yet); a process with
``PIPETUNE_EXECUTOR=ray`` measures the runs of the kinds its cluster offers through
RayGpuPool actors, on SQLite and PostgreSQL. The Ray part runs on a local Ray instance
whose node offers two simulated kinds of GPU."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from gpu_fakes import FINGERPRINT
from service_helpers import SMALL_GEMM, wait_for

from service.cli import main as cli
from service.commands.node import plan_nodes
from service.core.config import Settings
from service.db import fleet as fleet_db
from service.db import repositories as repo
from service.main import create_app
from service.runs import fleet
from workers.device import fingerprint_key
from workers.executors.ray_pool import resource_name
from workers.testing import H200_PROPS


class _TwoKinds:
    """Three GPUs: two identical H200s and one with another driver."""

    def count(self) -> int:
        return 3

    def properties(self, index: int) -> dict[str, Any]:
        return dict(H200_PROPS)

    def fingerprint(self, index: int) -> dict[str, Any]:
        return {**FINGERPRINT, "driver_release": "590.1"} if index == 2 else dict(FINGERPRINT)


def test_node_start_runs_one_ray_node_per_kind_of_gpu() -> None:
    entries = fleet.local_entries(_TwoKinds())
    plans = plan_nodes("10.0.0.1:6379", ["127.0.0.2", "127.0.0.3"], entries, ["--block"])
    assert [(p.node, p.cuda_devices, p.entry.gpus) for p in plans] == [
        ("127.0.0.2", "0,1", 2), ("127.0.0.3", "2", 1)]
    first = plans[0].command
    assert first[:4] == ("ray", "start", "--address", "10.0.0.1:6379")
    assert first[first.index("--num-gpus") + 1] == "2" and first[-1] == "--block"
    resources = json.loads(first[first.index("--resources") + 1])
    assert resources == {resource_name(fingerprint_key(FINGERPRINT)): 2}
    # The fleet device's key is its own, not the local cuda:N key of the same GPU.
    assert plans[0].entry.key != fingerprint_key(FINGERPRINT)
    assert fleet.model_of(plans[0].entry.identity).sm_count == H200_PROPS["multiProcessorCount"]
    with pytest.raises(ValueError, match="node-ip-address"):
        plan_nodes("10.0.0.1:6379", ["127.0.0.2"], entries, [])


@pytest.fixture
def fake_ray(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``ray`` on PATH that records each call's arguments and CUDA_VISIBLE_DEVICES."""
    calls = tmp_path / "ray-calls.jsonl"
    script = tmp_path / "bin" / "ray"
    script.parent.mkdir()
    script.write_text("#!/usr/bin/env python3\nimport json, os, sys\n"
                      f"with open({str(calls)!r}, 'a') as f:\n"
                      "    f.write(json.dumps([sys.argv[1:], "
                      "os.environ.get('CUDA_VISIBLE_DEVICES')]) + '\\n')\n"
                      "sys.exit(int(os.environ.get('FAKE_RAY_EXIT', '0')))\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    return calls


def _start_simulated_nodes(database_url: str) -> None:
    assert cli(["node", "start", "--address", "127.0.0.1:6379", "--no-gpus",
                "--simulate", "h100:2", "--simulate", "a100", "--node-ip-address", "127.0.0.2",
                "--node-ip-address", "127.0.0.3", "--database-url", database_url]) == 0


def test_registered_fleet_is_listed_and_named(fake_ray: Path, settings: Settings) -> None:
    _start_simulated_nodes(settings.database_url)
    calls = [json.loads(line) for line in fake_ray.read_text().splitlines()]
    assert [(args[:2], args[args.index("--node-ip-address") + 1], cuda)
            for args, cuda in calls] == [
        (["start", "--address"], "127.0.0.2", ""), (["start", "--address"], "127.0.0.3", "")]
    with TestClient(create_app(settings, run_background=False)) as client:
        listed = [d for d in client.get("/v1/devices").json()["data"] if d["kind"] == "fleet"]
        assert sorted((d["identity"]["catalog"], d["identity"]["gpus"], d["available"])
                      for d in listed) == [("a100", 1, False), ("h100", 2, False)]
        h100 = next(d for d in listed if d["identity"]["catalog"] == "h100")
        assert h100["name"] == f"fleet:{h100['key'][:12]}" and h100["simulated"]
        answer = client.post("/v1/tune", json={"op": "gemm", "params": SMALL_GEMM,
                                                "device": h100["name"], "budget": {"trials": 4}})
        assert answer.status_code == 202, answer.text
        run = client.get(f"/v1/runs/{answer.json()['run']['id']}").json()
        assert run["status"] == "queued" and "no running pipetune process" in run["waiting"]
        for name, hint in (("fleet:000000000000", "no fleet device"),
                           ("fleet:ab", "first 12")):
            refused = client.post("/v1/tune", json={"op": "gemm", "params": SMALL_GEMM,
                                                     "device": name})
            assert refused.status_code == 422 and hint in refused.text, refused.text
            assert refused.json()["detail"][0]["field"] == "device"
    assert cli(["node", "stop", "--node-ip-address", "127.0.0.2",
                "--database-url", settings.database_url]) == 0
    with repo.session_scope(_sessions(settings)) as session:
        assert [d.identity["catalog"] for d in fleet_db.fleet_devices(session)] == ["a100"]


def test_a_node_that_fails_to_start_or_stops_is_forgotten(
        fake_ray: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    def registered() -> list[str]:
        with repo.session_scope(_sessions(settings)) as session:
            return [n for d in fleet_db.fleet_devices(session) for n in d.nodes]

    start = ["node", "start", "--address", "127.0.0.1:6379", "--no-gpus", "--simulate", "h100",
             "--node-ip-address", "127.0.0.5", "--database-url", settings.database_url]
    monkeypatch.setenv("FAKE_RAY_EXIT", "3")
    assert cli(start) == 3 and registered() == []
    monkeypatch.setenv("FAKE_RAY_EXIT", "0")
    assert cli([*start, "--", "--block"]) == 0 and registered() == []  # ran, then stopped
    assert json.loads(fake_ray.read_text().splitlines()[-1])[0][-1] == "--block"
    with pytest.raises(SystemExit):  # two kinds cannot both stay in the foreground
        cli([*start, "--simulate", "a100", "--node-ip-address", "127.0.0.6", "--", "--block"])
    with pytest.raises(SystemExit):  # a misspelt option is refused, not passed to ray start
        cli([*start, "--simluate", "a100"])


def _sessions(settings: Settings) -> Any:
    from service.core.db import Database

    return Database(settings.database_url).sessions


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A local Ray instance whose node offers 2 simulated H100s and 1 simulated A100, one
    for the module (starting and stopping one takes seconds): the app of each test closes
    its executors, so their actors give the resources back."""
    ray = pytest.importorskip("ray")
    resources = {resource_name(fleet.placement_key(fleet.simulated_entry(name, 1).identity)):
                 count for name, count in (("h100", 2), ("a100", 1))}
    ray.init(address="local", num_cpus=2, resources=resources, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def test_a_ray_process_measures_the_fleet_it_is_offered(
        fake_ray: Path, settings: Settings, ray_cluster: Any) -> None:
    _start_simulated_nodes(settings.database_url)
    with repo.session_scope(_sessions(settings)) as session:
        fleet_db.register_node(session, node="127.0.0.4", entries=[
            fleet.simulated_entry("h200", 4)])  # registered, but no node of the cluster has it
    ray_settings = settings.model_copy(update={"executor": "ray", "ray_address": ""})
    with TestClient(create_app(ray_settings)) as client:
        devices = {d["identity"].get("catalog"): d for d in client.get("/v1/devices").json()[
            "data"] if d["kind"] == "fleet"}
        assert {c: d["available"] for c, d in devices.items()} == {
            "h100": True, "a100": True, "h200": False}
        runs = {}
        for catalog in ("h100", "a100", "h200"):
            answer = client.post("/v1/tune", json={
                "op": "gemm", "params": SMALL_GEMM, "device": devices[catalog]["name"],
                "budget": {"trials": 6}})
            assert answer.status_code == 202, answer.text
            runs[catalog] = answer.json()["run"]["id"]
        for catalog in ("h100", "a100"):
            done = wait_for(client, runs[catalog])
            assert done["status"] == "succeeded", done
            trials = client.get(f"/v1/runs/{runs[catalog]}/trials").json()["data"]
            assert len(trials) == 6 and all(t["status"] == "ok" for t in trials)
        executors = {d["identity"].get("catalog"): d for d in client.get("/v1/devices").json()[
            "data"] if d["kind"] == "fleet"}
        assert executors["h100"]["executor"] == "RayGpuPool"
        assert executors["h100"]["capacity"] == 2 * ray_settings.simulated_capacity
        assert executors["a100"]["capacity"] == ray_settings.simulated_capacity
        waiting = client.get(f"/v1/runs/{runs['h200']}").json()
        assert waiting["status"] == "queued" and waiting["waiting"]
        # The dashboard shows fleet runs as any other: their page, the list, the cache.
        for page in (f"/runs/{runs['h100']}", f"/runs/{runs['h200']}", "/", "/schedules"):
            shown = client.get(page)
            assert shown.status_code == 200 and "fleet:" in shown.text, page
