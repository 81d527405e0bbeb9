"""``det master up|down|status|info|config|logs``: the master daemon of this machine's data dir
(``_daemon``), and what the running master says about itself."""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator

from determined.cli import _cluster_message, _daemon, _render, _session
from determined.common import _paths
from determined.common.api import Session, _routes


def cmd_up(args: argparse.Namespace) -> None:
    master = _daemon.start(
        args.port,
        cpu_slots=args.cpu_slots,
        db_url=args.db_url,
        host=args.host,
        config_file=args.config_file,
    )
    print(f"Master running at {master.url} (pid {master.pid}, data dir {master.data_dir})")
    print(f"Logs: {master.data_dir / _daemon.LOG_FILE}; stop it with `det master down`")


def cmd_down(args: argparse.Namespace) -> None:
    data_dir = _paths.data_dir()
    master = _daemon.running(data_dir)
    if master is None:
        _daemon.forget(data_dir)
        print(f"No master is running from {data_dir}")
        return
    _daemon.stop(master)
    print(f"Stopped the master at {master.url} (pid {master.pid})")


def cmd_status(args: argparse.Namespace) -> None:
    data_dir = _paths.data_dir()
    master = _daemon.running(data_dir)
    if master is None:
        raise _render.CliError(f"No master is running from {data_dir}")
    state = "answering" if _daemon.answers(master.url) else "not answering"
    print(f"Master running at {master.url} (pid {master.pid}, data dir {data_dir}, {state})")


def cmd_migrate_store(args: argparse.Namespace) -> None:
    """Move this data dir's history into another (empty) database and use it from now on."""
    data_dir = _paths.data_dir().expanduser().resolve()
    if _daemon.running(data_dir) is not None:
        raise _render.CliError(
            f"the master from {data_dir} is running; stop it with `det master down` first"
        )
    source = _daemon.remembered_db_url(data_dir)
    if source is None and not (data_dir / "master.db").exists():
        raise _render.CliError(f"no master database in {data_dir}: nothing to migrate")
    # The master's own store code copies, in a process of its own (as `det master up` runs
    # the master): the CLI never imports the master.
    where = ["--from", source] if source is not None else ["--data-dir", str(data_dir)]
    cmd = [sys.executable, "-m", "determined.master.store", "copy", "--to", args.to, *where]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode == 2:  # refused as asked (store/__main__.py): the reason
        raise _render.CliError(done.stderr.strip())
    if done.returncode != 0:
        raise _render.CliError(f"copying the store failed:\n{done.stderr.strip()}")
    copied = json.loads(done.stdout)
    counts: dict[str, int] = copied["counts"]
    _daemon.remember_db_url(data_dir, args.to)
    rows = ", ".join(f"{counts.get(t, 0)} {t}" for t in ("experiments", "trials", "checkpoints"))
    print(f"Copied {sum(counts.values())} rows ({rows}, ...) into the new database.")
    old = copied["source"]
    print(f"`det master up` uses it from now on; {old} is left as it was, as a backup.")


def cmd_info(args: argparse.Namespace) -> None:
    info = _routes.get_master(_session.anonymous(args))
    if args.json:
        _render.print_json(info)
    else:
        _render.print_yaml(info)


def cmd_config_show(args: argparse.Namespace) -> None:
    config = _routes.get_master_config(_session.session(args))
    if args.json:
        _render.print_json(config)
    else:
        _render.print_yaml(config)


def cmd_config_set(args: argparse.Namespace) -> None:
    body: dict[str, object] = {}
    paths = []
    if args.log_level is not None:
        body["level"] = args.log_level
        paths.append("log.level")
    if args.log_color is not None:
        body["color"] = args.log_color == "on"
        paths.append("log.color")
    if not paths:
        raise _render.CliError(
            "give at least one of --log.level and --log.color (the fields 0.37 lets you set)"
        )
    _routes.patch_master_log_config(_session.session(args), body, paths)
    print("Successfully made changes to the master config.")


def master_log_lines(sess: Session, *, follow: bool = False, tail: int = 0) -> Iterator[str]:
    """The master's own log records as ``det master logs`` prints them (admins only)."""
    resp = _routes.stream_master_logs(sess, follow=follow, tail=tail)
    with resp:
        for raw in resp.iter_lines():
            if not raw:
                continue
            entry = json.loads(raw).get("result", {}).get("logEntry", {})
            yield f"{entry.get('timestamp')} [{entry.get('level') or ''}]: {entry.get('message')}"


def cmd_logs(args: argparse.Namespace) -> None:
    for line in master_log_lines(_session.session(args), follow=args.follow, tail=args.tail):
        print(line)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("master", help="manage the master")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    up = cmds.add_parser("up", help="start a master daemon from the data dir ($DET_HOME)")
    up.add_argument(
        "--port", type=int, default=_daemon.DEFAULT_PORT, help="TCP port (default 8080)"
    )
    up.add_argument("--cpu-slots", type=int, default=None, help="CPU slots without GPUs")
    up.add_argument(
        "--db-url",
        default=None,
        help="the database: sqlite:///FILE or postgresql://USER:PASSWORD@HOST:PORT/DB (default: "
        "the last one given, else SQLite in the data dir); remembered for the next `up`",
    )
    up.add_argument(
        "--host",
        default=None,
        help="address to bind (default 127.0.0.1); another one needs passwords on the "
        "default users admin and determined",
    )
    up.add_argument(
        "--config-file",
        type=pathlib.Path,
        default=None,
        help="a master config YAML (docs/master.md: task_container_defaults, resource_pools, "
        "security, ...); the options given here win over it",
    )
    up.set_defaults(func=cmd_up)
    migrate = cmds.add_parser(
        "migrate-store",
        help="move this data dir's history into another empty database (e.g. PostgreSQL)",
    )
    migrate.add_argument("--to", required=True, metavar="DB_URL", help="the empty database")
    migrate.set_defaults(func=cmd_migrate_store)
    cmds.add_parser("down", help="stop the master daemon").set_defaults(func=cmd_down)
    cmds.add_parser("status", help="is the master daemon running?").set_defaults(func=cmd_status)
    info = cmds.add_parser("info", help="fetch master info")
    info_fmt = info.add_mutually_exclusive_group()
    info_fmt.add_argument("--json", action="store_true", help="print as JSON")
    info_fmt.add_argument("--yaml", action="store_true", help="print as YAML (the default)")
    info.set_defaults(func=cmd_info)
    _cluster_message.add_parser(cmds)
    logs = cmds.add_parser("logs", help="fetch the master's own logs (admins)")
    logs.add_argument("-f", "--follow", action="store_true", help="keep following new lines")
    logs.add_argument("--tail", type=int, default=None, help="only the last N lines")
    logs.set_defaults(func=cmd_logs)
    config = cmds.add_parser("config", help="show the master config (admins)")
    config_fmt = config.add_mutually_exclusive_group()
    config_fmt.add_argument("--json", action="store_true", help="print as JSON")
    config_fmt.add_argument("--yaml", action="store_true", help="print as YAML (the default)")
    config.set_defaults(func=cmd_config_show)
    config_cmds = config.add_subparsers(dest="config_command", metavar="COMMAND")
    show = config_cmds.add_parser("show", help="show the master config (the default)")
    fmt = show.add_mutually_exclusive_group()
    # SUPPRESS: `det master config --json show` keeps the --json given before `show`.
    fmt.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="as JSON")
    fmt.add_argument("--yaml", action="store_true", default=argparse.SUPPRESS, help="as YAML")
    show.set_defaults(func=cmd_config_show)
    set_ = config_cmds.add_parser("set", help="change log settings of the running master")
    set_.add_argument("--log.level", dest="log_level", default=None)
    set_.add_argument("--log.color", dest="log_color", choices=("on", "off"), default=None)
    set_.set_defaults(func=cmd_config_set)
