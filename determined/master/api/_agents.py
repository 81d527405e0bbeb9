"""``/api/v1/agents``: this master's slots in 0.37's ``v1Agent`` shape; ``/api/v1/tasks``:
the allocations now live, as ``v1AllocationSummary`` (what ``det slot list`` names slots by).

The local resource manager's slots (GPUs, else CPU slots) form one agent, or several simulated
agents of ``slots_per_agent`` each; a slot in use shows the allocation running on it as its
container. Enabling and disabling agents or slots is not supported yet (501).
"""

from __future__ import annotations

import datetime
import socket
from typing import Any

from fastapi import APIRouter, Request

from determined._version import REFERENCE_VERSION
from determined.master._errors import NotFound, Unimplemented
from determined.master.api._auth import Caller
from determined.master.api._deps import StoreDep
from determined.master.store import _tasks, _trials
from determined.master.store._time import rfc3339

router = APIRouter()


def agent_ids(count: int) -> list[str]:
    """The hostname for a single agent, ``<hostname>-<i>`` for simulated ones."""
    host = socket.gethostname() or "localhost"
    return [host] if count == 1 else [f"{host}-{i}" for i in range(count)]


def agents_json(rm: Any) -> list[dict[str, Any]]:
    """``v1Agent`` per agent of ``rm`` (none without a resource manager)."""
    if rm is None:
        return []
    in_use = rm.occupancy()
    kind, brand = ("TYPE_CUDA", "NVIDIA GPU") if rm.gpu else ("TYPE_CPU", "CPU")
    registered = rfc3339(datetime.datetime.fromtimestamp(rm.started_at, datetime.timezone.utc))
    agents = []
    for agent_id, slots in zip(agent_ids(len(rm.agents)), rm.agents, strict=True):
        slot_json: dict[str, Any] = {}
        containers: dict[str, Any] = {}
        for slot in slots:
            device = {"id": slot, "brand": brand, "uuid": "", "type": kind}
            entry: dict[str, Any] = {
                "id": str(slot),
                "device": device,
                "enabled": True,
                "draining": False,
            }
            allocation_id = in_use.get(slot)
            if allocation_id is not None:
                container = containers.setdefault(
                    allocation_id,
                    {
                        "id": allocation_id,
                        "parent": agent_id,
                        "state": "STATE_RUNNING",
                        "devices": [],
                        "permissionDenied": False,
                    },
                )
                container["devices"].append(device)
                entry["container"] = container
            slot_json[str(slot)] = entry
        used = sum(1 for s in slots if s in in_use)
        stats = {"total": len(slots), "disabled": 0, "draining": 0}
        states = {"STATE_RUNNING": used} if used else {}
        agents.append(
            {
                "id": agent_id,
                "registeredTime": registered,
                "slots": slot_json,
                "containers": containers,
                "resourcePools": ["default"],
                "addresses": ["127.0.0.1"],
                "enabled": True,
                "draining": False,
                "version": REFERENCE_VERSION,
                "slotStats": {
                    "typeStats": {kind: {**stats, "states": states}},
                    "brandStats": {brand: {**stats, "states": states}},
                },
            }
        )
    return agents


@router.get("/api/v1/agents")
def get_agents(request: Request, caller: Caller) -> dict[str, Any]:
    caller.require_user()
    agents = agents_json(request.app.state.rm)
    return {"agents": agents, "pagination": {"offset": 0, "limit": 0, "startIndex": 0,
            "endIndex": len(agents), "total": len(agents)}}  # fmt: skip


@router.get("/api/v1/agents/{agent_id}")
def get_agent(agent_id: str, request: Request, caller: Caller) -> dict[str, Any]:
    caller.require_user()
    for agent in agents_json(request.app.state.rm):
        if agent["id"] == agent_id:
            return {"agent": agent}
    raise NotFound(f"agent {agent_id!r} not found")


def _not_yet(what: str) -> Unimplemented:
    return Unimplemented(f"{what} is not supported yet: this master's slots are always enabled")


@router.post("/api/v1/agents/{agent_id}/enable")
@router.post("/api/v1/agents/{agent_id}/disable")
def toggle_agent(agent_id: str, caller: Caller) -> dict[str, Any]:
    caller.require_user()
    raise _not_yet("enabling or disabling agents")


@router.post("/api/v1/agents/{agent_id}/slots/{slot_id}/enable")
@router.post("/api/v1/agents/{agent_id}/slots/{slot_id}/disable")
def toggle_slot(agent_id: str, slot_id: str, caller: Caller) -> dict[str, Any]:
    caller.require_user()
    raise _not_yet("enabling or disabling slots")


def task_name(trial_id: int, task_id: str) -> str:
    """0.37's name of a trial's task; task ids here are ``<experiment id>.<request id>``."""
    return f"Trial {trial_id} (Experiment {task_id.split('.', 1)[0]})"


def _agent_devices(agents: list[dict[str, Any]], allocation_id: str) -> list[dict[str, Any]]:
    """``{agent id: {devices}}`` per agent the allocation runs on, in agent order."""
    found = []
    for agent in agents:
        container = (agent.get("containers") or {}).get(allocation_id)
        if container is not None:
            found.append({agent["id"]: {"devices": container["devices"]}})
    return found


@router.get("/api/v1/tasks")
def get_tasks(request: Request, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """``GetTasksResponse``: every live allocation (trials' runs; there are no commands,
    notebooks or shells here)."""
    caller.require_user()
    with store.read() as conn:
        live = _trials.live_allocations(conn)
    agents = agents_json(request.app.state.rm)
    summaries = {}
    for alloc in live:
        aid = str(alloc["id"])
        resources = list(alloc["resources"] or [])
        placed = _agent_devices(agents, aid)
        # One container per agent; a single container gets every agent it found.
        if len(placed) != len(resources):
            placed = [{k: v for p in placed for k, v in p.items()}] + [{}] * len(resources)
        summaries[aid] = {
            "taskId": alloc["task_id"],
            "allocationId": aid,
            "name": task_name(int(alloc["trial_id"]), str(alloc["task_id"])),
            "registeredTime": rfc3339(alloc["start_time"]),
            "resourcePool": "default",
            "slotsNeeded": sum(int(r.get("slots") or 0) for r in resources),
            "schedulerType": "local",
            "priority": None,
            "proxyPorts": [],
            "resources": [
                {
                    "resourcesId": str(r.get("resourcesId")),
                    "resourcesType": "local",
                    "allocationId": aid,
                    "containerId": aid,
                    "agentDevices": placed[i],
                }
                for i, r in enumerate(resources)
            ],
        }
    with store.read() as conn:
        running = [t for t in _tasks.live(conn) if t["state"] == "RUNNING"]
    for task in running:
        aid = str(task["allocation_id"])
        placed = _agent_devices(agents, aid)
        summary: dict[str, Any] = {
            "taskId": task["id"],
            "allocationId": aid,
            "name": task["description"],
            "registeredTime": rfc3339(task["start_time"]),
            "resourcePool": "default",
            "slotsNeeded": int(task["slots"]),
            "schedulerType": "local",
            "priority": None,
            "proxyPorts": [
                {"port": p, "proxyTcp": task["type"] == "SHELL", "unauthenticated": False}
                for p in (task["ports"] or {}).values()
            ],
            "resources": [
                {
                    "resourcesId": "0",
                    "resourcesType": "local",
                    "allocationId": aid,
                    "containerId": aid,
                    "agentDevices": placed[0] if placed else {},
                }
            ],
        }
        summaries[aid] = summary
    return {"allocationIdToSummary": summaries}
