"""Alerts trials raise with ``core.Context.alert()`` (``POST /api/v1/webhooks/custom``)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from determined.master.store import _time
from determined.master.store._schema import alerts


def add(
    conn: sa.Connection,
    *,
    experiment_id: int,
    trial_id: int | None,
    level: str,
    title: str,
    description: str,
) -> None:
    """Record one alert (the caller has checked the experiment and trial exist)."""
    conn.execute(
        alerts.insert().values(
            experiment_id=experiment_id,
            trial_id=trial_id,
            level=level,
            title=title,
            description=description,
            created_at=_time.now(),
        )
    )


def list_for_experiment(
    conn: sa.Connection, experiment_id: int, trial_id: int | None = None
) -> list[dict[str, Any]]:
    """The experiment's alerts (only one trial's when ``trial_id`` is given), oldest first, as
    the wire shows them."""
    q = sa.select(alerts).where(alerts.c.experiment_id == experiment_id)
    if trial_id is not None:
        q = q.where(alerts.c.trial_id == trial_id)
    return [_alert_json(dict(r)) for r in conn.execute(q.order_by(alerts.c.id)).mappings()]


def _alert_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "experimentId": row["experiment_id"],
        "trialId": row["trial_id"],
        "level": row["level"],
        "title": row["title"],
        "description": row["description"],
        "createdAt": _time.rfc3339(row["created_at"]),
    }
