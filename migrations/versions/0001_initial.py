"""Initial tables: devices, workloads, runs, trials, schedules, kernels.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
HASH = sa.String(64)
ACTIVE = sa.text("status IN ('queued', 'running')")


def _timestamp(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "pipetune_devices",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("key", HASH, nullable=False, unique=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("simulated", sa.Boolean(), nullable=False),
        sa.Column("identity", JSON, nullable=False),
        _timestamp("created_at"),
    )
    op.create_table(
        "pipetune_workloads",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("key", HASH, nullable=False, unique=True),
        sa.Column("op", sa.String(64), nullable=False),
        sa.Column("params", JSON, nullable=False),
        _timestamp("created_at"),
    )
    op.create_index("ix_pipetune_workloads_op", "pipetune_workloads", ["op"])
    op.create_table(
        "pipetune_runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "workload_id", sa.Integer(), sa.ForeignKey("pipetune_workloads.id"), nullable=False
        ),
        sa.Column("device_id", sa.Integer(), sa.ForeignKey("pipetune_devices.id"), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("budget_trials", sa.Integer(), nullable=False),
        sa.Column("budget_seconds", sa.Float(), nullable=True),
        sa.Column("patience", sa.Integer(), nullable=True),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("study_name", sa.String(128), nullable=False),
        sa.Column("trials_done", sa.Integer(), nullable=False),
        sa.Column("invalid", sa.Integer(), nullable=False),
        sa.Column("best_latency_us", sa.Float(), nullable=True),
        sa.Column("best_schedule_hash", HASH, nullable=True),
        sa.Column("best_kernel_hash", HASH, nullable=True),
        sa.Column("best_simulated", sa.Boolean(), nullable=True),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("stop_reason", sa.String(32), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("owner", sa.String(200), nullable=True),
        _timestamp("heartbeat_at", nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("elapsed_s", sa.Float(), nullable=False),
        _timestamp("created_at"),
        _timestamp("started_at", nullable=True),
        _timestamp("finished_at", nullable=True),
    )
    op.create_index("ix_pipetune_runs_workload_id", "pipetune_runs", ["workload_id"])
    op.create_index("ix_pipetune_runs_device_id", "pipetune_runs", ["device_id"])
    op.create_index("ix_pipetune_runs_status", "pipetune_runs", ["status"])
    # One queued-or-running run per (workload, device): identical requests share it.
    op.create_index(
        "uq_pipetune_runs_active",
        "pipetune_runs",
        ["workload_id", "device_id"],
        unique=True,
        sqlite_where=ACTIVE,
        postgresql_where=ACTIVE,
    )
    op.create_table(
        "pipetune_trials",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "run_id",
            sa.Integer(),
            sa.ForeignKey("pipetune_runs.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("schedule_hash", HASH, nullable=True),
        sa.Column("choices", JSON, nullable=False),
        sa.Column("latency_us", sa.Float(), nullable=True),
        sa.Column("predicted_us", sa.Float(), nullable=True),
        sa.Column("simulated", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("measurement", JSON, nullable=True),
        _timestamp("created_at"),
        sa.UniqueConstraint("run_id", "number", name="uq_pipetune_trials_number"),
    )
    op.create_index("ix_pipetune_trials_run_id", "pipetune_trials", ["run_id"])
    op.create_index("ix_pipetune_trials_schedule_hash", "pipetune_trials", ["schedule_hash"])
    op.create_table(
        "pipetune_schedules",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "workload_id", sa.Integer(), sa.ForeignKey("pipetune_workloads.id"), nullable=False
        ),
        sa.Column("device_id", sa.Integer(), sa.ForeignKey("pipetune_devices.id"), nullable=False),
        sa.Column("schedule_hash", HASH, nullable=False),
        sa.Column("schedule", JSON, nullable=False),
        sa.Column("choices", JSON, nullable=False),
        sa.Column("latency_us", sa.Float(), nullable=False),
        sa.Column("predicted_us", sa.Float(), nullable=True),
        sa.Column("simulated", sa.Boolean(), nullable=False),
        sa.Column(
            "run_id",
            sa.Integer(),
            sa.ForeignKey("pipetune_runs.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("kernel_hash", HASH, nullable=True),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.UniqueConstraint("workload_id", "device_id", name="uq_pipetune_schedules_key"),
    )
    op.create_index("ix_pipetune_schedules_workload_id", "pipetune_schedules", ["workload_id"])
    op.create_index("ix_pipetune_schedules_device_id", "pipetune_schedules", ["device_id"])
    op.create_index(
        "ix_pipetune_schedules_schedule_hash", "pipetune_schedules", ["schedule_hash"]
    )
    op.create_table(
        "pipetune_kernels",
        sa.Column("hash", HASH, primary_key=True),
        sa.Column("schedule_hash", HASH, nullable=False),
        sa.Column("artifact", JSON, nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        _timestamp("created_at"),
    )
    op.create_index("ix_pipetune_kernels_schedule_hash", "pipetune_kernels", ["schedule_hash"])


def downgrade() -> None:
    op.drop_table("pipetune_kernels")
    op.drop_table("pipetune_schedules")
    op.drop_table("pipetune_trials")
    op.drop_table("pipetune_runs")
    op.drop_table("pipetune_workloads")
    op.drop_table("pipetune_devices")
