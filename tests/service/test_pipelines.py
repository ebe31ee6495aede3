"""``mamba2_ssd``, a pipeline: one tune request tunes each kernel its plans may run (each an
ordinary run whose schedule is cached for anyone tuning that kernel), and the answer puts
their schedules together with the plan served; bad params name the pipeline's field."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from service_helpers import wait_for

import pipetune
from service.runs.pipelines import split_budget
from service.schemas import BudgetIn

SSD = {"batch": 1, "seqlen": 512, "nheads": 8, "headdim": 64, "dstate": 64, "ngroups": 1,
       "chunk_size": 128, "dtype": "bfloat16"}
ROLES = {"state": ("mamba2_chunk_state", {"pass_states": True, "states_in_fp32": False}),
         "scan": ("mamba2_chunk_scan", {}),
         "scan_in_tile": ("mamba2_chunk_scan", {"cb_in_tile": True})}


def _body(trials: int = 9, **params: object) -> dict:
    return {"op": "mamba2_ssd", "params": {**SSD, **params}, "device": "sim:h200",
            "budget": {"trials": trials}}


def _check_answer(pipeline: dict) -> None:
    """Every kernel cached, its workload the kernel's own, and the plan served the
    cheapest, its cost its kernels' latencies added up."""
    kernels = {k["role"]: k for k in pipeline["kernels"]}
    assert set(kernels) == set(ROLES)
    for role, (op, extra) in ROLES.items():
        assert kernels[role]["op"] == op
        assert kernels[role]["schedule"]["workload"]["params"] == {**SSD, **extra}
    costs = {name: plan["latency_us"] for name, plan in pipeline["plans"].items()}
    assert pipeline["plan"] == min(costs, key=costs.__getitem__)
    latency = {role: kernels[role]["schedule"]["latency_us"] for role in kernels}
    # No peers on the simulated device: the cb plan's product costs nothing known.
    assert costs == pytest.approx({"cb_in_tile": latency["state"] + latency["scan_in_tile"],
                                   "cb": latency["state"] + latency["scan"]})
    assert pipeline["latency_us"] == costs[pipeline["plan"]]


def test_a_pipeline_tunes_its_kernels_then_answers_from_the_cache(client: TestClient) -> None:
    first = client.post("/v1/tune", json=_body())
    assert first.status_code == 202, first.text
    answer = first.json()
    assert answer["pipeline"]["plan"] is None and answer["schedule"] is None
    runs = [k["run"] for k in answer["pipeline"]["kernels"]]
    assert first.headers["location"] == f"/v1/runs/{runs[0]['id']}"
    assert {run["budget"]["trials"] for run in runs} == {3}  # the budget split three ways
    for run in runs:
        assert wait_for(client, run["id"])["status"] == "succeeded"
    again = client.post("/v1/tune", json=_body())
    assert again.status_code == 200, again.text
    assert again.json()["cached"] and again.json()["run"] is None
    _check_answer(again.json()["pipeline"])
    # The kernels' schedules are the cache's, for whoever asks for the kernel alone.
    scan = client.post("/v1/tune", json={**_body(), "op": "mamba2_chunk_scan",
                                         "params": {**SSD, "cb_in_tile": True}})
    assert scan.status_code == 200 and scan.json()["cached"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the API test has both
def test_pipetune_tune_runs_a_pipeline_in_process(database_url: str) -> None:
    result = pipetune.tune("mamba2_ssd", device="sim:h200", budget={"trials": 6},
                           database_url=database_url, progress=False, **SSD)
    assert not result.cached and result.pipeline is not None
    assert result.status == "succeeded"
    _check_answer(result.pipeline)
    assert result.latency_us == result.pipeline["latency_us"]
    assert result.kernels is not None and set(result.kernels) == set(ROLES)
    assert result.kernels["scan_in_tile"]["params"]["cb_in_tile"] is True
    again = pipetune.tune("mamba2_ssd", device="sim:h200", budget={"trials": 6},
                          database_url=database_url, progress=False, **SSD)
    assert again.cached and again.pipeline == result.pipeline | {"kernels": [
        k | {"run": again_k["run"]} for k, again_k in zip(
            result.pipeline["kernels"], again.pipeline["kernels"], strict=True)]}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # no run is started
@pytest.mark.parametrize(("params", "field"), [
    ({"ngroups": 3}, "params.ngroups"),
    ({"seqlen": 500}, "params.seqlen"),
    ({"headdim": 24}, "params.headdim"),
    ({"chunk_size": 96}, "params.chunk_size"),
    ({"gate": True}, "params.gate"),
    ({"batch": "8"}, "params.batch"),
])
def test_bad_params_name_the_pipeline_s_field(idle_client: TestClient, params: dict,
                                              field: str) -> None:
    response = idle_client.post("/v1/tune", json=_body(**params))
    assert response.status_code == 422, response.text
    assert field in [item["field"] for item in response.json()["detail"]]
    assert idle_client.get("/v1/runs").json()["count"] == 0  # nothing started


def test_a_bad_budget_is_the_request_s_not_a_kernel_s(idle_client: TestClient) -> None:
    response = idle_client.post("/v1/tune", json={**_body(), "force": True, "extend": True})
    assert response.status_code == 422
    assert [item["field"] for item in response.json()["detail"]] == ["extend"]


def test_the_budget_is_split_between_the_kernels() -> None:
    assert split_budget(BudgetIn(trials=10, seconds=60.0), 3) == BudgetIn(trials=4,
                                                                          seconds=20.0)
    assert split_budget(BudgetIn(seconds=30.0), 3) == BudgetIn(seconds=10.0)


def test_ops_lists_the_pipeline_with_its_kernels(idle_client: TestClient) -> None:
    ops = {item["op"]: item for item in idle_client.get("/v1/ops").json()["data"]}
    ssd = ops["mamba2_ssd"]
    assert ssd["kernels"] == ["mamba2_chunk_scan", "mamba2_chunk_state"]
    assert {"batch", "seqlen", "chunk_size"} <= set(ssd["required"])
    assert ops["gemm"]["kernels"] == []


def test_the_command_line_tunes_a_pipeline(capsys: pytest.CaptureFixture[str],
                                           tmp_path) -> None:
    from service.cli import main

    flags = [f"--{name.replace('_', '-')}={value}" for name, value in SSD.items()]
    flags = [part for flag in flags for part in flag.split("=")]
    database = f"sqlite:///{tmp_path / 'cli.db'}"
    out = tmp_path / "kernels.json"
    code = main(["tune", "mamba2_ssd", *flags, "--device", "sim:h200", "--trials", "6",
                 "--database-url", database, "--kernel-out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "plan cb_in_tile: state -> scan_in_tile" in printed and "<- served" in printed
    assert set(json.loads(out.read_text())) == set(ROLES)
    code = main(["tune", "mamba2_ssd", *flags, "--ngroups", "3", "--device", "sim:h200",
                 "--database-url", database])
    assert code == 2
    assert "params.ngroups: nheads=8 is not divisible by ngroups=3" in capsys.readouterr().err


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the API test has both
def test_the_client_follows_a_pipeline_s_runs(client: TestClient) -> None:
    """``Client.tune(wait=True)`` follows each kernel's run, then asks again: the answer
    has every schedule and the plan; ``force`` tunes anew once, not again on the re-ask."""
    with pipetune.Client(http=client) as api:
        result = api.tune("mamba2_ssd", SSD, device="sim:h200", budget={"trials": 6},
                          progress=False)
        assert not result.cached and result.pipeline is not None
        _check_answer(result.pipeline)
        assert result.latency_us == result.pipeline["latency_us"]
        forced = api.tune("mamba2_ssd", SSD, device="sim:h200", budget={"trials": 3},
                          force=True, progress=False)
        _check_answer(forced.pipeline)
        # The re-ask answers the cache (the faster of each kernel's two runs' schedules).
        assert len(api.runs(op="mamba2_chunk_scan")) == 4  # two forms, tuned twice
        assert len(api.runs(op="mamba2_chunk_state")) == 2


def test_the_client_stops_once_each_kernel_was_followed() -> None:
    """A kernel whose run fails has no schedule, so each re-ask starts it again: the
    client follows each kernel once and answers with the failed run."""
    import httpx

    posts: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posts.append(1)
            run = {"id": 100 + len(posts), "status": "failed", "budget": {"trials": 3}}
            kernels = [{"role": "state", "run": {"id": 1}, "schedule": {"latency_us": 5.0}},
                       {"role": "scan", "run": run, "schedule": None}]
            return httpx.Response(202, json={"cached": False, "run": run, "schedule": None,
                                             "pipeline": {"plan": None, "kernels": kernels}})
        return httpx.Response(200, text='event: end\ndata: {"status": "failed"}\n\n',
                              headers={"content-type": "text/event-stream"})

    http = httpx.Client(base_url="http://pipetune", transport=httpx.MockTransport(answer))
    result = pipetune.Client(http=http).tune("mamba2_ssd", SSD, progress=False)
    assert len(posts) == 2  # the request, then one re-ask after following the scan
    assert result.status == "failed"
    assert result.run is not None and result.run["id"] == 102
    assert result.pipeline is not None and result.pipeline["plan"] is None
