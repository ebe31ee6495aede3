"""``budget.patience`` (issue 42, item 7): the run's JSON echoed a patience the request
could not give (a 422, extra field). A tune now takes it, the run stops on it and echoes
it; where it would be ignored (a range run, an extend, a resume) it is a 422 naming it;
on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from service_helpers import wait_for

from service.cli import main

GEMM = {"m": 256, "n": 256, "k": 256, "dtype": "float16"}


def _tune(client: TestClient, params: dict[str, Any], budget: dict[str, Any],
          **extra: Any) -> Any:
    return client.post("/v1/tune", json={"op": "gemm", "params": params, "device": "sim:h200",
                                         "budget": budget, **extra})


def test_a_tune_takes_patience_and_stops_on_it(client: TestClient) -> None:
    answer = _tune(client, GEMM, {"trials": 200, "patience": 2})
    assert answer.status_code == 202, answer.text
    assert answer.json()["run"]["budget"]["patience"] == 2
    run = wait_for(client, answer.json()["run"]["id"])
    assert run["status"] == "succeeded" and run["budget"]["patience"] == 2
    assert run["trials_done"] < 200 and "improve" in run["stop_reason"], run


def test_patience_where_it_would_be_ignored_is_a_422(idle_client: TestClient) -> None:
    ranged = _tune(idle_client, {**GEMM, "m": {"min": 1, "max": 256}}, {"patience": 4})
    extend = _tune(idle_client, GEMM, {"trials": 4, "patience": 4}, extend=True)
    zero = _tune(idle_client, GEMM, {"patience": 0})
    for answer in (ranged, extend, zero):
        assert answer.status_code == 422
        assert [e["field"] for e in answer.json()["detail"]] == ["budget.patience"], answer.text


def test_the_cli_takes_patience(database_url: str) -> None:
    assert main(["tune", "gemm", *[a for k, v in GEMM.items() for a in (f"--{k}", str(v))],
                 "--device", "sim:h200", "--trials", "200", "--patience", "2",
                 "--database-url", database_url]) == 0
