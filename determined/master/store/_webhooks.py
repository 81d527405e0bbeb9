"""Webhooks and their triggers; the outbox of events waiting for delivery."""

from __future__ import annotations

import datetime
from typing import Any

import sqlalchemy as sa

from determined.master.store import _time
from determined.master.store._engine import inserted_id
from determined.master.store._schema import (
    webhook_events,
    webhook_task_log_fired,
    webhook_triggers,
    webhooks,
)


def insert_webhook(
    conn: sa.Connection,
    *,
    name: str,
    url: str,
    webhook_type: str,
    mode: str,
    workspace_id: int | None,
    triggers: list[tuple[str, dict[str, Any]]],
) -> int:
    webhook_id = inserted_id(
        conn.execute(
            webhooks.insert().values(
                name=name, url=url, webhook_type=webhook_type, mode=mode, workspace_id=workspace_id
            )
        )
    )
    for trigger_type, condition in triggers:
        conn.execute(
            webhook_triggers.insert().values(
                webhook_id=webhook_id, trigger_type=trigger_type, condition=condition
            )
        )
    return webhook_id


def get_webhook(conn: sa.Connection, webhook_id: int) -> dict[str, Any] | None:
    row = conn.execute(sa.select(webhooks).where(webhooks.c.id == webhook_id)).mappings().first()
    if row is None:
        return None
    return {**row, "triggers": triggers_of(conn, webhook_id)}


def list_webhooks(conn: sa.Connection) -> list[dict[str, Any]]:
    rows = conn.execute(sa.select(webhooks).order_by(webhooks.c.id)).mappings().all()
    return [{**r, "triggers": triggers_of(conn, int(r["id"]))} for r in rows]


def triggers_of(conn: sa.Connection, webhook_id: int) -> list[dict[str, Any]]:
    q = (
        sa.select(webhook_triggers)
        .where(webhook_triggers.c.webhook_id == webhook_id)
        .order_by(webhook_triggers.c.id)
    )
    return [dict(r) for r in conn.execute(q).mappings()]


def triggers_of_type(conn: sa.Connection, trigger_type: str) -> list[dict[str, Any]]:
    """Every trigger of one type, each with its webhook's columns (``url``, ``mode``, ...)."""
    q = (
        sa.select(
            webhook_triggers,
            webhooks.c.name,
            webhooks.c.url,
            webhooks.c.webhook_type,
            webhooks.c.mode,
            webhooks.c.workspace_id,
        )
        .join(webhooks, webhooks.c.id == webhook_triggers.c.webhook_id)
        .where(webhook_triggers.c.trigger_type == trigger_type)
        .order_by(webhook_triggers.c.id)
    )
    return [dict(r) for r in conn.execute(q).mappings()]


def set_url(conn: sa.Connection, webhook_id: int, url: str) -> None:
    conn.execute(webhooks.update().where(webhooks.c.id == webhook_id).values(url=url))


def delete_webhook(conn: sa.Connection, webhook_id: int) -> None:
    ids = sa.select(webhook_triggers.c.id).where(webhook_triggers.c.webhook_id == webhook_id)
    conn.execute(
        webhook_task_log_fired.delete().where(webhook_task_log_fired.c.trigger_id.in_(ids))
    )
    conn.execute(webhook_triggers.delete().where(webhook_triggers.c.webhook_id == webhook_id))
    conn.execute(webhooks.delete().where(webhooks.c.id == webhook_id))


def first_firing(conn: sa.Connection, task_id: str, trigger_id: int) -> bool:
    """Record that a task-log trigger fired for ``task_id``; False when it had already."""
    seen = conn.execute(
        sa.select(webhook_task_log_fired.c.task_id).where(
            webhook_task_log_fired.c.task_id == task_id,
            webhook_task_log_fired.c.trigger_id == trigger_id,
        )
    ).first()
    if seen is not None:
        return False
    conn.execute(webhook_task_log_fired.insert().values(task_id=task_id, trigger_id=trigger_id))
    return True


def enqueue(conn: sa.Connection, url: str, payload: str) -> None:
    conn.execute(
        webhook_events.insert().values(
            url=url, payload=payload, attempts=0, next_attempt_at=_time.now()
        )
    )


def due_events(conn: sa.Connection, limit: int) -> list[dict[str, Any]]:
    """Events whose next attempt is due, oldest first."""
    q = (
        sa.select(webhook_events)
        .where(webhook_events.c.next_attempt_at <= _time.now())
        .order_by(webhook_events.c.id)
        .limit(limit)
    )
    return [dict(r) for r in conn.execute(q).mappings()]


def next_due(conn: sa.Connection) -> datetime.datetime | None:
    value = conn.execute(sa.select(sa.func.min(webhook_events.c.next_attempt_at))).scalar()
    return None if value is None else _time.as_utc(value)


def event_done(conn: sa.Connection, event_id: int) -> None:
    conn.execute(webhook_events.delete().where(webhook_events.c.id == event_id))


def event_retry(conn: sa.Connection, event_id: int, attempts: int, at: datetime.datetime) -> None:
    conn.execute(
        webhook_events.update()
        .where(webhook_events.c.id == event_id)
        .values(attempts=attempts, next_attempt_at=at)
    )
