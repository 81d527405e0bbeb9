"""``det task list`` (0.37's columns over ``GET /api/v1/tasks``) and ``det task logs``."""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any

from determined.cli import _logs, _ntsc, _render, _session, _task_ids
from determined.common.api import _routes

_HEADERS = [
    "Task ID",
    "Allocation ID",
    "Name",
    "Slots Needed",
    "Registered Time",
    "Agent",
    "Priority",
    "Resource Pool",
    "Ports",
]


def _tasks(args: argparse.Namespace) -> dict[str, Any]:
    return _routes.list_allocations(_session.session(args))


def _agent(task: dict[str, Any]) -> Any:
    resources = task.get("resources")
    if resources is None:
        return "unassigned"
    agents = [a for r in resources for a in (r.get("agentDevices") or {})]
    return agents[0] if len(agents) == 1 else agents


def cmd_list(args: argparse.Namespace) -> None:
    tasks = _tasks(args)
    if args.json:
        _render.print_json(tasks)
        return
    ordered = sorted(tasks.values(), key=lambda t: str(t.get("registeredTime") or ""))
    rows = [
        [
            t.get("taskId"),
            t.get("allocationId"),
            t.get("name"),
            t.get("slotsNeeded"),
            _render.format_time(t.get("registeredTime")),
            _agent(t),
            t.get("priority") if t.get("schedulerType") == "priority" else "N/A",
            t.get("resourcePool"),
            ",".join(str(p["port"]) for p in t.get("proxyPorts") or [] if p.get("port")),
        ]
        for t in ordered
    ]
    _render.table(_HEADERS, rows, as_csv=args.csv)


def cmd_create(args: argparse.Namespace) -> None:
    """``det task create CONFIG_FILE [-c DIR]``: a generic task, as 0.37's (``--fork``,
    ``--parent``, ``--inherit_context``, ``--no_pause``, ``--project_id``)."""
    import yaml

    from determined.cli import _context

    config = _ntsc.build_config(args)
    files = (
        _context.read_context(args.context, args.include) if args.context or args.include else []
    )
    body: dict[str, Any] = {"config": yaml.safe_dump(config), "contextDirectory": files}
    for key, value in (
        ("forkedFrom", args.fork),
        ("parentId", args.parent),
        ("projectId", args.project_id),
    ):
        if value is not None:
            body[key] = value
    if args.inherit_context:
        body["inheritContext"] = True
    if args.no_pause:
        body["noPause"] = True
    _create(args, body)


def _create(args: argparse.Namespace, body: dict[str, Any]) -> None:
    task_id = _routes.create_generic_task(_session.session(args), body)
    print(f"Created task {task_id}")
    if args.follow:
        _ntsc.follow_logs(args, task_id)


def cmd_fork(args: argparse.Namespace) -> None:
    """``det task fork PARENT``: a new generic task with the parent's config and context."""
    body: dict[str, Any] = {"config": "", "contextDirectory": [], "forkedFrom": args.parent_task_id}
    if args.project_id is not None:
        body["projectId"] = args.project_id
    _create(args, body)


def cmd_config(args: argparse.Namespace) -> None:
    import yaml

    text = _routes.get_task_config(_session.session(args), args.task_id)
    config = json.loads(text) if text else {}
    if args.json:
        _render.print_json(config)
    else:
        print(yaml.safe_dump(config, default_flow_style=False), end="")


def cmd_kill(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    _routes.kill_task(sess, args.task_id, kill_from_root=bool(args.root))
    print(f"Killed task {args.task_id}")


def cmd_pause(args: argparse.Namespace) -> None:
    _routes.pause_task(_session.session(args), args.task_id)
    print(f"Paused task: {args.task_id}")


def cmd_unpause(args: argparse.Namespace) -> None:
    _routes.unpause_task(_session.session(args), args.task_id)
    print(f"Unpaused task: {args.task_id}")


def cmd_cleanup_logs(args: argparse.Namespace) -> None:
    removed = _routes.cleanup_logs(_session.session(args))
    print(f"Deleted {removed} rows of log entries.")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("task", help="this master's tasks (trials' allocations)")
    p.set_defaults(func=cmd_list, json=False, csv=False)
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND")
    ls = cmds.add_parser("list", aliases=["ls"], help="list the live tasks")
    fmt = ls.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="print as CSV")
    fmt.add_argument("--json", action="store_true", help="print as JSON")
    ls.set_defaults(func=cmd_list)
    logs = cmds.add_parser("logs", help="fetch a task's logs")
    logs.add_argument("task_id", type=_task_ids.TaskRef, help="task ID")
    _logs.add_log_args(logs, allocations=True)
    logs.set_defaults(func=_ntsc.cmd_logs)
    create = cmds.add_parser("create", help="create a generic task from a config file")
    create.add_argument("config_file", help="the task config (YAML, with an entrypoint)")
    create.add_argument("-c", "--context", type=pathlib.Path, default=None, help="context dir")
    create.add_argument("-i", "--include", type=pathlib.Path, action="append", default=[])
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    create.add_argument("-f", "--follow", action="store_true", help="follow its logs")
    create.add_argument(
        "--fork",
        type=_task_ids.TaskRef,
        default=None,
        help="start from this task's config and context",
    )
    create.add_argument(
        "-p", "--parent", type=_task_ids.TaskRef, default=None, help="the parent task's ID"
    )
    create.add_argument(
        "--inherit_context", action="store_true", help="run in the parent's context directory"
    )
    create.add_argument(
        "--no_pause", action="store_true", help="a pause of the parent passes this task by"
    )
    create.add_argument("--project_id", type=int, default=None, help="the project it belongs to")
    create.set_defaults(func=cmd_create)
    fork = cmds.add_parser("fork", help="a new generic task with a task's config and context")
    fork.add_argument("parent_task_id", type=_task_ids.TaskRef, help="the task to fork")
    fork.add_argument("-f", "--follow", action="store_true", help="follow its logs")
    fork.add_argument("--project_id", type=int, default=None, help="the project it belongs to")
    fork.set_defaults(func=cmd_fork)
    config = cmds.add_parser("config", help="print a task's config (YAML)")
    config.add_argument("task_id", type=_task_ids.TaskRef, help="task ID")
    config.add_argument("--json", action="store_true", help="print it as JSON")
    config.set_defaults(func=cmd_config)
    kill = cmds.add_parser("kill", help="kill a generic task (or any non-trial task)")
    kill.add_argument("task_id", type=_task_ids.TaskRef, help="task ID")
    kill.add_argument("--root", action="store_true", help="kill its whole tree, from its root")
    kill.set_defaults(func=cmd_kill)
    pause = cmds.add_parser("pause", help="stop a generic task's run and keep it paused")
    pause.add_argument("task_id", type=_task_ids.TaskRef, help="task ID")
    pause.set_defaults(func=cmd_pause)
    unpause = cmds.add_parser("unpause", help="run a paused generic task again")
    unpause.add_argument("task_id", type=_task_ids.TaskRef, help="task ID")
    unpause.set_defaults(func=cmd_unpause)
    cleanup = cmds.add_parser("cleanup-logs", help="drop task logs past their retention now")
    cleanup.set_defaults(func=cmd_cleanup_logs)
