"""``det project list|create|describe|delete|archive|unarchive|list-experiments|edit``, as 0.37:
projects are named by workspace name and project name."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any, Literal

from determined.cli import _describe, _render, _session, _workspace
from determined.common.api import Session, _routes


def project_by_name(
    sess: Session, workspace_name: str, project_name: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(workspace, project) by their names, or a CliError saying which is missing."""
    w = _workspace.workspace_by_name(sess, workspace_name)
    found = _routes.list_workspace_projects(sess, w["id"], {"name": project_name})["projects"]
    for p in found:
        if p["name"] == project_name:
            return w, dict(p)
    raise _render.CliError(f'project "{project_name}" not found in workspace "{workspace_name}"')


def render_project(p: Mapping[str, Any]) -> None:
    _render.table(_workspace.PROJECT_HEADERS, _workspace.project_rows([p]))


def _experiments(sess: Session, project_id: int, args: argparse.Namespace) -> list[Any]:
    users = None if args.all else [str(_session.current_user(sess).get("username"))]

    def page(offset: int, limit: int) -> dict[str, Any]:
        return _routes.list_experiments(
            sess,
            sort_by=f"SORT_BY_{args.sort_by.upper()}",
            order_by=f"ORDER_BY_{args.order_by.upper()}",
            archived=None if args.all else False,
            users=users,
            project_id=project_id,
            offset=offset,
            limit=limit,
        )

    exps = _describe.read_paginated(page, "experiments")
    key = "name" if args.sort_by == "name" else "id"
    exps.sort(key=lambda e: e.get(key) or "", reverse=args.order_by == "desc")
    offset = getattr(args, "offset", None) or 0
    limit = getattr(args, "limit", None) or len(exps)
    return exps[offset : offset + limit]


def render_experiments(args: argparse.Namespace, exps: list[dict[str, Any]]) -> None:
    archived = ["Archived"] if args.all else []
    rows = [
        _describe.experiment_list_row(e) + ([e.get("archived")] if args.all else []) for e in exps
    ]
    _render.table(_describe.EXPERIMENT_LIST_HEADERS + archived, rows)


def cmd_list_experiments(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    _, p = project_by_name(sess, args.workspace_name, args.project_name)
    exps = _experiments(sess, int(p["id"]), args)
    if args.json:
        _render.print_json(exps)
    else:
        render_experiments(args, exps)


def cmd_create(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    w = _workspace.workspace_by_name(sess, args.workspace_name)
    body = {
        "name": args.name,
        "description": args.description or "",
        "workspaceId": w["id"],
        "key": args.key,
    }
    p = _routes.create_project(sess, w["id"], body)
    if args.json:
        _render.print_json(p)
    else:
        render_project(p)


def cmd_describe(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    _, p = project_by_name(sess, args.workspace_name, args.project_name)
    if args.json:
        _render.print_json(p)
        return
    render_project(p)
    print("\nAssociated Experiments")
    args.sort_by, args.order_by = "id", "asc"
    render_experiments(args, _experiments(sess, int(p["id"]), args))


def cmd_delete(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    _, p = project_by_name(sess, args.workspace_name, args.project_name)
    if args.yes or _render.yes_or_no(
        f'Deleting project "{args.project_name}" will result in the \n'
        "unrecoverable deletion of this (empty) project and its notes.\n"
        "For a recoverable alternative, see the 'archive' command. Do you still \n"
        "wish to proceed?"
    ):
        _routes.delete_project(sess, p["id"])
        print(f"Successfully deleted project {args.project_name}.")
    else:
        print("Aborting project deletion.")


def cmd_edit(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    _, p = project_by_name(sess, args.workspace_name, args.project_name)
    body = {
        k: v
        for k, v in (("name", args.new_name), ("description", args.description), ("key", args.key))
        if v is not None
    }
    new = _routes.patch_project(sess, p["id"], body)
    if args.json:
        _render.print_json(new)
    else:
        render_project(new)


def _archiver(verb: Literal["archive", "unarchive"], done: str) -> Any:
    def run(args: argparse.Namespace) -> None:
        sess = _session.session(args)
        _, p = project_by_name(sess, args.workspace_name, args.project_name)
        _routes.project_action(sess, p["id"], verb)
        print(f"Successfully {done} project {args.project_name}.")

    return run


def _named(cmds: argparse._SubParsersAction, name: str, help: str) -> Any:  # noqa: A002
    p = cmds.add_parser(name, help=help)
    p.add_argument("workspace_name", help="name of the workspace")
    p.add_argument("project_name", help="name of the project")
    return p


def _all_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--all",
        "-a",
        action="store_true",
        help="show all experiments (including archived and other users')",
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("project", aliases=["p"], help="manage projects")
    cmds = p.add_subparsers(dest="project_command", metavar="COMMAND", required=True)
    ls = cmds.add_parser(
        "list", aliases=["ls"], help="list the projects associated with a workspace"
    )
    ls.add_argument("workspace_name", help="name of the workspace")
    _workspace.add_order_args(ls)
    ls.add_argument("--json", action="store_true", help="print as JSON")
    ls.set_defaults(func=_workspace.cmd_list_projects)
    le = _named(cmds, "list-experiments", "list the experiments associated with a project")
    _all_flag(le)
    _workspace.add_order_args(le)
    le.add_argument("--json", action="store_true", help="print as JSON")
    le.set_defaults(func=cmd_list_experiments)
    c = cmds.add_parser("create", help="create project")
    c.add_argument("workspace_name", help="name of the workspace")
    c.add_argument("name", help="name of the project")
    c.add_argument("--description", help="description of the project")
    c.add_argument("--key", help="key of the project")
    c.add_argument("--json", action="store_true", help="print as JSON")
    c.set_defaults(func=cmd_create)
    de = _named(cmds, "delete", "delete project")
    de.add_argument("--yes", action="store_true", help="automatically answer yes to prompts")
    de.set_defaults(func=cmd_delete)
    _named(cmds, "archive", "archive project").set_defaults(func=_archiver("archive", "archived"))
    _named(cmds, "unarchive", "unarchive project").set_defaults(
        func=_archiver("unarchive", "un-archived")
    )
    d = _named(cmds, "describe", "describe project")
    _all_flag(d)
    d.add_argument("--json", action="store_true", help="print as JSON")
    d.set_defaults(func=cmd_describe)
    e = _named(cmds, "edit", "edit project")
    e.add_argument("--new_name", help="new name of the project")
    e.add_argument("--description", help="description of the project")
    e.add_argument("--key", help="key of the project")
    e.add_argument("--json", action="store_true", help="print as JSON")
    e.set_defaults(func=cmd_edit)
