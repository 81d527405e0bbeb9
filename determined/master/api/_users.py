"""Users, as 0.37's REST wire has them: list (filters, sorting, paging), get by id or name,
create, patch (active, admin, display name, username, password), set a password, and the web
UI's per-user settings (an empty list: nothing is stored).

Who may do what: anyone logged in lists and reads users; an admin creates users and changes
anything of anyone; a user changes only their own display name and password. Allocation
tokens (trials) reach none of these. Passwords arrive client-hashed (``isHashed: true``, what
0.37's clients send) or in clear text, which the master hashes the same way first.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Body, Query

from determined.master._errors import InvalidArgument, NotFound, PermissionDenied
from determined.master.api._auth import Caller, Principal
from determined.master.api._deps import Limit, StoreDep
from determined.master.api._responses import UsersAnswer
from determined.master.api._wire import page
from determined.master.resources import _identity
from determined.master.store import _users

router = APIRouter(prefix="/api/v1")

_USERNAME = re.compile(r"[^\s/]{1,255}")
# Go's [[:graph:]\s]: printable ASCII and ASCII whitespace (0.37's display-name filter).
_PRINTABLE_ASCII = re.compile(r"[\x21-\x7e\t\n\f\r ]*")
# v1GetUsersRequestSortBy: the row key each sorts on.
_SORT_KEYS = {
    "SORT_BY_UNSPECIFIED": "id",
    "SORT_BY_DISPLAY_NAME": "display_name",
    "SORT_BY_USER_NAME": "username",
    "SORT_BY_ADMIN": "admin",
    "SORT_BY_ACTIVE": "active",
    "SORT_BY_MODIFIED_TIME": "modified_at",
    "SORT_BY_NAME": "name",
    "SORT_BY_LAST_AUTH_TIME": "id",  # not recorded here: by id
    "SORT_BY_REMOTE": "id",  # no remote users here: by id
}


def _check_username(name: Any) -> str:
    if not isinstance(name, str) or not _USERNAME.fullmatch(name):
        raise InvalidArgument(
            f"username {name!r} is not valid: 1 to 255 characters, no spaces and no '/'"
        )
    return name


def _display_name(
    conn: Any, name: Any, *, admin: bool, username: str | None, user_id: int | None
) -> str | None:
    """A display name as 0.37 clears it: trimmed, printable ASCII only, not "admin" for a
    user who is not an admin, not "determined" for anyone but that user, and no other user's
    username or display name (case ignored). An empty one clears it (None)."""
    if not isinstance(name, str) or len(name) > 255:
        raise InvalidArgument("displayName must be a string of at most 255 characters")
    name = name.strip()
    if not _PRINTABLE_ASCII.fullmatch(name):
        raise InvalidArgument("Display name and username cannot contain non-ASCII characters.")
    if not name:
        return None
    if name.lower() == "admin" and not admin:
        raise InvalidArgument("Non-admin user cannot be renamed 'admin'")
    if name.lower() == "determined" and username != "determined":
        raise InvalidArgument("User cannot be renamed 'determined'")
    if _users.name_in_use(conn, name, except_id=user_id):
        raise InvalidArgument(
            f"can not change display name to {name} found a similar username or display name"
        )
    return name


def _password(body: dict[str, Any]) -> str:
    """The client-hashed password of a request body with ``password`` and ``isHashed``."""
    password = body.get("password")
    if password is None:
        password = ""
    if not isinstance(password, str):
        raise InvalidArgument("password must be a string")
    return password if body.get("isHashed") else _users.client_hash(password)


def _flag(body: dict[str, Any], key: str) -> bool | None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise InvalidArgument(f"{key} must be true or false, not {value!r}")
    return value


@router.get("/users/setting")
def get_settings(caller: Caller) -> dict[str, Any]:
    """``GetUserSettingResponse``: no settings are kept; the web UI keeps its own."""
    caller.require_user()
    return {"settings": []}


@router.post("/users/setting")
def post_settings(caller: Caller, body: Any = Body(None)) -> dict[str, Any]:
    """Accepted and dropped: settings are not kept (see ``get_settings``)."""
    caller.require_user()
    return {}


@router.get("/users")
def list_users(
    caller: Caller,
    store: StoreDep,
    name: str | None = None,
    active: bool | None = None,
    admin: bool | None = None,
    offset: int = 0,
    limit: Limit = 0,
    sort_by: str = Query("SORT_BY_UNSPECIFIED", alias="sortBy"),
    order_by: str = Query("ORDER_BY_UNSPECIFIED", alias="orderBy"),
) -> UsersAnswer:
    """``GetUsersResponse``: ``{users, pagination}``; a negative offset counts from the end."""
    caller.require_user()
    key = _SORT_KEYS.get(sort_by)
    if key is None:
        raise InvalidArgument(f"unknown sortBy {sort_by!r}; known: {', '.join(_SORT_KEYS)}")
    with store.read() as conn:
        rows = _users.list_users(conn, name=name, active=active, admin=admin)

    def sort_key(row: dict[str, Any]) -> Any:
        if key == "name":
            return (row["display_name"] or row["username"]).lower()
        if key == "display_name":
            return (row["display_name"] or "").lower()
        return row[key]

    rows.sort(key=sort_key, reverse=order_by == "ORDER_BY_DESC")
    if offset < 0:
        offset = max(0, len(rows) + offset)
    chunk, pagination = page(rows, offset, limit)
    return {"users": [_users.user_json(r) for r in chunk], "pagination": pagination}


@router.get("/users/{user_id}")
def get_user(user_id: int, caller: Caller, store: StoreDep) -> dict[str, Any]:
    caller.require_user()
    with store.read() as conn:
        return {"user": _users.user_json(_users.require_user(conn, user_id))}


@router.get("/users/{username}/by-username")
def get_user_by_username(username: str, caller: Caller, store: StoreDep) -> dict[str, Any]:
    caller.require_user()
    with store.read() as conn:
        user = _users.get_user_by_name(conn, username)
    if user is None:
        raise NotFound(f"user {username!r} not found")
    return {"user": _users.user_json(user)}


@router.post("/users")
def post_user(caller: Caller, store: StoreDep, body: dict[str, Any] = Body(...)) -> dict[str, Any]:
    """``PostUserRequest`` ``{user: {username, admin, active, displayName, agentUserGroup},
    password, isHashed}`` -> ``{user}``. Admins only."""
    caller.require_admin("create users")
    user = body.get("user")
    if not isinstance(user, dict):
        raise InvalidArgument("body needs 'user': {username, admin, active, displayName}")
    if user.get("remote"):
        raise InvalidArgument("remote users need single sign-on, which this master has not")
    username = _check_username(user.get("username"))
    hashed = _password(body)
    admin = bool(_flag(user, "admin"))
    link = _identity.check_agent_user_group(user.get("agentUserGroup"))  # as PATCH's, 0.37
    with store.tx() as conn:
        display_name = None
        if user.get("displayName"):
            display_name = _display_name(
                conn, user["displayName"], admin=admin, username=username, user_id=None
            )
        user_id = _users.create_user_hashed(
            conn,
            username,
            hashed,
            admin=admin,
            active=_flag(user, "active") is not False,
            display_name=display_name,
        )
        if link is not None:
            _users.update_user(conn, user_id, agent_user_group=link)
        return {"user": _users.user_json(_users.require_user(conn, user_id))}


def _may_edit(caller: Principal, user_id: int, fields: set[str]) -> None:
    caller.require_user()
    if caller.info.admin:
        return
    if user_id != caller.info.user_id:
        raise PermissionDenied(f"only an admin may change another user (user {user_id})")
    if fields - {"display_name", "password"}:
        names = ", ".join(sorted(fields - {"display_name", "password"}))
        raise PermissionDenied(f"only an admin may change {names}, even their own")


_PATCH_FIELDS = {
    "username": "username",
    "displayName": "display_name",
    "admin": "admin",
    "active": "active",
    "password": "password",
}


def _patched_fields(body: dict[str, Any]) -> set[str]:
    """The fields a ``PATCH /users/{id}`` body changes, by their stored names."""
    fields = {name for key, name in _PATCH_FIELDS.items() if body.get(key) is not None}
    return fields | ({"agent_user_group"} if "agentUserGroup" in body else set())


@router.patch("/users/{user_id}")
def patch_user(
    user_id: int, caller: Caller, store: StoreDep, body: dict[str, Any] = Body(...)
) -> dict[str, Any]:
    """``v1PatchUser`` -> ``{user}``: the fields present change. Deactivating a user or
    changing a password ends the user's sessions (the caller's own one stays). Who may
    change the fields sent is checked before their values (0.37: a plain user's link to an
    agent user is forbidden, whatever names it holds)."""
    _may_edit(caller, user_id, _patched_fields(body))
    values: dict[str, Any] = {}
    if body.get("username") is not None:
        values["username"] = _check_username(body["username"])
    if body.get("displayName") is not None:
        values["display_name"] = body["displayName"]  # cleared below, against the stored user
    for key in ("admin", "active"):
        flag = _flag(body, key)
        if flag is not None:
            values[key] = flag
    if body.get("remote"):
        raise InvalidArgument("remote users need single sign-on, which this master has not")
    if body.get("password") is not None:
        values["password"] = _password(body)
    if "agentUserGroup" in body:  # det user link-with-agent-user; {} or null unlinks
        values["agent_user_group"] = _identity.check_agent_user_group(body["agentUserGroup"])
    if user_id == caller.info.user_id and (
        values.get("active") is False or values.get("admin") is False
    ):
        raise InvalidArgument("you cannot deactivate yourself or drop your own admin rights")
    with store.tx() as conn:
        if "display_name" in values:
            target = _users.require_user(conn, user_id)
            if values["display_name"] == (target["display_name"] or ""):
                del values["display_name"]  # unchanged: 0.37 checks nothing then
            else:
                values["display_name"] = _display_name(
                    conn,
                    values["display_name"],
                    admin=bool(target["admin"]),  # as stored before this patch, as 0.37
                    username=target["username"],
                    user_id=user_id,
                )
        row = _users.update_user(conn, user_id, keep_token=caller.token, **values)
        return {"user": _users.user_json(row)}


@router.post("/users/{user_id}/password")
def set_password(
    user_id: int, caller: Caller, store: StoreDep, password: Any = Body(...)
) -> dict[str, Any]:
    """``SetUserPassword``: the body is the new password as a JSON string, in clear text (the
    master hashes it as 0.37's clients would) -> ``{user}``."""
    if not isinstance(password, str):
        raise InvalidArgument('the body is the new password as a JSON string, e.g. "s3cret!A"')
    _may_edit(caller, user_id, {"password"})
    with store.tx() as conn:
        row = _users.update_user(
            conn, user_id, password=_users.client_hash(password), keep_token=caller.token
        )
        return {"user": _users.user_json(row)}
