"""How long trials' logs are kept after they end, and dropping the logs that are due."""

from __future__ import annotations

import datetime
from collections.abc import Iterable

import sqlalchemy as sa

from determined.master.store import _time
from determined.master.store._schema import task_logs, trials

FOREVER = -1
MAX_DAYS = 32767  # 0.37's range: -1 (forever) to 32767


def set_days(conn: sa.Connection, trial_ids: Iterable[int], days: int) -> None:
    ids = list(trial_ids)
    if ids:
        conn.execute(trials.update().where(trials.c.id.in_(ids)).values(log_retention_days=days))


def due_tasks(
    conn: sa.Connection, default_days: int, now: datetime.datetime | None = None
) -> list[str]:
    """Task ids of ended trials whose logs are past their retention (their own days, else
    ``default_days``; negative keeps them forever)."""
    now = now or _time.now()
    q = sa.select(trials.c.task_id, trials.c.end_time, trials.c.log_retention_days).where(
        trials.c.end_time.is_not(None)
    )
    due = []
    for task_id, end_time, own in conn.execute(q):
        days = default_days if own is None else int(own)
        if days >= 0 and _time.as_utc(end_time) + datetime.timedelta(days=days) <= now:
            due.append(str(task_id))
    return due


def drop_logs(conn: sa.Connection, task_ids: list[str]) -> int:
    """Delete the log lines of ``task_ids``; returns how many went."""
    if not task_ids:
        return 0
    return int(conn.execute(task_logs.delete().where(task_logs.c.task_id.in_(task_ids))).rowcount)
