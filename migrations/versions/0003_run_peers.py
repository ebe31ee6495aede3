"""Runs: the latencies of further peer baselines (e.g. ``sdpa_flash`` besides the primary
``sdpa_cudnn`` of attention), by name, re-timed with the finalists.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("pipetune_runs") as batch:
        batch.add_column(sa.Column("peer_latencies_us", JSON, nullable=True))


def downgrade() -> None:
    # Not by copying the table (batch mode's way on SQLite): with foreign keys on, as the
    # service's engine has them, dropping the old pipetune_runs would cascade to the runs'
    # trials. SQLite drops a column in place since 3.35.
    with op.batch_alter_table("pipetune_runs", recreate="never") as batch:
        batch.drop_column("peer_latencies_us")
