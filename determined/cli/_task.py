"""``det task list`` (0.37's columns over ``GET /api/v1/tasks``) and ``det task logs``."""

from __future__ import annotations

import argparse
import pathlib
from typing import Any

from determined.cli import _logs, _ntsc, _render, _session

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
    body = _session.session(args).get("/api/v1/tasks").json()
    return dict(body.get("allocationIdToSummary") or {})


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
    """``det task create CONFIG_FILE [-c DIR]``: a generic task, as 0.37's."""
    import yaml

    from determined.cli import _context

    sess = _session.session(args)
    config = _ntsc.build_config(args)
    files = (
        _context.read_context(args.context, args.include) if args.context or args.include else []
    )
    body = {"config": yaml.safe_dump(config), "contextDirectory": files}
    task_id = sess.post("/api/v1/generic-tasks", json=body).json()["taskId"]
    print(f"Created task {task_id}")
    if args.follow:
        _ntsc.follow_logs(args, task_id)


def cmd_kill(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    sess.post(f"/api/v1/tasks/{args.task_id}/kill")
    print(f"Killed task {args.task_id}")


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
    logs.add_argument("task_id", help="task ID")
    _logs.add_log_args(logs, allocations=True)
    logs.set_defaults(func=_ntsc.cmd_logs)
    create = cmds.add_parser("create", help="create a generic task from a config file")
    create.add_argument("config_file", help="the task config (YAML, with an entrypoint)")
    create.add_argument("-c", "--context", type=pathlib.Path, default=None, help="context dir")
    create.add_argument("-i", "--include", type=pathlib.Path, action="append", default=[])
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    create.add_argument("-f", "--follow", action="store_true", help="follow its logs")
    create.set_defaults(func=cmd_create)
    kill = cmds.add_parser("kill", help="kill a generic task (or any non-trial task)")
    kill.add_argument("task_id", help="task ID")
    kill.set_defaults(func=cmd_kill)
