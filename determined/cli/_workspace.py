"""``det workspace list|create|describe|delete|archive|unarchive|list-projects|list-pools|edit``,
as 0.37: its columns and ``--json``, and the settings of ``create``/``edit`` (agent user and
group, default checkpoint storage, default pools). Kubernetes namespaces and quotas are refused:
this master has no Kubernetes resource manager."""

from __future__ import annotations

import argparse
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from determined import errors
from determined.cli import _describe, _render, _session
from determined.common.api import Session, _routes

WORKSPACE_HEADERS = [
    "ID",
    "Name",
    "# Projects",
    "Agent Uid",
    "Agent Gid",
    "Agent User",
    "Agent Group",
    "Default Compute Pool",
    "Default Aux Pool",
]
PROJECT_HEADERS = ["ID", "Key", "Name", "Description", "# Experiments", "# Active Experiments"]


def workspace_by_name(sess: Session, name: str) -> dict[str, Any]:
    """The workspace named ``name`` (exactly), or a CliError saying there is none."""
    found = _routes.list_workspaces(sess, {"name": name})["workspaces"]
    for w in found:
        if w["name"] == name:
            return dict(w)
    raise _render.CliError(f'workspace "{name}" not found')


def render_workspaces(workspaces: Sequence[Mapping[str, Any]], *, from_list: bool = False) -> None:
    rows = []
    for w in workspaces:
        group = w.get("agentUserGroup") or {}
        row = [
            w["id"],
            w["name"],
            w["numProjects"],
            group.get("agentUid"),
            group.get("agentGid"),
            group.get("agentUser"),
            group.get("agentGroup"),
            w.get("defaultComputePool") or None,
            w.get("defaultAuxPool") or None,
        ]
        if not from_list:
            row.append(w.get("checkpointStorageConfig"))
        rows.append(row)
    headers = WORKSPACE_HEADERS + ([] if from_list else ["Checkpoint Storage Config"])
    _render.table(headers, rows)


def _order(args: argparse.Namespace) -> dict[str, str]:
    return {
        "sortBy": f"SORT_BY_{args.sort_by.upper()}",
        "orderBy": f"ORDER_BY_{args.order_by.upper()}",
    }


def cmd_list(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    params: dict[str, Any] = dict(_order(args), limit=args.limit)
    if args.offset:  # one page, as 0.37
        params["offset"] = args.offset
        workspaces = list(_routes.list_workspaces(sess, params)["workspaces"])
    else:
        workspaces = _describe.read_paginated(
            lambda offset, limit: _routes.list_workspaces(
                sess, {**_order(args), "offset": offset, "limit": limit}
            ),
            "workspaces",
            limit=args.limit,
        )
    if args.json:
        _render.print_json(workspaces)
    else:
        render_workspaces(workspaces, from_list=True)


def project_rows(projects: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    return [
        [
            p["id"],
            p["key"],
            p["name"],
            p["description"],
            p["numExperiments"],
            p["numActiveExperiments"],
        ]
        for p in projects
    ]


def cmd_list_projects(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    w = workspace_by_name(sess, args.workspace_name)
    projects = _describe.read_paginated(
        lambda offset, limit: _routes.list_workspace_projects(
            sess, w["id"], {"offset": offset, "limit": limit}
        ),
        "projects",
    )
    projects.sort(key=lambda p: p[args.sort_by], reverse=args.order_by == "desc")
    offset = args.offset or 0
    projects = projects[offset : offset + args.limit]
    if args.json:
        _render.print_json(projects)
    else:
        _render.table(PROJECT_HEADERS, project_rows(projects))


def workspace_names(sess: Session) -> dict[int, str]:
    """Workspace id -> name (a master without workspaces: everything is in the default one)."""
    try:
        found = _routes.list_workspaces(sess).get("workspaces") or []
    except errors.MasterNotFound:
        return {1: "Uncategorized"}
    return {int(w["id"]): str(w["name"]) for w in found}


def _settings(args: argparse.Namespace, compute_key: str, aux_key: str) -> dict[str, Any]:
    """The body fields of ``create``/``edit``'s settings flags (only those given)."""
    if getattr(args, "namespace", None) or getattr(args, "auto_create_namespace", False):
        raise _render.CliError(
            "Kubernetes namespaces need the Kubernetes resource manager, which this master "
            "does not have; leave --namespace and --auto-create-namespace out"
        )
    if getattr(args, "auto_create_namespace_all_clusters", False) or getattr(
        args, "resource_quota", None
    ):
        raise _render.CliError(
            "Kubernetes namespaces and quotas need the Kubernetes resource manager, which this "
            "master does not have"
        )
    body: dict[str, Any] = {}
    group = {
        "agentUid": args.agent_uid,
        "agentGid": args.agent_gid,
        "agentUser": args.agent_user,
        "agentGroup": args.agent_group,
    }
    if any(v is not None for v in group.values()):
        body["agentUserGroup"] = group
    text, path = args.checkpoint_storage_config, args.checkpoint_storage_config_file
    if text is not None and path is not None:
        raise _render.CliError(
            "can only provide --checkpoint-storage-config or --checkpoint-storage-config-file"
        )
    try:
        if text is not None:
            body["checkpointStorageConfig"] = json.loads(text)
        elif path is not None:
            body["checkpointStorageConfig"] = yaml.safe_load(pathlib.Path(path).read_text())
    except (ValueError, OSError, yaml.YAMLError) as e:
        raise _render.CliError(f"cannot read the checkpoint storage config: {e}") from e
    if args.default_compute_pool is not None:
        body[compute_key] = args.default_compute_pool
    if args.default_aux_pool is not None:
        body[aux_key] = args.default_aux_pool
    return body


def cmd_create(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    body = {"name": args.name, **_settings(args, "defaultComputePool", "defaultAuxPool")}
    w = _routes.create_workspace(sess, body)
    if args.json:
        _render.print_json(w)
    else:
        render_workspaces([w])


def cmd_describe(args: argparse.Namespace) -> None:
    w = workspace_by_name(_session.session(args), args.workspace_name)
    if args.json:
        _render.print_json(w)
    else:
        render_workspaces([w])


def cmd_delete(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    w = workspace_by_name(sess, args.workspace_name)
    if args.yes or _render.yes_or_no(
        f'Deleting workspace "{args.workspace_name}" will result \n'
        "in the unrecoverable deletion of its (empty) projects.\n"
        "For a recoverable alternative, see the 'archive' command. Do you still \n"
        "wish to proceed?"
    ):
        _routes.delete_workspace(sess, w["id"])
        print(f"Successfully deleted workspace {args.workspace_name}.")
    else:
        print("Aborting workspace deletion.")


def cmd_archive(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    w = workspace_by_name(sess, args.workspace_name)
    _routes.workspace_action(sess, w["id"], "archive")
    print(f"Successfully archived workspace {args.workspace_name}.")


def cmd_unarchive(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    w = workspace_by_name(sess, args.workspace_name)
    _routes.workspace_action(sess, w["id"], "unarchive")
    print(f"Successfully un-archived workspace {args.workspace_name}.")


def cmd_edit(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    current = workspace_by_name(sess, args.workspace_name)
    body = _settings(args, "defaultComputeResourcePool", "defaultAuxResourcePool")
    if args.name is not None:
        body["name"] = args.name
    w = _routes.patch_workspace(sess, current["id"], body)
    if args.json:
        _render.print_json(w)
    else:
        render_workspaces([w])


def cmd_list_pools(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    w = workspace_by_name(sess, args.workspace_name)
    pools = _routes.list_workspace_pools(sess, w["id"])
    names = ", ".join(pools.get("resourcePools") or [])
    _render.table(["Workspace", "Available Resource Pools"], [[args.workspace_name, names]])


def _setting_args(p: argparse.ArgumentParser, *, namespaces: bool) -> None:
    p.add_argument("--agent-uid", type=int, default=None, help="tasks run as it (root masters)")
    p.add_argument("--agent-gid", type=int, default=None, help="tasks run as it (root masters)")
    p.add_argument("--agent-user", default=None, help="tasks run as it (root masters)")
    p.add_argument("--agent-group", default=None, help="tasks run as it (root masters)")
    p.add_argument(
        "--checkpoint-storage-config",
        default=None,
        help="JSON: the checkpoint storage its experiments use when they name none",
    )
    p.add_argument(
        "--checkpoint-storage-config-file",
        default=None,
        help="YAML file: the checkpoint storage its experiments use when they name none",
    )
    p.add_argument("--default-compute-pool", default=None, help="its experiments' default pool")
    p.add_argument("--default-aux-pool", default=None, help="its CPU tasks' default pool")
    if namespaces:
        p.add_argument("-n", "--namespace", default=None, help="Kubernetes only: refused here")
        p.add_argument("--auto-create-namespace", action="store_true", help="Kubernetes only")
        p.add_argument(
            "--auto-create-namespace-all-clusters", action="store_true", help="Kubernetes only"
        )
        p.add_argument("--cluster-name", default=None, help="Kubernetes only")
        p.add_argument("--resource-quota", type=int, default=None, help="Kubernetes only")


def add_order_args(p: argparse.ArgumentParser) -> None:
    """``--sort-by id|name``, ``--order-by asc|desc``, ``--limit``, ``--offset`` (0.37's)."""
    p.add_argument("--sort-by", choices=["id", "name"], default="id", help="sort by this field")
    p.add_argument("--order-by", choices=["asc", "desc"], default="asc", help="sort order")
    p.add_argument("--limit", type=int, default=200, help="Maximum items per page of results")
    p.add_argument(
        "--offset", type=int, default=None, help="Number of items to skip before the page"
    )


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print as JSON")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("workspace", aliases=["w"], help="manage workspaces")
    cmds = p.add_subparsers(dest="workspace_command", metavar="COMMAND")
    # `det w` lists, as 0.37.
    p.set_defaults(func=cmd_list, sort_by="id", order_by="asc", limit=200, offset=None, json=False)
    ls = cmds.add_parser("list", aliases=["ls"], help="list all workspaces")
    add_order_args(ls)
    _json_flag(ls)
    ls.set_defaults(func=cmd_list)
    lp = cmds.add_parser("list-projects", help="list the projects associated with a workspace")
    lp.add_argument("workspace_name", help="name of the workspace")
    add_order_args(lp)
    _json_flag(lp)
    lp.set_defaults(func=cmd_list_projects)
    c = cmds.add_parser("create", help="create workspace")
    c.add_argument("name", help="unique name of the workspace")
    _setting_args(c, namespaces=True)
    _json_flag(c)
    c.set_defaults(func=cmd_create)
    de = cmds.add_parser("delete", help="delete workspace")
    de.add_argument("workspace_name", help="name of the workspace")
    de.add_argument("--yes", action="store_true", help="automatically answer yes to prompts")
    de.set_defaults(func=cmd_delete)
    for name, func in (("archive", cmd_archive), ("unarchive", cmd_unarchive)):
        a = cmds.add_parser(name, help=f"{name} workspace")
        a.add_argument("workspace_name", help="name of the workspace")
        a.set_defaults(func=func)
    d = cmds.add_parser("describe", help="describe workspace")
    d.add_argument("workspace_name", help="name of the workspace")
    _json_flag(d)
    d.set_defaults(func=cmd_describe)
    e = cmds.add_parser("edit", help="edit workspace")
    e.add_argument("workspace_name", help="current name of the workspace")
    e.add_argument("--name", help="new name of the workspace")
    _setting_args(e, namespaces=False)
    _json_flag(e)
    e.set_defaults(func=cmd_edit)
    pools = cmds.add_parser("list-pools", help="list the resource pools the workspace may use")
    pools.add_argument("workspace_name", help="name of the workspace")
    pools.set_defaults(func=cmd_list_pools)
