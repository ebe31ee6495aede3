"""How a GPU timed a result (``timing_method``: per-launch CUDA events, or a CUDA graph's
replay for a short or memory-bound workload) is stored with it: migration 0010 keeps the
rows both ways; a simulated tune leaves it null; a run on the pretend GPU (``gpu_fakes``)
stores its workload's method (``presets.timing_method``, the one its jobs were timed by)
on the run and the cache entry, and a range run per size in its buckets; the API,
``TuneResult``, ``pipetune tune``, the dashboard and the cache file carry it. On SQLite
and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, get_args

import pytest
from fastapi.testclient import TestClient
from gpu_fakes import FakeProbe, ModelGpu
from pydantic import ValidationError
from service_helpers import SMALL_GEMM, service_settings, tune_body, wait_for
from sqlalchemy import MetaData, Table, inspect

import migrations
from pipetune.results import TuneResult
from scheduler_search.ops import parse_range_spec, parse_spec
from scheduler_search.search.presets import EVENTS, GRAPH, timing_method
from service.cli import main
from service.core.config import Settings
from service.core.db import Database
from service.db import repositories as repo
from service.db import results as results_repo
from service.db.cache_file import RangeBucketEntry, ScheduleEntry, TimingMethod
from service.db.models import SCHEMA_VERSION
from service.main import create_app
from service.runs.devices import resolve_device
from service.schemas import TIMING_METHOD_TEXT

#: A GEMM short enough at the roofline to be timed by a graph's replay on an H200, and one
#: long enough for CUDA events (which is which is asked of ``timing_method``, below).
SHORT_GEMM = {"m": 1024, "n": 1024, "k": 1024, "dtype": "float16"}
LONG_GEMM = {"m": 8192, "n": 8192, "k": 8192, "dtype": "float16"}
#: A range whose small sizes run short and whose large ones run long.
WIDE_RANGE = {"m": {"min": 1, "max": 8192}, "n": 8192, "k": 8192, "dtype": "float16"}
FAST_RANGES = {"samples_per_anchor": 24, "anchors": 3, "climb_rounds": 1}


def _method(params: dict[str, Any]) -> str:
    """What a GPU run on the pretend GPU times a GEMM by: the function of its spec and the
    device's model, as the run's execution asks it."""
    return timing_method(parse_spec("gemm", params), resolve_device("cuda:0").model)


def test_the_two_gemms_exercise_both_methods(fake_gpu: FakeProbe) -> None:
    """The cases below cover each method (so a run's stored method is not one constant),
    and the cache file accepts exactly the methods there are."""
    assert (_method(SHORT_GEMM), _method(LONG_GEMM)) == (GRAPH, EVENTS)
    assert set(get_args(TimingMethod)) == {EVENTS, GRAPH} == set(TIMING_METHOD_TEXT)


# ----- migration 0010 ---------------------------------------------------------------------
def _table(connection: Any, name: str) -> Table:
    return Table(name, MetaData(), autoload_with=connection)


def test_0010_adds_timing_method_and_its_downgrade_keeps_the_rows(database_url: str) -> None:
    """A database at 0009 with a GPU run, its trial and its cache entry: 0010 adds a null
    ``timing_method`` to the run and the entry, which then take one; the downgrade drops
    both columns in place (no row lost, no trial cascaded away) and upgrading again
    works."""
    database = Database(database_url)
    try:
        migrations.upgrade(database.url, "0009", engine=database.engine)
        now = dt.datetime.now(dt.UTC)
        with database.engine.begin() as connection:
            connection.execute(_table(connection, "pipetune_workloads").insert(), [
                {"id": 1, "key": "w" * 64, "op": "gemm", "params": SHORT_GEMM,
                 "created_at": now}])
            connection.execute(_table(connection, "pipetune_devices").insert(), [
                {"id": 1, "key": "d" * 64, "name": "cuda:0", "kind": "cuda",
                 "simulated": False, "identity": {}, "created_at": now}])
            connection.execute(_table(connection, "pipetune_runs").insert(), [
                {"id": 1, "workload_id": 1, "device_id": 1, "status": "succeeded",
                 "budget_trials": 8, "seed": 0, "study_name": "s", "trials_done": 1,
                 "invalid": 0, "phase": "done", "cancel_requested": False, "attempts": 1,
                 "elapsed_s": 1.0, "created_at": now, "baseline": "cublas",
                 "baseline_latency_us": 20.0, "best_latency_us": 10.0}])
            connection.execute(_table(connection, "pipetune_trials").insert(), [
                {"run_id": 1, "number": 0, "status": "ok", "source": "search", "choices": {},
                 "simulated": False, "created_at": now}])
            connection.execute(_table(connection, "pipetune_schedules").insert(), [
                {"id": 1, "workload_id": 1, "device_id": 1, "schedule_hash": "s" * 64,
                 "schedule": {}, "choices": {}, "latency_us": 10.0, "simulated": False,
                 "run_id": 1, "baseline": "cublas", "baseline_latency_us": 20.0,
                 "created_at": now, "updated_at": now}])

        migrations.upgrade(database.url, engine=database.engine)
        assert migrations.current(database.url, engine=database.engine) == SCHEMA_VERSION
        for name in ("pipetune_runs", "pipetune_schedules"):
            columns = {c["name"]: c for c in inspect(database.engine).get_columns(name)}
            assert columns["timing_method"]["nullable"], name
        with repo.session_scope(database.sessions) as session:
            run = repo.get_run(session, run_id=1)
            entry = repo.find_schedule(session, workload_id=1, device_id=1)
            assert run.timing_method is None and run.baseline_latency_us == 20.0
            assert entry.timing_method is None and entry.latency_us == 10.0
            results_repo.set_run_baseline(session, run_id=1, baseline="cublas",
                                          latency_us=21.0, timing_method=GRAPH)
            repo.store_best_schedule(
                session, workload_id=1, device_id=1, run_id=1, schedule_hash="t" * 64,
                schedule={}, choices={}, latency_us=9.0, predicted_us=None, simulated=False,
                timing_method=GRAPH)
        with repo.session_scope(database.sessions) as session:
            assert repo.get_run(session, run_id=1).timing_method == GRAPH
            entry = repo.find_schedule(session, workload_id=1, device_id=1)
            assert (entry.schedule_hash, entry.timing_method) == ("t" * 64, GRAPH)

        migrations.downgrade(database.url, "0009", engine=database.engine)
        assert migrations.current(database.url, engine=database.engine) == "0009"
        with database.engine.connect() as connection:
            for name in ("pipetune_runs", "pipetune_schedules"):
                columns = {c["name"] for c in inspect(connection).get_columns(name)}
                assert "timing_method" not in columns and "baseline" in columns, name
            run_row = connection.execute(_table(connection, "pipetune_runs").select()).one()
            assert run_row.baseline_latency_us == 21.0 and run_row.status == "succeeded"
            schedule = connection.execute(
                _table(connection, "pipetune_schedules").select()).one()
            assert schedule.latency_us == 9.0 and schedule.run_id == 1
            trials = connection.execute(_table(connection, "pipetune_trials").select()).all()
            assert len(trials) == 1  # not cascaded away
        migrations.upgrade(database.url, engine=database.engine)  # and up again
        assert migrations.current(database.url, engine=database.engine) == SCHEMA_VERSION
        with repo.session_scope(database.sessions) as session:
            assert repo.get_run(session, run_id=1).timing_method is None
    finally:
        database.dispose()


# ----- the simulated device ---------------------------------------------------------------
@pytest.fixture
def sim_settings(database_url: str, tmp_path: Path) -> Settings:
    return service_settings(database_url, tmp_path).model_copy(
        update={"range_search": FAST_RANGES})


def test_a_simulated_tune_records_no_timing_method(sim_settings: Settings) -> None:
    """No GPU timed a simulated result: null on the run, the cache entry, the answer and a
    range's buckets; the pages say nothing of a timing method."""
    with TestClient(create_app(sim_settings)) as client:
        body = tune_body(SMALL_GEMM, trials=4)
        run = wait_for(client, client.post("/v1/tune", json=body).json()["run"]["id"])
        assert run["status"] == "succeeded" and run["simulated"], run
        assert "timing_method" in run and run["timing_method"] is None
        hit = client.post("/v1/tune", json=body)
        assert hit.status_code == 200 and hit.json()["schedule"]["timing_method"] is None
        assert TuneResult.of_answer(hit.json()).timing_method is None
        (entry,) = client.get("/v1/schedules").json()["data"]
        assert entry["timing_method"] is None
        assert 'id="timing-method"' not in client.get(f"/runs/{run['id']}").text
        assert 'id="timing-method"' not in client.get(f"/schedules/{entry['id']}").text

        ranged = {"op": "gemm", "params": {**SMALL_GEMM, "m": {"min": 1, "max": 1024}},
                  "device": "sim:h200", "budget": {"trials": 24}}
        run = wait_for(client, client.post("/v1/tune", json=ranged).json()["run"]["id"])
        assert run["status"] == "succeeded", run
        (table,) = client.get("/v1/ranges").json()["data"]
        assert all(b["timing_methods"] is None for b in table["buckets"])
        assert "Timed by" not in client.get(f"/ranges/{table['id']}").text


# ----- the pretend GPU ----------------------------------------------------------------------
@pytest.fixture
def gpu_settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(database_url=database_url, data_dir=tmp_path, max_concurrent_runs=1,
                    heartbeat_s=0.5, stale_after_s=5.0, cost_model_seeds=0,
                    warm_executors=False, range_search=FAST_RANGES)


def _schedules(capsys: pytest.CaptureFixture[str], url: str) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["schedules", "--json", "--database-url", url]) == 0
    return json.loads(capsys.readouterr().out)["data"]


@pytest.mark.parametrize("params", [SHORT_GEMM, LONG_GEMM], ids=["short", "long"])
def test_a_gpu_run_stores_and_shows_its_workloads_timing_method(
    fake_gpu: FakeProbe, gpu_settings: Settings, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], params: dict[str, Any],
) -> None:
    expected = _method(params)
    words = TIMING_METHOD_TEXT[expected]
    gpu = ModelGpu(batch=4)
    with TestClient(create_app(gpu_settings, gpu_pool_factory=lambda d: gpu)) as client:
        body = {"op": "gemm", "params": params, "budget": {"trials": 4}}
        run = wait_for(client, client.post("/v1/tune", json=body).json()["run"]["id"])
        assert run["status"] == "succeeded" and not run["simulated"], run
        # Stored: the method every job of the run (candidates, finalists, cuBLAS) was
        # timed by.
        assert {j.timing.method for batch in gpu.batches for j in batch} == {expected}
        assert run["timing_method"] == expected and run["baseline_latency_us"]
        assert [r["timing_method"] for r in client.get("/v1/runs").json()["data"]] == [
            expected]
        hit = client.post("/v1/tune", json=body)
        assert hit.status_code == 200
        entry = hit.json()["schedule"]
        assert entry["timing_method"] == expected and entry["run_id"] == run["id"]
        result = TuneResult.of_answer(hit.json())
        assert result.timing_method == expected and result.speedup_vs_baseline

        # The dashboard says it where the latency and the speedup are shown.
        page = client.get(f"/runs/{run['id']}").text
        assert 'id="timing-method" title="' in page
        assert f"timed by {words}, ours and cublas alike" in page
        assert "measured on the GPU by <span title=" in page and f">{words}</span>" in page
        assert f"÷ ours, timed by {words}" in client.get("/").text
        assert f"cuBLAS, timed by {words}" in client.get("/schedules").text
        entry_page = client.get(f"/schedules/{entry['id']}").text
        assert f"timed by {words}, ours and cublas alike" in entry_page

    # The cache file carries it to another database.
    path = tmp_path / "cache.json"
    assert main(["cache", "export", str(path), "--database-url", gpu_settings.database_url]) == 0
    (exported,) = json.loads(path.read_text())["schedules"]
    assert exported["timing_method"] == expected
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert main(["cache", "import", str(path), "--database-url", other]) == 0
    (imported,) = _schedules(capsys, other)
    assert imported["timing_method"] == expected and imported["run_id"] is None


def test_cli_tune_says_how_the_speedup_was_timed(
    fake_gpu: FakeProbe, gpu_settings: Settings, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from service.runs import executors

    monkeypatch.setattr(executors, "local_gpu_pool", lambda *args, **kwargs: ModelGpu())
    monkeypatch.setenv("PIPETUNE_COST_MODEL_SEEDS", "0")
    argv = ["tune", "gemm", "--m", "1024", "--n", "1024", "--k", "1024", "--dtype", "float16",
            "--trials", "4", "--database-url", gpu_settings.database_url]
    assert main(argv) == 0
    words = TIMING_METHOD_TEXT[_method(SHORT_GEMM)]
    assert f"vs cublas ({words}): " in capsys.readouterr().out
    assert main([*argv, "--json"]) == 0  # the cache hit, as JSON
    assert json.loads(capsys.readouterr().out)["timing_method"] == _method(SHORT_GEMM)


def test_a_gpu_range_run_records_each_sizes_timing_method(
    fake_gpu: FakeProbe, gpu_settings: Settings, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each bucket records, per size it has a latency at, the method of the exact
    workload there (the jobs' own); over a wide range both methods appear. An exact size
    served from the table says its bucket's method; the cache file carries them."""
    range_spec = parse_range_spec("gemm", WIDE_RANGE)
    model = resolve_device("cuda:0").model

    def method_at(size: int) -> str:
        return timing_method(range_spec.exact(range_spec.at(size)), model)

    gpu = ModelGpu(batch=4)
    with TestClient(create_app(gpu_settings, gpu_pool_factory=lambda d: gpu)) as client:
        body = {"op": "gemm", "params": WIDE_RANGE, "budget": {"trials": 24}}
        run = wait_for(client, client.post("/v1/tune", json=body).json()["run"]["id"])
        assert run["status"] == "succeeded" and not run["simulated"], run
        assert run["timing_method"] is None  # a range has no one method: its buckets say
        for job in gpu.kernel_jobs:
            assert job.timing.method == method_at(job.workload["params"]["m"])
        (listed,) = client.get("/v1/ranges").json()["data"]
        table = client.get(f"/v1/ranges/{listed['id']}").json()
        seen = set()
        for bucket in table["buckets"]:
            sizes = {*bucket["latencies_us"], *(bucket["retimed_us"] or {})}
            assert bucket["timing_methods"] == {s: method_at(int(s)) for s in sizes}
            seen |= set(bucket["timing_methods"].values())
        assert seen == {EVENTS, GRAPH}

        page = client.get(f"/ranges/{table['id']}").text
        assert "Timed by</th>" in page
        for words in TIMING_METHOD_TEXT.values():
            assert f">{words}</td>" in page

        # An exact size inside the range, served by its bucket's kernel.
        exact = {**WIDE_RANGE, "m": 1}
        served = client.post("/v1/tune", json={"op": "gemm", "params": exact}).json()
        assert served["cached"] and served["schedule"]["range_id"] == table["id"]
        bucket = next(b for b in table["buckets"] if b["low"] <= 1 <= b["high"])
        methods = set(bucket["timing_methods"].values())
        assert served["schedule"]["timing_method"] == (
            methods.pop() if len(methods) == 1 else None)

    path = tmp_path / "cache.json"
    assert main(["cache", "export", str(path), "--database-url", gpu_settings.database_url]) == 0
    (exported,) = json.loads(path.read_text())["ranges"]
    assert [b["timing_methods"] for b in exported["buckets"]] == [
        b["timing_methods"] for b in table["buckets"]]
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert main(["cache", "import", str(path), "--database-url", other]) == 0
    again = tmp_path / "again.json"
    assert main(["cache", "export", str(again), "--database-url", other]) == 0
    (reexported,) = json.loads(again.read_text())["ranges"]
    assert [b["timing_methods"] for b in reexported["buckets"]] == [
        b["timing_methods"] for b in table["buckets"]]


# ----- the cache file's checks --------------------------------------------------------------
_ENTRY = {"workload": "a" * 64, "device": "b" * 64, "schedule_hash": "c" * 64,
          "schedule": {}, "choices": {}, "latency_us": 10.0, "simulated": False}
_BUCKET = {"low": 1, "high": 8, "loss": 1.0, "samples": [1, 8], "schedule_hash": "c" * 64,
           "choices": {}, "schedule": {}, "latencies_us": {"1": 3.0, "8": 4.0}}


def test_the_cache_file_takes_the_two_methods_or_none() -> None:
    assert ScheduleEntry.model_validate(_ENTRY).timing_method is None  # files from before
    assert ScheduleEntry.model_validate({**_ENTRY, "timing_method": GRAPH}).timing_method \
        == GRAPH
    with pytest.raises(ValidationError, match="timing_method"):
        ScheduleEntry.model_validate({**_ENTRY, "timing_method": "cupti"})
    with pytest.raises(ValidationError, match="a simulated schedule's latency is an estimate"):
        ScheduleEntry.model_validate({**_ENTRY, "simulated": True, "timing_method": EVENTS})
    methods = {"1": GRAPH, "8": EVENTS}
    assert RangeBucketEntry.model_validate(
        {**_BUCKET, "timing_methods": methods}).timing_methods == methods
    assert RangeBucketEntry.model_validate(_BUCKET).timing_methods is None
    with pytest.raises(ValidationError, match="timing_methods"):
        RangeBucketEntry.model_validate({**_BUCKET, "timing_methods": {"1": "wall"}})
