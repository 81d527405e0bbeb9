"""Workspaces and projects (0.37's routes and ``v1Workspace``/``v1Project`` shapes), and moving
experiments between projects.

Without RBAC (as 0.37's open-source master): any user creates workspaces and projects; only a
workspace's or project's owner, or an admin, changes, archives or deletes it. The default
"Uncategorized" workspace and project (id 1) are immutable. Deleting a workspace or project
that still holds experiments (or models) is refused: move or delete them first.
"""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Query, Request
from pydantic import Field

from determined.master import experiment
from determined.master._errors import (
    ApiError,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    PermissionDenied,
)
from determined.master.api import (
    _bulk_experiments,
    _experiment_edits,
    _jobs,
    _ntsc,
    _redact,
    _wire,
)
from determined.master.api._auth import Caller, Principal
from determined.master.api._deps import ExperimentsDep, Limit, ResourceManagerDep, StoreDep
from determined.master.api._models import _Body
from determined.master.api._object_routes import flag_routes, get_route
from determined.master.api._services import services
from determined.master.store import Store, _experiments, _projects, _time, _users
from determined.master.store import _tasks as _task_rows

router = APIRouter(prefix="/api/v1")

MAX_NAME = 80  # characters, as 0.37's workspace and project names


# --- wire shapes --------------------------------------------------------------------------


def workspace_json(
    conn: sa.Connection, ws: dict[str, Any], viewer: int | None = None
) -> dict[str, Any]:
    """``v1Workspace``, ``pinned`` as the user ``viewer`` pinned it."""
    n_projects, n_exps = _projects.workspace_counts(conn, int(ws["id"]))
    owner = _users.get_user(conn, int(ws["user_id"]))
    return {
        "id": ws["id"],
        "name": ws["name"],
        "archived": bool(ws["archived"]),
        "username": "" if owner is None else owner["username"],
        "immutable": bool(ws["immutable"]),
        "numProjects": n_projects,
        "pinned": viewer is not None and int(ws["id"]) in _projects.pinned_ids(conn, viewer),
        "userId": ws["user_id"],
        "numExperiments": n_exps,
        "state": "WORKSPACE_STATE_UNSPECIFIED",
        "errorMessage": "",
        "agentUserGroup": ws.get("agent_user_group"),
        # Storage secrets are shown to nobody (the experiments that use them get them).
        "checkpointStorageConfig": _redact.redact_storage(ws.get("checkpoint_storage_config")),
        "defaultComputePool": ws.get("default_compute_pool") or "",
        "defaultAuxPool": ws.get("default_aux_pool") or "",
    }


def project_json(conn: sa.Connection, p: dict[str, Any]) -> dict[str, Any]:
    """``v1Project``."""
    stats = _projects.project_stats(conn, int(p["id"]))
    owner = _users.get_user(conn, int(p["user_id"]))
    ws = _projects.get_workspace(conn, int(p["workspace_id"]))
    return {
        "id": p["id"],
        "name": p["name"],
        "workspaceId": p["workspace_id"],
        "workspaceName": "" if ws is None else ws["name"],
        "description": p["description"],
        "lastExperimentStartedAt": _time.rfc3339(stats["last_started"]),
        "notes": list(p["notes"] or []),
        "numActiveExperiments": stats["num_active"],
        "numExperiments": stats["num_experiments"],
        "numRuns": stats["num_runs"],
        # A project of an archived workspace shows as archived (0.37).
        "archived": bool(p["archived"]) or bool(ws is not None and ws["archived"]),
        "username": "" if owner is None else owner["username"],
        "immutable": bool(p["immutable"]),
        "userId": p["user_id"],
        "state": "WORKSPACE_STATE_UNSPECIFIED",
        "errorMessage": "",
        "key": p["key"],
    }


def project_answer(conn: sa.Connection, project_id: int) -> dict[str, Any]:
    """``{project}``: what the project routes answer, the project as it is now."""
    return {"project": project_json(conn, _projects.require_project(conn, project_id))}


# --- checks -------------------------------------------------------------------------------


def _check_name(name: str | None, what: str) -> str:
    text = (name or "").strip()
    if not text:
        raise InvalidArgument(f"{what} name must not be empty")
    if len(text) > MAX_NAME:
        raise InvalidArgument(f"{what} name must be at most {MAX_NAME} characters")
    return text


def _check_changeable(caller: Principal, row: dict[str, Any], what: str, action: str) -> None:
    # Permission first, as 0.37: a user changing the default (admin's) one gets 403.
    caller.require_user()
    if not caller.info.admin and int(row["user_id"]) != caller.info.user_id:
        raise PermissionDenied(
            f"{what} {row['id']} is not yours: only its owner or an admin may {action} it"
        )
    if row["immutable"]:
        raise FailedPrecondition(f"the default {what} {row['name']!r} cannot be {action}")


def _check_project_changeable(
    conn: sa.Connection, caller: Principal, p: dict[str, Any], action: str
) -> None:
    # The project's owner, its workspace's owner, or an admin.
    ws = _projects.require_workspace(conn, int(p["workspace_id"]))
    if not p["immutable"] and int(ws["user_id"]) == caller.info.user_id:
        caller.require_user()
        return
    _check_changeable(caller, p, "project", action)


def _filtered(rows: list[dict[str, Any]], archived: bool | None, name: str | None) -> list[Any]:
    return [
        r
        for r in rows
        if (archived is None or bool(r["archived"]) == archived)
        and (not name or name.lower() == str(r["name"]).lower())
    ]


def _by_users(
    conn: sa.Connection, rows: list[dict[str, Any]], users: list[str], ids: list[int]
) -> list[dict[str, Any]]:
    if not users and not ids:
        return rows
    wanted = set(ids)
    for name in users:
        u = _users.get_user_by_name(conn, name)
        if u is not None:
            wanted.add(int(u["id"]))
    return [r for r in rows if int(r["user_id"]) in wanted]


def _collated(text: str) -> tuple[str, str]:
    """A sort key close to the en_US collation 0.37's Postgres sorts names with: letters and
    digits first, case and punctuation ignored (``_TestWS`` before ``Uncategorized``)."""
    return re.sub(r"[^0-9a-z]", "", text.lower()), text


def _sorted(rows: list[dict[str, Any]], sort_by: str, order_by: str) -> list[dict[str, Any]]:
    key = sort_by.upper().removeprefix("SORT_BY_")
    field = {"NAME": "name", "DESCRIPTION": "description", "CREATION_TIME": "created_at"}.get(
        key, "id"
    )
    out = sorted(
        rows, key=lambda r: _collated(str(r.get(field) or "")) if field != "id" else r["id"]
    )
    if order_by.upper().endswith("DESC"):
        out.reverse()
    return out


# --- workspaces ---------------------------------------------------------------------------


class PostWorkspace(_Body):
    # 0.37's SDK and CLI send null for what they were not given.
    name: str | None = None
    agent_user_group: dict[str, Any] | None = None
    checkpoint_storage_config: dict[str, Any] | None = None
    default_compute_pool: str | None = None
    default_aux_pool: str | None = None
    cluster_namespace_meta: dict[str, Any] | None = None
    cluster_quota_pairs: dict[str, Any] | None = None


class PatchWorkspace(_Body):
    name: str | None = None
    agent_user_group: dict[str, Any] | None = None
    checkpoint_storage_config: dict[str, Any] | None = None
    default_compute_resource_pool: str | None = None
    default_aux_resource_pool: str | None = None
    cluster_namespace_meta: dict[str, Any] | None = None


_AGENT_KEYS = {"agentUid": int, "agentGid": int, "agentUser": str, "agentGroup": str}


def _settings(
    request: Request,
    *,
    agent_user_group: dict[str, Any] | None,
    checkpoint_storage: dict[str, Any] | None,
    compute_pool: str | None,
    aux_pool: str | None,
    namespaces: dict[str, Any] | None,
) -> dict[str, Any]:
    """The workspace columns a create or patch sets (only what it was given), checked.

    Raises:
        InvalidArgument: a bad setting, a pool this master lacks, or Kubernetes namespaces.
    """
    if namespaces:
        raise InvalidArgument(
            "Kubernetes namespaces and quotas need the Kubernetes resource manager, which this "
            "master does not have; leave --namespace, --auto-create-namespace and "
            "--resource-quota out"
        )
    out: dict[str, Any] = {}
    if agent_user_group is not None:
        cleaned = {}
        for key, value in agent_user_group.items():
            kind = _AGENT_KEYS.get(key)
            if kind is None or (value is not None and not isinstance(value, kind)):
                raise InvalidArgument(
                    f"agentUserGroup.{key} = {value!r}: give agentUid and agentGid as integers, "
                    "agentUser and agentGroup as names"
                )
            if value is not None:
                cleaned[key] = value
        out["agent_user_group"] = cleaned or None
    if checkpoint_storage == {}:
        # 0.37: an empty storage config clears the workspace's (null in v1Workspace).
        out["checkpoint_storage_config"] = None
    elif checkpoint_storage is not None:
        try:
            experiment.parse_config(
                {
                    "entrypoint": "check",
                    "searcher": {"name": "single", "metric": "x", "max_length": 1},
                    "checkpoint_storage": checkpoint_storage,
                }
            )
        except InvalidArgument as e:
            raise InvalidArgument(f"checkpointStorageConfig: {e}") from e
        # As given: experiments lay their own checkpoint_storage over it, then get defaults.
        out["checkpoint_storage_config"] = checkpoint_storage
    for column, pool in (("default_compute_pool", compute_pool), ("default_aux_pool", aux_pool)):
        if pool is not None:
            out[column] = _known_pool(request, pool)
    return out


def _known_pool(request: Request, pool: str) -> str:
    """``pool`` if this master has it ("" for none)."""
    rm = services(request).rm
    if pool in ("", _jobs.POOL_NAME) or (rm is not None and rm.knows_pool(pool)):
        return pool
    raise InvalidArgument(
        f"resource pool {pool!r} does not exist; this master's one pool is {_jobs.POOL_NAME!r}"
    )


@router.get("/workspaces")
def list_workspaces(
    caller: Caller,
    store: StoreDep,
    offset: int = Query(0, ge=0),
    limit: Limit = 0,
    archived: bool | None = None,
    name: str | None = None,
    name_case_sensitive: str | None = Query(None, alias="nameCaseSensitive"),
    sort_by: str = Query("SORT_BY_ID", alias="sortBy"),
    order_by: str = Query("ORDER_BY_ASC", alias="orderBy"),
    users: list[str] = Query(default=[]),
    user_ids: list[int] = Query(default=[], alias="userIds"),
    pinned: bool | None = None,
) -> dict[str, Any]:
    """``{workspaces, pagination}``; ``name`` matches case-insensitively; ``pinned``: only
    those the caller pinned (or did not)."""
    caller.require_user()
    me = caller.info.user_id
    with store.read() as conn:
        rows = _filtered(_projects.list_workspaces(conn), archived, name)
        if pinned is not None:
            mine = _projects.pinned_ids(conn, me)
            rows = [r for r in rows if (int(r["id"]) in mine) == pinned]
        if name_case_sensitive:
            rows = [r for r in rows if r["name"] == name_case_sensitive]
        rows = _by_users(conn, rows, users, user_ids)
        chunk, pagination = _wire.page(_sorted(rows, sort_by, order_by), offset, limit)
        shown = [workspace_json(conn, w, me) for w in chunk]
        return {"workspaces": shown, "pagination": pagination}


@router.post("/workspaces")
def create_workspace(
    body: PostWorkspace, caller: Caller, store: StoreDep, request: Request
) -> dict[str, Any]:
    caller.require_user()
    name = _check_name(body.name, "workspace")
    settings = _settings(
        request,
        agent_user_group=body.agent_user_group,
        checkpoint_storage=body.checkpoint_storage_config,
        compute_pool=body.default_compute_pool,
        aux_pool=body.default_aux_pool,
        namespaces=body.cluster_namespace_meta or body.cluster_quota_pairs,
    )
    with store.tx() as conn:
        ws_id = _projects.insert_workspace(conn, name, caller.info.user_id)
        _projects.set_pinned(conn, ws_id, caller.info.user_id, True)  # as 0.37
        if settings:
            _projects.update_workspace(conn, ws_id, **settings)
        ws = workspace_json(conn, _projects.require_workspace(conn, ws_id), caller.info.user_id)
    # No Kubernetes namespaces here: 0.37's CLI iterates the (empty) bindings.
    return {"workspace": ws, "namespaceBindings": {}}


@router.get("/workspaces/{workspace_id}")
def get_workspace(workspace_id: int, caller: Caller, store: StoreDep) -> dict[str, Any]:
    caller.require_user()
    with store.read() as conn:
        ws = _projects.require_workspace(conn, workspace_id)
        return {"workspace": workspace_json(conn, ws, caller.info.user_id)}


@router.patch("/workspaces/{workspace_id}")
def patch_workspace(
    workspace_id: int, body: PatchWorkspace, caller: Caller, store: StoreDep, request: Request
) -> dict[str, Any]:
    settings = _settings(
        request,
        agent_user_group=body.agent_user_group,
        checkpoint_storage=body.checkpoint_storage_config,
        compute_pool=body.default_compute_resource_pool,
        aux_pool=body.default_aux_resource_pool,
        namespaces=body.cluster_namespace_meta,
    )
    with store.tx() as conn:
        ws = _projects.require_workspace(conn, workspace_id)
        if ws["immutable"]:  # before the permission check here, as 0.37 (400 for anyone)
            raise FailedPrecondition(f"the default workspace {ws['name']!r} cannot be edited")
        _check_changeable(caller, ws, "workspace", "edited")
        if ws["archived"]:  # as 0.37
            raise FailedPrecondition(
                f"workspace {ws['name']!r} is archived: unarchive it to edit it"
            )
        if body.name is not None:
            _projects.update_workspace(conn, workspace_id, name=_check_name(body.name, "workspace"))
        if settings:
            _projects.update_workspace(conn, workspace_id, **settings)
        ws = workspace_json(
            conn, _projects.require_workspace(conn, workspace_id), caller.info.user_id
        )
    return {"workspace": ws, "namespaceBindings": {}}


@router.delete("/workspaces/{workspace_id}")
def delete_workspace(
    workspace_id: int,
    caller: Caller,
    store: StoreDep,
    exps: ExperimentsDep,
    request: Request,
    rm: ResourceManagerDep = None,
) -> dict[str, Any]:
    """Deletes a workspace without models: its experiments (all ended; their checkpoints
    too), its projects and templates, and kills the commands, notebooks, shells, TensorBoards
    and generic tasks launched in it (0.37). Done when the answer comes (``completed``)."""
    with store.read() as conn:
        ws = _projects.require_workspace(conn, workspace_id)
        _check_changeable(caller, ws, "workspace", "deleted")
        n_models = _projects.models_in_workspace(conn, workspace_id)
        if n_models:
            raise FailedPrecondition(
                f"workspace {ws['name']!r} holds {n_models} model(s); move or delete them first "
                "(det model move, det model delete)"
            )
        exp_ids = [
            i
            for p in _projects.list_projects(conn, workspace_id)
            for i in _projects.project_experiment_ids(conn, int(p["id"]))
        ]
        _refuse_unended(conn, exp_ids, f"workspace {ws['name']!r}")
    _experiment_edits.delete_experiments(store, exps, rm, exp_ids)
    with store.tx() as conn:
        ws = _projects.require_workspace(conn, workspace_id)
        _, n_exps = _projects.workspace_counts(conn, workspace_id)
        if n_exps:  # one created meanwhile
            raise FailedPrecondition(
                f"workspace {ws['name']!r} got {n_exps} new experiment(s) while it was being "
                "deleted; delete it again"
            )
        for task_id in _task_rows.unended_in_workspace(conn, workspace_id):
            _task_rows.request_kill(conn, task_id)
        _projects.delete_workspace(conn, workspace_id)
    _ntsc.wake(request)
    return {"completed": True}


def _refuse_unended(conn: sa.Connection, exp_ids: list[int], where: str) -> None:
    """400 when an experiment in ``where`` has not ended: 0.37 deletes them as they are; here
    the one who deletes ends them first (their trials would be cut off mid-write)."""
    unended = [
        i
        for i in exp_ids
        if not experiment.State(_experiments.require_experiment(conn, i)["state"]).is_terminal
    ]
    if unended:
        raise FailedPrecondition(
            f"{where} still holds {len(unended)} experiment(s) that have not ended "
            f"({', '.join(map(str, unended))}); kill them (det e kill) or move them (det e "
            "move) first: ended experiments are deleted with it"
        )


@flag_routes(router, "/workspaces/{workspace_id}", ("archive_workspace", "unarchive_workspace"))
def _set_workspace_archived(store: Store, caller: Principal, workspace_id: int, to: bool) -> None:
    with store.tx() as conn:
        ws = _projects.require_workspace(conn, workspace_id)
        _check_changeable(caller, ws, "workspace", "archived" if to else "unarchived")
        if bool(ws["archived"]) == to:
            state = "archived" if to else "unarchived"
            raise FailedPrecondition(f"workspace ({workspace_id}) is already {state}")
        _projects.update_workspace(conn, workspace_id, archived=to)


@flag_routes(
    router,
    "/workspaces/{workspace_id}",
    ("pin_workspace", "unpin_workspace"),
    doc_on="Pins the workspace for the caller (``pinned: true`` in what they read).",
)
def _pin(store: Store, caller: Principal, workspace_id: int, pinned: bool) -> None:
    caller.require_user()
    with store.tx() as conn:
        _projects.require_workspace(conn, workspace_id)
        _projects.set_pinned(conn, workspace_id, caller.info.user_id, pinned)


# --- projects -----------------------------------------------------------------------------


class PostProject(_Body):
    name: str | None = None
    workspace_id: int | None = None
    description: str | None = None
    key: str | None = None


class PatchProject(_Body):
    name: str | None = None
    description: str | None = None
    key: str | None = None


class Note(_Body):
    name: str = ""
    contents: str = ""


class PutNotes(_Body):
    notes: list[Note] = Field(default_factory=list)
    project_id: int = 0


@router.get("/workspaces/{workspace_id}/projects")
def list_workspace_projects(
    workspace_id: int,
    caller: Caller,
    store: StoreDep,
    offset: int = Query(0, ge=0),
    limit: Limit = 0,
    archived: bool | None = None,
    name: str | None = None,
    sort_by: str = Query("SORT_BY_ID", alias="sortBy"),
    order_by: str = Query("ORDER_BY_ASC", alias="orderBy"),
    users: list[str] = Query(default=[]),
    user_ids: list[int] = Query(default=[], alias="userIds"),
) -> dict[str, Any]:
    """``{projects, pagination}``; workspace 0: the projects of every workspace."""
    caller.require_user()
    with store.read() as conn:
        if workspace_id:
            _projects.require_workspace(conn, workspace_id)
        rows = _filtered(_projects.list_projects(conn, workspace_id), archived, name)
        rows = _by_users(conn, rows, users, user_ids)
        chunk, pagination = _wire.page(_sorted(rows, sort_by, order_by), offset, limit)
        return {"projects": [project_json(conn, p) for p in chunk], "pagination": pagination}


@router.post("/workspaces/{workspace_id}/projects")
def create_project(
    workspace_id: int, body: PostProject, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    caller.require_user()
    if body.workspace_id and body.workspace_id != workspace_id:
        raise InvalidArgument(
            f"body workspaceId {body.workspace_id} does not match the path's {workspace_id}"
        )
    name = _check_name(body.name, "project")
    with store.tx() as conn:
        ws = _projects.require_workspace(conn, workspace_id)
        if ws["immutable"]:  # the default workspace: 0.37's words
            raise FailedPrecondition(
                f"workspace ({workspace_id}) is immutable and cannot add new projects; create "
                "a workspace for them (det workspace create)"
            )
        if ws["archived"]:
            raise FailedPrecondition(
                f"workspace {ws['name']!r} is archived: unarchive it to add projects"
            )
        project_id = _projects.insert_project(
            conn,
            name=name,
            workspace_id=workspace_id,
            user_id=caller.info.user_id,
            description=body.description or "",
            key=_check_key(body.key),
        )
        return project_answer(conn, project_id)


def _check_key(key: str | None) -> str | None:
    if not key:
        return None
    if len(key) > 5 or not key.isalnum():
        raise InvalidArgument(f"project key {key!r} must be 1 to 5 letters or digits")
    return key.upper()


get_route(router, "/projects/{project_id}", "get_project", project_answer, ("project_id", int))


@router.patch("/projects/{project_id}")
def patch_project(
    project_id: int, body: PatchProject, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    with store.tx() as conn:
        p = _projects.require_project(conn, project_id)
        if p["immutable"]:  # before the permission check here, as 0.37 (400 for anyone)
            raise FailedPrecondition(f"the default project {p['name']!r} cannot be edited")
        _check_project_changeable(conn, caller, p, "edited")
        if p["archived"]:  # as 0.37
            raise FailedPrecondition(f"project {p['name']!r} is archived: unarchive it to edit it")
        values: dict[str, Any] = {}
        if body.name is not None:
            values["name"] = _check_name(body.name, "project")
        if body.description is not None:
            values["description"] = body.description
        if body.key:
            values["key"] = _check_key(body.key)
        if values:
            _projects.update_project(conn, project_id, **values)
        return project_answer(conn, project_id)


@router.delete("/projects/{project_id}")
def delete_project(
    project_id: int,
    caller: Caller,
    store: StoreDep,
    exps: ExperimentsDep,
    rm: ResourceManagerDep = None,
) -> dict[str, Any]:
    """Deletes a project and its experiments (all ended; their checkpoints too), as 0.37."""
    with store.read() as conn:
        p = _projects.require_project(conn, project_id)
        _check_project_changeable(conn, caller, p, "deleted")
        exp_ids = _projects.project_experiment_ids(conn, project_id)
        _refuse_unended(conn, exp_ids, f"project {p['name']!r}")
    _experiment_edits.delete_experiments(store, exps, rm, exp_ids)
    with store.tx() as conn:
        p = _projects.require_project(conn, project_id)
        n = len(_projects.project_experiment_ids(conn, project_id))
        if n:  # one created meanwhile
            raise FailedPrecondition(
                f"project {p['name']!r} got {n} new experiment(s) while it was being deleted; "
                "delete it again"
            )
        _projects.delete_project(conn, project_id)
    return {"completed": True}


@flag_routes(router, "/projects/{project_id}", ("archive_project", "unarchive_project"))
def _set_project_archived(store: Store, caller: Principal, project_id: int, to: bool) -> None:
    with store.tx() as conn:
        p = _projects.require_project(conn, project_id)
        _check_project_changeable(conn, caller, p, "archived" if to else "unarchived")
        ws = _projects.require_workspace(conn, int(p["workspace_id"]))
        if ws["archived"]:
            raise FailedPrecondition(
                f"project ({project_id}) is in archived workspace {ws['name']!r}; unarchive "
                "the workspace first"
            )
        if bool(p["archived"]) == to:
            state = "archived" if to else "unarchived"
            raise FailedPrecondition(f"project ({project_id}) is already {state}")
        _projects.update_project(conn, project_id, archived=to)


class MoveProject(_Body):
    destination_workspace_id: int | None = None
    project_id: int | None = None


@router.post("/projects/{project_id}/move")
def move_project(
    project_id: int, body: MoveProject, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """0.37's ``MoveProject``: the project's owner or an admin moves a project (not the
    default one, not archived, not out of an archived workspace) into another workspace that
    is neither the default one nor archived and has no project of that name."""
    caller.require_user()
    if body.project_id and body.project_id != project_id:
        raise InvalidArgument(f"body projectId {body.project_id} does not match the path's")
    if not body.destination_workspace_id:
        raise InvalidArgument("give destinationWorkspaceId: the workspace to move the project to")
    with store.tx() as conn:
        p = _projects.require_project(conn, project_id)
        source = _projects.require_workspace(conn, int(p["workspace_id"]))
        to = _projects.require_workspace(conn, body.destination_workspace_id)
        if to["immutable"] or to["archived"]:
            state = "the default workspace" if to["immutable"] else "archived"
            raise FailedPrecondition(f"workspace ({to['id']}) is {state} and cannot take projects")
        if not caller.info.admin and int(p["user_id"]) != caller.info.user_id:
            raise PermissionDenied("non admin users can't move projects that someone else owns")
        if p["immutable"]:
            raise FailedPrecondition(f"the default project {p['name']!r} cannot be moved")
        if p["archived"] or source["archived"]:
            raise FailedPrecondition(
                f"project ({project_id}) is archived or in an archived workspace: unarchive "
                "it first"
            )
        if _projects.project_by_name(conn, int(to["id"]), str(p["name"])) is not None:
            raise Conflict(f"project with name {p['name']!r} already exists in target workspace")
        _projects.update_project(conn, project_id, workspace_id=int(to["id"]))
    return {}


@router.put("/projects/{project_id}/notes")
def put_project_notes(
    project_id: int, body: PutNotes, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """Replace the project's notes; answers ``{notes}``."""
    notes = [{"name": n.name, "contents": n.contents} for n in body.notes]
    with store.tx() as conn:
        p = _projects.require_project(conn, project_id)
        _check_project_changeable(conn, caller, p, "edited")
        _projects.update_project(conn, project_id, notes=notes)
    return {"notes": notes}


@router.post("/projects/{project_id}/notes")
def add_project_note(
    project_id: int, body: Note, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """0.37's ``AddProjectNote``: the note goes after the others; answers ``{notes}``."""
    with store.tx() as conn:
        p = _projects.require_project(conn, project_id)
        _check_project_changeable(conn, caller, p, "edited")
        notes = [*(p["notes"] or []), {"name": body.name, "contents": body.contents}]
        _projects.update_project(conn, project_id, notes=notes)
    return {"notes": notes}


@router.get("/projects/{project_id}/experiments")
def list_project_experiments(
    project_id: int,
    caller: Caller,
    store: StoreDep,
    offset: int = Query(0, ge=0),
    limit: Limit = 0,
) -> dict[str, Any]:
    """The project's experiments (``GET /api/v1/experiments?projectId=`` in 0.37's clients)."""
    caller.require_user()
    with store.read() as conn:
        _projects.require_project(conn, project_id)
        ids = _projects.project_experiment_ids(conn, project_id)
        chunk, pagination = _wire.page(ids, offset, limit)
        by_id = _experiments.experiments_by_id(conn, chunk)
        rows = [by_id[i] for i in chunk if i in by_id]
        return {"experiments": _wire.experiment_jsons(conn, rows), "pagination": pagination}


# --- moving experiments -------------------------------------------------------------------


class MoveExperiment(_Body):
    destination_project_id: int = 0
    experiment_id: int | None = None


class MoveExperiments(_bulk_experiments.BulkRequest):
    destination_project_id: int = 0


def move(experiment_id: int, destination: int, caller: Principal, store: Store) -> None:
    """Move one experiment (its owner or an admin) into ``destination``."""
    caller.check_owner(store, experiment_id, "move")
    with store.tx() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
        if exp["archived"]:  # 0.37's words, as the two below
            raise FailedPrecondition(
                f"experiment ({experiment_id}) is archived and cannot be moved; unarchive it first"
            )
        if _projects.require_project(conn, int(exp["project_id"]))["archived"]:
            raise FailedPrecondition(
                f"project ({exp['project_id']}) is archived and cannot have experiments moved "
                "from it; unarchive it first"
            )
        _projects.open_project(conn, destination)
        _experiments.update_experiment(conn, experiment_id, project_id=destination)


@router.post("/experiments/{experiment_id}/move")
def move_experiment(
    experiment_id: int, body: MoveExperiment, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    if body.experiment_id and body.experiment_id != experiment_id:
        raise InvalidArgument(
            f"body experimentId {body.experiment_id} does not match the path's {experiment_id}"
        )
    move(experiment_id, body.destination_project_id, caller, store)
    return {}


@router.post("/projects/{project_id}/experiments/move")
def move_experiments(
    project_id: int, body: MoveExperiments, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """Bulk move (by ``experimentIds`` or ``filters``), one result per experiment."""
    caller.require_user()
    with store.read() as conn:
        _projects.open_project(conn, body.destination_project_id)
    ids = _bulk_experiments.selected_ids(store, project_id, body, [])
    results = []
    for experiment_id in ids:
        try:
            move(experiment_id, body.destination_project_id, caller, store)
            results.append({"error": "", "id": experiment_id})
        except ApiError as e:
            results.append({"error": str(e), "id": experiment_id})
    return {"results": results}
