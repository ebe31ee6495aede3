"""Fresh databases for the service tests: a SQLite file, or a PostgreSQL schema of its
own. A module of its own (not the conftest), so test modules and other folders' fixtures
import it by a name no other folder's module has.

PostgreSQL: ``PIPETUNE_TEST_POSTGRES_URL`` (default the local server,
``postgresql+psycopg://postgres@127.0.0.1:5432/test``). Without a reachable server the
PostgreSQL cases are skipped, except in CI (``CI`` set) or when the URL is given
explicitly: there they fail.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

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


@functools.cache
def _admin_engine() -> Any:
    """One engine per test process for creating and dropping the tests' schemas (an
    engine made per test cost its own connection and dialect set-up each time)."""
    from sqlalchemy import create_engine

    return create_engine(postgres_url(), isolation_level="AUTOCOMMIT")


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
    from sqlalchemy import text

    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = _admin_engine()
    with admin.connect() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    separator = "&" if "?" in postgres_url() else "?"
    try:
        yield f"{postgres_url()}{separator}options=-csearch_path%3D{schema}"
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
