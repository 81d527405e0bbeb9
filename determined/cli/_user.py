"""``det user list | login | logout | whoami | create | change-password | activate |
deactivate``, as 0.37's. Passwords go to the master hashed the way 0.37's clients hash them
(``isHashed: true``); new ones must meet 0.37's complexity rules."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from determined import errors
from determined.cli import _render, _session
from determined.common.api import _routes
from determined.experimental._sdk import _user as _sdk_user


def _read_password(user: str, prompt: str | None = None) -> str:
    """From the terminal without echo; from stdin (one line) when it is not a terminal."""
    if sys.stdin.isatty():
        return getpass.getpass(prompt or f"Password for user '{user}': ")
    line = sys.stdin.readline()
    return line.rstrip("\r\n")


def check_complexity(password: str) -> None:
    """0.37's rules for a new password (the SDK's check), as a CliError naming what is
    missing."""
    try:
        _sdk_user.check_password_complexity(password)
    except ValueError as e:
        raise _render.CliError(str(e)) from None


def _new_password(user: str) -> str:
    password = _read_password(user, f"New password for user '{user}': ")
    again = _read_password(user, "Confirm password: ")
    if password != again:
        raise _render.CliError("Passwords do not match")
    check_complexity(password)
    return password


def _by_name(sess: Any, username: str) -> dict[str, Any]:
    try:
        return dict(_routes.get_user_by_name(sess, username))
    except errors.MasterNotFound as e:
        raise _render.CliError(f"user {username!r} not found") from e


def cmd_list(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    params = {} if args.all else {"active": "true"}
    users = _routes.list_users(sess, params)["users"]
    headers = ["User Id", "Username", "Display Name", "Admin", "Active", "Remote"]
    headers += ["Agent Uid", "Agent Gid", "Agent User", "Agent Group"]
    rows = [
        [u["id"], u["username"], u.get("displayName") or "N/A", u["admin"], u["active"]]
        + [u.get("remote", False), "N/A", "N/A", "N/A", "N/A"]
        for u in users
    ]
    _render.table(headers, rows)


def cmd_create(args: argparse.Namespace) -> None:
    if args.remote:
        raise _render.CliError("remote users need single sign-on, which this master has not")
    sess = _session.session(args)
    password = args.password
    if password is None:
        password = _read_password(args.username, f"Password for user '{args.username}': ")
        if _read_password(args.username, "Confirm password: ") != password:
            raise _render.CliError("Passwords do not match")
    check_complexity(password)
    created = _routes.create_user(
        sess,
        {
            "user": {"username": args.username, "admin": bool(args.admin), "active": True},
            "password": _session.hash_password(password),
            "isHashed": True,
        },
    )
    # 0.37 printed nothing on success; a new user is told it worked and how to log in.
    user_id = created.get("id")
    role = "admin " if args.admin else ""
    print(
        f"Created {role}user '{args.username}' (id {user_id}); "
        f"log in with `det user login {args.username}`"
    )


def cmd_change_password(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    me = _session.current_user(sess)
    username = args.target_user or me["username"]
    password = _new_password(username)
    user = me if username == me["username"] else _by_name(sess, username)
    fields = {"password": _session.hash_password(password), "isHashed": True}
    _routes.patch_user(sess, user["id"], fields)
    if args.target_user is None or username == me["username"]:
        url = _session.master_url(args)
        _, token = _session.login(url, username, password)
        _session.TokenStore(url).set_token(username, token, active=True)
    print(f"Changed the password of user '{username}'")


def _set_active(args: argparse.Namespace, active: bool) -> None:
    sess = _session.session(args)
    user = _by_name(sess, args.username)
    _routes.patch_user(sess, user["id"], {"active": active})
    print(f"{'Activated' if active else 'Deactivated'} user '{args.username}'")


def cmd_activate(args: argparse.Namespace) -> None:
    _set_active(args, True)


def cmd_deactivate(args: argparse.Namespace) -> None:
    _set_active(args, False)


def cmd_login(args: argparse.Namespace) -> None:
    url = _session.master_url(args)
    user = args.username or input("Username: ").strip()
    password = _read_password(user)
    _, token = _session.login(url, user, password)
    _session.TokenStore(url).set_token(user, token, active=True)
    print(f"Logged in as user '{user}' on {url}")


def _log_out(url: str, store: _session.TokenStore, user: str) -> bool:
    """Forget ``user``'s token here and end its session on the master; False if none."""
    token = store.token(user)
    store.drop(user)
    if token is None:
        return False
    try:
        _routes.logout(_session.client(url, token))
    except errors.Unauthenticated:
        pass  # the token had already expired: logged out either way
    return True


def cmd_logout(args: argparse.Namespace) -> None:
    """``det [-u USER] user logout [--all]``: the active user (or ``-u``'s), or everyone."""
    url = _session.master_url(args)
    store = _session.TokenStore(url)
    if args.all:
        users = store.users()
        for user in users:
            _log_out(url, store, user)
        print(f"Logged out {len(users)} user(s) from {url}")
        return
    user = args.user or store.active_user or _session.DEFAULT_USER
    if not _log_out(url, store, user):
        print(f"User '{user}' is not logged in on {url}")
        return
    print(f"Logged out user '{user}' from {url}")


def cmd_edit(args: argparse.Namespace) -> None:
    """``det user edit USER [--display-name] [--username] [--active|--deactivate] [--admin]``."""
    body: dict[str, object] = {}
    changes = []
    for field, wire, label in (
        ("display_name", "displayName", "Display Name"),
        ("remote", "remote", "Remote"),
        ("activate", "active", "Active"),
        ("new_username", "username", "Username"),
        ("admin", "admin", "Admin"),
    ):
        value = getattr(args, field)
        if value is not None:
            body[wire] = value
            changes.append(label)
    if not changes:
        raise _render.CliError("No field provided. Use 'det user edit -h' for usage.")
    if body.get("remote"):
        raise _render.CliError("remote users need single sign-on, which this master has not")
    sess = _session.session(args)
    user = _by_name(sess, args.target_user)
    _routes.patch_user(sess, user["id"], body)
    print("Changes made to the following fields: " + ", ".join(changes))


def cmd_rename(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    user = _by_name(sess, args.target_user)
    _routes.patch_user(sess, user["id"], {"username": args.new_username})
    print(f"Renamed user '{args.target_user}' to '{args.new_username}'")


def cmd_link_with_agent_user(args: argparse.Namespace) -> None:
    """``det user link-with-agent-user USER --agent-uid --agent-gid --agent-user
    --agent-group`` (admins): the OS identity a root master runs the user's tasks as."""
    for field in ("agent_uid", "agent_user", "agent_gid", "agent_group"):
        if getattr(args, field) is None:
            raise _render.CliError(f"{field.replace('_', '-')} argument required")
    sess = _session.session(args)
    user = _by_name(sess, args.det_username)
    group = {
        "agentUid": args.agent_uid,
        "agentGid": args.agent_gid,
        "agentUser": args.agent_user,
        "agentGroup": args.agent_group,
    }
    _routes.patch_user(sess, user["id"], {"agentUserGroup": group})


def cmd_whoami(args: argparse.Namespace) -> None:
    user = _session.current_user(_session.session(args))
    print(f"You are logged in as user '{user.get('username')}'")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("user", aliases=["u"], help="manage users")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    login = cmds.add_parser("login", help="log in user")
    login.add_argument("username", nargs="?", default=None, help="user to log in as")
    login.set_defaults(func=cmd_login)
    logout = cmds.add_parser(
        "logout", help="log out user (-u USER before the command, or the active one)"
    )
    logout.add_argument("--all", "-a", action="store_true", help="log out every cached user")
    logout.set_defaults(func=cmd_logout)
    edit = cmds.add_parser("edit", help="edit user fields")
    edit.add_argument("target_user", help="name of user that should be edited")
    edit.add_argument("--display-name", default=None, help="new display name")
    edit.add_argument("--username", dest="new_username", default=None, help="new username")
    edit.add_argument("--remote", type=_render.truth, default=None, metavar="(true|false)")
    edit.add_argument(
        "--active", dest="activate", type=_render.truth, default=None, metavar="(true|false)"
    )
    edit.add_argument("--admin", type=_render.truth, default=None, metavar="(true|false)")
    edit.set_defaults(func=cmd_edit)
    rename = cmds.add_parser("rename", help="change username for user (det user edit --username)")
    rename.add_argument("target_user", help="name of user whose username should be changed")
    rename.add_argument("new_username", help="new username for target_user")
    rename.set_defaults(func=cmd_rename)
    cmds.add_parser("whoami", help="print the active user").set_defaults(func=cmd_whoami)
    link = cmds.add_parser("link-with-agent-user", help="link a user with UID/GID on agent")
    link.add_argument("det_username", help="name of Determined user to link")
    link.add_argument(
        "--agent-uid", type=int, default=None, help="UID on the agent to run tasks as"
    )
    link.add_argument("--agent-gid", type=int, default=None, help="GID on agent to run tasks as")
    link.add_argument("--agent-user", default=None, help="user on the agent to run tasks as")
    link.add_argument("--agent-group", default=None, help="group on the agent to run tasks as")
    link.set_defaults(func=cmd_link_with_agent_user)
    ls = cmds.add_parser("list", aliases=["ls"], help="list users")
    ls.add_argument("--all", "-a", action="store_true", help="List all active and inactive users.")
    ls.set_defaults(func=cmd_list)
    create = cmds.add_parser("create", help="create user")
    create.add_argument("username", help="name of new user")
    create.add_argument("--admin", action="store_true", help="give new user admin rights")
    create.add_argument("--password", help="password of new user")
    create.add_argument("--remote", action="store_true", help="an SSO user (not supported)")
    create.set_defaults(func=cmd_create)
    change = cmds.add_parser("change-password", help="change password for user")
    change.add_argument(
        "target_user", nargs="?", default=None, help="name of user to change password of"
    )
    change.set_defaults(func=cmd_change_password)
    for name, func, verb in (
        ("activate", cmd_activate, "activate"),
        ("deactivate", cmd_deactivate, "deactivate"),
    ):
        cmd = cmds.add_parser(name, help=f"{verb} user")
        cmd.add_argument("username", help=f"name of user to {verb}")
        cmd.set_defaults(func=func)
