"""``det deploy local cluster-up|cluster-down|master-up|master-down``: 0.37's container
deployment commands mapped onto this machine's master daemon (``det master up|down``).

There are no containers, agents or Postgres images here: the master runs as a process of
this machine and runs trials on its own slots. 0.37's flags that only steer containers are
accepted and ignored with one line saying so; flags that would change what the master does
(a master config file, a storage path, an initial password, the enterprise image) are
refused, because silently dropping them would start a different master than asked for.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from determined.cli import _daemon, _render

# 0.37 flags that only steer docker containers or images: accepted and ignored.
_IGNORED = (
    "det_version",
    "cluster_name",
    "master_name",
    "db_password",
    "no_autorestart",
    "auto_work_dir",
    "image_repo_prefix",
    "agents",
    "gpu",
    "delete_db",
)
# 0.37 flags whose meaning cannot be kept here: refused with a message.
_REFUSED = {
    "master_config_path": "a master config file",
    "storage_host_path": "--storage-host-path",
    "initial_user_password": "--initial-user-password",
    "enterprise_edition": "the enterprise edition",
}
_DEFAULTS = {
    "det_version": None,
    "cluster_name": "determined",
    "master_name": None,
    "db_password": "postgres",
    "no_autorestart": False,
    "auto_work_dir": None,
    "image_repo_prefix": "determinedai",
    "agents": 1,
    "gpu": None,
    "delete_db": False,
}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _check_flags(args: argparse.Namespace) -> None:
    for dest, what in _REFUSED.items():
        value = getattr(args, dest, None)
        if value not in (None, False):
            raise _render.CliError(
                f"{_flag(dest)}: {what} cannot apply to this master (no containers); start "
                "it with `det master up` (see docs/cli.md) instead"
            )
    ignored = [
        _flag(dest)
        for dest in _IGNORED
        if hasattr(args, dest) and getattr(args, dest) != _DEFAULTS[dest]
    ]
    if ignored:
        print(
            f"ignoring {', '.join(ignored)}: this master runs as a local process, "
            "without containers or agents",
            file=sys.stderr,
        )


def cmd_up(args: argparse.Namespace) -> None:
    _check_flags(args)
    print(
        f"{args.deploy_command}: starting the master as `det master up --port {args.master_port}`"
    )
    master = _daemon.start(args.master_port)
    print(f"Master running at {master.url} (pid {master.pid}, data dir {master.data_dir})")


def cmd_down(args: argparse.Namespace) -> None:
    _check_flags(args)
    print(f"{args.deploy_command}: stopping the master as `det master down`")
    from determined.cli import _master

    _master.cmd_down(args)


def _up_flags(p: argparse.ArgumentParser, cluster: bool) -> None:
    source = p.add_mutually_exclusive_group()
    source.add_argument("--master-config-path", type=pathlib.Path, default=None)
    source.add_argument("--storage-host-path", type=pathlib.Path, default=None)
    p.add_argument("--initial-user-password", type=str, default=None)
    if cluster:
        p.add_argument("--agents", type=int, default=1, help="ignored: no agents here")
    p.add_argument(
        "--master-port", type=int, default=_daemon.DEFAULT_PORT, help="TCP port (default 8080)"
    )
    p.add_argument("--cluster-name", type=str, default="determined", help="ignored")
    if not cluster:
        p.add_argument("--master-name", type=str, default=None, help="ignored")
        p.add_argument("--image-repo-prefix", type=str, default="determinedai", help="ignored")
    p.add_argument("--det-version", type=str, default=None, help="ignored")
    p.add_argument("--db-password", type=str, default="postgres", help="ignored")
    p.add_argument("--delete-db", action="store_true", help="ignored")
    if cluster:
        gpu = p.add_mutually_exclusive_group()
        gpu.add_argument("--gpu", dest="gpu", action="store_true", default=None, help="ignored")
        gpu.add_argument("--no-gpu", dest="gpu", action="store_false", help="ignored")
    p.add_argument("--no-autorestart", action="store_true", help="ignored")
    p.add_argument("--auto-work-dir", type=pathlib.Path, default=None, help="ignored")
    p.add_argument("--enterprise-edition", action="store_true")
    p.set_defaults(func=cmd_up)


def _down_flags(p: argparse.ArgumentParser, cluster: bool) -> None:
    if not cluster:
        p.add_argument("--master-name", type=str, default=None, help="ignored")
    p.add_argument("--cluster-name", type=str, default="determined", help="ignored")
    p.add_argument("--delete-db", action="store_true", help="ignored")
    p.set_defaults(func=cmd_down)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "deploy", aliases=["d"], help="0.37's deployment commands, mapped to `det master`"
    )
    targets = p.add_subparsers(dest="deploy_target", metavar="TARGET", required=True)
    local = targets.add_parser("local", help="the master of this machine")
    cmds = local.add_subparsers(dest="deploy_command", metavar="COMMAND", required=True)
    _up_flags(cmds.add_parser("cluster-up", help="= det master up"), cluster=True)
    _down_flags(cmds.add_parser("cluster-down", help="= det master down"), cluster=True)
    _up_flags(cmds.add_parser("master-up", help="= det master up"), cluster=False)
    _down_flags(cmds.add_parser("master-down", help="= det master down"), cluster=False)
