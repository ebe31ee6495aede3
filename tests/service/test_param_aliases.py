"""The API takes the shorthands the command line takes (issue 42, item 7): ``fp16`` /
``bf16`` for a dtype and attention's ``seq`` for both sequence lengths, stored as the
canonical spec (the same workload as its long spelling); a clash is a 422 naming the
field; on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

GEMM = {"m": 256, "n": 256, "k": 256}
ATTENTION = {"batch": 1, "heads": 4, "kv_heads": 4, "head_dim": 64}


def _tune(client: TestClient, op: str, params: dict[str, Any]) -> Any:
    return client.post("/v1/tune", json={"op": op, "params": params, "device": "sim:h200",
                                         "budget": {"trials": 4}})


@pytest.mark.parametrize(("op", "short", "canonical"), [
    ("gemm", {**GEMM, "dtype": "fp16"}, {**GEMM, "dtype": "float16"}),
    ("gemm", {**GEMM, "dtype": "BF16"}, {**GEMM, "dtype": "bfloat16"}),
    ("attention", {**ATTENTION, "seq": 512, "dtype": "bf16"},
     {**ATTENTION, "seq_q": 512, "seq_kv": 512, "dtype": "bfloat16"}),
])
def test_the_api_takes_the_cli_shorthands(idle_client: TestClient, op: str,
                                          short: dict[str, Any],
                                          canonical: dict[str, Any]) -> None:
    first = _tune(idle_client, op, short)
    assert first.status_code == 202, first.text
    run = first.json()["run"]
    assert {k: run["workload"]["params"][k] for k in canonical} == canonical
    again = _tune(idle_client, op, canonical)  # the same workload: joins the queued run
    assert again.json()["run"]["id"] == run["id"]


def test_a_range_takes_seq_for_both_lengths(idle_client: TestClient) -> None:
    answer = _tune(idle_client, "attention",
                   {**ATTENTION, "seq": {"min": 128, "max": 1024}, "dtype": "fp16"})
    assert answer.status_code == 202, answer.text
    params = answer.json()["run"]["workload"]["params"]
    assert params["seq_q"] == params["seq_kv"] == {"min": 128, "max": 1024}
    assert params["dtype"] == "float16"


def test_seq_with_seq_q_is_a_422_naming_seq(idle_client: TestClient) -> None:
    answer = _tune(idle_client, "attention", {**ATTENTION, "seq": 512, "seq_q": 256})
    assert answer.status_code == 422
    assert [item["field"] for item in answer.json()["detail"]] == ["params.seq"]


def test_the_cli_reads_the_same_tables() -> None:
    """One source: the command line's shorthands are the operator specs' own."""
    from scheduler_search.ops.aliases import DTYPE_ALIASES, PARAM_ALIASES
    from service.commands import _params

    assert _params.parse_params("attention", ["--seq", "64", "--dtype", "bf16"]) == {
        "seq_q": 64, "seq_kv": 64, "dtype": "bfloat16"}
    assert set(DTYPE_ALIASES) >= {"fp16", "bf16"} and "seq" in PARAM_ALIASES["attention"]
