"""Experiment rows and their search-method snapshots."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from determined.master._states import State
from determined.master._store import _time
from determined.master._store._engine import inserted_id
from determined.master._store._schema import experiments, searcher_snapshots


def insert_experiment(
    conn: sa.Connection,
    *,
    config: dict[str, Any],
    original_config: str,
    model_definition: bytes | None,
    owner_id: int,
    state: State = State.PAUSED,
    parent_id: int | None = None,
) -> int:
    """A new experiment (created PAUSED, as in the reference, then activated)."""
    row = conn.execute(
        experiments.insert().values(
            state=state.value,
            config=config,
            original_config=original_config,
            model_definition=model_definition,
            owner_id=owner_id,
            parent_id=parent_id,
            archived=False,
            progress=None,
            notes="",
            start_time=_time.now(),
        )
    )
    return inserted_id(row)


def get_experiment(conn: sa.Connection, experiment_id: int) -> dict[str, Any] | None:
    row = (
        conn.execute(sa.select(experiments).where(experiments.c.id == experiment_id))
        .mappings()
        .first()
    )
    return None if row is None else dict(row)


def list_experiment_ids(conn: sa.Connection, *, live_only: bool = False) -> list[int]:
    q = sa.select(experiments.c.id).order_by(experiments.c.id)
    if live_only:
        q = q.where(experiments.c.state.not_in([s.value for s in State if s.is_terminal]))
    return [int(r[0]) for r in conn.execute(q)]


def update_experiment(conn: sa.Connection, experiment_id: int, **values: Any) -> None:
    if "state" in values and isinstance(values["state"], State):
        values["state"] = values["state"].value
    conn.execute(experiments.update().where(experiments.c.id == experiment_id).values(**values))


def save_snapshot(conn: sa.Connection, experiment_id: int, snapshot: dict[str, Any]) -> None:
    """Replace the experiment's search-method snapshot (same transaction as its event)."""
    updated = conn.execute(
        searcher_snapshots.update()
        .where(searcher_snapshots.c.experiment_id == experiment_id)
        .values(snapshot=snapshot, updated_at=_time.now())
    )
    if updated.rowcount == 0:
        conn.execute(
            searcher_snapshots.insert().values(
                experiment_id=experiment_id, snapshot=snapshot, updated_at=_time.now()
            )
        )


def load_snapshot(conn: sa.Connection, experiment_id: int) -> dict[str, Any] | None:
    row = conn.execute(
        sa.select(searcher_snapshots.c.snapshot).where(
            searcher_snapshots.c.experiment_id == experiment_id
        )
    ).first()
    return None if row is None else dict(row[0])
