"""API keys (stored hashed, with scopes) and the key that created each run.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "pipetune_api_keys",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("prefix", sa.String(32), nullable=False, unique=True),
        sa.Column("salt", sa.String(64), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("scopes", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    # In place (no table copy on SQLite: see 0003's downgrade on why copying
    # pipetune_runs would cascade to its trials).
    with op.batch_alter_table("pipetune_runs", recreate="never") as batch:
        batch.add_column(sa.Column("key_id", sa.Integer(), nullable=True))
        batch.create_index("ix_pipetune_runs_key_id", ["key_id"])


def downgrade() -> None:
    with op.batch_alter_table("pipetune_runs", recreate="never") as batch:
        batch.drop_index("ix_pipetune_runs_key_id")
        batch.drop_column("key_id")
    op.drop_table("pipetune_api_keys")
