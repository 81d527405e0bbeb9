"""Config templates (0.37's ``/api/v1/templates``): named configs that ``det e create
--template NAME`` lays under an experiment's config (the experiment's own fields win, mappings
merge key by key). Any user reads and creates them; their creator or an admin changes or
deletes one (0.37 without RBAC lets every user do both).

A template's secrets (checkpoint storage credentials, environment variable values) are shown
whole to those who may change it (its creator, an admin) and redacted to everyone else
(``_redact.shown``); a config sent back with the placeholder keeps the stored secret, and a new
template cannot hold the placeholder."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Body, Query

from determined.master import experiment
from determined.master._errors import Conflict, InvalidArgument, NotFound, PermissionDenied
from determined.master.api import _redact, _wire
from determined.master.api._auth import Caller, Principal
from determined.master.api._deps import Limit, StoreDep
from determined.master.api._models import _Body
from determined.master.store import _templates

router = APIRouter(prefix="/api/v1")

DEFAULT_WORKSPACE_ID = 1


class TemplateBody(_Body):
    """``v1Template``."""

    name: str = ""
    config: Any = None
    workspace_id: int = 0


class RenameTemplate(_Body):
    old_name: str
    new_name: str


def template_json(row: dict[str, Any], caller: Principal) -> dict[str, Any]:
    return {
        "name": row["name"],
        "config": _redact.shown(row["config"], caller.owns(row["created_by"])),
        "workspaceId": row["workspace_id"],
    }


def _config(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgument("a template's config must be a mapping of experiment config fields")
    experiment.check_size(value, "template config")
    return value


def _require(conn: sa.Connection, name: str) -> dict[str, Any]:
    row = _templates.get(conn, name)
    if row is None:
        raise NotFound(f"template {name!r} not found; det template list shows the templates")
    return row


def _check_creator(caller: Caller, row: dict[str, Any], action: str) -> None:
    if not caller.info.admin and row["created_by"] != caller.info.user_id:
        raise PermissionDenied(
            f"template {row['name']!r} is not yours: only its creator or an admin may {action} it"
        )


def apply_template(conn: sa.Connection, name: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` laid over the template ``name`` (400 when there is no such template)."""
    row = _templates.get(conn, name)
    if row is None:
        raise InvalidArgument(f"template {name!r} not found; det template list shows the templates")
    return experiment.merge_configs(row["config"], config)


@router.get("/templates")
def list_templates(
    caller: Caller,
    store: StoreDep,
    name: str = "",
    offset: int = Query(0, ge=0),
    limit: Limit = 0,
    order_by: str = Query("ORDER_BY_UNSPECIFIED", alias="orderBy"),
    workspace_ids: list[int] = Query(default=[], alias="workspaceIds"),
) -> dict[str, Any]:
    """``{templates, pagination}`` by name; ``name`` is a case-insensitive substring."""
    caller.require_user()
    with store.read() as conn:
        rows = _templates.list_all(conn)
    rows = [r for r in rows if name.lower() in r["name"].lower()]
    rows = [r for r in rows if not workspace_ids or r["workspace_id"] in workspace_ids]
    if order_by == "ORDER_BY_DESC":
        rows.reverse()
    chunk, pagination = _wire.page([template_json(r, caller) for r in rows], offset, limit)
    return {"templates": chunk, "pagination": pagination}


@router.get("/templates/{template_name}")
def get_template(template_name: str, caller: Caller, store: StoreDep) -> dict[str, Any]:
    caller.require_user()
    with store.read() as conn:
        return {"template": template_json(_require(conn, template_name), caller)}


@router.post("/templates/{template_name}")
def post_template(
    template_name: str, body: TemplateBody, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    caller.require_user()
    name = body.name or template_name
    if not name.strip():
        raise InvalidArgument("a template needs a name")
    config = _config(body.config)
    workspace_id = body.workspace_id or DEFAULT_WORKSPACE_ID

    config = _redact.restore(config, None)

    def insert(conn: sa.Connection) -> dict[str, Any] | None:
        created = _templates.insert(
            conn, name=name, config=config, workspace_id=workspace_id, user_id=caller.info.user_id
        )
        return _templates.get(conn, name) if created else None

    row = store.write(insert)
    if row is None:
        raise Conflict(
            f"template {name!r} exists already; det template set-value config changes it"
        )
    return {"template": template_json(row, caller)}


@router.put("/templates/{template_name}")
def put_template(
    template_name: str, body: TemplateBody, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """Create or replace the template's config; 0.37 refuses a workspace here."""
    caller.require_user()
    if body.workspace_id:
        raise InvalidArgument("setting workspace_id is not supported when putting a template")
    name = body.name or template_name
    config = _config(body.config)

    def upsert(conn: sa.Connection) -> dict[str, Any]:
        row = _templates.get(conn, name)
        if row is None:
            _templates.insert(
                conn,
                name=name,
                config=_redact.restore(config, None),
                workspace_id=DEFAULT_WORKSPACE_ID,
                user_id=caller.info.user_id,
            )
        else:
            _check_creator(caller, row, "change")
            _templates.set_config(conn, name, _redact.restore(config, row["config"]))
        return _require(conn, name)

    return {"template": template_json(store.write(upsert), caller)}


@router.patch("/templates/{template_name}")
def patch_template_config(
    template_name: str, caller: Caller, store: StoreDep, config: Any = Body(...)
) -> dict[str, Any]:
    """The body is the new config itself, as 0.37's ``PatchTemplateConfig``."""
    caller.require_user()
    checked = _config(config)

    def update(conn: sa.Connection) -> dict[str, Any]:
        row = _require(conn, template_name)
        _check_creator(caller, row, "change")
        _templates.set_config(conn, template_name, _redact.restore(checked, row["config"]))
        return _require(conn, template_name)

    return {"template": template_json(store.write(update), caller)}


@router.patch("/template/rename")
def rename_template(body: RenameTemplate, caller: Caller, store: StoreDep) -> dict[str, Any]:
    caller.require_user()
    if not body.new_name.strip():
        raise InvalidArgument("newName must not be empty")

    def rename(conn: sa.Connection) -> dict[str, Any]:
        _check_creator(caller, _require(conn, body.old_name), "rename")
        if body.new_name != body.old_name and _templates.get(conn, body.new_name) is not None:
            raise Conflict(f"template {body.new_name!r} exists already")
        _templates.rename(conn, body.old_name, body.new_name)
        return _require(conn, body.new_name)

    return {"template": template_json(store.write(rename), caller)}


@router.delete("/templates/{template_name}")
def delete_template(template_name: str, caller: Caller, store: StoreDep) -> dict[str, Any]:
    caller.require_user()

    def delete(conn: sa.Connection) -> None:
        _check_creator(caller, _require(conn, template_name), "delete")
        _templates.delete(conn, template_name)

    store.write(delete)
    return {}
