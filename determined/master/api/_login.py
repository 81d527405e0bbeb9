"""Cluster info and user sessions: ``/info``, ``/api/v1/master``, login, logout, me."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from determined._version import REFERENCE_VERSION, __version__
from determined.master._errors import Unauthenticated
from determined.master.api._auth import Caller
from determined.master.api._deps import StoreDep
from determined.master.api._models import LoginRequest
from determined.master.store import _cluster_messages, _users

router = APIRouter()


def master_info(request: Request) -> dict[str, Any]:
    """``GetMasterResponse``."""
    state = request.app.state
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
    }
    if message is not None:  # optional in the reference: absent when there is none
        body["clusterMessage"] = _cluster_messages.message_json(message)
    return body


@router.get("/info")
def info(request: Request) -> dict[str, Any]:
    """``GetMasterResponse``, plus the snake_case keys of the reference's ``/info``."""
    body = master_info(request)
    body.update(
        cluster_id=body["clusterId"], master_id=body["masterId"], cluster_name=body["clusterName"]
    )
    return body


@router.get("/api/v1/master")
def get_master(request: Request) -> dict[str, Any]:
    return master_info(request)


@router.post("/api/v1/auth/login")
def login(body: LoginRequest, store: StoreDep) -> dict[str, Any]:
    """``{token, user}`` for a right username and password (hashed by the client or not)."""
    with store.tx() as conn:
        user = _users.check_password(conn, body.username, body.password, is_hashed=body.is_hashed)
        if user is None:
            raise Unauthenticated("invalid credentials: unknown user or wrong password")
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
def me(caller: Caller, store: StoreDep) -> dict[str, Any]:
    with store.read() as conn:
        user = _users.require_user(conn, caller.info.user_id)
    return {"user": _users.user_json(user)}
