"""Workspaces and projects: the folders experiments (and models) are filed under.

Id 1 of each is the default "Uncategorized" (0.37's ids and names), created on first start and
immutable. A project's ``key`` is unique across the cluster, as in 0.37.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from determined.master._errors import Conflict, FailedPrecondition, InvalidArgument, NotFound
from determined.master.store import _engine, _time
from determined.master.store._engine import inserted_id
from determined.master.store._schema import (
    experiments,
    models,
    projects,
    templates,
    trials,
    users,
    workspace_pins,
    workspaces,
)

DEFAULT_ID = 1
DEFAULT_NAME = "Uncategorized"


def ensure_defaults(conn: sa.Connection) -> None:
    """The default workspace and project (owned by ``admin``), once."""
    if conn.execute(sa.select(workspaces.c.id).where(workspaces.c.id == DEFAULT_ID)).first():
        return
    admin = conn.execute(sa.select(users.c.id).where(users.c.username == "admin")).scalar()
    owner = int(admin or 1)
    now = _time.now()
    conn.execute(
        workspaces.insert().values(
            id=DEFAULT_ID,
            name=DEFAULT_NAME,
            user_id=owner,
            archived=False,
            immutable=True,
            created_at=now,
        )
    )
    conn.execute(
        projects.insert().values(
            id=DEFAULT_ID,
            name=DEFAULT_NAME,
            workspace_id=DEFAULT_ID,
            user_id=owner,
            description="",
            key="UNCAT",
            archived=False,
            immutable=True,
            notes=[],
            created_at=now,
        )
    )
    _bump_sequences(conn)


def _bump_sequences(conn: sa.Connection) -> None:
    # Rows inserted with an explicit id leave Postgres's serial sequence at 1.
    if conn.dialect.name == "postgresql":
        for table in ("workspaces", "projects"):
            conn.execute(
                sa.text(
                    f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                    f"(SELECT MAX(id) FROM {table}))"
                )
            )


# --- workspaces ---------------------------------------------------------------------------


def get_workspace(conn: sa.Connection, workspace_id: int) -> dict[str, Any] | None:
    row = conn.execute(sa.select(workspaces).where(workspaces.c.id == workspace_id)).mappings()
    first = row.first()
    return None if first is None else dict(first)


def require_workspace(conn: sa.Connection, workspace_id: int) -> dict[str, Any]:
    """The workspace's row. Raises NotFound (404)."""
    ws = get_workspace(conn, workspace_id)
    if ws is None:
        raise NotFound(f"workspace ({workspace_id}) not found")
    return ws


def workspace_by_name(conn: sa.Connection, name: str) -> dict[str, Any] | None:
    row = conn.execute(sa.select(workspaces).where(workspaces.c.name == name)).mappings().first()
    return None if row is None else dict(row)


def list_workspaces(conn: sa.Connection) -> list[dict[str, Any]]:
    q = sa.select(workspaces).order_by(workspaces.c.id)
    return [dict(r) for r in conn.execute(q).mappings()]


def insert_workspace(conn: sa.Connection, name: str, user_id: int) -> int:
    """A new workspace. Raises Conflict (409) when the name is taken."""
    if workspace_by_name(conn, name) is not None:
        raise Conflict(f"avoid names equal to other workspaces (case-sensitive): {name!r}")
    row = conn.execute(
        workspaces.insert().values(
            name=name, user_id=user_id, archived=False, immutable=False, created_at=_time.now()
        )
    )
    return inserted_id(row)


def update_workspace(conn: sa.Connection, workspace_id: int, **values: Any) -> None:
    if "name" in values:
        other = workspace_by_name(conn, values["name"])
        if other is not None and other["id"] != workspace_id:
            raise Conflict(
                f"avoid names equal to other workspaces (case-sensitive): {values['name']!r}"
            )
    conn.execute(workspaces.update().where(workspaces.c.id == workspace_id).values(**values))


def delete_workspace(conn: sa.Connection, workspace_id: int) -> None:
    """Remove the workspace, its (empty) projects and its templates (0.37); the caller checked
    there are no experiments or models left in it."""
    conn.execute(projects.delete().where(projects.c.workspace_id == workspace_id))
    conn.execute(templates.delete().where(templates.c.workspace_id == workspace_id))
    conn.execute(workspace_pins.delete().where(workspace_pins.c.workspace_id == workspace_id))
    conn.execute(workspaces.delete().where(workspaces.c.id == workspace_id))


def set_pinned(conn: sa.Connection, workspace_id: int, user_id: int, pinned: bool) -> None:
    """Pin the workspace for the user, or unpin it (either twice is a no-op)."""
    mine = (workspace_pins.c.workspace_id == workspace_id) & (workspace_pins.c.user_id == user_id)
    conn.execute(workspace_pins.delete().where(mine))
    if pinned:
        conn.execute(
            workspace_pins.insert().values(
                workspace_id=workspace_id, user_id=user_id, created_at=_time.now()
            )
        )


def pinned_ids(conn: sa.Connection, user_id: int) -> set[int]:
    """The ids of the workspaces the user pinned."""
    q = sa.select(workspace_pins.c.workspace_id).where(workspace_pins.c.user_id == user_id)
    return {int(r[0]) for r in conn.execute(q)}


def workspace_counts(conn: sa.Connection, workspace_id: int) -> tuple[int, int]:
    """(number of projects, number of experiments) in the workspace."""
    n_projects = conn.execute(
        sa.select(sa.func.count()).where(projects.c.workspace_id == workspace_id)
    ).scalar()
    project_ids = sa.select(projects.c.id).where(projects.c.workspace_id == workspace_id)
    n_exps = conn.execute(
        sa.select(sa.func.count()).where(experiments.c.project_id.in_(project_ids))
    ).scalar()
    return int(n_projects or 0), int(n_exps or 0)


def models_in_workspace(conn: sa.Connection, workspace_id: int) -> int:
    n = conn.execute(sa.select(sa.func.count()).where(models.c.workspace_id == workspace_id))
    return int(n.scalar() or 0)


# --- projects -----------------------------------------------------------------------------


def get_project(conn: sa.Connection, project_id: int) -> dict[str, Any] | None:
    row = conn.execute(sa.select(projects).where(projects.c.id == project_id)).mappings().first()
    return None if row is None else dict(row)


def projects_by_id(conn: sa.Connection, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """``get_project`` for many projects: those that exist, by id."""
    return _engine.rows_by_id(conn, projects, ids)


def workspaces_by_id(conn: sa.Connection, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """``get_workspace`` for many workspaces: those that exist, by id."""
    return _engine.rows_by_id(conn, workspaces, ids)


def require_project(conn: sa.Connection, project_id: int) -> dict[str, Any]:
    """The project's row. Raises NotFound (404)."""
    p = get_project(conn, project_id)
    if p is None:
        raise NotFound(f"project ({project_id}) not found")
    return p


def project_by_name(conn: sa.Connection, workspace_id: int, name: str) -> dict[str, Any] | None:
    q = sa.select(projects).where(projects.c.workspace_id == workspace_id, projects.c.name == name)
    row = conn.execute(q).mappings().first()
    return None if row is None else dict(row)


def list_projects(conn: sa.Connection, workspace_id: int | None = None) -> list[dict[str, Any]]:
    """The projects of one workspace (None or 0: of every workspace), by id."""
    q = sa.select(projects).order_by(projects.c.id)
    if workspace_id:
        q = q.where(projects.c.workspace_id == workspace_id)
    return [dict(r) for r in conn.execute(q).mappings()]


_KEY_CHARS = re.compile(r"[^A-Z0-9]")


def _free_key(conn: sa.Connection, name: str) -> str:
    # 0.37 derives a short key from the name and makes it unique with a suffix.
    base = _KEY_CHARS.sub("", name.upper())[:5] or "PROJ"
    key, n = base, 0
    while conn.execute(sa.select(projects.c.id).where(projects.c.key == key)).first():
        n += 1
        key = f"{base}{n}"
    return key


def insert_project(
    conn: sa.Connection,
    *,
    name: str,
    workspace_id: int,
    user_id: int,
    description: str = "",
    key: str | None = None,
) -> int:
    """A new project. Raises Conflict (409) for a name taken in the workspace or a key taken."""
    if project_by_name(conn, workspace_id, name) is not None:
        raise Conflict(f"project name {name!r} is already in use in workspace {workspace_id}")
    if key:
        if conn.execute(sa.select(projects.c.id).where(projects.c.key == key)).first():
            raise Conflict(f"project key {key!r} is already in use")
    else:
        key = _free_key(conn, name)
    row = conn.execute(
        projects.insert().values(
            name=name,
            workspace_id=workspace_id,
            user_id=user_id,
            description=description,
            key=key,
            archived=False,
            immutable=False,
            notes=[],
            created_at=_time.now(),
        )
    )
    return inserted_id(row)


def update_project(conn: sa.Connection, project_id: int, **values: Any) -> None:
    if "name" in values:
        p = require_project(conn, project_id)
        other = project_by_name(conn, int(p["workspace_id"]), values["name"])
        if other is not None and other["id"] != project_id:
            raise Conflict(f"project name {values['name']!r} is already in use")
    if "key" in values:
        q = sa.select(projects.c.id).where(projects.c.key == values["key"])
        other_id = conn.execute(q).scalar()
        if other_id is not None and other_id != project_id:
            raise Conflict(f"project key {values['key']!r} is already in use")
    conn.execute(projects.update().where(projects.c.id == project_id).values(**values))


def delete_project(conn: sa.Connection, project_id: int) -> None:
    """Remove an (empty) project; the caller checked it has no experiments."""
    conn.execute(projects.delete().where(projects.c.id == project_id))


def project_experiment_ids(conn: sa.Connection, project_id: int) -> list[int]:
    q = sa.select(experiments.c.id).where(experiments.c.project_id == project_id)
    return [int(r[0]) for r in conn.execute(q.order_by(experiments.c.id))]


def project_stats(conn: sa.Connection, project_id: int) -> dict[str, Any]:
    """Counts for ``v1Project``: experiments, active ones, trials (runs), last start."""
    exp_ids = sa.select(experiments.c.id).where(experiments.c.project_id == project_id)
    n = conn.execute(sa.select(sa.func.count()).where(experiments.c.project_id == project_id))
    active = conn.execute(
        sa.select(sa.func.count()).where(
            experiments.c.project_id == project_id,
            experiments.c.state.in_(["STATE_ACTIVE", "STATE_PAUSED"]),
        )
    )
    runs = conn.execute(sa.select(sa.func.count()).where(trials.c.experiment_id.in_(exp_ids)))
    last = conn.execute(
        sa.select(sa.func.max(experiments.c.start_time)).where(
            experiments.c.project_id == project_id
        )
    )
    return {
        "num_experiments": int(n.scalar() or 0),
        "num_active": int(active.scalar() or 0),
        "num_runs": int(runs.scalar() or 0),
        "last_started": last.scalar(),
    }


def open_project(conn: sa.Connection, project_id: int) -> dict[str, Any]:
    """The project an experiment may be created in or moved to: it exists (else NotFound) and
    neither it nor its workspace is archived (else FailedPrecondition)."""
    p = require_project(conn, project_id)
    ws = require_workspace(conn, int(p["workspace_id"]))
    if p["archived"] or ws["archived"]:
        raise FailedPrecondition(
            f"project {p['name']!r} (or its workspace) is archived and cannot take experiments; "
            "unarchive it first"
        )
    return p


def target_project(conn: sa.Connection, project_id: int | None, config: dict[str, Any]) -> int:
    """The project a new experiment goes to: ``projectId`` if given, else the config's
    ``workspace`` and ``project`` names (both or neither, as 0.37), else the default (1)."""
    if project_id:
        return int(open_project(conn, project_id)["id"])
    ws_name, p_name = config.get("workspace") or "", config.get("project") or ""
    if not ws_name and not p_name:
        return DEFAULT_ID
    if not ws_name or not p_name:
        raise InvalidArgument(
            "workspace and project must both be included in the config if one is provided "
            f"(got workspace {ws_name!r}, project {p_name!r})"
        )
    ws = workspace_by_name(conn, ws_name)
    p = None if ws is None else project_by_name(conn, int(ws["id"]), p_name)
    if p is None:
        raise NotFound(f"no project {p_name!r} in workspace {ws_name!r} (config workspace/project)")
    return int(open_project(conn, int(p["id"]))["id"])
