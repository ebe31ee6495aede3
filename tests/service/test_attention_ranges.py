"""Attention over a range of sequence lengths through the service, on the simulated H200:
``seq_q`` alone, ``seq_kv`` alone, or both given one range (self-attention's prefill,
``seq_q = seq_kv``, one tied axis) are range runs; two different ranges a 422 naming
``params.seq_kv``. A tuned tied range answers an exact size with ``seq_q = seq_kv``
inside it (the bucket's kernel bound to both lengths), not one with ``seq_q != seq_kv``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from service_helpers import service_settings, wait_for

from codegen import KernelArtifact, RangeArtifact
from service.core.config import Settings

#: The range search's knobs for tests: few anchors' samples (a second per run).
FAST = {"samples_per_anchor": 16, "anchors": 2, "climb_rounds": 1}
FIXED = {"batch": 1, "heads": 8, "kv_heads": 2, "head_dim": 128, "causal": True,
         "dtype": "float16"}
SEQ = {"min": 128, "max": 2048}
TIED = {**FIXED, "seq_q": SEQ, "seq_kv": SEQ}


@pytest.fixture
def settings(database_url: str, tmp_path) -> Settings:
    return service_settings(database_url, tmp_path).model_copy(update={"range_search": FAST})


def _body(params: dict[str, Any], trials: int = 16, **extra: Any) -> dict[str, Any]:
    return {"op": "attention", "params": params, "device": "sim:h200",
            "budget": {"trials": trials}, **extra}


def _exact(seq_q: int, seq_kv: int) -> dict[str, Any]:
    return _body({**FIXED, "seq_q": seq_q, "seq_kv": seq_kv})


@pytest.fixture
def tuned(client: TestClient) -> Iterator[tuple[TestClient, dict[str, Any]]]:
    """A client whose database holds a tuned self-attention range (seq 128..2048)."""
    response = client.post("/v1/tune", json=_body(TIED))
    assert response.status_code == 202, response.text
    run = wait_for(client, response.json()["run"]["id"])
    assert run["status"] == "succeeded", run
    yield client, run


@pytest.mark.parametrize("params", [
    TIED,
    {**FIXED, "seq_q": [128, 300, 2048], "seq_kv": [128, 300, 2048]},
    {**FIXED, "seq_q": SEQ, "seq_kv": 1024},
    {**FIXED, "seq_q": 1, "seq_kv": SEQ},
])
def test_one_sequence_axis_is_a_range_run(idle_client: TestClient,
                                          params: dict[str, Any]) -> None:
    response = idle_client.post("/v1/tune", json=_body(params))
    assert response.status_code == 202, response.text
    run = response.json()["run"]
    assert run["kind"] == "range" and run["workload"]["params"]["seq_q"] == params["seq_q"]


@pytest.mark.parametrize("seq_kv", [{"min": 128, "max": 4096}, [128, 2048]])
def test_two_different_sequence_ranges_are_a_422_naming_seq_kv(idle_client: TestClient,
                                                              seq_kv: Any) -> None:
    response = idle_client.post("/v1/tune", json=_body({**TIED, "seq_kv": seq_kv}))
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert [item["field"] for item in detail] == ["params.seq_kv"]
    assert "one range axis" in detail[0]["msg"] and "same range" in detail[0]["msg"]


def test_a_tied_range_run_stores_a_table_over_both_lengths(
        tuned: tuple[TestClient, dict[str, Any]]) -> None:
    client, run = tuned
    table = client.get("/v1/ranges", params={"run_id": run["id"]}).json()["data"][0]
    assert (table["op"], table["dim"], table["low"], table["high"]) == (
        "attention", "seq_q", 128, 2048)
    assert table["params"]["seq_q"] == table["params"]["seq_kv"] == SEQ
    assert table["size_from"] == ["q", 1] and table["artifact_available"]
    for bucket in client.get(f"/v1/ranges/{table['id']}").json()["buckets"]:
        schedule = bucket["schedule"]
        assert schedule["runtime_dims"] == ["seq_q", "seq_kv"]
        assert schedule["params"]["seq_q"] == schedule["params"]["seq_kv"] == 2048
    trials = client.get(f"/v1/runs/{run['id']}/trials").json()["data"]
    assert {t["params"]["seq_q"] for t in trials} == set(table["sizes"])
    artifact = RangeArtifact.from_dict(client.get(f"/v1/ranges/{table['id']}/artifact").json())
    assert artifact.dims == ("seq_q", "seq_kv") and artifact.tied == (("seq_kv", "k", 1),)
    bound = artifact.kernel_at(300)
    assert bound.params["seq_q"] == bound.params["seq_kv"] == 300
    # The same range again is a hit; a wider one a new run.
    again = client.post("/v1/tune", json=_body(TIED))
    assert again.status_code == 200 and again.json()["range"]["id"] == table["id"]
    wider = client.post("/v1/tune", json=_body({**TIED, "seq_kv": {"min": 1, "max": 2048},
                                                "seq_q": {"min": 1, "max": 2048}}))
    assert wider.status_code == 202


def test_an_exact_self_attention_size_inside_the_range_is_served_by_its_bucket(
        tuned: tuple[TestClient, dict[str, Any]]) -> None:
    client, run = tuned
    table = client.get("/v1/ranges").json()["data"][0]
    response = client.post("/v1/tune", json=_exact(300, 300))
    assert response.status_code == 200, response.text
    body = response.json()
    schedule = body["schedule"]
    assert body["cached"] and body["run"]["id"] == run["id"]
    assert schedule["range_id"] == table["id"] and schedule["id"] is None
    assert schedule["workload"]["params"]["seq_q"] == 300
    bucket = next(b for b in table["buckets"] if b["low"] <= 300 <= b["high"])
    assert schedule["schedule_hash"] == bucket["schedule_hash"]
    kernel = KernelArtifact.from_dict(
        client.get(f"/v1/kernels/{schedule['kernel_hash']}").json()["artifact"])
    assert kernel.params["seq_q"] == kernel.params["seq_kv"] == 300
    scalars = {a.name: a.value for a in kernel.args if a.kind == "scalar"}
    assert scalars["SEQ_Q"] == scalars["SEQ_KV"] == 300
    bucket_kernel = KernelArtifact.from_dict(
        client.get(f"/v1/kernels/{bucket['kernel_hash']}").json()["artifact"])
    assert kernel == bucket_kernel.at_sizes({"seq_q": 300, "seq_kv": 300})
    # Lengths that differ, or outside the range: not the tied range's, a run.
    assert client.post("/v1/tune", json=_exact(300, 1000)).status_code == 202
    assert client.post("/v1/tune", json=_exact(4096, 4096)).status_code == 202


def test_cached_range_finds_the_tied_range_of_equal_lengths(
        tuned: tuple[TestClient, dict[str, Any]], settings: Settings) -> None:
    from service.runs.in_process import cached_range
    from service.schemas import TuneRequest

    def lookup(seq_q: int, seq_kv: int) -> dict[str, Any] | None:
        request = TuneRequest(op="attention", device="sim:h200",
                              params={**FIXED, "seq_q": seq_q, "seq_kv": seq_kv})
        return cached_range(request, settings.database_url)

    found = lookup(1000, 1000)
    assert found is not None and found["tied"] == [["seq_kv", "k", 1]]
    assert RangeArtifact.from_dict(found).kernel_at(1000).params["seq_kv"] == 1000
    assert lookup(1000, 999) is None and lookup(4096, 4096) is None


def test_on_a_gpu_each_job_is_the_kernel_bound_to_both_lengths(
        fake_gpu: None, database_url: str, tmp_path) -> None:
    """On a (pretend) GPU a candidate's kernel is rendered once and bound to each sampled
    length: every job's workload, tensors and launch contract are the exact spec's at
    seq_q = seq_kv = size, as the worker checks them against its reference."""
    from gpu_fakes import ModelGpu

    from service.main import create_app
    from workers.contract import check_tensor_args

    gpu = ModelGpu(batch=4)
    settings = Settings(database_url=database_url, data_dir=tmp_path, max_concurrent_runs=1,
                        heartbeat_s=0.5, stale_after_s=5.0, cost_model_seeds=0,
                        warm_executors=False, range_search=FAST)
    with TestClient(create_app(settings, gpu_pool_factory=lambda d: gpu)) as client:
        response = client.post("/v1/tune", json={"op": "attention", "params": TIED,
                                                 "budget": {"trials": 12}})
        assert response.status_code == 202, response.text
        run = wait_for(client, response.json()["run"]["id"])
        assert run["status"] == "succeeded", run
        table = client.get("/v1/ranges").json()["data"][0]
        assert not table["simulated"] and table["artifact_available"]
    searched = [j for j in gpu.kernel_jobs if j.timing == gpu.kernel_jobs[0].timing]
    assert len(searched) == 12
    sources: dict[str, set[str]] = {}
    for job in searched:
        params = job.workload["params"]
        size = params["seq_q"]
        assert params["seq_kv"] == size and job.artifact.params["seq_kv"] == size
        assert job.artifact.runtime_dims == ("seq_q", "seq_kv")
        scalars = {a.name: a.value for a in job.artifact.args if a.kind == "scalar"}
        assert scalars["SEQ_Q"] == scalars["SEQ_KV"] == size
        shapes = {t.name: t.shape for t in job.tensors}
        assert shapes["q"][1] == shapes["k"][1] == shapes["o"][1] == size
        check_tensor_args("attention", params, job.artifact.args, job.tensors)
        sources.setdefault(job.artifact.schedule_hash, set()).add(job.artifact.source)
    assert all(len(texts) == 1 for texts in sources.values())
