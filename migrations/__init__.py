"""Alembic migrations of pipetune's tables, shipped inside the package.

A user's SQLite file (or a shared PostgreSQL database) is upgraded in code, with an Alembic
``Config`` built here, so the wheel needs no ``alembic.ini``:

    from migrations import upgrade
    upgrade("sqlite:////home/me/.local/share/pipetune/pipetune.db")

The version table is ``pipetune_alembic_version``: Optuna's storage, in the same database,
keeps its own Alembic history in ``alembic_version``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy import Engine

VERSION_TABLE = "pipetune_alembic_version"
TABLE_PREFIX = "pipetune_"
_HERE = Path(__file__).resolve().parent


def include_object(obj: object, name: str | None, type_: str, reflected: bool,
                   compare_to: object) -> bool:
    """Alembic filter: only pipetune's own tables (not Optuna's, not the version table)."""
    if type_ == "table":
        return bool(name) and name.startswith(TABLE_PREFIX) and name != VERSION_TABLE
    return True


def alembic_config(url: str) -> Config:
    """An Alembic ``Config`` for this package's scripts and the database at ``url``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_HERE))
    # "%" is interpolation syntax in Alembic's config parser.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head", engine: Engine | None = None) -> None:
    """Upgrade the database at ``url`` to ``revision`` (default: the newest).

    Args:
        engine: an engine to reuse (its SQLite pragmas and pool); one is made otherwise.
    """
    from alembic import command

    config = alembic_config(url)
    if engine is None:
        command.upgrade(config, revision)
        return
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def downgrade(url: str, revision: str, engine: Engine | None = None) -> None:
    """Downgrade the database at ``url`` to ``revision`` (``"base"``: no pipetune tables).

    Args:
        engine: an engine to reuse, as in :func:`upgrade`.
    """
    from alembic import command

    config = alembic_config(url)
    if engine is None:
        command.downgrade(config, revision)
        return
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def current(url: str, engine: Engine | None = None) -> str | None:
    """The database's revision, or ``None`` before the first upgrade."""
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import create_engine

    own = engine is None
    engine = engine or create_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"version_table": VERSION_TABLE}
            )
            return context.get_current_revision()
    finally:
        if own:
            engine.dispose()


def head() -> str:
    """The newest revision this package ships."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    revision = script.get_current_head()
    assert revision is not None
    return revision


__all__ = [
    "TABLE_PREFIX",
    "VERSION_TABLE",
    "alembic_config",
    "current",
    "downgrade",
    "head",
    "include_object",
    "upgrade",
]
