"""``det agent list`` and ``det slot list`` (0.37's columns, ``--json``/``--csv``) over
``GET /api/v1/agents``; ``enable``/``disable`` reach the master, which says they are not
supported yet."""

from __future__ import annotations

import argparse
from typing import Any

from determined.cli import _render, _session

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
    agents = _session.session(args).get("/api/v1/agents").json().get("agents") or []
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
    tasks = _session.session(args).get("/api/v1/tasks").json().get("allocationIdToSummary")
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
    what = "enable" if args.subcommand == "enable" else "disable"
    _session.session(args).post(f"/api/v1/agents/{args.agent_id}/{what}", json={})


def cmd_slot_toggle(args: argparse.Namespace) -> None:
    what = "enable" if args.subcommand == "enable" else "disable"
    path = f"/api/v1/agents/{args.agent_id}/slots/{args.slot_id}/{what}"
    _session.session(args).post(path, json={})


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
        p = cmds.add_parser(what, help=f"{what} an agent (not supported yet)")
        p.add_argument("agent_id", nargs="?", default=None)
        p.add_argument("--all", action="store_true")
        p.set_defaults(func=cmd_agent_toggle)

    slot = sub.add_parser("slot", aliases=["s"], help="this master's slots")
    cmds = slot.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    _list_parser(cmds, cmd_slot_list, "list slots and what runs on them")
    for what in ("enable", "disable"):
        p = cmds.add_parser(what, help=f"{what} a slot (not supported yet)")
        p.add_argument("agent_id")
        p.add_argument("slot_id")
        p.set_defaults(func=cmd_slot_toggle)
