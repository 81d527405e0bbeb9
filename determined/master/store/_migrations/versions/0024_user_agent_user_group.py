"""A user's agent user/group (``det user link-with-agent-user``): the OS identity a root
master runs the user's tasks as (docs/security.md).

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users", recreate="never") as batch:
        batch.add_column(sa.Column("agent_user_group", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users", recreate="never") as batch:
        batch.drop_column("agent_user_group")
