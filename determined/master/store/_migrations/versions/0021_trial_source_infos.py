"""Trial source infos: the checkpoint or model version an inference trial used.

Revision ID: 0021
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "trial_source_infos",
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("checkpoint_uuid", sa.String(64), nullable=False),
        sa.Column("trial_source_info_type", sa.String(64), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=True),
        sa.Column("model_version", sa.Integer(), nullable=True),
        sa.UniqueConstraint("trial_id", "checkpoint_uuid", name="uq_trial_source_infos"),
    )
    op.create_index("ix_trial_source_infos_trial_id", "trial_source_infos", ["trial_id"])
    op.create_index(
        "ix_trial_source_infos_checkpoint_uuid", "trial_source_infos", ["checkpoint_uuid"]
    )


def downgrade() -> None:
    op.drop_index("ix_trial_source_infos_checkpoint_uuid", "trial_source_infos")
    op.drop_index("ix_trial_source_infos_trial_id", "trial_source_infos")
    op.drop_table("trial_source_infos")
