"""The dashboard's tuned ranges: ``/ranges`` lists the range tables (filtered by operator
and device), ``/ranges/{id}`` shows one table's buckets and their latencies per sampled
size, and a range run's page links its table; through the app, on SQLite and PostgreSQL."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from service_helpers import service_settings, wait_for

from service.core.config import Settings

FIXED = {"n": 1024, "k": 1024, "dtype": "float16"}


@pytest.fixture
def settings(database_url: str, tmp_path) -> Settings:
    """Few anchors' samples: a range run takes about a second."""
    return service_settings(database_url, tmp_path).model_copy(update={"range_search": {
        "samples_per_anchor": 24, "anchors": 3, "climb_rounds": 1}})


def _tuned_range(client: TestClient) -> tuple[int, dict]:
    """A range run of m 1..4096 on the simulated H200: its id and its table (API JSON)."""
    body = {"op": "gemm", "params": {**FIXED, "m": {"min": 1, "max": 4096}},
            "device": "sim:h200", "budget": {"trials": 24}}
    response = client.post("/v1/tune", json=body)
    assert response.status_code == 202, response.text
    run = wait_for(client, response.json()["run"]["id"])
    assert run["status"] == "succeeded", run
    listed = client.get("/v1/ranges", params={"run_id": run["id"]}).json()["data"]
    return run["id"], client.get(f"/v1/ranges/{listed[0]['id']}").json()


def test_ranges_list_table_page_and_the_run_link(client: TestClient) -> None:
    assert "No tuned range yet" in client.get("/ranges").text
    assert 'href="/ranges"' in client.get("/").text  # in the navigation
    run_id, table = _tuned_range(client)

    page = client.get("/ranges").text
    row = page.split(f'data-range-id="{table["id"]}"', 1)[1].split("</tr>", 1)[0]
    assert "m 1..4096" in row and "n=1024 k=1024 · fp16 · kn" in row and "sim:h200" in row
    assert f'<td class="num">{len(table["buckets"])}</td>' in row
    assert f'href="/runs/{run_id}"' in row and f"{table['loss']:.3f}" in row
    for query, shown in (({"op": "gemm"}, True), ({"op": "attention"}, False),
                         ({"device": "sim:h200"}, True), ({"device": "sim:h100"}, False)):
        html = client.get("/ranges", params=query).text
        assert (f'data-range-id="{table["id"]}"' in html) is shown, query

    detail = client.get(f"/ranges/{table['id']}")
    assert detail.status_code == 200 and f"run #{run_id}" in detail.text
    assert detail.text.count('class="bucket-row"') == len(table["buckets"])
    for bucket in table["buckets"]:
        assert f"{bucket['low']}..{bucket['high']}" in detail.text
        assert f'href="/v1/kernels/{bucket["kernel_hash"]}/source"' in detail.text
        tile = " ".join(f"{k[5:]}{v}" for k, v in sorted(bucket["choices"].items())
                        if k.startswith("tile_"))
        assert f"tile {tile}" in detail.text
    # One row per sampled size; in each, the bucket serving the size in bold.
    latencies = detail.text.split('id="latencies-table"', 1)[1]
    assert latencies.count("<tr>") == len(table["sizes"]) + 1
    assert len(re.findall(r'class="num served"><b>', latencies)) == len(table["sizes"])
    assert "est.</abbr>" in latencies and 'id="estimate-card"' in detail.text
    assert f'href="/v1/ranges/{table["id"]}/artifact"' in detail.text

    assert f'href="/ranges/{table["id"]}"' in client.get(f"/runs/{run_id}").text
    missing = client.get("/ranges/999")
    assert missing.status_code == 404 and "There is no range table 999" in missing.text
    assert client.get("/ranges/0").status_code == 422
