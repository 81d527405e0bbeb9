"""Where each job (experiment) stands in the queue among jobs of its priority: its row's
position, else its experiment id (submission order)."""

from __future__ import annotations

import sqlalchemy as sa

from determined.master.store._schema import job_positions


def positions(conn: sa.Connection) -> dict[int, float]:
    """``experiment id -> position`` for the jobs that were moved."""
    rows = conn.execute(sa.select(job_positions)).mappings()
    return {int(r["experiment_id"]): float(r["position"]) for r in rows}


def position_of(moved: dict[int, float], experiment_id: int) -> float:
    return moved.get(experiment_id, float(experiment_id))


def set_position(conn: sa.Connection, experiment_id: int, position: float) -> None:
    conn.execute(job_positions.delete().where(job_positions.c.experiment_id == experiment_id))
    conn.execute(job_positions.insert().values(experiment_id=experiment_id, position=position))
