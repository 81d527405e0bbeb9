"""Task log lines, as trials ship them (``POST /api/v1/task/logs``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from determined.master.store import _time
from determined.master.store._schema import allocations, task_logs, trials

# A trial's log echoes its config (0.37's "New trial runner ...: {config}"), regexes of log
# policies and webhooks included: such a line matches neither (0.37's rule).
CONFIG_ECHO = re.compile(r'"log_policies":')


def append(conn: sa.Connection, lines: list[dict[str, Any]]) -> None:
    """Store lines already validated by the caller (keys as in the ``task_logs`` table)."""
    if lines:
        conn.execute(task_logs.insert(), [{**line} for line in lines])


TaskIds = str | Sequence[str]  # one task, or several (a continued trial's)


def _of(task_id: TaskIds) -> sa.ColumnElement[bool]:
    if isinstance(task_id, str):
        return task_logs.c.task_id == task_id
    return task_logs.c.task_id.in_(list(task_id))


def read(
    conn: sa.Connection, task_id: TaskIds, *, after_id: int = 0, limit: int | None = None
) -> list[dict[str, Any]]:
    """The task's (tasks') lines with id > ``after_id``, oldest first."""
    q = sa.select(task_logs).where(_of(task_id), task_logs.c.id > after_id).order_by(task_logs.c.id)
    if limit is not None:
        q = q.limit(limit)
    return [dict(r) for r in conn.execute(q).mappings()]


def newest(conn: sa.Connection, task_id: TaskIds, n: int) -> list[dict[str, Any]]:
    """The task's (tasks') last ``n`` lines, oldest first."""
    q = sa.select(task_logs).where(_of(task_id)).order_by(task_logs.c.id.desc()).limit(n)
    return [dict(r) for r in conn.execute(q).mappings()][::-1]


# v1TaskLogsFieldsResponse's keys and the columns whose distinct values they list.
FIELD_COLUMNS = {
    "allocationIds": "allocation_id",
    "agentIds": "agent_id",
    "containerIds": "container_id",
    "rankIds": "rank_id",
    "stdtypes": "stdtype",
    "sources": "source",
}


def fields(conn: sa.Connection, task_id: TaskIds) -> dict[str, list[Any]]:
    """The values a reader of the task's lines may filter on (0.37's ``TaskLogsFields``): for
    each key of ``FIELD_COLUMNS``, the distinct non-null values of its column, sorted."""
    out: dict[str, list[Any]] = {}
    for key, name in FIELD_COLUMNS.items():
        column = task_logs.c[name]
        q = sa.select(column).where(_of(task_id), column.is_not(None)).distinct().order_by(column)
        out[key] = [r[0] for r in conn.execute(q)]
    return out


def log_json(row: dict[str, Any], trial_id: int | None = None) -> dict[str, Any]:
    """``v1TaskLog`` for one stored line."""
    return {
        "id": row["id"],
        "taskId": row["task_id"],
        "allocationId": row["allocation_id"],
        "agentId": row["agent_id"],
        "containerId": row["container_id"],
        "rankId": row["rank_id"],
        "timestamp": _time.rfc3339(row["timestamp"]),
        "level": row["level"],
        "log": row["log"],
        "source": row["source"],
        "stdtype": row["stdtype"],
    }


def task_known(conn: sa.Connection, task_id: str) -> bool:
    """Whether ``task_id`` names a task the master knows: a trial's task, one with runs, or one
    that has log lines (a task's lines outlive nothing else, so any line makes it known)."""
    for q in (
        sa.select(trials.c.id).where(trials.c.task_id == task_id),
        sa.select(allocations.c.id).where(allocations.c.task_id == task_id),
        sa.select(task_logs.c.id).where(task_logs.c.task_id == task_id),
    ):
        if conn.execute(q.limit(1)).first() is not None:
            return True
    return False
