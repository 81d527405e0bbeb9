"""Logging in to a master, and the token store ``det user login`` writes, shared by the CLI
and the Python SDK (``determined.experimental.client``): a login made with one is a login for
the other.

Tokens are cached per master URL in ``<data dir>/auth.json`` (mode 0600), with the active user of
each master. Without a cached token the default user ``determined`` logs in with an empty
password (or ``$DET_USER``/``$DET_PASS``; inside a task, its owner's ``$DET_USER`` and
``$DET_USER_TOKEN``), as Determined 0.37 does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
from collections.abc import Iterator
from typing import Any

from determined import errors
from determined.common import _paths
from determined.common.api import _routes
from determined.common.api._session import Session
from determined.common.api._urls import canonicalize_master_url

DEFAULT_MASTER = "http://localhost:8080"
DEFAULT_USER = "determined"
AUTH_FILE = "auth.json"
# 0.37's clients send sha512(salt + password) with isHashed; the master accepts both forms.
_PASSWORD_SALT = "GubPEmmotfiK9TMD6Zdw"


class LoginError(errors.MasterError):
    """A login that cannot succeed as asked (wrong password, no cached session)."""


def hash_password(password: str) -> str:
    """What 0.37's clients send with ``isHashed``: an empty password stays empty."""
    if not password:
        return password
    return hashlib.sha512((_PASSWORD_SALT + password).encode()).hexdigest()


class TokenStore:
    """``auth.json``: ``{"masters": {url: {"active_user": str|null, "tokens": {user: token}}}}``.

    Raises:
        ValueError: ``url`` is not a master URL (the message says what to fix).
    """

    def __init__(self, url: str, path: pathlib.Path | None = None) -> None:
        self.url = canonicalize_master_url(url)
        self.path = path or _paths.data_dir() / AUTH_FILE

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {"masters": {}}
        return data if isinstance(data.get("masters"), dict) else {"masters": {}}

    @contextlib.contextmanager
    def _edit(self) -> Iterator[dict[str, Any]]:
        data = self._load()
        entry = data["masters"].setdefault(self.url, {"active_user": None, "tokens": {}})
        yield entry
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
        os.replace(tmp, self.path)

    def _entry(self) -> dict[str, Any]:
        return dict(self._load()["masters"].get(self.url) or {})

    @property
    def active_user(self) -> str | None:
        return self._entry().get("active_user")

    def token(self, user: str) -> str | None:
        return (self._entry().get("tokens") or {}).get(user)

    def set_token(self, user: str, token: str, *, active: bool = False) -> None:
        with self._edit() as entry:
            entry.setdefault("tokens", {})[user] = token
            if active:
                entry["active_user"] = user

    def users(self) -> list[str]:
        """The users with a cached token for this master."""
        return sorted((self._entry().get("tokens") or {}).keys())

    def drop(self, user: str) -> None:
        with self._edit() as entry:
            entry.setdefault("tokens", {}).pop(user, None)
            if entry.get("active_user") == user:
                entry["active_user"] = None


class UserSession(Session):
    """A user's session: bodies are labelled ``Content-Type: application/json`` as 0.37's CLI
    and SDK label them (the harness's client sends none); two quick tries, so an unreachable
    master fails in about a second."""

    def __init__(
        self, url: str, token: str | None = None, *, cert: str | bool | None = None
    ) -> None:
        super().__init__(
            url, token, token_kind="user", max_attempts=2, backoff=0.3, timeout=30.0, cert=cert
        )
        self._http.headers["Content-Type"] = "application/json"
        self.token = token


def login(
    url: str, user: str, password: str, *, cert: str | bool | None = None
) -> tuple[UserSession, str]:
    """POST ``/api/v1/auth/login``; return a session with the new token, and the token.

    Raises:
        LoginError: wrong username or password.
    """
    sess = UserSession(url, cert=cert)
    try:
        body = _routes.login(sess, user, hash_password(password))
    except errors.Unauthenticated as e:
        raise LoginError(f"login as {user!r} failed: wrong username or password", status=401) from e
    token = str(body["token"])
    return UserSession(url, token, cert=cert), token


def token_valid(url: str, token: str, *, cert: str | bool | None = None) -> bool:
    """Whether the master still accepts ``token`` (it forgets them on logout and expiry)."""
    try:
        _routes.get_me(UserSession(url, token, cert=cert))
    except errors.Unauthenticated:
        return False
    return True


def _chosen_user(
    requested: str | None, password: str | None, store: TokenStore
) -> tuple[str, str | None]:
    """Who logs in, and with what password: the user asked for; else the master's active user
    in the token store (the last ``det user login``); else ``$DET_USER`` with ``$DET_PASS``
    when both are set; else ``determined`` (empty password). As 0.37, but for one thing: 0.37
    let ``$DET_USER``/``$DET_PASS`` outrank an explicit ``det user login`` (docs/cli.md).
    ``$DET_PASS`` is also the password of a user asked for, where 0.37 prompted."""
    env_pass = os.environ.get("DET_PASS")
    if requested:
        return requested, password if password is not None else env_pass
    if store.active_user:
        return store.active_user, password if password is not None else env_pass
    env_user = os.environ.get("DET_USER")
    if env_user is not None and env_pass is not None:
        return env_user, env_pass
    return DEFAULT_USER, password


def login_with_cache(
    url: str,
    user: str | None = None,
    password: str | None = None,
    *,
    cert: str | bool | None = None,
) -> tuple[UserSession, str]:
    """A session as ``user`` (default: see :func:`_chosen_user`) and that user's name.

    A cached token that the master still accepts is reused. Else, inside a task (whose
    environment has its owner's ``$DET_USER`` and ``$DET_USER_TOKEN``, as 0.37's), the task's
    token, unless another user was asked for. Otherwise the user logs in with the password and
    the new token is cached, so the next client, CLI or SDK, reuses it.

    Raises:
        LoginError: no valid cached token and no password for a non-default user, or a wrong
            password.
    """
    store = TokenStore(url)
    requested = user
    user, password = _chosen_user(requested, password, store)
    token = store.token(user)
    if token is not None:
        if token_valid(store.url, token, cert=cert):
            return UserSession(store.url, token, cert=cert), user
        store.drop(user)
    task_user, task_token = os.environ.get("DET_USER"), os.environ.get("DET_USER_TOKEN")
    if task_user is not None and task_token is not None and requested in (None, "", task_user):
        return UserSession(store.url, task_token, cert=cert), task_user
    if password is None and user == DEFAULT_USER:
        password = ""  # 0.37's default user has an empty password
    if password is None:
        raise LoginError(
            f"user {user!r} has no valid session on {store.url}; run `det user login "
            f"{user}` or pass a password",
            status=401,
        )
    sess, token = login(store.url, user, password, cert=cert)
    store.set_token(user, token)
    return sess, user


def logout(url: str, user: str | None = None, *, cert: str | bool | None = None) -> None:
    """Forget ``user``'s cached token (default: the active user) and tell the master to
    invalidate it; a token the master no longer knows is just forgotten."""
    store = TokenStore(url)
    user = user or store.active_user or DEFAULT_USER
    token = store.token(user)
    store.drop(user)
    if token is None:
        return
    with contextlib.suppress(errors.Unauthenticated):
        _routes.logout(UserSession(store.url, token, cert=cert))
