"""RayGpuPool on a local Ray instance with stand-in GPU pools (no GPU): the executor
contract, the stand-in workers' behaviours through an actor, placement by fingerprint key,
and a chunk lost with its actor measured by another, once; the compile farm (RayCompiler)
with a stand-in compile task: cubins returned in order, compiled once, failures and hangs
as failed compiles, and a pool measuring through it."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workers import Executor, Job, LocalGpuPool, MeasurementStatus
from workers.compile_farm import COMPILE_RESOURCE, RayCompiler, farm_offered
from workers.device import fingerprint_key
from workers.executors.ray_pool import RayGpuPool, resource_name
from workers.testing import StandinCompiler, standin_artifact, standin_worker_main

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a local Ray instance: seconds a test

WORKLOAD = {"op": "gemm", "params": {"m": 256, "n": 256, "k": 128, "dtype": "float16"}}
FINGERPRINT = {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132}
KEY = fingerprint_key(FINGERPRINT)


@pytest.fixture(scope="module", autouse=True)
def cluster() -> Iterator[None]:
    # The actors' processes cannot import this test module: its pool factories travel
    # by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(address="local", num_cpus=2,
             resources={resource_name(KEY): 2, COMPILE_RESOURCE: 2},
             include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def job(behaviour: str = "ok", name: str = "k", deadline_s: float = 30.0) -> Job:
    return Job(workload=WORKLOAD, artifact=standin_artifact(behaviour, name=name),
               deadline_s=deadline_s)


def standin_pool() -> Executor:
    return LocalGpuPool(["0"], worker_entry=standin_worker_main, compiler=StandinCompiler())


class _Fingerprinted(Executor):
    """A stand-in pool whose worker reports ``fingerprint``."""

    def __init__(self, fingerprint: dict[str, Any]) -> None:
        self.pool, self.fingerprint = standin_pool(), fingerprint

    @property
    def fingerprints(self) -> list[dict[str, Any]]:  # as LocalGpuPool has it
        return [self.fingerprint]

    def capacity(self) -> int:
        return self.pool.capacity()

    def measure(self, jobs: Any) -> Any:
        return self.pool.measure(jobs)

    def close(self) -> None:
        self.pool.close()


class _NodeDiesOnce(_Fingerprinted):
    """Its process exits (as a lost node's actor) at the first job named ``lose-node``."""

    def __init__(self, flag: str) -> None:
        super().__init__(FINGERPRINT)
        self.flag = Path(flag)

    def measure(self, jobs: Any) -> Any:
        if any("lose-node" in j.artifact.source for j in jobs) and not self.flag.exists():
            self.flag.write_text("lost")
            os._exit(1)
        return self.pool.measure(jobs)


def test_the_executor_contract_through_actors() -> None:
    with RayGpuPool(standin_pool, actors=2) as pool, standin_pool() as alone:
        assert pool.capacity() == 2
        # As wide as the actors' pools together, so each compiles whole batches.
        assert pool.batch_size() == 2 * alone.batch_size() > pool.capacity()
        assert pool.measure([]) == []
        ahead = [job(name=f"p{i}") for i in range(4)]
        pool.prepare(ahead)  # compiled ahead on the actors, then measured as usual
        assert all(r.status.is_ok() for r in pool.measure(ahead))
        kinds = ["ok", "syntax", "ok", "ok", "syntax"]
        results = pool.measure([job(k, name=f"j{i}") for i, k in enumerate(kinds)])
        expected = {"ok": MeasurementStatus.OK, "syntax": MeasurementStatus.COMPILE_ERROR}
        assert [r.status for r in results] == [expected[k] for k in kinds]
        one = pool.measure_one(job())
        assert one.status.is_ok() and one.latency_us and one.samples_us
        retimed = pool.retime_interleaved([job(), job("syntax"), job()], rounds=2)
        assert [r.status for r in retimed] == [MeasurementStatus.OK,
                                               MeasurementStatus.COMPILE_ERROR,
                                               MeasurementStatus.OK]
        assert len(retimed[0].samples_us) >= 2


def test_the_dispatch_cost_beyond_measuring_is_counted() -> None:
    with RayGpuPool(standin_pool, actors=1) as pool:
        assert pool.dispatch_overhead()["chunks"] == 0
        pool.measure([job(), job(name="b")])
        pool.measure([job(name="c")])
        cost = pool.dispatch_overhead()
    assert cost["chunks"] == 2
    assert cost["round_trip_s"] >= cost["actor_s"] > 0
    assert cost["overhead_per_chunk_s"] == pytest.approx(
        (cost["round_trip_s"] - cost["actor_s"]) / 2)


class _RecordsWarmUp(_Fingerprinted):
    """Writes the names of the jobs it was warmed with to ``record`` (it lives in the
    actor's process)."""

    def __init__(self, record: str) -> None:
        super().__init__(FINGERPRINT)
        self.record = Path(record)

    def warm(self, jobs: Any = ()) -> None:
        self.pool.warm(jobs)
        self.record.write_text(" ".join(j.artifact.entry for j in jobs))


def test_warm_hands_the_warm_up_jobs_to_the_actors(tmp_path: Path) -> None:
    record = tmp_path / "warmed"
    with RayGpuPool(functools.partial(_RecordsWarmUp, str(record)), actors=1,
                    device_key=KEY) as pool:
        pool.warm([job(name="warm-a"), job(name="warm-b")])
        assert [r.status for r in pool.measure([job(name="run")])] == [MeasurementStatus.OK]
    assert record.read_text().split() == [standin_artifact("ok", name=n).entry
                                          for n in ("warm-a", "warm-b")]


def test_worker_failures_stay_statuses_inside_an_actor() -> None:
    """hang, die, crash, wrong: what LocalGpuPool reports, now from a remote actor."""
    with RayGpuPool(standin_pool, actors=1) as pool:
        results = pool.measure([job("hang", deadline_s=1.0), job("die"), job("crash"),
                                job("wrong"), job(name="after")])
    assert [r.status for r in results] == [
        MeasurementStatus.TIMEOUT, MeasurementStatus.CRASH, MeasurementStatus.CRASH,
        MeasurementStatus.WRONG_RESULT, MeasurementStatus.OK]


def test_actors_are_placed_by_key_and_check_their_gpu() -> None:
    right = functools.partial(_Fingerprinted, FINGERPRINT)
    with RayGpuPool(right, actors=2, device_key=KEY) as pool:
        assert pool.capacity() == 2
    wrong = functools.partial(_Fingerprinted, {**FINGERPRINT, "name": "NVIDIA A100"})
    with pytest.raises(ValueError, match="placed for device"):
        RayGpuPool(wrong, actors=1, device_key=KEY)
    # A LocalGpuPool itself (its workers' fingerprints: the stand-in's, not KEY's).
    with pytest.raises(ValueError, match="placed for device"):
        RayGpuPool(standin_pool, actors=1, device_key=KEY)


def test_a_chunk_lost_with_its_node_is_measured_once_by_another_actor(tmp_path: Path) -> None:
    factory = functools.partial(_NodeDiesOnce, str(tmp_path / "lost"))
    with RayGpuPool(factory, actors=2, device_key=KEY) as pool:
        jobs = [job(name="lose-node"), job(name="a"), job(name="b"), job(name="c")]
        results = pool.measure(jobs)
        assert (tmp_path / "lost").exists()  # the first actor's process did exit
        assert [r.status for r in results] == [MeasurementStatus.OK] * 4
        # The actor comes back (Ray restarts it) and measures again.
        assert [r.status for r in pool.measure(jobs)] == [MeasurementStatus.OK] * 4
    with RayGpuPool(factory, actors=1, device_key=KEY, redispatch=0) as lonely:
        (tmp_path / "lost").unlink()
        lost = lonely.measure([job(name="lose-node"), job(name="a")])
    assert [r.status for r in lost] == [MeasurementStatus.CRASH] * 2
    assert "lost with its GPU's node" in lost[0].error


def test_a_batch_with_no_live_actor_waits_for_its_node_then_gives_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While a key's only node restarts, a batch waits for its actor instead of spending
    its candidates as crashes; past ``node_wait_s`` its jobs are crashes."""
    with RayGpuPool(standin_pool, actors=1, node_wait_s=30.0) as pool:
        pings: list[float] = []

        def gone_twice(timeout_s: float = 5.0) -> list[int]:
            pings.append(timeout_s)
            return [] if len(pings) <= 2 else [0]

        monkeypatch.setattr(pool, "live_actors", gone_twice)
        assert [r.status for r in pool.measure([job(), job(name="b")])] == [
            MeasurementStatus.OK] * 2
        assert len(pings) == 3
    with RayGpuPool(standin_pool, actors=1, node_wait_s=0.3) as pool:
        monkeypatch.setattr(pool, "live_actors", lambda timeout_s=5.0: [])
        given_up = pool.measure([job()])
    assert given_up[0].status == MeasurementStatus.CRASH
    assert "none back within" in given_up[0].error


def _imports_ray(script: str) -> bool:
    """Whether ``script``, run in a fresh interpreter from the checkout, loads Ray (the
    script must succeed)."""
    out = subprocess.run([sys.executable, "-c", f"{script}\nimport sys\n"
                          "print('ray' in sys.modules)\n"], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1] == "True"


def test_the_api_and_the_executors_package_never_import_ray(tmp_path: Path) -> None:
    """Ray is imported by a RayGpuPool only: an API server (and a worker process) that
    does not use the fleet never loads it."""
    script = (
        "import sys\n"
        "from fastapi.testclient import TestClient\n"
        "from service.core.config import Settings\n"
        "from service.main import create_app\n"
        "import workers.executors\n"
        f"settings = Settings(database_url='sqlite:///{tmp_path / 'api.db'}', "
        f"data_dir='{tmp_path}', run_workers=0)\n"
        "with TestClient(create_app(settings)) as client:\n"
        "    assert client.get('/healthz').status_code == 200\n"
    )
    assert not _imports_ray(script)


def test_an_api_server_of_a_fleet_never_imports_ray(tmp_path: Path) -> None:
    """An API server of a fleet deployment (PIPETUNE_EXECUTOR=ray, its searches in worker
    processes, as pipetune serve runs it) lists the fleet and queues its runs from the
    database alone."""
    script = (
        "import sys\n"
        "from fastapi.testclient import TestClient\n"
        "from service.core.config import Settings\n"
        "from service.core.db import Database\n"
        "from service.db import fleet as fleet_db\n"
        "from service.db.repositories import session_scope\n"
        "from service.main import create_app\n"
        "from service.runs import fleet\n"
        "import migrations\n"
        f"url = 'sqlite:///{tmp_path / 'fleet.db'}'\n"
        "db = Database(url); migrations.upgrade(db.url, engine=db.engine)\n"
        "with session_scope(db.sessions) as session:\n"
        "    fleet_db.register_node(session, node='10.0.0.9', "
        "entries=[fleet.simulated_entry('h100', 2)])\n"
        f"settings = Settings(database_url=url, data_dir='{tmp_path}', executor='ray')\n"
        "with TestClient(create_app(settings, run_background=False)) as client:\n"
        "    listed = [d for d in client.get('/v1/devices').json()['data'] "
        "if d['kind'] == 'fleet']\n"
        "    body = {'op': 'gemm', 'params': {'m': 256, 'n': 256, 'k': 256, "
        "'dtype': 'float16'}, 'device': listed[0]['name']}\n"
        "    assert client.post('/v1/tune', json=body).status_code == 202\n"
    )
    assert not _imports_ray(script)


def _farm_compile(source: str, options: tuple[str, ...], arch: str) -> tuple[dict, bytes | None]:
    """A stand-in compile task: 'syntax' fails, 'hang' sleeps, 'broken' raises; each call
    leaves a mark in the folder its ``-DMARKS=`` option names (a task's process does not
    share the test's environment), so a test can count the compiles."""
    import hashlib
    import time

    marks = Path(next(o for o in options if o.startswith("-DMARKS=")).split("=", 1)[1])
    (marks / f"{source}.{time.time_ns()}").write_text(source)
    if "broken" in source:
        raise RuntimeError("NVRTC is missing")
    if "hang" in source:
        time.sleep(30)
    ok = "syntax" not in source
    key = hashlib.sha256(f"{source}{options}{arch}".encode()).hexdigest()
    result = {"ok": ok, "key": key, "cubin_path": "/node/cache/x.cubin" if ok else None,
              "log": "" if ok else "error: expected a ';'", "compile_ms": 2.0}
    return result, (f"cubin of {source}".encode() if ok else None)


@pytest.fixture
def marks(tmp_path: Path) -> tuple[str, ...]:
    """Compile options that carry the folder the stand-in compiles mark."""
    (tmp_path / "marks").mkdir()
    return (f"-DMARKS={tmp_path / 'marks'}",)


def test_the_compile_farm_returns_cubins_in_order_and_compiles_once(
        tmp_path: Path, marks: tuple[str, ...]) -> None:
    assert farm_offered() == 2
    farm = RayCompiler(tmp_path / "cubin", remote_compile=_farm_compile)
    requests = [("a", marks), ("syntax", marks), ("a", marks), ("b", marks)]
    results = farm.compile_many(requests, "90a")
    assert [r.ok for r in results] == [True, False, True, True]
    assert results[0] == results[2] and "expected a ';'" in results[1].log
    for result, source in ((results[0], "a"), (results[3], "b")):
        assert Path(result.cubin_path).parent == tmp_path / "cubin"
        assert Path(result.cubin_path).read_bytes() == f"cubin of {source}".encode()
    compiled = tmp_path / "marks"
    assert sorted(m.name.split(".")[0] for m in compiled.iterdir()) == ["a", "b", "syntax"]
    again = farm.compile_many([("b", marks), ("a", marks)], "90a")
    assert [r.cubin_path for r in again] == [results[3].cubin_path, results[0].cubin_path]
    assert len(list(compiled.iterdir())) == 3  # answered from memory


def test_a_broken_or_hung_compile_is_a_failed_compile(tmp_path: Path,
                                                      marks: tuple[str, ...]) -> None:
    farm = RayCompiler(tmp_path / "cubin", remote_compile=_farm_compile, timeout_s=3.0)
    broken, hung, fine = farm.compile_many([("broken", marks), ("hang", marks),
                                            ("c", marks)], "90a")
    assert not broken.ok and "NVRTC is missing" in broken.log
    assert not hung.ok and hung.timed_out and "did not finish" in hung.log
    assert fine.ok
