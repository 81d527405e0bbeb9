"""Config templates: a name, a config mapping, the workspace it belongs to and who made it."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from determined.master.store._schema import templates


def get(conn: sa.Connection, name: str) -> dict[str, Any] | None:
    row = conn.execute(sa.select(templates).where(templates.c.name == name)).mappings().first()
    return None if row is None else dict(row)


def list_all(conn: sa.Connection) -> list[dict[str, Any]]:
    rows = conn.execute(sa.select(templates).order_by(templates.c.name)).mappings()
    return [dict(r) for r in rows]


def insert(
    conn: sa.Connection, *, name: str, config: dict[str, Any], workspace_id: int, user_id: int
) -> bool:
    """False when a template of that name exists already (nothing written)."""
    if get(conn, name) is not None:
        return False
    conn.execute(
        templates.insert().values(
            name=name, config=config, workspace_id=workspace_id, created_by=user_id
        )
    )
    return True


def set_config(conn: sa.Connection, name: str, config: dict[str, Any]) -> bool:
    done = conn.execute(templates.update().where(templates.c.name == name).values(config=config))
    return bool(done.rowcount)


def rename(conn: sa.Connection, old: str, new: str) -> bool:
    done = conn.execute(templates.update().where(templates.c.name == old).values(name=new))
    return bool(done.rowcount)


def delete(conn: sa.Connection, name: str) -> bool:
    return bool(conn.execute(templates.delete().where(templates.c.name == name)).rowcount)
