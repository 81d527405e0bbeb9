"""An unmanaged trial's last sign of life, for marking lost trials.

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

import datetime

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("unmanaged_trials") as batch:
        batch.add_column(sa.Column("last_activity", sa.DateTime(timezone=True), nullable=True))
    # Trials that ran before the upgrade get a full timeout from now to say they live.
    table = sa.table("unmanaged_trials", sa.column("last_activity", sa.DateTime(timezone=True)))
    op.execute(table.update().values(last_activity=datetime.datetime.now(datetime.timezone.utc)))


def downgrade() -> None:
    with op.batch_alter_table("unmanaged_trials") as batch:
        batch.drop_column("last_activity")
