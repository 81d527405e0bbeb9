"""Role-based access control, as 0.37's open-source master serves it: every route exists and
answers 501 with the reference's own reason (roles, role assignments and the permissions
summary came with its Enterprise Edition). Clients that look roles up (``det rbac``, 0.37's
``det workspace list-members``) get that named error rather than a bare 404."""

from __future__ import annotations

from typing import Any, NoReturn

from fastapi import APIRouter, Body

from determined.master._errors import Unimplemented
from determined.master.api._auth import Caller

router = APIRouter(prefix="/api/v1")

# 0.37's rbacAPIServerStub message, word for word (its clients show it).
ENTERPRISE_ONLY = "Determined Enterprise Edition is required for this functionality"


def _refuse(caller: Caller) -> NoReturn:
    caller.require_user()
    raise Unimplemented(ENTERPRISE_ONLY)


@router.post("/roles/search")
@router.post("/roles/search/by-assignability")
@router.post("/roles/search/by-ids")
@router.post("/roles/add-assignments")
@router.post("/roles/remove-assignments")
def roles_post(caller: Caller, body: Any = Body(None)) -> dict[str, Any]:
    """ListRoles, SearchRolesAssignableToScope, GetRolesByID, AssignRoles, RemoveAssignments."""
    _refuse(caller)


@router.get("/roles/search/by-user/{user_id}")
@router.get("/roles/search/by-group/{group_id}")
@router.get("/roles/workspace/{workspace_id}")
@router.get("/permissions/summary")
def roles_get(caller: Caller) -> dict[str, Any]:
    """GetRolesAssignedToUser/Group, GetGroupsAndUsersAssignedToWorkspace,
    GetPermissionsSummary."""
    _refuse(caller)
