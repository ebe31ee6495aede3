"""Range runs through the service (issue 20), on the simulated H200, SQLite and PostgreSQL:
a range request validated (422 naming the field), run, stored as a bucket table covering
the range; the table answers later range requests it covers and exact sizes inside it
(the bucket's kernel bound to the size); ``/v1/ranges``; in-process tunes; migration 0007."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from service_helpers import service_settings, wait_for

import migrations
import pipetune
from codegen import KernelArtifact, RangeArtifact
from service.core.config import Settings
from service.core.db import Database
from service.db.models import SCHEMA_VERSION
from service.main import create_app

#: The range search's knobs for tests: few anchors' samples (a second per run).
FAST = {"samples_per_anchor": 24, "anchors": 3, "climb_rounds": 1}
FIXED = {"n": 1024, "k": 1024, "dtype": "float16"}
RANGE = {"m": {"min": 1, "max": 4096}, **FIXED}


@pytest.fixture
def settings(database_url: str, tmp_path) -> Settings:
    return service_settings(database_url, tmp_path).model_copy(update={"range_search": FAST})


def _body(params: dict[str, Any], trials: int = 24, **extra: Any) -> dict[str, Any]:
    return {"op": "gemm", "params": params, "device": "sim:h200", "budget": {"trials": trials},
            **extra}


def _fields(response: Any) -> list[str]:
    return [item["field"] for item in response.json()["detail"]]


@pytest.fixture
def tuned(client: TestClient) -> Iterator[tuple[TestClient, dict[str, Any]]]:
    """A client whose database holds a tuned range of m 1..4096, and that range's run."""
    response = client.post("/v1/tune", json=_body(RANGE))
    assert response.status_code == 202, response.text
    run = wait_for(client, response.json()["run"]["id"])
    assert run["status"] == "succeeded", run
    yield client, run


@pytest.mark.parametrize(("params", "field"), [
    ({**RANGE, "m": {"min": 0, "max": 64}}, "params.m.min"),
    ({**RANGE, "m": {"min": 64, "max": 8}}, "params.m.min"),
    ({**RANGE, "m": {"min": 1, "max": "big"}}, "params.m.max"),
    ({**RANGE, "m": {"min": 1}}, "params.m"),
    ({**RANGE, "m": [1, 7, 7]}, "params.m"),
    ({**RANGE, "m": [1, 0]}, "params.m.1"),
    ({**RANGE, "m": []}, "params.m"),
    ({**RANGE, "n": 1023}, "params.n"),
    ({**RANGE, "dtype": "int4"}, "params.dtype"),
    ({**RANGE, "m": {"min": 1, "max": 4096}, "epilogue": {"act": "nope"}}, "params.epilogue.act"),
])
def test_a_bad_range_is_a_422_naming_its_field(idle_client: TestClient,
                                                params: dict[str, Any], field: str) -> None:
    response = idle_client.post("/v1/tune", json=_body(params))
    assert response.status_code == 422, response.text
    assert field in _fields(response), response.text


def test_only_dimensions_kernels_take_at_run_time_may_be_ranges(idle_client: TestClient) -> None:
    # Attention's sequence lengths may (tests/service/test_attention_ranges.py).
    response = idle_client.post("/v1/tune", json=_body({**RANGE, "n": {"min": 64, "max": 128}}))
    assert response.status_code == 422 and _fields(response) == ["params.n"]
    both = idle_client.post("/v1/tune", json=_body(RANGE, force=True, extend=True))
    assert both.status_code == 422 and _fields(both) == ["extend"]


def test_identical_range_requests_share_a_run(idle_client: TestClient) -> None:
    first = idle_client.post("/v1/tune", json=_body(RANGE))
    # The same range with the fixed parameters spelled otherwise (a default given).
    second = idle_client.post("/v1/tune", json=_body({**RANGE, "b_layout": "kn"}))
    assert first.status_code == second.status_code == 202
    run = first.json()["run"]
    assert second.json()["run"]["id"] == run["id"] and run["kind"] == "range"
    assert first.headers["location"] == f"/v1/runs/{run['id']}"
    assert run["workload"]["params"]["m"] == {"min": 1, "max": 4096}
    assert first.json()["schedule"] is None and first.json()["range"] is None
    listed = idle_client.post("/v1/tune", json=_body({**RANGE, "m": [1, 7, 64]}))
    assert listed.status_code == 202 and listed.json()["run"]["id"] != run["id"]
    # A range request never meets the exact workload of the same fixed parameters.
    exact = idle_client.post("/v1/tune", json=_body({**FIXED, "m": 4096}))
    assert exact.status_code == 202 and exact.json()["run"]["kind"] == "exact"
    assert exact.json()["run"]["id"] not in (run["id"], listed.json()["run"]["id"])


def test_a_range_run_stores_a_table_covering_the_range(
        tuned: tuple[TestClient, dict[str, Any]]) -> None:
    client, run = tuned
    # 18 trials of the first pass (3 kernels at 6 sizes), then refining where the winner or
    # the best time changes between sizes, within the budget of 24.
    assert run["kind"] == "range" and 18 <= run["trials_done"] <= 24 and run["best"] is None
    listed = client.get("/v1/ranges", params={"run_id": run["id"]}).json()
    assert listed["count"] == 1
    table = client.get(f"/v1/ranges/{listed['data'][0]['id']}").json()
    assert (table["op"], table["dim"], table["low"], table["high"]) == ("gemm", "m", 1, 4096)
    assert table["device"] == "sim:h200" and table["simulated"]
    assert table["run_id"] == run["id"] and table["size_from"] == ["a", 0]
    assert table["params"] == {**FIXED, "b_layout": "kn", "m": {"min": 1, "max": 4096}}
    buckets = table["buckets"]
    assert buckets[0]["low"] == 1 and buckets[-1]["high"] == 4096
    assert all(a["high"] + 1 == b["low"] for a, b in itertools.pairwise(buckets))
    assert table["artifact_available"] and table["loss"] >= 1.0
    for bucket in buckets:
        assert bucket["schedule"]["runtime_dims"] == ["m"] and bucket["kernel_hash"]
        assert bucket["schedule"]["params"]["m"] == 4096
        # Measured at the first pass's six sizes and at each of its own samples (a
        # refined size holds the contenders' measurements alone).
        measured = {int(s) for s in bucket["latencies_us"]}
        assert len(measured) >= 6 and measured <= set(table["sizes"])
        assert set(bucket["samples"]) <= measured
    # Each measurement is a trial at its size.
    trials = client.get(f"/v1/runs/{run['id']}/trials").json()
    assert trials["count"] == run["trials_done"]
    assert {t["params"]["m"] for t in trials["data"]} == set(table["sizes"])
    # The table's kernels as one RangeArtifact.
    artifact = RangeArtifact.from_dict(client.get(f"/v1/ranges/{table['id']}/artifact").json())
    assert (artifact.low, artifact.high, artifact.dim) == (1, 4096, "m")
    assert list(artifact.sampled) == table["sizes"]
    assert [b.kernel.hash for b in artifact.buckets] == [b["kernel_hash"] for b in buckets]
    assert artifact.kernel_at(300).params["m"] == 300
    # Lists filter; unknown ids are 404s, bad filters 422s.
    assert client.get("/v1/ranges", params={"op": "gemm", "device": "sim:h200"}).json()[
        "count"] == 1
    assert client.get("/v1/ranges", params={"op": "attention"}).json()["count"] == 0
    assert listed["data"][0]["buckets"][0]["schedule"] is None
    assert client.get("/v1/ranges/999").status_code == 404
    assert client.get("/v1/ranges/999/artifact").status_code == 404
    assert client.get("/v1/ranges", params={"op": "conv"}).status_code == 422


def test_a_covered_range_is_a_hit_and_a_wider_one_a_new_run(
        tuned: tuple[TestClient, dict[str, Any]]) -> None:
    client, run = tuned
    again = client.post("/v1/tune", json=_body(RANGE))
    assert again.status_code == 200, again.text
    body = again.json()
    assert body["cached"] and body["run"]["id"] == run["id"] and body["schedule"] is None
    assert (body["range"]["low"], body["range"]["high"]) == (1, 4096)
    narrower = client.post("/v1/tune", json=_body({**RANGE, "m": [16, 300, 1000]}))
    assert narrower.status_code == 200 and narrower.json()["range"]["id"] == body["range"]["id"]
    wider = client.post("/v1/tune", json=_body({**RANGE, "m": {"min": 1, "max": 8192}}))
    assert wider.status_code == 202 and wider.json()["run"]["id"] != run["id"]
    other = client.post("/v1/tune", json=_body({**RANGE, "k": 2048}))
    assert other.status_code == 202
    forced = client.post("/v1/tune", json=_body(RANGE, force=True))
    assert forced.status_code == 202 and forced.json()["run"]["id"] != run["id"]


def test_an_exact_size_inside_a_tuned_range_is_served_by_its_bucket(
        tuned: tuple[TestClient, dict[str, Any]]) -> None:
    client, run = tuned
    table = client.get("/v1/ranges").json()["data"][0]
    response = client.post("/v1/tune", json=_body({**FIXED, "m": 300}))
    assert response.status_code == 200, response.text
    body = response.json()
    schedule = body["schedule"]
    assert body["cached"] and body["run"]["id"] == run["id"] and body["range"] is None
    assert schedule["id"] is None and schedule["range_id"] == table["id"]
    assert schedule["workload"]["params"]["m"] == 300 and schedule["latency_us"] > 0
    bucket = next(b for b in table["buckets"] if b["low"] <= 300 <= b["high"])
    assert schedule["schedule_hash"] == bucket["schedule_hash"]
    # Its kernel is the bucket's, bound to m = 300, and stored under its own hash.
    kernel = client.get(f"/v1/kernels/{schedule['kernel_hash']}")
    assert kernel.status_code == 200
    artifact = KernelArtifact.from_dict(kernel.json()["artifact"])
    assert artifact.params["m"] == 300 and artifact.runtime_dims == ("m",)
    assert {a.name: a.value for a in artifact.args if a.kind == "scalar"}["M"] == 300
    maps = [a for a in artifact.args if a.kind == "tensor_map" and a.tensor == "a"]
    assert maps and maps[0].global_dims[-1] == 300
    bucket_kernel = KernelArtifact.from_dict(
        client.get(f"/v1/kernels/{bucket['kernel_hash']}").json()["artifact"])
    assert artifact.source == bucket_kernel.source and artifact == bucket_kernel.at_sizes(
        {"m": 300})
    # Outside the range, or other fixed parameters: not served, a run.
    assert client.post("/v1/tune", json=_body({**FIXED, "m": 8192})).status_code == 202
    assert client.post("/v1/tune", json=_body({**FIXED, "m": 300, "k": 2048})
                       ).status_code == 202


def test_an_exact_cached_schedule_wins_over_the_range(
        tuned: tuple[TestClient, dict[str, Any]]) -> None:
    client, _ = tuned
    forced = client.post("/v1/tune", json=_body({**FIXED, "m": 300}, trials=8, force=True))
    assert forced.status_code == 202
    assert wait_for(client, forced.json()["run"]["id"])["status"] == "succeeded"
    response = client.post("/v1/tune", json=_body({**FIXED, "m": 300}))
    schedule = response.json()["schedule"]
    assert response.status_code == 200 and schedule["id"] is not None
    assert schedule["range_id"] is None


def test_cached_range_finds_the_range_holding_an_exact_size(
        tuned: tuple[TestClient, dict[str, Any]], settings: Settings) -> None:
    from service.runs.in_process import cached_range
    from service.schemas import TuneRequest

    def lookup(**params: Any) -> dict[str, Any] | None:
        request = TuneRequest(op="gemm", params={**FIXED, **params}, device="sim:h200")
        return cached_range(request, settings.database_url)

    found = lookup(m=300)
    assert found is not None and found["kind"] == "range"
    artifact = RangeArtifact.from_dict(found)
    assert (artifact.low, artifact.high) == (1, 4096)
    assert artifact.params["m"] == {"min": 1, "max": 4096}
    assert lookup(m=8192) is None and lookup(m=300, k=2048) is None


def test_a_range_tunes_in_process_then_answers_from_the_cache(database_url: str,
                                                               monkeypatch) -> None:
    monkeypatch.setenv("PIPETUNE_RANGE_SEARCH", '{"samples_per_anchor": 24, "anchors": 3}')
    kwargs = {"device": "sim:h200", "budget": {"trials": 16}, "database_url": database_url,
              "progress": False, **FIXED}
    first = pipetune.tune("gemm", m={"min": 1, "max": 2048}, **kwargs)
    assert first.status == "succeeded" and not first.cached
    assert first.run is not None and first.run["kind"] == "range"
    assert first.range is not None and first.range["high"] == 2048
    artifact = RangeArtifact.from_dict(first.kernel or {})
    assert artifact.low == 1 and artifact.high == 2048 and artifact.size_from == ("a", 0)
    again = pipetune.tune("gemm", m=[4, 64, 1024], **kwargs)
    assert again.cached and again.kernel == first.kernel and again.run_id == first.run_id
    exact = pipetune.tune("gemm", m=100, **kwargs)
    assert exact.cached and exact.schedule is not None
    assert exact.schedule["range_id"] == first.range["id"]
    assert exact.kernel is not None and exact.kernel["params"]["m"] == 100


def test_a_bad_range_in_process_raises_bad_request(tmp_path) -> None:
    with pytest.raises(pipetune.BadRequest) as raised:
        pipetune.tune("gemm", m={"min": 5, "max": 1}, database_url=f"sqlite:///{tmp_path}/x.db",
                      progress=False, **FIXED)
    assert raised.value.field == "params.m.min"


def test_0007_adds_run_kinds_and_range_tables_to_an_existing_database(
        database_url: str) -> None:
    """A database at 0006 with a run: 0007 gives the run kind ``exact`` and adds the range
    tables; a downgrade drops them and keeps the run."""
    import datetime as dt

    from sqlalchemy import MetaData, Table, inspect

    from service.db import repositories as repo

    database = Database(database_url)
    try:
        migrations.upgrade(database.url, "0006", engine=database.engine)
        now = dt.datetime.now(dt.UTC)
        with database.engine.begin() as connection:
            def table(name: str) -> Table:
                return Table(name, MetaData(), autoload_with=connection)

            connection.execute(table("pipetune_workloads").insert(), [
                {"id": 1, "key": "w" * 64, "op": "gemm", "params": {}, "created_at": now}])
            connection.execute(table("pipetune_devices").insert(), [
                {"id": 1, "key": "d" * 64, "name": "sim:h200", "kind": "simulated",
                 "simulated": True, "identity": {}, "created_at": now}])
            connection.execute(table("pipetune_runs").insert(), [
                {"id": 1, "workload_id": 1, "device_id": 1, "status": "succeeded",
                 "budget_trials": 8, "seed": 0, "study_name": "s", "trials_done": 1,
                 "invalid": 0, "phase": "done", "cancel_requested": False, "attempts": 1,
                 "elapsed_s": 1.0, "created_at": now}])
        migrations.upgrade(database.url, engine=database.engine)
        assert migrations.current(database.url, engine=database.engine) == SCHEMA_VERSION
        assert "pipetune_range_tables" in inspect(database.engine).get_table_names()
        with repo.session_scope(database.sessions) as session:
            run = repo.get_run(session, run_id=1)
            assert run is not None and run.kind == "exact"
        migrations.downgrade(database.url, "0006", engine=database.engine)
        assert "pipetune_range_tables" not in inspect(database.engine).get_table_names()
        columns = {c["name"] for c in inspect(database.engine).get_columns("pipetune_runs")}
        assert "kind" not in columns
        with database.engine.connect() as connection:
            runs = Table("pipetune_runs", MetaData(), autoload_with=connection)
            assert len(connection.execute(runs.select()).all()) == 1
        migrations.upgrade(database.url, engine=database.engine)
    finally:
        database.dispose()


def test_a_range_run_on_a_gpu_measures_one_kernel_per_candidate_bound_to_each_size(
        fake_gpu: None, database_url: str, tmp_path) -> None:
    """On a (pretend) GPU each candidate's kernel is generated once and bound to every
    sampled size: one source per candidate, each job's launch contract and tensors those
    of its size; the buckets' winners are re-timed by the final policy."""
    from gpu_fakes import ModelGpu

    gpu = ModelGpu(batch=4)
    settings = Settings(database_url=database_url, data_dir=tmp_path, max_concurrent_runs=1,
                        heartbeat_s=0.5, stale_after_s=5.0, cost_model_seeds=0,
                        warm_executors=False, range_search=FAST)
    with TestClient(create_app(settings, gpu_pool_factory=lambda d: gpu)) as client:
        response = client.post("/v1/tune", json={"op": "gemm", "params": RANGE,
                                                 "budget": {"trials": 24}})
        assert response.status_code == 202, response.text
        run = wait_for(client, response.json()["run"]["id"])
        assert run["status"] == "succeeded", run
        assert run["device"] == "cuda:0" and not run["simulated"]
        table = client.get("/v1/ranges").json()["data"][0]
        assert not table["simulated"] and table["artifact_available"]
    jobs = gpu.kernel_jobs
    quick = jobs[0].timing
    searched = [j for j in jobs if j.timing == quick]
    assert len(searched) == run["trials_done"] and any(j.timing != quick for j in jobs)
    sources: dict[str, set[str]] = {}
    for job in searched:
        m = job.workload["params"]["m"]
        assert job.artifact.params["m"] == m and job.artifact.runtime_dims == ("m",)
        assert {t.name: t.shape for t in job.tensors}["a"] == (m, 1024)
        assert {a.name: a.value for a in job.artifact.args if a.kind == "scalar"}["M"] == m
        sources.setdefault(job.artifact.schedule_hash, set()).add(job.artifact.source)
    # 18 trials of the first pass (a quarter kept for refining) over 6 sizes: 3 kernels,
    # each at every one of those sizes; the refining rounds (where the winner or the best
    # time changes between sizes) measure some at more.
    assert len(sources) == 3
    per_size = {m: sum(j.workload["params"]["m"] == m for j in searched)
                for m in table["sizes"]}
    assert sum(count == 3 for count in per_size.values()) >= 6
    assert all(len(texts) == 1 for texts in sources.values())
    assert gpu.prepared  # the next batch compiled while this one was measured
