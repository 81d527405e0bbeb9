"""Tasks that are not trials (commands, notebooks, shells, TensorBoards, generic tasks): their
rows move QUEUED -> RUNNING -> TERMINATED (TERMINATED straight from QUEUED when killed first)."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from determined.master._errors import NotFound
from determined.master.store import _time
from determined.master.store._schema import tasks

TYPES = ("COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD", "GENERIC")
LIVE = ("QUEUED", "RUNNING")


def create(
    conn: sa.Connection,
    *,
    type: str,  # noqa: A002 - the column's name
    owner_id: int,
    description: str,
    config: dict[str, Any],
    slots: int,
    context: bytes | None = None,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A new QUEUED task; its row."""
    if type not in TYPES:
        raise ValueError(f"unknown task type {type!r}")
    task_id = str(uuid.uuid4())
    conn.execute(
        tasks.insert().values(
            id=task_id,
            type=type,
            owner_id=owner_id,
            state="QUEUED",
            description=description,
            config=config,
            context=context,
            data=data,
            slots=slots,
            kill_requested=False,
            start_time=_time.now(),
        )
    )
    return require(conn, task_id)


def get(conn: sa.Connection, task_id: str) -> dict[str, Any] | None:
    row = conn.execute(sa.select(tasks).where(tasks.c.id == task_id)).mappings().first()
    return None if row is None else dict(row)


def require(conn: sa.Connection, task_id: str, type: str | None = None) -> dict[str, Any]:  # noqa: A002
    """The task's row; NotFound when there is none (of that type)."""
    row = get(conn, task_id)
    if row is None or (type is not None and row["type"] != type):
        what = (type or "task").lower()
        raise NotFound(f"{what} {task_id!r} not found")
    return row


def list_tasks(conn: sa.Connection, type: str | None = None) -> list[dict[str, Any]]:  # noqa: A002
    """Tasks (of a type), oldest first, without their context archives."""
    cols = [c for c in tasks.c if c.name != "context"]
    query = sa.select(*cols).order_by(tasks.c.start_time, tasks.c.id)
    if type is not None:
        query = query.where(tasks.c.type == type)
    return [dict(r) for r in conn.execute(query).mappings()]


def queued(conn: sa.Connection) -> list[dict[str, Any]]:
    """QUEUED tasks not asked to stop, oldest first (the order they are started in)."""
    query = (
        sa.select(tasks).where(tasks.c.state == "QUEUED").order_by(tasks.c.start_time, tasks.c.id)
    )
    return [dict(r) for r in conn.execute(query).mappings()]


def live(conn: sa.Connection) -> list[dict[str, Any]]:
    cols = [c for c in tasks.c if c.name != "context"]
    query = sa.select(*cols).where(tasks.c.state.in_(LIVE)).order_by(tasks.c.start_time)
    return [dict(r) for r in conn.execute(query).mappings()]


def unended_in_workspace(conn: sa.Connection, workspace_id: int) -> list[str]:
    """The ids of the tasks launched in ``workspace_id`` that have not ended (queued, running
    or paused)."""
    query = sa.select(tasks.c.id, tasks.c.data).where(tasks.c.state.in_((*LIVE, PAUSED)))
    return [
        str(r.id)
        for r in conn.execute(query)
        if int((r.data or {}).get("workspaceId") or 1) == workspace_id
    ]


def set_running(
    conn: sa.Connection, task_id: str, allocation_id: str, ports: dict[str, int | str]
) -> None:
    # Only a QUEUED task starts: one killed meanwhile stays ended (its run is then killed).
    conn.execute(
        tasks.update()
        .where(tasks.c.id == task_id, tasks.c.state == "QUEUED")
        .values(state="RUNNING", allocation_id=allocation_id, ports=ports)
    )


def set_config(conn: sa.Connection, task_id: str, config: dict[str, Any]) -> None:
    conn.execute(tasks.update().where(tasks.c.id == task_id).values(config=config))


def set_description(conn: sa.Connection, task_id: str, description: str) -> None:
    conn.execute(tasks.update().where(tasks.c.id == task_id).values(description=description))


def terminate(conn: sa.Connection, task_id: str, exit_status: str) -> None:
    """The task ended (or never started): TERMINATED with what became of it."""
    conn.execute(
        tasks.update()
        .where(tasks.c.id == task_id, tasks.c.state.in_(LIVE))
        .values(state="TERMINATED", exit_status=exit_status, end_time=_time.now())
    )


def request_kill(conn: sa.Connection, task_id: str) -> None:
    """A queued task ends at once, a paused one too; a running one is killed by the resource
    manager (and ends TERMINATED, even if it was being paused)."""
    row = require(conn, task_id)
    if row["state"] == "QUEUED":
        terminate(conn, task_id, "killed before it started")
    elif row["state"] == PAUSED:
        conn.execute(
            tasks.update()
            .where(tasks.c.id == task_id)
            .values(state="TERMINATED", exit_status="killed while paused", end_time=_time.now())
        )
    elif row["state"] == "RUNNING":
        data = {**(row["data"] or {}), "pause_requested": False}
        conn.execute(
            tasks.update().where(tasks.c.id == task_id).values(kill_requested=True, data=data)
        )


# Generic tasks (``det task create``) may be paused: the run is stopped, the task waits PAUSED
# (not live: nothing schedules it) until unpaused, then runs again as a new allocation.
PAUSED = "PAUSED"


def allocation_of(row: dict[str, Any]) -> str:
    """The task's current run: ``<task id>.<run>`` (run 1, one more after each unpause)."""
    return f"{row['id']}.{int((row['data'] or {}).get('run') or 1)}"


def request_pause(conn: sa.Connection, task_id: str) -> None:
    """A queued task is PAUSED at once; a running one is stopped by the resource manager,
    which then ends its run as PAUSED (:func:`end_run`)."""
    row = require(conn, task_id)
    if row["state"] == "QUEUED":
        conn.execute(tasks.update().where(tasks.c.id == task_id).values(state=PAUSED))
    elif row["state"] == "RUNNING":
        data = {**(row["data"] or {}), "pause_requested": True}
        conn.execute(
            tasks.update().where(tasks.c.id == task_id).values(kill_requested=True, data=data)
        )


def end_run(conn: sa.Connection, task_id: str, exit_status: str) -> None:
    """The task's run ended: PAUSED if a pause stopped it, else TERMINATED."""
    row = get(conn, task_id)
    if row is None:
        return
    data = dict(row["data"] or {})
    if row["state"] == "RUNNING" and data.pop("pause_requested", False):
        conn.execute(
            tasks.update()
            .where(tasks.c.id == task_id)
            .values(state=PAUSED, kill_requested=False, data=data, exit_status="paused")
        )
        return
    terminate(conn, task_id, exit_status)


def unpause(conn: sa.Connection, task_id: str) -> None:
    """A PAUSED task queues again, for its next run."""
    row = require(conn, task_id)
    data = dict(row["data"] or {})
    data["run"] = int(data.get("run") or 1) + (1 if row["allocation_id"] else 0)
    conn.execute(
        tasks.update()
        .where(tasks.c.id == task_id, tasks.c.state == PAUSED)
        .values(state="QUEUED", data=data, exit_status=None, end_time=None, allocation_id=None)
    )


def subtree(conn: sa.Connection, task_id: str) -> list[dict[str, Any]]:
    """The task and its descendants (generic tasks created with ``parentId``), parents first."""
    query = sa.select(
        tasks.c.id, tasks.c.type, tasks.c.state, tasks.c.owner_id, tasks.c.data
    ).where(tasks.c.type == "GENERIC")
    children: dict[str, list[dict[str, Any]]] = {}
    rows = {}
    for r in conn.execute(query).mappings():
        rows[str(r["id"])] = dict(r)
        parent = (r["data"] or {}).get("parentId")
        if parent:
            children.setdefault(str(parent), []).append(dict(r))
    out = [rows.get(task_id) or require(conn, task_id)]
    for node in out:  # grows while it is walked: breadth first
        out.extend(children.get(str(node["id"]), []))
    return out


def root_of(conn: sa.Connection, task_id: str) -> str:
    """The first task of ``task_id``'s line of parents."""
    seen = {task_id}
    row = require(conn, task_id)
    while True:
        parent = (row["data"] or {}).get("parentId")
        if not parent or parent in seen:
            return str(row["id"])
        seen.add(str(parent))
        found = get(conn, str(parent))
        if found is None:
            return str(row["id"])
        row = found
