"""``det template``: config templates stored in the master, as in 0.37 (``list``, ``describe``,
``create``, ``set-value config``, ``set`` (deprecated there too), ``remove``)."""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from determined.cli import _render, _session, _workspace
from determined.common.api import Session, _routes


def _read_config(path: str) -> Any:
    try:
        with open(path) as f:
            config = yaml.safe_load(f)
    except OSError as e:
        raise _render.CliError(f"cannot read template file {path!r}: {e}") from e
    except yaml.YAMLError as e:
        raise _render.CliError(f"template file {path!r} is not valid YAML: {e}") from e
    if not isinstance(config, dict):
        raise _render.CliError(f"template file {path!r} must be a YAML mapping of config fields")
    return config


def _workspace_id(sess: Session, name: str | None) -> int:
    if not name:
        return 0
    found = _routes.list_workspaces(sess, {"name": name}).get("workspaces") or []
    match = [w for w in found if w.get("name") == name]
    if not match:
        raise _render.CliError(f'Workspace "{name}" not found')
    if match[0].get("archived"):
        raise _render.CliError(f'Workspace "{name}" is archived.')
    return int(match[0]["id"])


def _dump(config: Any) -> str:
    return str(yaml.safe_dump(config, default_flow_style=False))


def cmd_list(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    names = _workspace.workspace_names(sess)
    found = _routes.list_templates(sess)
    rows: list[list[Any]] = []
    for t in found:
        row = [t["name"], names.get(int(t["workspaceId"]), "missing workspace")]
        rows.append(row + [_dump(t["config"])] if args.details else row)
    headers = ["Name", "Workspace"] + (["Config"] if args.details else [])
    _render.table(headers, rows)


def cmd_describe(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    template = _routes.get_template(sess, args.template_name)
    print(_dump(template["config"]))


def cmd_create(args: argparse.Namespace) -> None:
    config = _read_config(args.template_file)
    sess = _session.session(args)
    body = {
        "name": args.template_name,
        "config": config,
        "workspaceId": _workspace_id(sess, args.workspace_name),
    }
    _routes.create_template(sess, args.template_name, body)
    print(f"Created template {args.template_name}")


def cmd_set_config(args: argparse.Namespace) -> None:
    config = _read_config(args.template_file)
    _routes.patch_template_config(_session.session(args), args.template_name, config)
    print(f"Updated template {args.template_name}")


def cmd_set(args: argparse.Namespace) -> None:
    config = _read_config(args.template_file)
    body = {"name": args.template_name, "config": config, "workspaceId": 0}
    _routes.put_template(_session.session(args), args.template_name, body)
    print(f"Set template {args.template_name}")


def cmd_remove(args: argparse.Namespace) -> None:
    _routes.delete_template(_session.session(args), args.template_name)
    print(f"Removed template {args.template_name}")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("template", aliases=["tpl"], help="manage config templates")
    cmds = p.add_subparsers(dest="template_command", metavar="COMMAND")
    p.set_defaults(func=cmd_list, details=False)
    ls = cmds.add_parser("list", aliases=["ls"], help="list config templates")
    ls.add_argument("-d", "--details", action="store_true", help="show the configs")
    ls.set_defaults(func=cmd_list)
    s = cmds.add_parser("set", help="set config template (deprecated: use create|set-value)")
    s.add_argument("template_name", help="template name")
    s.add_argument("template_file", help="config template file (.yaml)")
    s.set_defaults(func=cmd_set)
    sv = cmds.add_parser("set-value", help="set template attributes")
    sv_cmds = sv.add_subparsers(dest="set_value_command", metavar="COMMAND", required=True)
    c = sv_cmds.add_parser("config", help="update config template")
    c.add_argument("template_name", help="template name")
    c.add_argument("template_file", help="config template file (.yaml)")
    c.set_defaults(func=cmd_set_config)
    d = cmds.add_parser("describe", help="describe config template")
    d.add_argument("template_name", help="template name")
    d.set_defaults(func=cmd_describe)
    cr = cmds.add_parser("create", help="create config template")
    cr.add_argument("template_name", help="template name")
    cr.add_argument("template_file", help="config template file (.yaml)")
    cr.add_argument("-w", "--workspace-name", default=None, help="workspace name")
    cr.set_defaults(func=cmd_create)
    rm = cmds.add_parser("remove", aliases=["rm"], help="remove config template")
    rm.add_argument("template_name", help="template name")
    rm.set_defaults(func=cmd_remove)
