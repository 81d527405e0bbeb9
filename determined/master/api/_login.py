"""Cluster info and user sessions: ``/info``, ``/api/v1/master``, login, logout, me."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from determined._version import REFERENCE_VERSION, __version__
from determined.master._errors import PermissionDenied, Unauthenticated, Unimplemented
from determined.master.api._auth import Caller
from determined.master.api._deps import Limit, StoreDep
from determined.master.api._models import LoginRequest
from determined.master.api._responses import InfoAnswer, MasterAnswer, MeAnswer
from determined.master.api._services import services
from determined.master.store import _cluster_messages, _users

router = APIRouter()


def master_info(request: Request) -> dict[str, Any]:
    """``GetMasterResponse``."""
    state = services(request)
    with state.store.read() as conn:
        message = _cluster_messages.current(conn, started=True)
    body: dict[str, Any] = {
        # 0.37 clients warn on every command when the master's version differs from theirs
        # (PEP 440: even 0.37.0+local sorts above 0.37.0), so this is the API's version.
        "version": REFERENCE_VERSION,
        "redeterminedVersion": __version__,
        "masterId": state.master_id,
        "clusterId": state.store.cluster_id,
        "clusterName": state.cluster_name,
        "telemetryEnabled": False,
        "ssoProviders": [],
        "externalLoginUri": "",
        "externalLogoutUri": "",
        "branding": "determined",
        "rbacEnabled": False,
        "strictJobQueueControl": False,
        "hasCustomLogo": False,
        "product": "PRODUCT_UNSPECIFIED",
        "userManagementEnabled": True,
        "featureSwitches": [],
        # Ours: the sandbox of trial and task processes (docs/security.md).
        "taskIsolation": state.sandbox.describe(),
    }
    if message is not None:  # optional in the reference: absent when there is none
        body["clusterMessage"] = _cluster_messages.message_json(message)
    return body


@router.get("/info")
def info(request: Request) -> InfoAnswer:
    """``GetMasterResponse``, plus the snake_case keys of the reference's ``/info``."""
    body = master_info(request)
    body.update(
        cluster_id=body["clusterId"], master_id=body["masterId"], cluster_name=body["clusterName"]
    )
    return body


@router.get("/api/v1/master")
def get_master(request: Request) -> MasterAnswer:
    return master_info(request)


@router.get("/api/v1/master/config")
def get_master_config(request: Request, caller: Caller) -> dict[str, Any]:
    """``GetMasterConfigResponse``: the effective options (database password redacted);
    admins only, as in 0.37."""
    caller.require_user()
    if not caller.info.admin:
        raise PermissionDenied("only admins may view the master config")
    return {"config": services(request).master_config}


@router.patch("/api/v1/master/config")
def patch_master_config(caller: Caller) -> dict[str, Any]:
    """0.37 changes ``log.level``/``log.color`` of a running master; not here yet."""
    caller.require_user()
    raise Unimplemented(
        "changing the master config at runtime (det master config set) is not supported yet; "
        "restart the master with --log-level instead"
    )


@router.get("/api/v1/master/logs")
def master_logs(
    request: Request,
    caller: Caller,
    follow: bool = False,
    offset: int = 0,
    limit: Limit = 0,
) -> StreamingResponse:
    """NDJSON ``{"result": {"logEntry": v1LogEntry}}`` of the master's own log (admins only, as
    in 0.37): from the start, or the last ``-offset`` lines when ``offset`` is negative;
    ``follow`` keeps streaming new lines until the client goes away."""
    caller.require_user()
    if not caller.info.admin:
        raise PermissionDenied("only admins may read the master's logs")
    log = services(request).master_log
    if log is None:
        raise Unimplemented("this master keeps no log of its own (it runs embedded)")
    entries = log.since(0)
    if offset:  # negative: the last -offset lines; positive: skip that many
        entries = entries[offset:]
    if limit:
        entries = entries[:limit]

    def lines() -> Iterator[bytes]:
        last = entries[-1]["id"] if entries else (log.since(0) or [{"id": 0}])[-1]["id"]
        for entry in entries:
            yield (json.dumps({"result": {"logEntry": entry}}) + "\n").encode()
        while follow:
            log.wait(last, 1.0)
            for entry in log.since(last):
                last = entry["id"]
                yield (json.dumps({"result": {"logEntry": entry}}) + "\n").encode()

    return StreamingResponse(lines(), media_type="application/json")


@router.post("/api/v1/auth/login")
def login(body: LoginRequest, store: StoreDep) -> dict[str, Any]:
    """``{token, user}`` for a right username and password (hashed by the client or not)."""
    with store.tx() as conn:
        user = _users.check_password(conn, body.username, body.password, is_hashed=body.is_hashed)
        if user is None:
            raise Unauthenticated("invalid credentials: unknown user or wrong password")
        if not user["active"]:
            # 403 as 0.37 (ErrNotActive), checked after the password so it reveals nothing.
            raise PermissionDenied("user is not active")
        token = _users.issue_token(conn, int(user["id"]))
    # csrfToken: what a client that authenticates by the ``auth`` cookie sends as X-CSRF-Token.
    return {"token": token, "user": _users.user_json(user), "csrfToken": _users.csrf_token(token)}


@router.post("/api/v1/auth/logout")
def logout(caller: Caller, store: StoreDep) -> dict[str, Any]:
    caller.require_user()
    with store.tx() as conn:
        _users.revoke_token(conn, caller.token)
    return {}


@router.get("/api/v1/me")
def me(caller: Caller, store: StoreDep) -> MeAnswer:
    with store.read() as conn:
        user = _users.require_user(conn, caller.info.user_id)
    return {"user": _users.user_json(user)}
