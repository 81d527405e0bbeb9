"""The log policies a task's lines triggered: the first line per task and regex (per node too
for ``exclude_node``) is kept."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from determined.master.store._schema import log_policy_dont_retry, log_policy_exclude_node


def _first(conn: sa.Connection, table: sa.Table, row: dict[str, Any]) -> bool:
    keys = [c for c in table.primary_key.columns]
    seen = conn.execute(sa.select(*keys).where(*[c == row[c.name] for c in keys])).first()
    if seen is not None:
        return False
    conn.execute(table.insert().values(**row))
    return True


def add_dont_retry(conn: sa.Connection, task_id: str, regex: str, node: str, line: str) -> bool:
    """Record a ``cancel_retries`` match; False when this task and regex had one already."""
    row = {"task_id": task_id, "regex": regex, "node_name": node, "triggering_log": line}
    return _first(conn, log_policy_dont_retry, row)


def add_exclude_node(conn: sa.Connection, task_id: str, regex: str, node: str, line: str) -> bool:
    """Record an ``exclude_node`` match; False when it was recorded already."""
    row = {"task_id": task_id, "node_name": node, "regex": regex, "triggering_log": line}
    return _first(conn, log_policy_exclude_node, row)


def dont_retry(conn: sa.Connection, task_id: str) -> list[dict[str, Any]]:
    q = sa.select(log_policy_dont_retry).where(log_policy_dont_retry.c.task_id == task_id)
    return [dict(r) for r in conn.execute(q.order_by(log_policy_dont_retry.c.regex)).mappings()]


def blocked_nodes(conn: sa.Connection, task_id: str) -> list[str]:
    q = (
        sa.select(log_policy_exclude_node.c.node_name)
        .where(log_policy_exclude_node.c.task_id == task_id)
        .distinct()
        .order_by(log_policy_exclude_node.c.node_name)
    )
    return [str(r[0]) for r in conn.execute(q)]
