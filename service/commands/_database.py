"""The database a command reads or writes: the server's (``--database-url``, else
``PIPETUNE_DATABASE_URL``, else the data directory's SQLite file), migrated first."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.core.db import Database


def add_database_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", default=None,
                        help="SQLAlchemy URL (default: PIPETUNE_DATABASE_URL, else the data "
                        "directory's SQLite file, as pipetune serve uses)")


@contextmanager
def open_database(url: str | None) -> Iterator[Database]:
    """The database at ``url`` (or the settings' default), migrated; disposed after."""
    from service.core.config import get_settings
    from service.core.db import Database
    from service.db import schema

    db = Database(get_settings(database_url=url).database_url)
    try:
        schema.migrate(db)
        yield db
    finally:
        db.dispose()
