"""Run metadata: the JSON object ``TrainContext.set_metadata()`` posts for its trial (a run)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from determined.master.store import _time
from determined.master.store._schema import run_metadata


def replace(conn: sa.Connection, trial_id: int, metadata: dict[str, Any]) -> None:
    """Replace the trial's metadata with ``metadata`` (0.37 overwrites, it does not merge)."""
    updated = conn.execute(
        run_metadata.update()
        .where(run_metadata.c.trial_id == trial_id)
        .values(metadata=metadata, updated_at=_time.now())
    )
    if updated.rowcount == 0:
        conn.execute(
            run_metadata.insert().values(
                trial_id=trial_id, metadata=metadata, updated_at=_time.now()
            )
        )


def get(conn: sa.Connection, trial_id: int) -> dict[str, Any]:
    """The trial's metadata; ``{}`` when none was set (as in 0.37)."""
    row = conn.execute(
        sa.select(run_metadata.c.metadata).where(run_metadata.c.trial_id == trial_id)
    ).first()
    return {} if row is None else dict(row[0])
