"""Unmanaged experiments and trials (core_v2) and their external ids.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "unmanaged_experiments",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("external_id", sa.String(length=255), nullable=True),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"]),
        sa.PrimaryKeyConstraint("experiment_id"),
        sa.UniqueConstraint("external_id"),
    )
    op.create_table(
        "unmanaged_trials",
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("external_id", sa.String(length=255), nullable=True),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"]),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"]),
        sa.PrimaryKeyConstraint("trial_id"),
        sa.UniqueConstraint("experiment_id", "external_id", name="uq_unmanaged_trials_external"),
    )


def downgrade() -> None:
    op.drop_table("unmanaged_trials")
    op.drop_table("unmanaged_experiments")
