"""Service fixtures: a fresh database per test on SQLite and on PostgreSQL.

PostgreSQL: ``PIPETUNE_TEST_POSTGRES_URL`` (default the local server,
``postgresql+psycopg://postgres@127.0.0.1:5432/test``). Each test gets a schema of its
own (``search_path`` in the URL, so Optuna's storage lands there too), dropped after.
Without a reachable server the PostgreSQL cases are skipped, except in CI (``CI`` set) or
when the URL is given explicitly: there they fail.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from service_helpers import service_settings

from service.core.config import Settings
from service.main import create_app

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def postgres_url() -> str:
    return os.environ.get("PIPETUNE_TEST_POSTGRES_URL", DEFAULT_POSTGRES)


def postgres_required() -> bool:
    return bool(os.environ.get("CI")) or "PIPETUNE_TEST_POSTGRES_URL" in os.environ


@functools.cache
def postgres_problem() -> str | None:
    """Why PostgreSQL cannot be used, or None."""
    from sqlalchemy import create_engine, text

    try:
        engine = create_engine(postgres_url())
        with engine.connect() as connection:
            connection.execute(text("select 1"))
        engine.dispose()
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


@contextmanager
def fresh_database(kind: str, directory: Path) -> Iterator[str]:
    """The URL of a new, empty database: a SQLite file in ``directory``, or a PostgreSQL
    schema of its own (dropped after)."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / 'pipetune.db'}"
        return
    problem = postgres_problem()
    if problem is not None:
        message = f"PostgreSQL at {postgres_url()} unreachable: {problem}"
        if postgres_required():
            pytest.fail(message)
        pytest.skip(message)
    from sqlalchemy import create_engine, text

    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    separator = "&" if "?" in postgres_url() else "?"
    try:
        yield f"{postgres_url()}{separator}options=-csearch_path%3D{schema}"
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def settings(database_url: str, tmp_path) -> Settings:
    return service_settings(database_url, tmp_path)


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
