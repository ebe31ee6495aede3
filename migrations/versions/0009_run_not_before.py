"""A run queued again after a database fault starts no sooner than ``not_before``: its
restarts wait longer each time instead of being spent within seconds while the database
is still away (issue 42, item 6).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pipetune_runs") as batch:
        batch.add_column(sa.Column("not_before", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # In place, not by copying the table (see 0003): copying would cascade to the trials.
    with op.batch_alter_table("pipetune_runs", recreate="never") as batch:
        batch.drop_column("not_before")
