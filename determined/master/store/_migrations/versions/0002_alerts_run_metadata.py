"""Alerts raised by trials (``core.Context.alert``) and run metadata
(``TrainContext.set_metadata``).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=True),
        sa.Column("level", sa.String(length=32), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"]),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_alerts_experiment_id"), "alerts", ["experiment_id"], unique=False)
    op.create_table(
        "run_metadata",
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"]),
        sa.PrimaryKeyConstraint("trial_id"),
    )


def downgrade() -> None:
    op.drop_table("run_metadata")
    op.drop_index(op.f("ix_alerts_experiment_id"), table_name="alerts")
    op.drop_table("alerts")
