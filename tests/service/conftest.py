"""Service fixtures: a fresh database per test on SQLite and on PostgreSQL.

PostgreSQL: ``PIPETUNE_TEST_POSTGRES_URL`` (default the local server,
``postgresql+psycopg://postgres@127.0.0.1:5432/test``). Each test gets a schema of its
own (``search_path`` in the URL, so Optuna's storage lands there too), dropped after.
Without a reachable server the PostgreSQL cases are skipped, except in CI (``CI`` set) or
when the URL is given explicitly: there they fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient
from run_fakes import migrated, run_managers
from service_databases import fresh_database
from service_helpers import service_settings

from service.core.config import Settings
from service.core.db import Database
from service.main import create_app
from service.runs.manager import RunManager


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def settings(database_url: str, tmp_path) -> Settings:
    return service_settings(database_url, tmp_path)


@pytest.fixture
def db(settings: Settings) -> Iterator[Database]:
    """The test's database, migrated (a module's own ``db`` fixture overrides it)."""
    with migrated(settings.database_url) as database:
        yield database


@pytest.fixture
def managers(db: Database) -> Iterator[Callable[..., RunManager]]:
    """Makes run managers on ``db``, closed at the end."""
    with run_managers(db) as make:
        yield make


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture
def idle_client(settings: Settings) -> Iterator[TestClient]:
    """An app whose run manager does not execute runs (they stay queued)."""
    with TestClient(create_app(settings, run_background=False)) as test_client:
        yield test_client


@pytest.fixture
def fake_gpu() -> Iterator[object]:
    """The device probe answers with a pretend GPU (``gpu_fakes.FakeProbe``, yielded)."""
    from gpu_fakes import FakeProbe

    from service.runs import devices as devices_module

    probe = FakeProbe()
    previous = devices_module.set_gpu_probe(probe)
    try:
        yield probe
    finally:
        devices_module.set_gpu_probe(previous)
