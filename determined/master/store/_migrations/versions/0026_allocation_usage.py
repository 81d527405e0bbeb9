"""What the usage reports read of each trial run (``allocation_usage``): the workspace it ran
in and its slots and times, kept when its project moves or its experiment is deleted (0.37's
``allocation_workspace_info``). Existing runs are recorded with their workspace of today.

Revision ID: 0026
Revises: 0025
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def _pool(config: Any) -> str:
    resources = (config if isinstance(config, dict) else {}).get("resources") or {}
    return str(resources.get("resource_pool") or "default")


def _slots(resources: Any) -> int:
    return sum(int(r.get("slots") or 0) for r in resources or [] if isinstance(r, dict))


def upgrade() -> None:
    usage = op.create_table(
        "allocation_usage",
        sa.Column("allocation_id", sa.String(length=255), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("workspace_id", sa.Integer(), nullable=True),
        sa.Column("workspace_name", sa.Text(), nullable=False),
        sa.Column("resource_pool", sa.String(length=255), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("start_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("end_time", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("allocation_id"),
    )
    op.create_index(
        op.f("ix_allocation_usage_start_time"), "allocation_usage", ["start_time"], unique=False
    )
    meta = sa.MetaData()
    bind = op.get_bind()
    allocations, trials, experiments, projects, workspaces = (
        sa.Table(name, meta, autoload_with=bind)
        for name in ("allocations", "trials", "experiments", "projects", "workspaces")
    )
    query = sa.select(
        allocations.c.id,
        allocations.c.resources,
        allocations.c.start_time,
        allocations.c.end_time,
        experiments.c.id.label("experiment_id"),
        experiments.c.owner_id,
        experiments.c.config,
        workspaces.c.id.label("workspace_id"),
        workspaces.c.name,
    ).select_from(
        allocations.join(trials, trials.c.id == allocations.c.trial_id)
        .join(experiments, experiments.c.id == trials.c.experiment_id)
        .outerjoin(projects, projects.c.id == experiments.c.project_id)
        .outerjoin(workspaces, workspaces.c.id == projects.c.workspace_id)
    )
    rows = [
        {
            "allocation_id": r.id,
            "experiment_id": r.experiment_id,
            "owner_id": r.owner_id,
            "workspace_id": r.workspace_id,
            "workspace_name": r.name or "",
            "resource_pool": _pool(r.config),
            "slots": _slots(r.resources),
            "start_time": r.start_time,
            "end_time": r.end_time,
        }
        for r in bind.execute(query)
    ]
    if rows:
        op.bulk_insert(usage, rows)


def downgrade() -> None:
    op.drop_index(op.f("ix_allocation_usage_start_time"), table_name="allocation_usage")
    op.drop_table("allocation_usage")
