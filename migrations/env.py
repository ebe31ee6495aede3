"""Alembic environment: the URL (or an open connection) comes from ``migrations.upgrade``,
the target metadata from ``service.db.models``; only pipetune's tables are considered
(Optuna's, in the same database, have their own history)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from migrations import VERSION_TABLE, include_object
from service.db.models import Base

config = context.config
target_metadata = Base.metadata


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        include_object=include_object,
        render_as_batch=True,  # SQLite alters tables by copying them
        compare_type=True,
        **kwargs,
    )


def run_offline() -> None:
    _configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url"), poolclass=pool.NullPool)
    with engine.connect() as connection:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
