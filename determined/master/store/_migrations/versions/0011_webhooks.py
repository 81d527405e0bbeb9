"""Webhooks, their triggers, the outbox of events to deliver, and the task-log triggers that
fired.

Revision ID: 0011
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("webhook_type", sa.String(length=32), nullable=False),
        sa.Column("mode", sa.String(length=32), nullable=False),
        sa.Column("workspace_id", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "webhook_triggers",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("webhook_id", sa.Integer(), nullable=False),
        sa.Column("trigger_type", sa.String(length=64), nullable=False),
        sa.Column("condition", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["webhook_id"], ["webhooks.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        op.f("ix_webhook_triggers_webhook_id"), "webhook_triggers", ["webhook_id"], unique=False
    )
    op.create_index(
        op.f("ix_webhook_triggers_trigger_type"),
        "webhook_triggers",
        ["trigger_type"],
        unique=False,
    )
    op.create_table(
        "webhook_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        op.f("ix_webhook_events_next_attempt_at"),
        "webhook_events",
        ["next_attempt_at"],
        unique=False,
    )
    op.create_table(
        "webhook_task_log_fired",
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("trigger_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["trigger_id"], ["webhook_triggers.id"]),
        sa.PrimaryKeyConstraint("task_id", "trigger_id"),
    )


def downgrade() -> None:
    op.drop_table("webhook_task_log_fired")
    op.drop_index(op.f("ix_webhook_events_next_attempt_at"), table_name="webhook_events")
    op.drop_table("webhook_events")
    op.drop_index(op.f("ix_webhook_triggers_trigger_type"), table_name="webhook_triggers")
    op.drop_index(op.f("ix_webhook_triggers_webhook_id"), table_name="webhook_triggers")
    op.drop_table("webhook_triggers")
    op.drop_table("webhooks")
