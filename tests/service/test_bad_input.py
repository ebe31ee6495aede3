"""Malformed requests get a 4xx JSON error naming the field, never a 500, and the server
keeps answering."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from service_helpers import SMALL_GEMM, tune_body

G = SMALL_GEMM
JSON = {"content-type": "application/json"}

#: (label, body (dict -> JSON, bytes -> raw), headers, status, field named in the detail)
RAW_BODIES: list[tuple[str, bytes, dict[str, str], int, str]] = [
    ("not json", b"not json", JSON, 400, "body"),
    ("truncated", b'{"op": "gemm"', JSON, 400, "body"),
    ("empty", b"", JSON, 422, "body"),
    ("nested deep", b"[" * 5000 + b"]" * 5000, JSON, 400, "body"),
    ("too large", b"[" * 100_000 + b"]" * 100_000, JSON, 413, "body"),
    ("text/plain", json.dumps(tune_body()).encode(), {"content-type": "text/plain"}, 415,
     "content-type"),
    ("no content type", json.dumps(tune_body()).encode(), {"content-type": ""}, 415,
     "content-type"),
    ("NaN param", b'{"op":"gemm","params":{"m":NaN,"n":1024,"k":1024}}', JSON, 422, "params.m"),
    ("inf seconds",
     b'{"op":"gemm","params":{"m":1024,"n":1024,"k":1024},"budget":{"seconds":Infinity}}',
     JSON, 422, "budget.seconds"),
    ("infinite epilogue scale", b'{"op":"gemm","params":{"m":1024,"n":1024,"k":1024,'
     b'"epilogue":{"scale":-Infinity}}}', JSON, 422, "params.epilogue.scale"),
]

JSON_BODIES: list[tuple[str, Any, int, str]] = [
    ("array", [1, 2], 422, "body"),
    ("string", "gemm", 422, "body"),
    ("null", None, 422, "body"),
    ("op not a string", {"op": 5, "params": G}, 422, "op"),
    ("unknown op", {"op": "conv2d", "params": G}, 422, "op"),
    ("long op", {"op": "x" * 10_000, "params": G}, 422, "op"),
    ("missing params", {"op": "gemm"}, 422, "params"),
    ("params not an object", {"op": "gemm", "params": [1]}, 422, "params"),
    ("missing param", {"op": "gemm", "params": {"m": 1024, "n": 1024}}, 422, "params.k"),
    ("extra param", {"op": "gemm", "params": {**G, "x": 1}}, 422, "params.x"),
    ("string number", {"op": "gemm", "params": {**G, "m": "1024"}}, 422, "params.m"),
    ("float number", {"op": "gemm", "params": {**G, "m": 1024.0}}, 422, "params.m"),
    ("bool number", {"op": "gemm", "params": {**G, "m": True}}, 422, "params.m"),
    ("negative", {"op": "gemm", "params": {**G, "m": -1}}, 422, "params.m"),
    ("huge int", {"op": "gemm", "params": {**G, "m": 10**30}}, 422, "params.m"),
    ("unaligned", {"op": "gemm", "params": {**G, "n": 1023}}, 422, "params.n"),
    ("absurd shape",
     {"op": "gemm", "params": {**G, "m": 1 << 20, "n": 1 << 20, "k": 1 << 20}}, 422, "params.m"),
    ("too big for the device",
     {**tune_body({"m": 131072, "n": 131072, "k": 131072}), "device": "sim:a100"}, 422,
     "params"),
    ("8-bit floats on an A100",
     {**tune_body({"m": 1024, "n": 1024, "k": 1024, "dtype": "float8_e4m3", "b_layout": "nk"}),
      "device": "sim:a100"}, 422, "params.dtype"),
    ("8-bit attention on an L40S (FP8 GEMMs only)",
     {"op": "attention", "device": "sim:l40s",
      "params": {"batch": 1, "heads": 8, "kv_heads": 8, "seq_q": 1024, "seq_kv": 1024,
                 "head_dim": 128, "causal": False, "dtype": "float8_e4m3"}}, 422,
     "params.dtype"),
    ("bad dtype", {"op": "gemm", "params": {**G, "dtype": "int8"}}, 422, "params.dtype"),
    ("bad activation", {"op": "gemm", "params": {**G, "epilogue": {"act": "tanh"}}}, 422,
     "params.epilogue.act"),
    ("epilogue not an object", {"op": "gemm", "params": {**G, "epilogue": "gelu"}}, 422,
     "params.epilogue"),
    ("attention partial", {"op": "attention", "params": {"batch": 1}}, 422, "params.heads"),
    ("unknown device", {**tune_body(), "device": "tpu:0"}, 422, "device"),
    ("absent gpu", {**tune_body(), "device": "cuda:7"}, 422, "device"),
    ("device not a string", {**tune_body(), "device": 3}, 422, "device"),
    ("huge trials", {**tune_body(), "budget": {"trials": 10**9}}, 422, "budget.trials"),
    ("string trials", {**tune_body(), "budget": {"trials": "64"}}, 422, "budget.trials"),
    ("zero trials", {**tune_body(), "budget": {"trials": 0}}, 422, "budget.trials"),
    ("huge seconds", {**tune_body(), "budget": {"seconds": 1e12}}, 422, "budget.seconds"),
    ("negative seconds", {**tune_body(), "budget": {"seconds": -1}}, 422, "budget.seconds"),
    ("tiny seconds", {**tune_body(), "budget": {"seconds": 1e-300}}, 422, "budget.seconds"),
    ("unknown budget", {**tune_body(), "budget": {"hours": 1}}, 422, "budget.hours"),
    ("budget not an object", {**tune_body(), "budget": 64}, 422, "budget"),
    ("extra field", {**tune_body(), "priority": 1}, 422, "priority"),
]

GETS: list[tuple[str, int, str]] = [
    ("/v1/runs/abc", 422, "run_id"),
    ("/v1/runs/0", 422, "run_id"),
    ("/v1/runs/99999999999999999999999", 422, "run_id"),
    (f"/v1/runs/{2**31}", 422, "run_id"),
    (f"/v1/runs/{2**31}/trials", 422, "run_id"),
    ("/v1/runs/1/convergence?x=1&y=%00", 422, "y"),
    ("/v1/runs?op=gemm%00", 422, "op"),
    ("/v1/schedules?device=sim%00h200", 422, "device"),
    (f"/v1/runs?offset={2**63}", 422, "offset"),
    (f"/v1/schedules?offset={2**40}", 422, "offset"),
    (f"/v1/runs/1/trials?offset={10**30}", 422, "offset"),
    (f"/v1/runs/1/events?after={2**31}", 422, "after"),
    (f"/v1/schedules/{2**31}/timeline", 422, "schedule_id"),
    ("/v1/runs?status=bogus", 422, "status"),
    ("/v1/runs?limit=0", 422, "limit"),
    ("/v1/runs?offset=-1", 422, "offset"),
    ("/v1/runs/1/trials?limit=100000", 422, "limit"),
    ("/v1/schedules?params=notjson", 422, "params"),
    ("/v1/schedules?params=[1]", 422, "params"),
    ("/v1/schedules?op=conv2d", 422, "op"),
    ("/v1/schedules?device=h200", 422, "device"),
    ("/v1/schedules?device=gpu0", 422, "device"),
    ("/v1/kernels/xyz", 422, "kernel_hash"),
    ("/v1/kernels/xyz/source", 422, "kernel_hash"),
]


def _fields(response: Any) -> list[str]:
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail, detail
    for item in detail:
        assert set(item) >= {"loc", "field", "msg", "type"} and item["msg"]
    return [item["field"] for item in detail]


def _check_alive(client: TestClient) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.post("/v1/tune", json=tune_body()).status_code == 202


@pytest.mark.parametrize(("label", "body", "headers", "status", "field"), RAW_BODIES,
                         ids=[c[0] for c in RAW_BODIES])
def test_raw_bodies(idle_client: TestClient, label: str, body: bytes,
                    headers: dict[str, str], status: int, field: str) -> None:
    response = idle_client.post("/v1/tune", content=body, headers=headers)
    assert response.status_code == status, response.text
    assert field in _fields(response)


def test_json_bodies_then_still_alive(idle_client: TestClient) -> None:
    for label, body, status, field in JSON_BODIES:
        response = idle_client.post("/v1/tune", json=body)
        assert response.status_code == status, (label, response.text)
        assert field in _fields(response), (label, response.json())
    for path, status, field in GETS:
        response = idle_client.get(path)
        assert response.status_code == status, (path, response.text)
        assert field in _fields(response), (path, response.json())
    _check_alive(idle_client)
    runs = idle_client.get("/v1/runs").json()
    assert runs["count"] == 1  # none of the bad requests made a run


def test_the_servers_budget_limits_come_from_its_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """``PIPETUNE_MAX_TRIALS`` / ``PIPETUNE_MAX_SECONDS`` bound a request's budget: a larger
    one is a 422 naming the field and the setting; a seconds-only budget runs up to the
    trial limit."""
    from service.core.config import get_settings
    from service.main import create_app

    monkeypatch.setenv("PIPETUNE_MAX_TRIALS", "100")
    monkeypatch.setenv("PIPETUNE_MAX_SECONDS", "60")
    settings = get_settings(database_url=f"sqlite:///{tmp_path / 'limits.db'}",
                            data_dir=tmp_path)
    assert (settings.max_trials, settings.max_seconds) == (100, 60.0)
    with TestClient(create_app(settings, run_background=False)) as client:
        for budget, field, setting in (({"trials": 101}, "budget.trials", "PIPETUNE_MAX_TRIALS"),
                                       ({"seconds": 61}, "budget.seconds",
                                        "PIPETUNE_MAX_SECONDS")):
            response = client.post("/v1/tune", json={**tune_body(), "budget": budget})
            assert response.status_code == 422, response.text
            detail = response.json()["detail"]
            assert field in _fields(response) and setting in detail[0]["msg"]
        ok = client.post("/v1/tune", json={**tune_body(), "budget": {"seconds": 30}})
        assert ok.status_code == 202 and ok.json()["run"]["budget"]["trials"] == 100
