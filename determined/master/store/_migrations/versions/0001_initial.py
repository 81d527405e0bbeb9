"""The initial schema: every table of ``_schema.py`` as of the first release.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cluster_info",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "storage_backends",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("digest"),
    )
    op.create_table(
        "task_logs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("allocation_id", sa.String(length=255), nullable=True),
        sa.Column("agent_id", sa.String(length=255), nullable=True),
        sa.Column("container_id", sa.String(length=255), nullable=True),
        sa.Column("rank_id", sa.Integer(), nullable=True),
        sa.Column("timestamp", sa.DateTime(timezone=True), nullable=False),
        sa.Column("level", sa.String(length=32), nullable=True),
        sa.Column("stdtype", sa.String(length=32), nullable=True),
        sa.Column("source", sa.String(length=32), nullable=True),
        sa.Column("log", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_task_logs_task_id", "task_logs", ["task_id", "id"], unique=False)
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("username", sa.String(length=255), nullable=False),
        sa.Column("password_hash", sa.Text(), nullable=True),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("display_name", sa.String(length=255), nullable=True),
        sa.Column("modified_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("username"),
    )
    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("original_config", sa.Text(), nullable=False),
        sa.Column("model_definition", sa.LargeBinary(), nullable=True),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("archived", sa.Boolean(), nullable=False),
        sa.Column("progress", sa.Float(), nullable=True),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("start_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("end_time", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["users.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("allocation_id", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("digest"),
    )
    op.create_index(op.f("ix_tokens_allocation_id"), "tokens", ["allocation_id"], unique=False)
    op.create_table(
        "searcher_snapshots",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("snapshot", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["experiment_id"],
            ["experiments.id"],
        ),
        sa.PrimaryKeyConstraint("experiment_id"),
    )
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("hparams", sa.JSON(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("warm_start_checkpoint", sa.String(length=64), nullable=True),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("op_length", sa.BigInteger(), nullable=True),
        sa.Column("op_complete", sa.Boolean(), nullable=False),
        sa.Column("op_closed", sa.Boolean(), nullable=False),
        sa.Column("early_exit", sa.String(length=64), nullable=True),
        sa.Column("searcher_units", sa.Float(), nullable=False),
        sa.Column("progress", sa.Float(), nullable=True),
        sa.Column("runner_state", sa.String(length=64), nullable=False),
        sa.Column("total_batches", sa.BigInteger(), nullable=False),
        sa.Column("summary_metrics", sa.JSON(), nullable=False),
        sa.Column("latest_validation_id", sa.Integer(), nullable=True),
        sa.Column("best_validation_id", sa.Integer(), nullable=True),
        sa.Column("start_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("end_time", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["experiment_id"],
            ["experiments.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("experiment_id", "request_id", name="uq_trials_request"),
        sa.UniqueConstraint("task_id"),
    )
    op.create_table(
        "allocations",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("resources", sa.JSON(), nullable=False),
        sa.Column("preempted", sa.Boolean(), nullable=False),
        sa.Column("acked", sa.Boolean(), nullable=False),
        sa.Column("ready", sa.Boolean(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("start_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("end_time", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["trial_id"],
            ["trials.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_allocations_task_id"), "allocations", ["task_id"], unique=False)
    op.create_index(op.f("ix_allocations_trial_id"), "allocations", ["trial_id"], unique=False)
    op.create_table(
        "checkpoints",
        sa.Column("uuid", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("allocation_id", sa.String(length=255), nullable=True),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("report_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("resources", sa.JSON(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("steps_completed", sa.BigInteger(), nullable=False),
        sa.Column("storage_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["storage_id"],
            ["storage_backends.id"],
        ),
        sa.ForeignKeyConstraint(
            ["trial_id"],
            ["trials.id"],
        ),
        sa.PrimaryKeyConstraint("uuid"),
    )
    op.create_index(op.f("ix_checkpoints_task_id"), "checkpoints", ["task_id"], unique=False)
    op.create_index(op.f("ix_checkpoints_trial_id"), "checkpoints", ["trial_id"], unique=False)
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("trial_run_id", sa.Integer(), nullable=False),
        sa.Column("metric_group", sa.String(length=255), nullable=False),
        sa.Column("partition", sa.String(length=16), nullable=False),
        sa.Column("steps_completed", sa.BigInteger(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("batch_metrics", sa.JSON(), nullable=True),
        sa.Column("report_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("archived", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["trial_id"],
            ["trials.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_metrics_trial_group_steps",
        "metrics",
        ["trial_id", "metric_group", "steps_completed"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_metrics_trial_group_steps", table_name="metrics")
    op.drop_table("metrics")
    op.drop_index(op.f("ix_checkpoints_trial_id"), table_name="checkpoints")
    op.drop_index(op.f("ix_checkpoints_task_id"), table_name="checkpoints")
    op.drop_table("checkpoints")
    op.drop_index(op.f("ix_allocations_trial_id"), table_name="allocations")
    op.drop_index(op.f("ix_allocations_task_id"), table_name="allocations")
    op.drop_table("allocations")
    op.drop_table("trials")
    op.drop_table("searcher_snapshots")
    op.drop_index(op.f("ix_tokens_allocation_id"), table_name="tokens")
    op.drop_table("tokens")
    op.drop_table("experiments")
    op.drop_table("users")
    op.drop_index("ix_task_logs_task_id", table_name="task_logs")
    op.drop_table("task_logs")
    op.drop_table("storage_backends")
    op.drop_table("cluster_info")
