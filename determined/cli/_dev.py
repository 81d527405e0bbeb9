"""``det dev auth-token|curl``: the session's token, and curl with it, as 0.37's (its
``dev bindings`` lists generated protobuf bindings, which this API does not have)."""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from urllib import parse

from determined.cli import _render, _session


def cmd_auth_token(args: argparse.Namespace) -> None:
    print(_session.session(args).token)


def cmd_curl(args: argparse.Namespace) -> None:
    """``det dev curl [-x] PATH [curl args...]``: curl the master with this login's token."""
    if shutil.which("curl") is None:
        raise _render.CliError("curl is not installed on this machine")
    parsed = parse.urlparse(args.path)
    if parsed.scheme or parsed.netloc:
        raise _render.CliError(
            "give a path on the master (/api/v1/...), not a URL; -m sets the master"
        )
    sess = _session.session(args)
    cmd = [
        "curl",
        f"{sess.master_url}/{args.path.lstrip('/')}",
        "-H",
        f"Authorization: Bearer {sess.token}",
        "-s",
        "--globoff",
        *args.curl_args,
    ]
    if args.x:
        print(shlex.join(cmd))
    if not sys.stdout.isatty():
        sys.exit(subprocess.run(cmd).returncode)
    done = subprocess.run(cmd, stdout=subprocess.PIPE)
    text = done.stdout.decode("utf8", errors="replace")
    try:
        _render.print_json(json.loads(text))
    except ValueError:
        print(text)
    sys.exit(done.returncode)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dev", help="dev-only commands")
    cmds = p.add_subparsers(dest="dev_command", metavar="COMMAND", required=True)
    cmds.add_parser("auth-token", help="print the active user's auth token").set_defaults(
        func=cmd_auth_token
    )
    curl = cmds.add_parser("curl", aliases=["c"], help="invoke curl with this login's token")
    curl.add_argument("-x", action="store_true", help="display the curl command that will run")
    curl.add_argument("path", help="path on the master, such as /api/v1/me")
    curl.add_argument("curl_args", nargs=argparse.REMAINDER, help="curl arguments")
    curl.set_defaults(func=cmd_curl)
