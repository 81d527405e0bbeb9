"""Tasks that are not trials: commands, notebooks, shells, TensorBoards, generic tasks.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(255), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("context", sa.LargeBinary(), nullable=True),
        sa.Column("data", sa.JSON(), nullable=True),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("allocation_id", sa.String(255), nullable=True),
        sa.Column("ports", sa.JSON(), nullable=True),
        sa.Column("kill_requested", sa.Boolean(), nullable=False),
        sa.Column("exit_status", sa.Text(), nullable=True),
        sa.Column("start_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("end_time", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("tasks")
