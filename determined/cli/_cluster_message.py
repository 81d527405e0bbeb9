"""``det master cluster-message set|clear|get``: the admin's cluster-wide message, as in 0.37."""

from __future__ import annotations

import argparse
import datetime

from determined.cli import _render, _session
from determined.common.api import Session, _routes


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cmd_set(args: argparse.Namespace) -> None:
    if args.message is None:
        raise _render.CliError("Provide a message using the -m flag.")
    body = {
        "message": args.message,
        "startTime": args.start or _now(),
        "endTime": args.end,
        "duration": args.duration,
    }
    _routes.put_cluster_message(_session.session(args), body)


def cmd_clear(args: argparse.Namespace) -> None:
    _routes.delete_cluster_message(_session.session(args))


def cmd_get(args: argparse.Namespace) -> None:
    body = _routes.get_cluster_message(_session.session(args))
    if args.json:
        _render.print_json(body)
    else:
        _render.print_yaml(body)


def show_active(sess: Session) -> str | None:
    """The message users see now (``GET /api/v1/master``), as one line, or None."""
    message = _routes.get_master(sess).get("clusterMessage")
    return None if not message else f"Cluster message: {message['message']}"


def add_parser(master_cmds: argparse._SubParsersAction) -> None:
    p = master_cmds.add_parser("cluster-message", help="set or clear cluster-wide message")
    cmds = p.add_subparsers(dest="cluster_message_command", metavar="COMMAND", required=True)
    s = cmds.add_parser("set", help="create or edit the displayed cluster-wide message")
    s.add_argument("-s", "--start", default=None, help="start (RFC 3339); default: now")
    end = s.add_mutually_exclusive_group()
    end.add_argument("-e", "--end", default=None, help="end (RFC 3339); default: never")
    end.add_argument("-d", "--duration", default=None, help="how long, as a Go duration: 24h")
    s.add_argument("-m", "--message", default=None, help="text of the message to show users")
    s.set_defaults(func=cmd_set)
    c = cmds.add_parser("clear", help="clear cluster-wide message")
    c.add_argument("-c", "--clear", action="store_true", help="accepted, as in 0.37")
    c.set_defaults(func=cmd_clear)
    g = cmds.add_parser("get", help="get cluster-wide message")
    out = g.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print as JSON")
    out.add_argument("--yaml", action="store_true", help="print as YAML (the default)")
    g.set_defaults(func=cmd_get)
