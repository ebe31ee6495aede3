"""A range tune through the Python client (issue 42, item 7): ``Client.tune`` waits for the
range run and returns its bucket table (``range``, ``range_id``), the run's JSON names
the table it stored, and the run's dashboard page links the table instead of saying that
no schedule was measured; on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from service_helpers import service_settings

import pipetune
from service.core.config import Settings
from workers import RangeKernel

RANGE = {"m": {"min": 1, "max": 4096}, "n": 1024, "k": 1024, "dtype": "float16"}


@pytest.fixture
def settings(database_url: str, tmp_path) -> Settings:
    """Few anchors' samples: a range run takes about a second."""
    return service_settings(database_url, tmp_path).model_copy(update={"range_search": {
        "samples_per_anchor": 24, "anchors": 3, "climb_rounds": 1}})


def test_a_range_tune_returns_its_table_and_the_run_links_it(client: TestClient) -> None:
    with pipetune.Client(http=client) as api:
        result = api.tune("gemm", RANGE, device="sim:h200", budget={"trials": 24},
                          progress=False)
        assert result.status == "succeeded" and not result.cached
        table = result.range
        assert table is not None and result.range_id == table["id"]
        assert (table["low"], table["high"]) == (1, 4096)
        assert table["buckets"] and all(b["kernel_hash"] for b in table["buckets"])
        assert result.run["range_id"] == table["id"]  # the run's JSON links its table
        assert api.run(result.run_id)["range_id"] == table["id"]
        kernel = pipetune.load(api.range_artifact(result.range_id))
        assert isinstance(kernel, RangeKernel) and (kernel.low, kernel.high) == (1, 4096)

        again = api.tune("gemm", RANGE, device="sim:h200")
        assert again.cached and again.range_id == table["id"]

        page = client.get(f"/runs/{result.run_id}").text
        assert f'href="/ranges/{table["id"]}"' in page
        assert "No schedule has been measured yet" not in page
        assert "Winning schedule" not in page  # one kernel per bucket, in the table


def test_an_exact_run_has_no_range(client: TestClient) -> None:
    with pipetune.Client(http=client) as api:
        result = api.tune("gemm", {**RANGE, "m": 256}, device="sim:h200",
                          budget={"trials": 4}, progress=False)
    assert result.range is None and result.range_id is None
    assert result.run["range_id"] is None and result.latency_us is not None
