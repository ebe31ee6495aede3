"""GPU runs: the vendor baseline of runs and schedules; the cost model's calibrations.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    for table in ("pipetune_runs", "pipetune_schedules"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("baseline", sa.String(32), nullable=True))
            batch.add_column(sa.Column("baseline_latency_us", sa.Float(), nullable=True))
    op.create_table(
        "pipetune_calibrations",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "device_id",
            sa.Integer(),
            sa.ForeignKey("pipetune_devices.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("op", sa.String(64), nullable=False),
        sa.Column("calibration", JSON, nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("device_id", "op", name="uq_pipetune_calibrations_key"),
    )
    op.create_index(
        "ix_pipetune_calibrations_device_id", "pipetune_calibrations", ["device_id"]
    )


def downgrade() -> None:
    op.drop_table("pipetune_calibrations")
    for table in ("pipetune_schedules", "pipetune_runs"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("baseline_latency_us")
            batch.drop_column("baseline")
