"""The GPUs of a Ray fleet, as ``pipetune node start`` registers them: one row per (node,
device key), with the identity a run's hardware model is rebuilt from and how many GPUs of
that kind the node offers.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "pipetune_fleet_devices",
        sa.Column("node", sa.String(200), primary_key=True),
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("simulated", sa.Boolean(), nullable=False),
        sa.Column("identity", JSON, nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pipetune_fleet_devices")
