"""``det model list|create|describe|register-version|list-versions|delete|move``, as 0.37: its
tables, ``--json`` shapes and flags."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

from determined.cli import _describe, _render, _session, _workspace
from determined.common.api import Session, _routes

VERSION_HEADERS = [
    "Version #",
    "Trial ID",
    "Batch #",
    "Checkpoint UUID",
    "Validation Metrics",
    "Metadata",
]


def model_by_name(sess: Session, name: str) -> dict[str, Any]:
    return dict(_routes.get_model(sess, name))


def model_to_json(m: Mapping[str, Any]) -> dict[str, Any]:
    """0.37's ``--json`` form of a model (the SDK object's fields, snake_case)."""
    return {
        "name": m["name"],
        "id": m["id"],
        "description": m.get("description"),
        "creation_time": m.get("creationTime"),
        "last_updated_time": m.get("lastUpdatedTime"),
        "metadata": m.get("metadata"),
        "archived": m.get("archived"),
    }


def render_model(m: Mapping[str, Any]) -> None:
    headers = [
        "ID",
        "Name",
        "Description",
        "Workspace ID",
        "Creation Time",
        "Last Updated Time",
        "Metadata",
    ]
    row = [
        m["id"],
        m["name"],
        m.get("description"),
        m.get("workspaceId"),
        m.get("creationTime"),
        m.get("lastUpdatedTime"),
        json.dumps(m.get("metadata") or {}, indent=4),
    ]
    _render.table(headers, [row])


def render_versions(versions: Sequence[Mapping[str, Any]]) -> None:
    rows = []
    for v in versions:
        ckpt = v["checkpoint"]
        training = ckpt.get("training") or {}
        metadata = ckpt.get("metadata") or {}
        rows.append(
            [
                v["version"],
                training.get("trialId"),
                metadata.get("steps_completed"),
                ckpt["uuid"],
                json.dumps(training.get("validationMetrics"), indent=2) if training else "",
                json.dumps(metadata, indent=2),
            ]
        )
    _render.table(VERSION_HEADERS, rows)


def cmd_list(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    params: dict[str, Any] = {
        "sortBy": f"SORT_BY_{args.sort_by.upper()}",
        "orderBy": f"ORDER_BY_{args.order_by.upper()}",
    }
    if args.workspace_names is not None:
        params["workspaceNames"] = args.workspace_names.split(",")
    models = _describe.read_paginated(
        lambda offset, limit: _routes.list_models(
            sess, {**params, "offset": offset, "limit": limit}
        ),
        "models",
    )
    if args.json:
        _render.print_json([model_to_json(m) for m in models])
        return
    headers = ["ID", "Name", "Workspace ID", "Creation Time", "Last Updated Time", "Metadata"]
    rows = [
        [
            m["id"],
            m["name"],
            m.get("workspaceId"),
            m.get("creationTime"),
            m.get("lastUpdatedTime"),
            json.dumps(m.get("metadata") or {}, indent=2),
        ]
        for m in models
    ]
    _render.table(headers, rows)


def cmd_list_versions(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    m = model_by_name(sess, args.name)
    if args.json:
        _render.print_json(_routes.list_model_versions_response(sess, m["id"]))
        return
    order = {"orderBy": "ORDER_BY_DESC", "sortBy": "SORT_BY_VERSION"}

    def page(offset: int, limit: int) -> dict[str, Any]:
        query = {**order, "offset": offset, "limit": limit}
        return _routes.list_model_versions_response(sess, m["id"], query)

    versions = _describe.read_paginated(page, "modelVersions")
    render_model(m)
    print("\n")
    render_versions(versions)


def cmd_delete(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    m = model_by_name(sess, args.name)
    _routes.delete_model(sess, m["id"])


def cmd_create(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    body: dict[str, Any] = {"name": args.name, "description": args.description or ""}
    if args.workspace_name:
        body["workspaceName"] = args.workspace_name
    m = _routes.create_model(sess, body)
    if args.json:
        _render.print_json(model_to_json(m))
    else:
        render_model(m)


def cmd_move(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    m = model_by_name(sess, args.name)
    name = args.workspace_name or "Uncategorized"
    w = _workspace.workspace_by_name(sess, name)
    body = {"destinationWorkspaceId": w["id"], "modelName": m["name"]}
    _routes.move_model(sess, m["id"], body)


def cmd_describe(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    m = model_by_name(sess, args.name)
    version: _routes.ModelVersion | None
    if args.version == -1:
        params = {"limit": 1, "orderBy": "ORDER_BY_DESC", "sortBy": "SORT_BY_VERSION"}
        found = _routes.list_model_versions_response(sess, m["id"], params)["modelVersions"]
        version = found[0] if found else None
    else:
        version = _routes.get_model_version(sess, m["id"], args.version)
    if args.json:
        _render.print_json(model_to_json(m))
        return
    render_model(m)
    if version is not None:
        print("\n")
        render_versions([version])


def cmd_register_version(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    m = model_by_name(sess, args.name)
    resp = _routes.post_model_version_response(sess, m["id"], {"checkpointUuid": args.uuid})
    if args.json:
        _render.print_json(resp)
        return
    version = resp["modelVersion"]
    render_model(version["model"])
    print("\n")
    render_versions([version])


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model", aliases=["m"], help="manage models")
    cmds = p.add_subparsers(dest="model_command", metavar="COMMAND")
    # `det m` lists, as 0.37.
    p.set_defaults(
        func=cmd_list,
        workspace_names=None,
        sort_by="last_updated_time",
        order_by="asc",
        json=False,
    )
    ls = cmds.add_parser("list", aliases=["ls"], help="list all models in the registry")
    ls.add_argument(
        "-w",
        "--workspace-names",
        help="list models in given list of comma-separated workspaces",
    )
    ls.add_argument(
        "--sort-by",
        choices=["name", "description", "creation_time", "last_updated_time"],
        default="last_updated_time",
        help="sort models by the given field",
    )
    ls.add_argument("--order-by", choices=["asc", "desc"], default="asc", help="sort order")
    ls.add_argument("--json", action="store_true", help="print as JSON")
    ls.set_defaults(func=cmd_list)
    rv = cmds.add_parser("register-version", help="register a new version of a model")
    rv.add_argument("name", help="name of the model")
    rv.add_argument("uuid", help="uuid to register as the next version of the model")
    rv.add_argument("--json", action="store_true", help="print as JSON")
    rv.set_defaults(func=cmd_register_version)
    d = cmds.add_parser("describe", help="describe model")
    d.add_argument("name", help="name of model to describe")
    d.add_argument("--json", action="store_true", help="print as JSON")
    d.add_argument(
        "--version", type=int, default=-1, help="model version information to include in output"
    )
    d.set_defaults(func=cmd_describe)
    lv = cmds.add_parser("list-versions", help="list the versions of a model")
    lv.add_argument("name", help="unique name of the model")
    lv.add_argument("--json", action="store_true", help="print as JSON")
    lv.set_defaults(func=cmd_list_versions)
    de = cmds.add_parser("delete", help="delete model")
    de.add_argument("name", help="unique name of the model")
    de.set_defaults(func=cmd_delete)
    c = cmds.add_parser("create", help="create model")
    c.add_argument("name", help="unique name of the model")
    c.add_argument("-w", "--workspace-name", help="workspace name")
    c.add_argument("--description", help="description of the model")
    c.add_argument("--json", action="store_true", help="print as JSON")
    c.set_defaults(func=cmd_create)
    mv = cmds.add_parser("move", help="move model to given workspace")
    mv.add_argument("name", help="name of model")
    mv.add_argument("-w", "--workspace-name", help="workspace name")
    mv.set_defaults(func=cmd_move)
