"""``/api/v1/agents``: this master's slots in 0.37's ``v1Agent`` shape; ``/api/v1/tasks``:
the allocations now live, as ``v1AllocationSummary`` (what ``det slot list`` names slots by).

The local resource manager's slots (GPUs, else CPU slots) form one agent, or several simulated
agents of ``slots_per_agent`` each; a slot in use shows the allocation running on it as its
container. An admin enables and disables agents and slots (0.37's routes, ``drain`` in the
disable body); the resource manager reads the states from the store (``_agent_states``).
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from fastapi import APIRouter, Request

from determined._version import REFERENCE_VERSION
from determined.master._errors import NotFound
from determined.master.api._auth import Caller
from determined.master.api._deps import StoreDep
from determined.master.api._models import _Body
from determined.master.api._responses import AgentAnswer, AgentsAnswer, TasksAnswer
from determined.master.api._services import services
from determined.master.resources import ResourceManager
from determined.master.store import _agent_states, _tasks, _trials
from determined.master.store._time import rfc3339

router = APIRouter()


class DisableRequest(_Body):
    """``v1DisableAgentRequest`` / ``v1DisableSlotRequest``: ``drain`` lets running work
    finish."""

    drain: bool = False


def agents_json(rm: ResourceManager | None) -> list[dict[str, Any]]:
    """``v1Agent`` per agent of ``rm`` (none without a resource manager)."""
    if rm is None:
        return []
    in_use = rm.occupancy()
    agent_toggles, slot_toggles = rm.toggles()
    kind, brand = ("TYPE_CUDA", "NVIDIA GPU") if rm.gpu else ("TYPE_CPU", "CPU")
    registered = rfc3339(datetime.datetime.fromtimestamp(rm.started_at, datetime.timezone.utc))
    agents = []
    for agent_id, slots in zip(rm.agent_ids, rm.agents, strict=True):
        slot_json: dict[str, Any] = {}
        containers: dict[str, Any] = {}
        agent_toggle = agent_toggles[agent_id]
        for slot in slots:
            device = {"id": slot, "brand": brand, "uuid": "", "type": kind}
            toggle = slot_toggles[slot]
            entry: dict[str, Any] = {
                "id": str(slot),
                "device": device,
                # As 0.37's v1Slot: enabled only while both it and its agent are; draining
                # when a disable (its own or its agent's) lets the work there finish.
                "enabled": agent_toggle.enabled and toggle.enabled,
                "draining": (not agent_toggle.enabled and agent_toggle.draining)
                or (not toggle.enabled and toggle.draining),
                # 0.37 sends every field of v1Slot: a free slot's container is null.
                "container": None,
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
        off = [s for s in slots if not (agent_toggle.enabled and slot_toggles[s].enabled)]
        draining = [s for s in off if agent_toggle.draining or slot_toggles[s].draining]
        stats = {"total": len(slots), "disabled": len(off), "draining": len(draining)}
        states = {"STATE_RUNNING": used} if used else {}
        agents.append(
            {
                "id": agent_id,
                "registeredTime": registered,
                "slots": slot_json,
                "containers": containers,
                "resourcePools": ["default"],
                "addresses": ["127.0.0.1"],
                "enabled": agent_toggle.enabled,
                "draining": agent_toggle.draining,
                "version": REFERENCE_VERSION,
                "slotStats": {
                    "typeStats": {kind: {**stats, "states": states}},
                    "brandStats": {brand: {**stats, "states": states}},
                },
            }
        )
    return agents


@router.get("/api/v1/agents")
def get_agents(request: Request, caller: Caller) -> AgentsAnswer:
    caller.require_user()
    agents = agents_json(services(request).rm)
    return {"agents": agents, "pagination": {"offset": 0, "limit": 0, "startIndex": 0,
            "endIndex": len(agents), "total": len(agents)}}  # fmt: skip


def _one(request: Request, agent_id: str) -> dict[str, Any]:
    for agent in agents_json(services(request).rm):
        if agent["id"] == agent_id:
            return agent
    raise NotFound(f"agent {agent_id!r} not found")


@router.get("/api/v1/agents/{agent_id}")
def get_agent(agent_id: str, request: Request, caller: Caller) -> AgentAnswer:
    caller.require_user()
    return {"agent": _one(request, agent_id)}


def _agent_slots(rm: ResourceManager | None, agent_id: str) -> list[int]:
    """The agent's slots; 404 naming the agents there are for an unknown one."""
    ids = list(rm.agent_ids) if rm is not None else []
    if rm is None or agent_id not in ids:
        raise NotFound(f"agent {agent_id!r} not found; agents: {', '.join(ids) or 'none'}")
    return list(rm.agents[ids.index(agent_id)])


def _toggle(
    request: Request, store: Any, agent_id: str, slot_id: str, on: bool, drain: bool
) -> None:
    rm = services(request).rm
    slots = _agent_slots(rm, agent_id)
    if slot_id != _agent_states.AGENT and slot_id not in {str(s) for s in slots}:
        raise NotFound(
            f"slot {slot_id!r} not found on agent {agent_id!r}; its slots: "
            f"{', '.join(str(s) for s in slots)}"
        )
    with store.tx() as conn:
        _agent_states.set_state(conn, agent_id, slot_id, _agent_states.Toggle(on, drain and not on))
    if rm is not None:  # it is: _agent_slots found the agent
        rm.wake()  # kill or start work at once


@router.post("/api/v1/agents/{agent_id}/enable")
def enable_agent(
    agent_id: str, request: Request, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """``EnableAgent``: the agent takes new work again (its slots' own states still apply)."""
    caller.require_admin("enable agents")
    _toggle(request, store, agent_id, _agent_states.AGENT, True, False)
    return {"agent": _one(request, agent_id)}


@router.post("/api/v1/agents/{agent_id}/disable")
def disable_agent(
    agent_id: str,
    request: Request,
    caller: Caller,
    store: StoreDep,
    body: DisableRequest | None = None,
) -> dict[str, Any]:
    """``DisableAgent``: no new work; without ``drain`` the work running there is killed (its
    trials run again on enabled slots)."""
    caller.require_admin("disable agents")
    _toggle(request, store, agent_id, _agent_states.AGENT, False, bool(body and body.drain))
    return {"agent": _one(request, agent_id)}


def _slot(request: Request, agent_id: str, slot_id: str) -> dict[str, Any]:
    slots = _one(request, agent_id)["slots"]
    if slot_id not in slots:
        raise NotFound(
            f"slot {slot_id!r} not found on agent {agent_id!r}; its slots: {', '.join(slots)}"
        )
    return dict(slots[slot_id])


@router.get("/api/v1/agents/{agent_id}/slots")
def get_slots(agent_id: str, request: Request, caller: Caller) -> dict[str, Any]:
    """``GetSlotsResponse``: the agent's ``v1Slot``s."""
    caller.require_user()
    return {"slots": list(_one(request, agent_id)["slots"].values())}


@router.get("/api/v1/agents/{agent_id}/slots/{slot_id}")
def get_slot(agent_id: str, slot_id: str, request: Request, caller: Caller) -> dict[str, Any]:
    """``GetSlotResponse``: one ``v1Slot`` (its ``enabled``, ``draining`` and container)."""
    caller.require_user()
    return {"slot": _slot(request, agent_id, slot_id)}


@router.post("/api/v1/agents/{agent_id}/slots/{slot_id}/enable")
def enable_slot(
    agent_id: str, slot_id: str, request: Request, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    caller.require_admin("enable slots")
    _toggle(request, store, agent_id, slot_id, True, False)
    return {"slot": _slot(request, agent_id, slot_id)}


@router.post("/api/v1/agents/{agent_id}/slots/{slot_id}/disable")
def disable_slot(
    agent_id: str,
    slot_id: str,
    request: Request,
    caller: Caller,
    store: StoreDep,
    body: DisableRequest | None = None,
) -> dict[str, Any]:
    caller.require_admin("disable slots")
    _toggle(request, store, agent_id, slot_id, False, bool(body and body.drain))
    return {"slot": _slot(request, agent_id, slot_id)}


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
def get_tasks(request: Request, caller: Caller, store: StoreDep) -> TasksAnswer:
    """``GetTasksResponse``: every live allocation (trials' runs; there are no commands,
    notebooks or shells here)."""
    caller.require_user()
    with store.read() as conn:
        live = _trials.live_allocations(conn)
    agents = agents_json(services(request).rm)
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
                if isinstance(p, int)  # a notebook's unix socket is no port
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


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def _snake_keys(value: Any) -> Any:
    """``allocationId`` -> ``allocation_id`` throughout (the Go structs' JSON names), agent
    ids (the keys of ``agentDevices``) excepted."""
    if isinstance(value, list):
        return [_snake_keys(v) for v in value]
    if not isinstance(value, dict):
        return value
    return {_snake(k): (v if k == "agentDevices" else _snake_keys(v)) for k, v in value.items()}


def legacy_tasks(request: Request, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """0.37's legacy ``GET /tasks`` (served by ``_webui``, whose Tasks page shares the path):
    ``{allocation id: AllocationSummary}`` with the Go structs' snake_case names; the same
    allocations as ``GET /api/v1/tasks``."""
    summaries = get_tasks(request, caller, store)["allocationIdToSummary"]
    return {aid: _snake_keys(summary) for aid, summary in summaries.items()}
