"""Which master ``det`` talks to, and a logged-in session for it.

Master URL, first match wins: ``-m/--master``; ``$DET_MASTER``; the master ``det master up``
started from the data dir, if it runs; ``http://localhost:8080``.

Tokens are cached per master URL in ``<data dir>/auth.json`` (mode 0600), with the active user of
each master. A command without a cached token logs in as the default user ``determined`` with an
empty password (or ``$DET_USER``/``$DET_PASS``), as the reference does.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import pathlib
from collections.abc import Iterator
from typing import Any

from determined import errors
from determined.cli import _daemon, _render
from determined.common import _paths
from determined.common.api import Session, canonicalize_master_url

DEFAULT_MASTER = "http://localhost:8080"
DEFAULT_USER = "determined"
AUTH_FILE = "auth.json"
# The reference CLI sends sha512(salt + password) with isHashed; the master accepts both forms.
_PASSWORD_SALT = "GubPEmmotfiK9TMD6Zdw"


def normalize(url: str) -> str:
    """The canonical form of a master URL (``canonicalize_master_url``), or a ``CliError``
    saying what is wrong with it."""
    try:
        return canonicalize_master_url(url)
    except ValueError as e:
        raise _render.CliError(str(e)) from None


def explicit_master(args: argparse.Namespace) -> str | None:
    """The URL named by ``-m`` or ``$DET_MASTER``, if any."""
    url = getattr(args, "master", None) or os.environ.get("DET_MASTER")
    return normalize(url) if url else None


def master_url(args: argparse.Namespace) -> str:
    """The master this command talks to (see the module docstring for the order)."""
    url = explicit_master(args)
    if url:
        return url
    local = _daemon.running()
    return local.url if local is not None else DEFAULT_MASTER


def hash_password(password: str) -> str:
    """What the reference sends with ``isHashed``: an empty password stays empty."""
    if not password:
        return password
    return hashlib.sha512((_PASSWORD_SALT + password).encode()).hexdigest()


class TokenStore:
    """``auth.json``: ``{"masters": {url: {"active_user": str|null, "tokens": {user: token}}}}``."""

    def __init__(self, url: str, path: pathlib.Path | None = None) -> None:
        self.url = normalize(url)
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


class CliSession(Session):
    """A user's session that labels its bodies ``Content-Type: application/json``, as the
    reference CLI does (its requests pass ``json=``); the harness's client sends none."""

    def __init__(self, url: str, token: str | None = None) -> None:
        # Two quick tries: an unreachable master should fail in about a second.
        super().__init__(url, token, token_kind="user", max_attempts=2, backoff=0.3, timeout=30.0)
        self._http.headers["Content-Type"] = "application/json"


def client(url: str, token: str | None = None) -> Session:
    """A session to ``url`` with the user token ``token`` (none: anonymous)."""
    return CliSession(url, token)


def anonymous(args: argparse.Namespace) -> Session:
    """A session without a token (``/info``, ``/api/v1/master``, login)."""
    return client(master_url(args))


def login(url: str, user: str, password: str) -> tuple[Session, str]:
    """POST ``/api/v1/auth/login``; return a session with the new token, and the token."""
    sess = client(url)
    try:
        body = sess.post(
            "/api/v1/auth/login",
            json={"username": user, "password": hash_password(password), "isHashed": True},
        ).json()
    except errors.Unauthenticated as e:
        raise _render.CliError(f"login as {user!r} failed: wrong username or password") from e
    token = str(body["token"])
    return client(url, token), token


def _token_valid(url: str, token: str) -> bool:
    try:
        client(url, token).get("/api/v1/me")
    except errors.Unauthenticated:
        return False
    return True


def session(args: argparse.Namespace) -> Session:
    """A session logged in as the active user of this master (default: ``determined``)."""
    url = master_url(args)
    store = TokenStore(url)
    requested = getattr(args, "user", None)  # det -u USER
    user = requested or store.active_user or os.environ.get("DET_USER") or DEFAULT_USER
    token = store.token(user)
    if token is not None:
        if _token_valid(url, token):
            return client(url, token)
        store.drop(user)
    password = os.environ.get("DET_PASS", "")
    if user != DEFAULT_USER and "DET_PASS" not in os.environ:
        raise _render.CliError(
            f"user {user!r} has no valid session on {url}; run `det user login {user}`"
        )
    sess, token = login(url, user, password)
    store.set_token(user, token)
    return sess


def current_user(sess: Session) -> dict[str, Any]:
    return dict(sess.get("/api/v1/me").json()["user"])
