"""Dashboard fixtures: the service tests' database fixtures (SQLite and PostgreSQL) and
helpers, reused as they are, plus a finished small tuning run to look at: fresh per test
(``finished_run``), or one per module and database for the pages that only read it
(``shared_client`` and ``shared_run``: a run takes seconds to make)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

SERVICE_TESTS = Path(__file__).resolve().parent.parent / "service"
sys.path.insert(0, str(SERVICE_TESTS))  # service_helpers, service_databases
from service_databases import fresh_database  # noqa: E402

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


def _finished_run(client: TestClient) -> dict:
    """A succeeded 16-trial GEMM run on the simulated H200."""
    from dashboard_helpers import posted_run
    from service_helpers import tune_body, wait_for

    response = client.post("/v1/tune", json=tune_body(trials=16))
    assert response.status_code == 202, response.text
    run = wait_for(client, posted_run(response.json())["id"])
    assert run["status"] == "succeeded", run
    return run


@pytest.fixture
def finished_run(client: TestClient) -> dict:
    return _finished_run(client)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def shared_client(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """An app on a database of its own for the module's read-only page tests."""
    from service.main import create_app

    directory = tmp_path_factory.mktemp("dashboard")
    with fresh_database(request.param, directory) as url:
        settings = _fixtures.service_settings(url, directory)
        with TestClient(create_app(settings)) as test_client:
            yield test_client


@pytest.fixture(scope="module")
def shared_run(shared_client: TestClient) -> dict:
    """``finished_run`` made once per module and database; tests must not change it."""
    return _finished_run(shared_client)
