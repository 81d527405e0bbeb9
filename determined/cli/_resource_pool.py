"""``det resource-pool|rp bindings add|remove|replace|list-workspaces``, as 0.37: which
workspaces a resource pool serves. This master has one pool, ``default``, which serves every
workspace and cannot be bound (0.37's rule), so the master refuses a binding with a reason."""

from __future__ import annotations

import argparse

from determined.cli import _render, _session, _workspace


def _body(args: argparse.Namespace) -> dict[str, object]:
    return {"resourcePoolName": args.pool_name, "workspaceNames": args.workspace_names}


def cmd_add(args: argparse.Namespace) -> None:
    path = f"/api/v1/resource-pools/{args.pool_name}/workspace-bindings"
    _session.session(args).post(path, json=_body(args))
    print(
        f'added bindings between the resource pool "{args.pool_name}" and the following '
        f"workspaces: {args.workspace_names}"
    )


def cmd_remove(args: argparse.Namespace) -> None:
    path = f"/api/v1/resource-pools/{args.pool_name}/workspace-bindings"
    _session.session(args).delete(path, json=_body(args))
    print(
        f'removed bindings between the resource pool "{args.pool_name}" and the following '
        f"workspaces: {args.workspace_names}"
    )


def cmd_replace(args: argparse.Namespace) -> None:
    path = f"/api/v1/resource-pools/{args.pool_name}/workspace-bindings"
    _session.session(args).put(path, json=_body(args))
    print(
        f'replaced bindings of the resource pool "{args.pool_name}" with those to the '
        f"following workspaces: {args.workspace_names}"
    )


def cmd_list_workspaces(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    path = f"/api/v1/resource-pools/{args.pool_name}/workspace-bindings"
    ids = set(sess.get(path).json().get("workspaceIds") or [])
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
