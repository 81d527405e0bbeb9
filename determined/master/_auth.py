"""Who is calling: user login tokens and per-allocation tokens, and what each may reach.

Tokens arrive as ``Authorization: Bearer <token>`` (users; the reference's trials too) or
``Grpc-Metadata-x-allocation-token: Bearer <token>`` (an allocation's token). An allocation's
token reaches only its own allocation, its trial, its task and its experiment's searcher state;
anything else answers 403.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import Depends, Request

from determined.master._errors import PermissionDenied, Unauthenticated
from determined.master._store import Store, _trials, _users

_HEADERS = ("authorization", "grpc-metadata-x-allocation-token", "x-allocation-token")


@dataclasses.dataclass(frozen=True)
class Principal:
    """The caller of one request."""

    token: str
    info: _users.TokenInfo
    allocation: dict[str, Any] | None = None  # for allocation tokens
    trial: dict[str, Any] | None = None

    @property
    def is_allocation(self) -> bool:
        return self.info.kind == "allocation"

    def check_trial(self, trial_id: int) -> None:
        if self.trial is not None and int(self.trial["id"]) != trial_id:
            raise PermissionDenied(
                f"this allocation's token belongs to trial {self.trial['id']}, not {trial_id}"
            )

    def check_allocation(self, allocation_id: str) -> None:
        if self.allocation is not None and self.allocation["id"] != allocation_id:
            raise PermissionDenied(
                f"this token belongs to allocation {self.allocation['id']}, not {allocation_id}"
            )

    def check_task(self, task_id: str) -> None:
        if self.allocation is not None and self.allocation["task_id"] != task_id:
            raise PermissionDenied(
                f"this token belongs to task {self.allocation['task_id']}, not {task_id}"
            )

    def check_experiment(self, experiment_id: int) -> None:
        if self.trial is not None and int(self.trial["experiment_id"]) != experiment_id:
            raise PermissionDenied(
                f"this allocation's token belongs to experiment {self.trial['experiment_id']}, "
                f"not {experiment_id}"
            )

    def require_user(self) -> None:
        if self.is_allocation:
            raise PermissionDenied("this endpoint needs a user's login token")


def _bearer(request: Request) -> str | None:
    for name in _HEADERS:
        value = request.headers.get(name)
        if value:
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    cookie = request.cookies.get("auth")
    return cookie or None


def authenticate(request: Request) -> Principal:
    """FastAPI dependency: the caller, or 401."""
    token = _bearer(request)
    if token is None:
        raise Unauthenticated(
            "no token: log in (POST /api/v1/auth/login) and send 'Authorization: Bearer <token>'"
        )
    store: Store = request.app.state.store
    with store.read() as conn:
        info = _users.lookup_token(conn, token)
        if info is None:
            raise Unauthenticated("invalid or expired token; log in again")
        if info.kind != "allocation" or info.allocation_id is None:
            return Principal(token=token, info=info)
        alloc = _trials.get_allocation(conn, info.allocation_id)
        trial = None if alloc is None else _trials.get_trial(conn, int(alloc["trial_id"]))
    if alloc is None or trial is None:
        raise Unauthenticated(f"allocation {info.allocation_id} of this token no longer exists")
    return Principal(token=token, info=info, allocation=alloc, trial=trial)


Caller = Annotated[Principal, Depends(authenticate)]
