"""Runs and cached schedules say how a GPU timed their latencies (``timing_method``):
``events`` (per-launch CUDA events, the L2 flushed before each) or ``graph`` (launches
replayed from a CUDA graph over operand copies larger than the L2), chosen per workload;
a latency and its speedup over the vendor peer mean what they say only with it. Rows from
before (and every simulated one) have none.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TABLES = ("pipetune_runs", "pipetune_schedules")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("timing_method", sa.String(16), nullable=True))


def downgrade() -> None:
    # In place, not by copying the tables (see 0003): copying the runs would cascade to
    # the trials.
    for table in TABLES:
        with op.batch_alter_table(table, recreate="never") as batch:
            batch.drop_column("timing_method")
