"""``det user login [USER] | logout | whoami``."""

from __future__ import annotations

import argparse
import getpass
import sys

from determined import errors
from determined.cli import _session


def _read_password(user: str) -> str:
    """From the terminal without echo; from stdin (one line) when it is not a terminal."""
    if sys.stdin.isatty():
        return getpass.getpass(f"Password for user '{user}': ")
    line = sys.stdin.readline()
    return line.rstrip("\r\n")


def cmd_login(args: argparse.Namespace) -> None:
    url = _session.master_url(args)
    user = args.username or input("Username: ").strip()
    password = _read_password(user)
    _, token = _session.login(url, user, password)
    _session.TokenStore(url).set_token(user, token, active=True)
    print(f"Logged in as user '{user}' on {url}")


def cmd_logout(args: argparse.Namespace) -> None:
    url = _session.master_url(args)
    store = _session.TokenStore(url)
    user = args.user or store.active_user or _session.DEFAULT_USER
    token = store.token(user)
    store.drop(user)
    if token is None:
        print(f"User '{user}' is not logged in on {url}")
        return
    try:
        _session.client(url, token).post("/api/v1/auth/logout")
    except errors.Unauthenticated:
        pass  # the token had already expired: logged out either way
    print(f"Logged out user '{user}' from {url}")


def cmd_whoami(args: argparse.Namespace) -> None:
    user = _session.current_user(_session.session(args))
    print(f"You are logged in as user '{user.get('username')}'")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("user", aliases=["u"], help="manage users")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    login = cmds.add_parser("login", help="log in user")
    login.add_argument("username", nargs="?", default=None, help="user to log in as")
    login.set_defaults(func=cmd_login)
    logout = cmds.add_parser("logout", help="log out user")
    logout.add_argument("user", nargs="?", default=None, help="user (default: the active one)")
    logout.set_defaults(func=cmd_logout)
    cmds.add_parser("whoami", help="print the active user").set_defaults(func=cmd_whoami)
