"""Dynamic shapes (issue 20): a run's kind (``exact`` or ``range``), and the tuned ranges,
each a bucket table over one dimension of a workload on a device.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("pipetune_runs") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False,
                                   server_default="exact"))
    op.create_table(
        "pipetune_range_tables",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("op", sa.String(64), nullable=False),
        sa.Column("fixed_key", sa.String(64), nullable=False),
        sa.Column("dim", sa.String(32), nullable=False),
        sa.Column("low", sa.Integer(), nullable=False),
        sa.Column("high", sa.Integer(), nullable=False),
        sa.Column("params", JSON, nullable=False),
        sa.Column("size_from", JSON, nullable=False),
        sa.Column("sizes", JSON, nullable=False),
        sa.Column("buckets", JSON, nullable=False),
        sa.Column("loss", sa.Float(), nullable=True),
        sa.Column("simulated", sa.Boolean(), nullable=False),
        sa.Column("device_id", sa.Integer(), sa.ForeignKey("pipetune_devices.id"),
                  nullable=False),
        sa.Column("run_id", sa.Integer(),
                  sa.ForeignKey("pipetune_runs.id", ondelete="SET NULL"), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_pipetune_range_tables_lookup", "pipetune_range_tables",
                    ["op", "fixed_key", "dim", "device_id"])
    op.create_index("ix_pipetune_range_tables_device_id", "pipetune_range_tables",
                    ["device_id"])
    op.create_index("ix_pipetune_range_tables_run_id", "pipetune_range_tables", ["run_id"])


def downgrade() -> None:
    op.drop_table("pipetune_range_tables")
    # In place, not by copying the table (see 0003): copying would cascade to the trials.
    with op.batch_alter_table("pipetune_runs", recreate="never") as batch:
        batch.drop_column("kind")
