"""The database's schema revision: the service's one way to the Alembic migrations
(``migrations/``, whose scripts read the tables of :mod:`service.db.models`), so the
dependency runs one way, from the database layer to the migrations beside it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import migrations

if TYPE_CHECKING:
    from service.core.db import Database


def migrate(db: Database) -> None:
    """Upgrade ``db`` to the newest revision, on its own engine."""
    migrations.upgrade(db.url, engine=db.engine)


def revision(db: Database, *, read: bool = False) -> str | None:
    """The revision ``db`` is at (None: no pipetune tables); ``read`` asks through the
    read engine (on SQLite one that never takes the write lock)."""
    return migrations.current(db.url, engine=db.read_engine if read else db.engine)


def head() -> str:
    """The newest revision the migrations know."""
    return migrations.head()


__all__ = ["head", "migrate", "revision"]
