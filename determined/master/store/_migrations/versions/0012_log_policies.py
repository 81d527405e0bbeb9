"""The log policies a task's lines triggered (``cancel_retries``, ``exclude_node``).

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "log_policy_dont_retry",
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("regex", sa.Text(), nullable=False),
        sa.Column("node_name", sa.String(length=255), nullable=False),
        sa.Column("triggering_log", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("task_id", "regex"),
    )
    op.create_table(
        "log_policy_exclude_node",
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("node_name", sa.String(length=255), nullable=False),
        sa.Column("regex", sa.Text(), nullable=False),
        sa.Column("triggering_log", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("task_id", "node_name", "regex"),
    )


def downgrade() -> None:
    op.drop_table("log_policy_exclude_node")
    op.drop_table("log_policy_dont_retry")
