"""Which master ``det`` talks to, and a logged-in session for it.

Master URL, first match wins: ``-m/--master``; ``$DET_MASTER``; the master ``det master up``
started from the data dir, if it runs; ``http://localhost:8080``.

Logins and the token store (``<data dir>/auth.json``) live in ``determined.common.api._auth``,
shared with the Python SDK, so ``det user login`` also logs in ``client.login()``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from determined.cli import _daemon, _render
from determined.common.api import Session, _auth, _routes, canonicalize_master_url

DEFAULT_MASTER = _auth.DEFAULT_MASTER
DEFAULT_USER = _auth.DEFAULT_USER
AUTH_FILE = _auth.AUTH_FILE
hash_password = _auth.hash_password
CliSession = _auth.UserSession


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


class TokenStore(_auth.TokenStore):
    """The shared token store, with a bad URL reported as a ``CliError``."""

    def __init__(self, url: str) -> None:
        super().__init__(normalize(url))


def client(url: str, token: str | None = None) -> Session:
    """A session to ``url`` with the user token ``token`` (none: anonymous)."""
    return CliSession(url, token)


def anonymous(args: argparse.Namespace) -> Session:
    """A session without a token (``/info``, ``/api/v1/master``, login)."""
    return client(master_url(args))


def login(url: str, user: str, password: str) -> tuple[Session, str]:
    """POST ``/api/v1/auth/login``; return a session with the new token, and the token."""
    try:
        return _auth.login(url, user, password)
    except _auth.LoginError as e:
        raise _render.CliError(str(e)) from e


def session(args: argparse.Namespace) -> Session:
    """A session logged in as the active user of this master (default: ``determined``)."""
    try:
        sess, _ = _auth.login_with_cache(master_url(args), getattr(args, "user", None))
    except _auth.LoginError as e:
        raise _render.CliError(str(e)) from e
    return sess


def current_user(sess: Session) -> dict[str, Any]:
    return dict(_routes.get_me(sess))
