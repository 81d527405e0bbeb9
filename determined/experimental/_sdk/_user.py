"""``User``: one account on the master."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from determined.common.api import Session, _auth, _routes


def check_password_complexity(password: str | None) -> None:
    """0.37's rules for a new password.

    Raises:
        ValueError: naming every rule the password breaks.
    """
    password = password or ""
    missing = []
    if len(password) < 8:
        missing.append("at least 8 characters")
    if not any(c.isupper() for c in password):
        missing.append("an upper-case letter")
    if not any(c.islower() for c in password):
        missing.append("a lower-case letter")
    if not any(c.isdigit() for c in password):
        missing.append("a number")
    if missing:
        raise ValueError("password is too weak: it needs " + ", ".join(missing))


class User:
    """A user: get one from ``client.whoami()``, ``get_user_by_name``, ``list_users`` ...

    Attributes (cached; :meth:`reload` refreshes them): ``user_id``, ``username``, ``admin``,
    ``remote``, ``active``, ``display_name``, and the agent user/group fields ``agent_uid``,
    ``agent_gid``, ``agent_user``, ``agent_group`` (None here: this master runs trials as the
    user that runs it).
    """

    def __init__(self, user_id: int, session: Session) -> None:
        self.user_id = user_id
        self._session = session
        self.username: str | None = None
        self.admin: bool | None = None
        self.remote: bool | None = None
        self.active: bool | None = None
        self.display_name: str | None = None
        self.agent_uid: int | None = None
        self.agent_gid: int | None = None
        self.agent_user: str | None = None
        self.agent_group: str | None = None

    def _hydrate(self, body: Mapping[str, Any]) -> None:
        self.username = body.get("username")
        self.admin = bool(body.get("admin"))
        self.remote = bool(body.get("remote", False))
        self.active = body.get("active") is not False
        self.display_name = body.get("displayName")
        group = body.get("agentUserGroup") or {}
        self.agent_uid = group.get("agentUid")
        self.agent_gid = group.get("agentGid")
        self.agent_user = group.get("agentUser")
        self.agent_group = group.get("agentGroup")

    @classmethod
    def _from_json(cls, body: Mapping[str, Any], session: Session) -> User:
        user = cls(int(body["id"]), session)
        user._hydrate(body)
        return user

    def reload(self) -> None:
        self._hydrate(_routes.get_user(self._session, self.user_id))

    def _patch(self, **fields: Any) -> None:
        _routes.patch_user(self._session, self.user_id, fields)
        self.reload()

    def rename(self, new_username: str) -> None:
        self._patch(username=new_username)

    def activate(self) -> None:
        self._patch(active=True)

    def deactivate(self) -> None:
        self._patch(active=False)

    def change_display_name(self, display_name: str) -> None:
        self._patch(displayName=display_name)

    def change_password(self, new_password: str) -> None:
        """Set a new password (0.37's complexity rules apply).

        Raises:
            ValueError: the password breaks a complexity rule.
        """
        check_password_complexity(new_password)
        self._patch(password=_auth.hash_password(new_password), isHashed=True)

    def link_with_agent(
        self,
        agent_uid: int | None = None,
        agent_gid: int | None = None,
        agent_user: str | None = None,
        agent_group: str | None = None,
    ) -> None:
        """Set the user/group a trial of this user runs as (0.37's agent user group)."""
        group = {
            "agentUid": agent_uid,
            "agentGid": agent_gid,
            "agentUser": agent_user,
            "agentGroup": agent_group,
        }
        self._patch(agentUserGroup=group)

    def __repr__(self) -> str:
        return f"User(id={self.user_id}, username={self.username})"
