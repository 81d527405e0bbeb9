"""The cluster-wide message: at most one is current (setting one ends the one before)."""

from __future__ import annotations

import datetime
from typing import Any

import sqlalchemy as sa

from determined.master.store import _time
from determined.master.store._schema import cluster_messages


def _not_ended(now: datetime.datetime) -> sa.ColumnElement[bool]:
    return sa.or_(cluster_messages.c.end_time.is_(None), cluster_messages.c.end_time > now)


def set_message(
    conn: sa.Connection,
    *,
    message: str,
    start: datetime.datetime,
    end: datetime.datetime | None,
    user_id: int,
) -> None:
    now = _time.now()
    conn.execute(cluster_messages.update().where(_not_ended(now)).values(end_time=now))
    conn.execute(
        cluster_messages.insert().values(
            message=message, start_time=start, end_time=end, created_time=now, created_by=user_id
        )
    )


def clear(conn: sa.Connection) -> None:
    now = _time.now()
    conn.execute(cluster_messages.update().where(_not_ended(now)).values(end_time=now))


def current(conn: sa.Connection, *, started: bool) -> dict[str, Any] | None:
    """The newest message unless it has ended; with ``started``, only once it has begun."""
    now = _time.now()
    row = (
        conn.execute(sa.select(cluster_messages).order_by(cluster_messages.c.id.desc()).limit(1))
        .mappings()
        .first()
    )
    if row is None:
        return None
    end = row["end_time"]
    if end is not None and _time.as_utc(end) <= now:
        return None
    if started and _time.as_utc(row["start_time"]) > now:
        return None
    return dict(row)


def message_json(row: dict[str, Any]) -> dict[str, Any]:
    """``v1ClusterMessage`` (``endTime`` left out when there is none, as the gateway does)."""
    body = {
        "message": row["message"],
        "startTime": _time.rfc3339(row["start_time"]),
        "createdTime": _time.rfc3339(row["created_time"]),
    }
    if row["end_time"] is not None:
        body["endTime"] = _time.rfc3339(row["end_time"])
    return body
