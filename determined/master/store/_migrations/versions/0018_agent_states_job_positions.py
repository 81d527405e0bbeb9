"""Disabled agents and slots; job queue positions; archived trials (runs).

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_states",
        sa.Column("agent_id", sa.String(255), nullable=False),
        sa.Column("slot_id", sa.String(64), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("draining", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("agent_id", "slot_id"),
    )
    op.create_table(
        "job_positions",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("experiment_id"),
    )
    with op.batch_alter_table("trials") as batch:
        batch.add_column(
            sa.Column("archived", sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("archived")
    op.drop_table("job_positions")
    op.drop_table("agent_states")
