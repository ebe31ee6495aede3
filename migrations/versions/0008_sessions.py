"""Dashboard sessions: the cookie a login sets names a row here (by the SHA-256 of its
secret), never the API key itself (issue 42, item 5).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pipetune_sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("key_id", sa.Integer(),
                  sa.ForeignKey("pipetune_api_keys.id", ondelete="CASCADE"), nullable=False),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_pipetune_sessions_key_id", "pipetune_sessions", ["key_id"])
    op.create_index("ix_pipetune_sessions_expires_at", "pipetune_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_table("pipetune_sessions")
