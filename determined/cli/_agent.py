"""``det agent list`` and ``det slot list`` (0.37's columns, ``--json``/``--csv``) over
``GET /api/v1/agents``; ``det agent|slot enable|disable`` (``--drain`` lets running work
finish) over 0.37's routes."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Literal

from determined.cli import _render, _session
from determined.common.api import _routes

_AGENT_HEADERS = [
    "Agent ID",
    "Version",
    "Registered Time",
    "Slots",
    "Containers",
    "Resource Pool",
    "Enabled",
    "Draining",
    "Addresses",
]
_SLOT_HEADERS = [
    "Agent ID",
    "Resource Pool",
    "Slot ID",
    "Enabled",
    "Draining",
    "Allocation ID",
    "Task Name",
    "Type",
    "Device",
]
_TYPES = {"TYPE_CUDA": "cuda", "TYPE_ROCM": "rocm", "TYPE_CPU": "cpu"}


def _agents(args: argparse.Namespace) -> list[dict[str, Any]]:
    agents = _routes.list_agents(_session.session(args))
    return sorted(agents, key=lambda a: str(a["id"]))


def cmd_agent_list(args: argparse.Namespace) -> None:
    rows = [
        {
            "id": a["id"],
            "version": a.get("version"),
            "registered_time": _render.format_time(a.get("registeredTime")),
            "num_slots": len(a.get("slots") or {}),
            "num_containers": len(a.get("containers") or {}),
            "resource_pools": ", ".join(a.get("resourcePools") or []),
            "enabled": a.get("enabled"),
            "draining": a.get("draining"),
            "addresses": ", ".join(a.get("addresses") or []),
        }
        for a in _agents(args)
    ]
    if args.json:
        _render.print_json(rows)
        return
    _render.table(_AGENT_HEADERS, [list(r.values()) for r in rows], as_csv=args.csv)


def cmd_slot_list(args: argparse.Namespace) -> None:
    tasks = _routes.list_allocations(_session.session(args))
    names = {
        r["containerId"]: str(t.get("name") or "")
        for t in (tasks or {}).values()
        for r in t.get("resources") or []
        if r.get("containerId")
    }
    rows = []
    for agent in _agents(args):
        for slot in (agent.get("slots") or {}).values():
            container = slot.get("container")
            device = slot.get("device") or {}
            rows.append(
                {
                    "agent_id": agent["id"],
                    "resource_pools": ", ".join(agent.get("resourcePools") or []),
                    "slot_id": slot.get("id"),
                    "enabled": slot.get("enabled"),
                    "draining": slot.get("draining"),
                    "allocation_id": container["id"] if container else "FREE",
                    "task_name": names.get(container["id"], "") if container else "FREE",
                    "type": _TYPES.get(str(device.get("type")), "unknown"),
                    "device": device.get("brand"),
                }
            )
    if args.json:
        _render.print_json(rows)
        return
    _render.table(_SLOT_HEADERS, [list(r.values()) for r in rows], as_csv=args.csv)


def cmd_agent_toggle(args: argparse.Namespace) -> None:
    on = args.subcommand == "enable"
    what: Literal["enable", "disable"] = "enable" if on else "disable"
    if bool(args.all) == bool(args.agent_id):
        raise _render.CliError(
            f"Please pass agent id or --all option. See `det agent {what} --help` for details."
        )
    sess = _session.session(args)
    ids = [args.agent_id] if args.agent_id else [str(a["id"]) for a in _agents(args)]
    drain = bool(getattr(args, "drain", False)) and not on
    for agent_id in ids:
        _routes.toggle_agent(sess, agent_id, what, drain=drain)
        print(f"{'Enabled' if on else 'Disabled'} agent {agent_id}.", file=sys.stderr)
    if drain:
        tasks = _routes.list_allocations(sess)
        busy = [
            t
            for t in tasks.values()
            if any(a in ids for r in t.get("resources") or [] for a in r.get("agentDevices") or {})
        ]
        if args.json:
            _render.print_json(busy)
            return
        if busy:
            print("Tasks still in progress on draining nodes.")
            rows = [[t["taskId"], t["allocationId"], t["name"], t["slotsNeeded"]] for t in busy]
            _render.table(
                ["Task ID", "Allocation ID", "Name", "Slots Needed"], rows, as_csv=args.csv
            )
        else:
            print("No tasks in progress on draining nodes.")


def cmd_slot_toggle(args: argparse.Namespace) -> None:
    on = args.subcommand == "enable"
    what: Literal["enable", "disable"] = "enable" if on else "disable"
    body: dict[str, Any] = {} if on else {"drain": bool(args.drain)}
    _routes.toggle_slot(_session.session(args), args.agent_id, args.slot_id, what, body)
    print(f"{'Enabled' if on else 'Disabled'} slot {args.slot_id} of agent {args.agent_id}")


def _list_parser(cmds: argparse._SubParsersAction, func: Any, help: str) -> None:
    ls = cmds.add_parser("list", aliases=["ls"], help=help)
    fmt = ls.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print as JSON")
    fmt.add_argument("--csv", action="store_true", help="print as CSV")
    ls.set_defaults(func=func)


def add_parser(sub: argparse._SubParsersAction) -> None:
    agent = sub.add_parser("agent", aliases=["a"], help="this master's agents")
    cmds = agent.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    _list_parser(cmds, cmd_agent_list, "list agents")
    for what in ("enable", "disable"):
        p = cmds.add_parser(what, help=f"{what} an agent")
        p.add_argument("agent_id", nargs="?", default=None, help="agent ID")
        p.add_argument("--all", action="store_true", help=f"{what} all agents")
        if what == "disable":
            p.add_argument(
                "--drain",
                action="store_true",
                help="let the work running on the agents finish (and list it); without it, "
                "that work is killed and runs again elsewhere",
            )
            fmt = p.add_mutually_exclusive_group()
            fmt.add_argument("--json", action="store_true", help="print as JSON")
            fmt.add_argument("--csv", action="store_true", help="print as CSV")
        p.set_defaults(func=cmd_agent_toggle, json=False, csv=False)

    slot = sub.add_parser("slot", aliases=["s"], help="this master's slots")
    cmds = slot.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    _list_parser(cmds, cmd_slot_list, "list slots and what runs on them")
    for what in ("enable", "disable"):
        p = cmds.add_parser(what, help=f"{what} a slot of an agent")
        p.add_argument("agent_id", help="agent ID")
        p.add_argument("slot_id", type=int, help="slot ID")
        if what == "disable":
            p.add_argument("--drain", action="store_true", help="let its running work finish")
        p.set_defaults(func=cmd_slot_toggle, drain=False)
