"""The model registry (0.37's ``/api/v1/models`` routes, ``v1Model``/``v1ModelVersion``):
models with unique names, each with numbered versions that point at checkpoints.

``{modelName}`` in a path is a model's name, or its id when it is a number (as 0.37 reads it;
so a model's name cannot be all digits). Any user registers versions of a model and reads the
registry; only a model's owner or an admin renames, moves, archives or deletes it; a version is
changed or deleted by its creator, the model's owner or an admin. A model's workspace only
files it (0.37's RBAC roles on workspaces are not implemented).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Query

from determined.master._errors import FailedPrecondition, InvalidArgument, PermissionDenied
from determined.master.api import _wire
from determined.master.api._auth import Caller, Principal
from determined.master.api._deps import Limit, StoreDep
from determined.master.api._models import _Body
from determined.master.api._object_routes import flag_routes, get_route
from determined.master.store import Store, _checkpoints, _models, _projects, _time, _users

router = APIRouter(prefix="/api/v1")

MAX_NAME = 255


# --- wire shapes --------------------------------------------------------------------------


def _username(conn: sa.Connection, user_id: int) -> str:
    user = _users.get_user(conn, user_id)
    return "" if user is None else str(user["username"])


def model_json(conn: sa.Connection, m: dict[str, Any]) -> dict[str, Any]:
    """``v1Model``."""
    return {
        "id": m["id"],
        "name": m["name"],
        "description": m["description"],
        "metadata": m["metadata"] or {},
        "labels": list(m["labels"] or []),
        "notes": m["notes"],
        "userId": m["user_id"],
        "username": _username(conn, int(m["user_id"])),
        "workspaceId": m["workspace_id"],
        "archived": bool(m["archived"]),
        "creationTime": _time.rfc3339(m["creation_time"]),
        "lastUpdatedTime": _time.rfc3339(m["last_updated_time"]),
        "numVersions": _models.count_versions(conn, int(m["id"])),
    }


def version_json(conn: sa.Connection, m: dict[str, Any], v: dict[str, Any]) -> dict[str, Any]:
    """``v1ModelVersion``: with its model and its checkpoint (config redacted)."""
    ckpt = _checkpoints.require(conn, v["checkpoint_uuid"])
    return {
        "id": v["id"],
        "version": v["version"],
        "model": model_json(conn, m),
        "checkpoint": _wire.checkpoint_json(conn, ckpt),
        "creationTime": _time.rfc3339(v["creation_time"]),
        "lastUpdatedTime": _time.rfc3339(v["last_updated_time"]),
        "name": v["name"],
        "comment": v["comment"],
        "notes": v["notes"],
        "metadata": v["metadata"] or {},
        "labels": list(v["labels"] or []),
        "userId": v["user_id"],
        "username": _username(conn, int(v["user_id"])),
    }


def _model_answer(conn: sa.Connection, identifier: int | str) -> dict[str, Any]:
    """``{model}``: what the model routes answer, the model as it is now."""
    return {"model": model_json(conn, _models.require_model(conn, identifier))}


# --- checks -------------------------------------------------------------------------------


def _check_name(name: str | None) -> str:
    text = (name or "").strip()
    if not text:
        raise InvalidArgument("model name must not be empty")
    if text.isdigit():
        raise InvalidArgument(
            f"model name {text!r} cannot be only digits: paths read a number as a model id"
        )
    if len(text) > MAX_NAME:
        raise InvalidArgument(f"model name must be at most {MAX_NAME} characters")
    return text


def _owned_model(
    conn: sa.Connection, caller: Principal, identifier: int | str, action: str
) -> dict[str, Any]:
    """The model, which the caller may ``action``: its owner or an admin."""
    m = _models.require_model(conn, identifier)
    caller.require_user()
    if not caller.info.admin and int(m["user_id"]) != caller.info.user_id:
        raise PermissionDenied(
            f"model {m['name']!r} is not yours: only its owner or an admin may {action} it"
        )
    return m


def _workspace_id(conn: sa.Connection, ws_id: int | None, ws_name: str | None) -> int | None:
    """The workspace named by id or name (None: neither given); it must not be archived."""
    if ws_name:
        ws = _projects.workspace_by_name(conn, ws_name)
        if ws is None:
            raise InvalidArgument(f"workspace {ws_name!r} not found")
    elif ws_id:
        ws = _projects.require_workspace(conn, ws_id)
    else:
        return None
    if ws["archived"]:
        raise FailedPrecondition(f"workspace {ws['name']!r} is archived: unarchive it first")
    return int(ws["id"])


def _labels(labels: list[str] | None) -> list[str] | None:
    # 0.37 keeps labels as a set: duplicates and empty ones are dropped, order kept.
    return None if labels is None else [x for x in dict.fromkeys(labels) if x]


# --- models -------------------------------------------------------------------------------


class PostModel(_Body):
    # 0.37's SDK sends null for what it was not given.
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None
    labels: list[str] | None = None
    notes: str | None = None
    workspace_id: int | None = None
    workspace_name: str | None = None


class PatchModel(PostModel):
    pass  # the same fields: those present change


class MoveModel(_Body):
    destination_workspace_id: int | None = None
    model_name: str | None = None


_MODEL_SORT = {
    "NAME": lambda r: str(r["name"]).lower(),
    "DESCRIPTION": lambda r: str(r["description"]).lower(),
    "CREATION_TIME": lambda r: r["creation_time"],
    "LAST_UPDATED_TIME": lambda r: r["last_updated_time"],
    "NUM_VERSIONS": lambda r: r["numVersions"],
    "WORKSPACE": lambda r: r["workspaceId"],
}


@router.get("/models")
def list_models(
    caller: Caller,
    store: StoreDep,
    offset: int = Query(0, ge=0),
    limit: Limit = 0,
    archived: bool | None = None,
    name: str | None = None,
    description: str | None = None,
    id: int | None = None,
    labels: list[str] = Query(default=[]),
    users: list[str] = Query(default=[]),
    user_ids: list[int] = Query(default=[], alias="userIds"),
    workspace_ids: list[int] = Query(default=[], alias="workspaceIds"),
    workspace_names: list[str] = Query(default=[], alias="workspaceNames"),
    sort_by: str = Query("SORT_BY_UNSPECIFIED", alias="sortBy"),
    order_by: str = Query("ORDER_BY_ASC", alias="orderBy"),
) -> dict[str, Any]:
    """``{models, pagination}``; ``name`` and ``description`` match parts, ``labels`` all."""
    caller.require_user()
    with store.read() as conn:
        wanted_ws = set(workspace_ids)
        for ws_name in workspace_names:
            ws = _projects.workspace_by_name(conn, ws_name)
            wanted_ws.add(-1 if ws is None else int(ws["id"]))
        wanted_users = set(user_ids)
        for username in users:
            u = _users.get_user_by_name(conn, username)
            wanted_users.add(-1 if u is None else int(u["id"]))
        rows = [
            m
            for m in _models.list_models(conn)
            if (archived is None or bool(m["archived"]) == archived)
            and (not name or name.lower() in str(m["name"]).lower())
            and (not description or description.lower() in str(m["description"]).lower())
            and (id is None or m["id"] == id)
            and set(labels) <= set(m["labels"] or [])
            and (not wanted_users or int(m["user_id"]) in wanted_users)
            and (not wanted_ws or int(m["workspace_id"]) in wanted_ws)
        ]
        for m in rows:
            m["numVersions"] = _models.count_versions(conn, int(m["id"]))
            m["workspaceId"] = m["workspace_id"]
        key = _MODEL_SORT.get(sort_by.upper().removeprefix("SORT_BY_"))
        if key is not None:
            rows.sort(key=key)
        if order_by.upper().endswith("DESC"):
            rows.reverse()
        chunk, pagination = _wire.page(rows, offset, limit)
        return {"models": [model_json(conn, m) for m in chunk], "pagination": pagination}


@router.post("/models")
def create_model(body: PostModel, caller: Caller, store: StoreDep) -> dict[str, Any]:
    caller.require_user()
    name = _check_name(body.name)
    with store.tx() as conn:
        ws_id = _workspace_id(conn, body.workspace_id, body.workspace_name)
        model_id = _models.insert_model(
            conn,
            name=name,
            user_id=caller.info.user_id,
            workspace_id=ws_id or _projects.DEFAULT_ID,
            description=body.description or "",
            metadata=body.metadata,
            labels=_labels(body.labels),
            notes=body.notes or "",
        )
        return _model_answer(conn, model_id)


@router.get("/model/labels")
def model_labels(caller: Caller, store: StoreDep) -> dict[str, Any]:
    caller.require_user()
    with store.read() as conn:
        return {"labels": _models.labels_in_use(conn)}


get_route(router, "/models/{model_name}", "get_model", _model_answer, ("model_name", str))


@router.patch("/models/{model_name}")
def patch_model(
    model_name: str, body: PatchModel, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """Change the fields present (``metadata`` and ``labels`` are replaced whole)."""
    with store.tx() as conn:
        m = _owned_model(conn, caller, model_name, "edit")
        values: dict[str, Any] = {}
        if body.name is not None and body.name != m["name"]:
            values["name"] = _check_name(body.name)
        for field in ("description", "notes", "metadata"):
            if getattr(body, field) is not None:
                values[field] = getattr(body, field)
        if body.labels is not None:
            values["labels"] = _labels(body.labels)
        ws_id = _workspace_id(conn, body.workspace_id, body.workspace_name)
        if ws_id is not None:
            values["workspace_id"] = ws_id
        if values:
            _models.update_model(conn, int(m["id"]), **values)
        return _model_answer(conn, int(m["id"]))


@router.delete("/models/{model_name}")
def delete_model(model_name: str, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """Remove the model and its versions; the checkpoints stay (and GC may collect them)."""
    with store.tx() as conn:
        m = _owned_model(conn, caller, model_name, "delete")
        _models.delete_model(conn, int(m["id"]))
    return {}


@flag_routes(router, "/models/{model_name}", ("archive_model", "unarchive_model"))
def _set_archived(store: Store, caller: Principal, model_name: str, to: bool) -> None:
    with store.tx() as conn:
        m = _owned_model(conn, caller, model_name, "archive" if to else "unarchive")
        _models.update_model(conn, int(m["id"]), archived=to)


@router.post("/models/{model_name}/move")
def move_model(model_name: str, body: MoveModel, caller: Caller, store: StoreDep) -> dict[str, Any]:
    with store.tx() as conn:
        m = _owned_model(conn, caller, model_name, "move")
        ws_id = _workspace_id(conn, body.destination_workspace_id or None, None)
        if ws_id is None:
            raise InvalidArgument("destinationWorkspaceId must name a workspace")
        _models.update_model(conn, int(m["id"]), workspace_id=ws_id)
    return {}


# --- versions -----------------------------------------------------------------------------


class PostModelVersion(_Body):
    checkpoint_uuid: str | None = None
    model_name: str | None = None
    name: str | None = None
    comment: str | None = None
    notes: str | None = None
    metadata: dict[str, Any] | None = None
    labels: list[str] | None = None


class PatchModelVersion(_Body):
    name: str | None = None
    comment: str | None = None
    notes: str | None = None
    metadata: dict[str, Any] | None = None
    labels: list[str] | None = None


@router.get("/models/{model_name}/versions")
def list_versions(
    model_name: str,
    caller: Caller,
    store: StoreDep,
    offset: int = Query(0, ge=0),
    limit: Limit = 0,
    sort_by: str = Query("SORT_BY_VERSION", alias="sortBy"),
    order_by: str = Query("ORDER_BY_ASC", alias="orderBy"),
) -> dict[str, Any]:
    """``{model, modelVersions, pagination}``, by version number (or creation time)."""
    caller.require_user()
    with store.read() as conn:
        m = _models.require_model(conn, model_name)
        rows = _models.versions_of(conn, int(m["id"]))
        if sort_by.upper().endswith("CREATION_TIME"):
            rows.sort(key=lambda v: (v["creation_time"], v["version"]))
        if order_by.upper().endswith("DESC"):
            rows.reverse()
        chunk, pagination = _wire.page(rows, offset, limit)
        return {
            "model": model_json(conn, m),
            "modelVersions": [version_json(conn, m, v) for v in chunk],
            "pagination": pagination,
        }


@router.post("/models/{model_name}/versions")
def register_version(
    model_name: str, body: PostModelVersion, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """Register a COMPLETED checkpoint as the model's next version."""
    caller.require_user()
    if not body.checkpoint_uuid:
        raise InvalidArgument("checkpointUuid must name the checkpoint to register")
    with store.tx() as conn:
        m = _models.require_model(conn, model_name)
        if m["archived"]:
            raise FailedPrecondition(
                f"model {m['name']!r} is archived and cannot take new versions; unarchive it"
            )
        ckpt = _checkpoints.require(conn, body.checkpoint_uuid)
        if ckpt["state"] != _checkpoints.COMPLETED:
            raise FailedPrecondition(
                f"checkpoint {body.checkpoint_uuid} is {ckpt['state']}: only a COMPLETED "
                "checkpoint can be registered"
            )
        number = _models.insert_version(
            conn,
            model_id=int(m["id"]),
            checkpoint_uuid=body.checkpoint_uuid,
            user_id=caller.info.user_id,
            name=body.name or "",
            comment=body.comment or "",
            notes=body.notes or "",
            metadata=body.metadata,
            labels=_labels(body.labels),
        )
        m = _models.require_model(conn, int(m["id"]))
        v = _models.require_version(conn, m, number)
        return {"modelVersion": version_json(conn, m, v)}


@router.get("/models/{model_name}/versions/{version}")
def get_version(model_name: str, version: int, caller: Caller, store: StoreDep) -> dict[str, Any]:
    caller.require_user()
    with store.read() as conn:
        m = _models.require_model(conn, model_name)
        return {"modelVersion": version_json(conn, m, _models.require_version(conn, m, version))}


def _check_version_owner(
    caller: Principal, m: dict[str, Any], v: dict[str, Any], action: str
) -> None:
    caller.require_user()
    if caller.info.admin or caller.info.user_id in (int(m["user_id"]), int(v["user_id"])):
        return
    raise PermissionDenied(
        f"version {v['version']} of model {m['name']!r} is not yours: only its creator, the "
        f"model's owner or an admin may {action} it"
    )


@router.patch("/models/{model_name}/versions/{version}")
def patch_version(
    model_name: str, version: int, body: PatchModelVersion, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    with store.tx() as conn:
        m = _models.require_model(conn, model_name)
        v = _models.require_version(conn, m, version)
        _check_version_owner(caller, m, v, "edit")
        values = {
            k: val for k, val in body.model_dump().items() if val is not None and k != "labels"
        }
        if body.labels is not None:
            values["labels"] = _labels(body.labels)
        if values:
            _models.update_version(conn, int(v["id"]), **values)
        v = _models.require_version(conn, m, version)
        return {"modelVersion": version_json(conn, m, v)}


@router.delete("/models/{model_name}/versions/{version}")
def delete_version(
    model_name: str, version: int, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """Remove the version; the checkpoint stays (and GC may collect it)."""
    with store.tx() as conn:
        m = _models.require_model(conn, model_name)
        v = _models.require_version(conn, m, version)
        _check_version_owner(caller, m, v, "delete")
        _models.delete_version(conn, int(v["id"]))
    return {}
