"""``det resource-pool|rp bindings add|remove|replace|list-workspaces``, as 0.37: which
workspaces a resource pool serves. This master has one pool, ``default``, which serves every
workspace and cannot be bound (0.37's rule), so the master refuses a binding with a reason."""

from __future__ import annotations

import argparse

from determined.cli import _render, _session, _workspace
from determined.common.api import _routes


def _bind(args: argparse.Namespace, method: _routes.PoolBindingAction) -> None:
    sess = _session.session(args)
    _routes.bind_pool_workspaces(sess, args.pool_name, method, args.workspace_names)


def cmd_add(args: argparse.Namespace) -> None:
    _bind(args, "post")
    print(
        f'added bindings between the resource pool "{args.pool_name}" and the following '
        f"workspaces: {args.workspace_names}"
    )


def cmd_remove(args: argparse.Namespace) -> None:
    _bind(args, "delete")
    print(
        f'removed bindings between the resource pool "{args.pool_name}" and the following '
        f"workspaces: {args.workspace_names}"
    )


def cmd_replace(args: argparse.Namespace) -> None:
    _bind(args, "put")
    print(
        f'replaced bindings of the resource pool "{args.pool_name}" with those to the '
        f"following workspaces: {args.workspace_names}"
    )


def cmd_list_workspaces(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    ids = set(_routes.list_pool_workspace_ids(sess, args.pool_name))
    names = _workspace.workspace_names(sess)
    bound = ", ".join(names[i] for i in sorted(ids) if i in names)
    _render.table(["resource pool", "workspaces"], [[args.pool_name, bound]])


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("resource-pool", aliases=["rp"], help="manage resource pools")
    cmds = p.add_subparsers(dest="rp_command", metavar="COMMAND", required=True)
    b = cmds.add_parser("bindings", help="manage resource pool bindings")
    bcmds = b.add_subparsers(dest="bindings_command", metavar="COMMAND", required=True)
    for name, func, what in (
        ("add", cmd_add, "add a resource-pool-to-workspace binding"),
        ("remove", cmd_remove, "remove a resource-pool-to-workspace binding"),
        ("replace", cmd_replace, "replace all existing resource-pool-to-workspace bindings"),
    ):
        c = bcmds.add_parser(name, help=what)
        c.add_argument("pool_name", help="name of the resource pool")
        c.add_argument("workspace_names", nargs="+", help="the workspaces")
        c.set_defaults(func=func)
    ls = bcmds.add_parser("list-workspaces", help="list all workspaces bound to the pool")
    ls.add_argument("pool_name", help="name of the resource pool")
    ls.set_defaults(func=cmd_list_workspaces)
