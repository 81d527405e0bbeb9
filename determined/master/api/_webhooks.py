"""Webhooks as 0.37 serves them: ``GET/POST /api/v1/webhooks``, ``DELETE`` and ``PATCH``
(its URL) ``/api/v1/webhooks/{id}``, ``POST /api/v1/webhooks/{id}/test``. Changing webhooks
needs an admin, as 0.37's basic authorization does; listing them a user login."""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

import requests
from fastapi import APIRouter
from pydantic import Field

from determined.master._errors import InvalidArgument, NotFound
from determined.master.api import _redact
from determined.master.api._auth import Caller
from determined.master.api._deps import StoreDep, WebhooksDep
from determined.master.api._models import _Body
from determined.master.store import _projects, _webhooks
from determined.master.store._enums import State
from determined.master.webhooks import metric_threshold, post, test_body

router = APIRouter(prefix="/api/v1")

TRIGGER_TYPES = ("EXPERIMENT_STATE_CHANGE", "METRIC_THRESHOLD_EXCEEDED", "TASK_LOG", "CUSTOM")
WEBHOOK_TYPES = ("DEFAULT", "SLACK")
MODES = ("WORKSPACE", "SPECIFIC")
MAX_TRIGGERS = 100


class TriggerBody(_Body):
    trigger_type: str = "TRIGGER_TYPE_UNSPECIFIED"
    condition: dict[str, Any] = Field(default_factory=dict)


class WebhookBody(_Body):
    """``v1Webhook`` as a create request carries it."""

    url: str = ""
    name: str = ""
    triggers: list[TriggerBody] = Field(default_factory=list)
    webhook_type: str = "WEBHOOK_TYPE_DEFAULT"
    mode: str = "WEBHOOK_MODE_WORKSPACE"
    workspace_id: int | None = None


class PatchWebhookBody(_Body):
    url: str = ""


def _enum(value: str, prefix: str, allowed: tuple[str, ...], what: str) -> str:
    name = value.removeprefix(prefix)
    if name not in allowed:
        shown = ", ".join(prefix + a for a in allowed)
        raise InvalidArgument(f"{what} {value!r} is not one of {shown}")
    return name


def _check_url(url: str) -> str:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InvalidArgument(f"valid url required: {url!r} is not an http(s) URL")
    return url


def _terminal_or_known_states() -> set[str]:
    return {s.value.removeprefix("STATE_") for s in State}


def _trigger(t: TriggerBody, mode: str) -> tuple[str, dict[str, Any]]:
    kind = _enum(t.trigger_type, "TRIGGER_TYPE_", TRIGGER_TYPES, "triggerType")
    condition = dict(t.condition)
    if kind == "EXPERIMENT_STATE_CHANGE":
        state = str(condition.get("state", "")).removeprefix("STATE_")
        if state not in _terminal_or_known_states():
            raise InvalidArgument(
                f"an EXPERIMENT_STATE_CHANGE trigger needs condition.state, one of "
                f"{', '.join(sorted(_terminal_or_known_states()))}; got {t.condition}"
            )
        condition = {"state": state}
    elif kind == "TASK_LOG":
        if set(condition) != {"regex"} or not isinstance(condition["regex"], str):
            raise InvalidArgument(
                f"webhook task log condition must have the one key 'regex', a string; got "
                f"{t.condition}"
            )
        try:
            re.compile(condition["regex"])
        except re.error as e:
            raise InvalidArgument(f"condition.regex {condition['regex']!r} is invalid: {e}") from e
    elif kind == "CUSTOM" and mode != "SPECIFIC":
        raise InvalidArgument(
            "custom trigger only works on webhook with mode 'SPECIFIC' (WEBHOOK_MODE_SPECIFIC)"
        )
    elif kind == "METRIC_THRESHOLD_EXCEEDED" and metric_threshold(condition) is None:
        raise InvalidArgument(
            "a metric threshold condition is {metricName: <metric>, metricValue: <number>}; "
            f"got {t.condition}"
        )
    return kind, condition


def webhook_json(row: dict[str, Any], *, admin: bool = True) -> dict[str, Any]:
    """``v1Webhook``; for a non-admin the URL (which often carries a token) is only its scheme
    and host, the rest the redaction placeholder."""
    url = str(row["url"])
    if not admin:
        parsed = urllib.parse.urlparse(url)
        url = f"{parsed.scheme}://{parsed.hostname or ''}/{_redact.PLACEHOLDER}"
    return {
        "id": row["id"],
        "url": url,
        "triggers": [
            {
                "id": t["id"],
                "triggerType": "TRIGGER_TYPE_" + t["trigger_type"],
                "condition": t["condition"],
                "webhookId": t["webhook_id"],
            }
            for t in row["triggers"]
        ],
        "webhookType": "WEBHOOK_TYPE_" + row["webhook_type"],
        "name": row["name"],
        "workspaceId": row["workspace_id"] or 0,
        "mode": "WEBHOOK_MODE_" + row["mode"],
    }


def _own_workspaces(conn: Any, caller: Any) -> set[int]:
    """The workspaces ``caller`` created (0.37: their webhooks are theirs to see and edit)."""
    return {
        int(w["id"])
        for w in _projects.list_workspaces(conn)
        if int(w["user_id"]) == caller.info.user_id
    }


def _require_editor(conn: Any, caller: Any, workspace_id: int | None) -> None:
    """As 0.37: an admin edits every webhook; a workspace's creator those of that workspace;
    cluster-wide webhooks (no workspace) are the admins'."""
    caller.require_user()
    if caller.info.admin:
        return
    if workspace_id:
        _projects.require_workspace(conn, workspace_id)
        if workspace_id in _own_workspaces(conn, caller):
            return
    # 0.37's open-source master answers this with a plain error, not PermissionDenied, and its
    # e2e suite pins that (a 403 is a ForbiddenException there, not an APIException): a 400.
    raise InvalidArgument(
        "non admin users can't edit global webhooks: only an admin, or the creator of the "
        "webhook's workspace, may create, change, test or delete it"
    )


@router.get("/webhooks")
def list_webhooks(caller: Caller, store: StoreDep) -> dict[str, Any]:
    """As 0.37: an admin sees every webhook; another user the cluster-wide ones and those of
    the workspaces they created (the URLs of the cluster-wide ones shortened: they often hold a
    token)."""
    caller.require_user()
    with store.read() as conn:
        rows = _webhooks.list_webhooks(conn)
        own = set() if caller.info.admin else _own_workspaces(conn, caller)
    if caller.info.admin:
        return {"webhooks": [webhook_json(w) for w in rows]}
    shown = [w for w in rows if not w["workspace_id"] or int(w["workspace_id"]) in own]
    return {"webhooks": [webhook_json(w, admin=bool(w["workspace_id"])) for w in shown]}


@router.post("/webhooks")
def create_webhook(
    body: WebhookBody, caller: Caller, store: StoreDep, hooks: WebhooksDep
) -> dict[str, Any]:
    with store.read() as conn:
        _require_editor(conn, caller, body.workspace_id or None)
    if not body.triggers:
        raise InvalidArgument("at least one trigger required")
    if len(body.triggers) > MAX_TRIGGERS:
        raise InvalidArgument(f"at most {MAX_TRIGGERS} triggers per webhook")
    url = _check_url(body.url)
    webhook_type = _enum(body.webhook_type, "WEBHOOK_TYPE_", WEBHOOK_TYPES, "webhookType")
    mode = _enum(body.mode, "WEBHOOK_MODE_", MODES, "mode")
    triggers = [_trigger(t, mode) for t in body.triggers]
    # As 0.37 (a unique index on name and workspace, where no workspace never clashes): a name is
    # unique within its workspace; cluster-wide webhooks may share one, the empty name included
    # (0.37's own client sends "").
    name = body.name.strip()
    with store.tx() as conn:
        same = [
            w
            for w in _webhooks.list_webhooks(conn)
            if body.workspace_id and w["name"] == name and w["workspace_id"] == body.workspace_id
        ]
        if same:
            raise InvalidArgument(f"a webhook named {name!r} exists already (id {same[0]['id']})")
        webhook_id = _webhooks.insert_webhook(
            conn,
            name=name,
            url=url,
            webhook_type=webhook_type,
            mode=mode,
            workspace_id=body.workspace_id or None,
            triggers=triggers,
        )
        created = _webhooks.get_webhook(conn, webhook_id)
    assert created is not None
    hooks.triggers_changed()
    return {"webhook": webhook_json(created)}


def _require_webhook(conn: Any, webhook_id: int) -> dict[str, Any]:
    row = _webhooks.get_webhook(conn, webhook_id)
    if row is None:
        raise NotFound(f"webhook {webhook_id} not found")
    return row


@router.delete("/webhooks/{webhook_id}")
def delete_webhook(
    webhook_id: int, caller: Caller, store: StoreDep, hooks: WebhooksDep
) -> dict[str, Any]:
    with store.tx() as conn:
        row = _require_webhook(conn, webhook_id)
        _require_editor(conn, caller, row["workspace_id"])
        _webhooks.delete_webhook(conn, webhook_id)
    hooks.triggers_changed()
    return {}


@router.patch("/webhooks/{webhook_id}")
def patch_webhook(
    webhook_id: int, body: PatchWebhookBody, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    url = _check_url(body.url)
    with store.tx() as conn:
        row = _require_webhook(conn, webhook_id)
        _require_editor(conn, caller, row["workspace_id"])
        _webhooks.set_url(conn, webhook_id, url)
    return {}


@router.post("/webhooks/{webhook_id}/test")
def test_webhook(
    webhook_id: int, caller: Caller, store: StoreDep, hooks: WebhooksDep
) -> dict[str, Any]:
    """Send a test event now (not through the outbox); ``completed``: the receiver answered
    2xx."""
    with store.read() as conn:
        row = _require_webhook(conn, webhook_id)
        _require_editor(conn, caller, row["workspace_id"])
    try:
        answer = post(row["url"], json.dumps(test_body(row)), hooks.signing_key)
    except requests.RequestException:
        return {"completed": False}
    return {"completed": answer.ok}
