"""Dashboard fixtures: the service tests' database fixtures (SQLite and PostgreSQL) and
helpers, reused as they are, plus a finished small tuning run to look at."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

SERVICE_TESTS = Path(__file__).resolve().parent.parent / "service"
sys.path.insert(0, str(SERVICE_TESTS))  # service_helpers

_spec = importlib.util.spec_from_file_location(
    "_service_test_fixtures", SERVICE_TESTS / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

database_url = _fixtures.database_url
settings = _fixtures.settings
client = _fixtures.client
idle_client = _fixtures.idle_client


@pytest.fixture
def finished_run(client: TestClient) -> Iterator[dict]:
    """A succeeded 16-trial GEMM run on the simulated H200."""
    from service_helpers import tune_body, wait_for

    response = client.post("/v1/tune", json=tune_body(trials=16))
    assert response.status_code == 202, response.text
    run = wait_for(client, response.json()["id"])
    assert run["status"] == "succeeded", run
    yield run
