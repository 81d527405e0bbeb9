"""Entry point of ``det``: the command tree and the one place errors become messages.

Commands follow Determined 0.37's CLI (``det e create``, ``det t logs``, ``det c describe``, ...;
see docs/cli.md). A user error (an unreachable master, an unknown experiment, a bad flag) prints
``det: <what went wrong>`` on stderr and exits 1; argparse usage errors exit 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from determined import __version__, errors
from determined.cli import (
    _agent,
    _checkpoint,
    _deploy,
    _dev,
    _experiment,
    _job,
    _master,
    _model,
    _ntsc,
    _preview,
    _project,
    _render,
    _resource_pool,
    _resources,
    _session,
    _task,
    _task_ids,
    _template,
    _tensorboard,
    _trial,
    _user,
    _workspace,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="det",
        description="redetermined command line",
        epilog="examples:\n  det master up\n  det e create const.yaml ./model -f\n  det e list",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--version", action="version", version=f"det {__version__}")
    parser.add_argument(
        "-u", "--user", default=None, metavar="username", help="run as the given user"
    )
    parser.add_argument(
        "-m",
        "--master",
        default=None,
        help="master URL (default: $DET_MASTER, then the master `det master up` started, "
        "then http://localhost:8080)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _master.add_parser(sub)
    _user.add_parser(sub)
    _experiment.add_parser(sub)
    _trial.add_parser(sub)
    _checkpoint.add_parser(sub)
    _tensorboard.add_parser(sub)
    _preview.add_parser(sub)
    _deploy.add_parser(sub)
    _agent.add_parser(sub)
    _task.add_parser(sub)
    _job.add_parser(sub)
    _resources.add_parser(sub)
    _resource_pool.add_parser(sub)
    _template.add_parser(sub)
    _dev.add_parser(sub)
    _workspace.add_parser(sub)
    _project.add_parser(sub)
    _model.add_parser(sub)
    _ntsc.add_parsers(sub)
    version = sub.add_parser("version", help="show the CLI and master versions")
    version.set_defaults(func=_cmd_version)
    _add_help_commands(parser)
    return parser


def _add_help_commands(parser: argparse.ArgumentParser) -> None:
    """``det help``, ``det NOUN help``, ... at every level that has commands, as 0.37: print
    the help of the command above it."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for sub in subs:
        for child in {id(p): p for p in sub.choices.values()}.values():
            _add_help_commands(child)
        if "help" not in sub.choices:
            helper = sub.add_parser("help", help="show help for this command")
            helper.set_defaults(func=lambda _args, at=parser: at.print_help())


def _cmd_version(args: argparse.Namespace) -> None:
    print(f"client: {__version__}")
    url = _session.master_url(args)
    try:
        info = _session.anonymous(args).get("/info").json()
    except errors.MasterUnreachable:
        print(f"master: not reachable at {url}")
        return
    own = info.get("redeterminedVersion")
    served = f" (serving Determined {info.get('version')}'s API)" if own else ""
    print(f"master: {own or info.get('version')}{served} at {url}")


def _master_message(e: errors.MasterError) -> str:
    """The master's own message, then the status, without the client's request line."""
    body: Any = e.body
    message = ""
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict):
            message = str(inner.get("message") or "")
        message = message or str(body.get("message") or body.get("detail") or "")
    if not message:
        message = str(e)
    if e.status == 405 or (e.status == 404 and message.strip().lower() == "not found"):
        request = str(e).split(" failed with", 1)[0]
        return f"this master does not serve {request} yet (HTTP {e.status})"
    return f"{message} (HTTP {e.status})"


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    try:
        _task_ids.resolve_args(args, _session.session)
        func(args)
    except _render.CliError as e:
        print(f"det: {e}", file=sys.stderr)
        return 1
    except errors.MasterUnreachable:
        url = _session.master_url(args)
        print(
            f"det: cannot reach the master at {url}; start one with `det master up` or "
            "point -m/DET_MASTER at a running one",
            file=sys.stderr,
        )
        return 1
    except errors.MasterError as e:
        print(f"det: {_master_message(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
