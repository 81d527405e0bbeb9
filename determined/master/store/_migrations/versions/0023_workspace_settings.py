"""Workspace settings: the default checkpoint storage and pools, the agent user/group.

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workspaces", recreate="never") as batch:
        batch.add_column(sa.Column("checkpoint_storage_config", sa.JSON(), nullable=True))
        batch.add_column(
            sa.Column(
                "default_compute_pool", sa.String(length=255), nullable=False, server_default=""
            )
        )
        batch.add_column(
            sa.Column("default_aux_pool", sa.String(length=255), nullable=False, server_default="")
        )
        batch.add_column(sa.Column("agent_user_group", sa.JSON(), nullable=True))


def downgrade() -> None:
    # SQLite drops the columns in place (3.35+): copying the table, batch mode's default,
    # would break the projects' foreign keys to it.
    with op.batch_alter_table("workspaces", recreate="never") as batch:
        batch.drop_column("agent_user_group")
        batch.drop_column("default_aux_pool")
        batch.drop_column("default_compute_pool")
        batch.drop_column("checkpoint_storage_config")
