"""The job queue in 0.37's shapes: ``GET /api/v1/job-queues`` (``v1Job``),
``/api/v1/job-queues-v2`` (``v1RBACJob``) and ``GET /api/v1/resource-pools`` (the one pool,
``default``, that ``det job list`` asks for its scheduler type). Jobs are the experiments not
yet ended, oldest first; changing a job's priority or weight is not supported yet (501).
"""

from __future__ import annotations

import datetime
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Request

from determined.master._errors import Unimplemented
from determined.master.api._auth import Caller
from determined.master.api._deps import StoreDep
from determined.master.store import State, _experiments, _tasks, _trials, _users
from determined.master.store._time import rfc3339

router = APIRouter()


def _job(conn: sa.Connection, exp_id: int, ahead: int) -> dict[str, Any] | None:
    exp = _experiments.get_experiment(conn, exp_id)
    if exp is None or State(exp["state"]).is_terminal:
        return None
    config = exp["config"] or {}
    resources = config.get("resources") or {}
    trials = [t for t in _trials.trials_of(conn, exp_id) if not State(t["state"]).is_terminal]
    per_trial = int(resources.get("slots_per_trial") or 1)
    allocated = 0
    for trial in trials:
        alloc = _trials.live_allocation(conn, int(trial["id"]))
        if alloc is not None:
            allocated += sum(int(r.get("slots") or 0) for r in alloc["resources"] or [])
    if exp["state"] != State.ACTIVE.value:
        state = "STATE_UNSPECIFIED"
    elif allocated:
        state = "STATE_SCHEDULED"
    else:
        state = "STATE_QUEUED"
    owner = _users.require_user(conn, exp["owner_id"])
    return {
        "summary": {"state": state, "jobsAhead": ahead},
        "type": "TYPE_EXPERIMENT",
        "submissionTime": rfc3339(exp["start_time"]),
        "username": owner["username"],
        "userId": exp["owner_id"],
        "resourcePool": "default",
        "isPreemptible": True,
        "priority": int(resources.get("priority") or 42),
        "weight": float(resources.get("weight") or 1),
        "entityId": str(exp_id),
        "jobId": f"experiment-{exp_id}",
        "requestedSlots": per_trial * max(len(trials), 1),
        "allocatedSlots": allocated,
        "name": str(config.get("name") or f"Experiment {exp_id}"),
        "progress": float(exp["progress"] or 0.0),
        "workspaceId": 1,
    }


_TASK_JOB_TYPES = {
    "COMMAND": "TYPE_COMMAND",
    "NOTEBOOK": "TYPE_NOTEBOOK",
    "SHELL": "TYPE_SHELL",
    "TENSORBOARD": "TYPE_TENSORBOARD",
    "GENERIC": "TYPE_GENERIC",
}


def _task_job(conn: sa.Connection, task: dict[str, Any], ahead: int) -> dict[str, Any]:
    """``v1Job`` of a live command, notebook, shell, TensorBoard or generic task."""
    owner = _users.require_user(conn, int(task["owner_id"]))
    running = task["state"] == "RUNNING"
    resources = (task["config"] or {}).get("resources") or {}
    return {
        "summary": {"state": "STATE_SCHEDULED" if running else "STATE_QUEUED", "jobsAhead": ahead},
        "type": _TASK_JOB_TYPES[str(task["type"])],
        "submissionTime": rfc3339(task["start_time"]),
        "username": owner["username"],
        "userId": task["owner_id"],
        "resourcePool": "default",
        "isPreemptible": False,
        "priority": int(resources.get("priority") or 42),
        "weight": float(resources.get("weight") or 1),
        "entityId": str(task["id"]),
        "jobId": str(task["id"]),
        "requestedSlots": int(task["slots"]),
        "allocatedSlots": int(task["slots"]) if running else 0,
        "name": str(task["description"]),
        "progress": 0.0,
        "workspaceId": 1,
    }


def jobs(store: Any) -> list[dict[str, Any]]:
    """``v1Job`` per experiment and non-trial task not yet ended, in submission order."""
    out: list[dict[str, Any]] = []
    with store.read() as conn:
        found: list[tuple[Any, int, Any]] = [
            (exp["start_time"], 0, exp_id)
            for exp_id in sorted(_experiments.list_experiment_ids(conn))
            if (exp := _experiments.get_experiment(conn, exp_id)) is not None
        ]
        found += [(t["start_time"], 1, t) for t in _tasks.live(conn)]
        found.sort(key=lambda f: (_as_utc(f[0]), f[1]))
        for _, is_task, item in found:
            job = _task_job(conn, item, len(out)) if is_task else _job(conn, item, len(out))
            if job is not None:
                out.append(job)
    return out


def _as_utc(when: Any) -> Any:
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.timezone.utc)


def _pagination(total: int) -> dict[str, int]:
    return {"offset": 0, "limit": 0, "startIndex": 0, "endIndex": total, "total": total}


@router.get("/api/v1/job-queues")
def get_jobs(caller: Caller, store: StoreDep, orderBy: str = "ORDER_BY_ASC") -> dict[str, Any]:  # noqa: N803
    caller.require_user()
    found = jobs(store)
    if orderBy == "ORDER_BY_DESC":
        found.reverse()
    return {"jobs": found, "pagination": _pagination(len(found))}


@router.get("/api/v1/job-queues-v2")
def get_jobs_v2(caller: Caller, store: StoreDep, orderBy: str = "ORDER_BY_ASC") -> dict[str, Any]:  # noqa: N803
    caller.require_user()
    found = jobs(store)
    if orderBy == "ORDER_BY_DESC":
        found.reverse()
    return {"jobs": [{"full": j} for j in found], "pagination": _pagination(len(found))}


@router.post("/api/v1/job-queues")
def update_jobs(caller: Caller) -> dict[str, Any]:
    caller.require_user()
    raise Unimplemented(
        "changing a job's priority, weight or resource pool (det job update) is not supported "
        "yet; set resources.priority or resources.weight with det experiment set"
    )


@router.get("/api/v1/resource-pools")
def get_resource_pools(request: Request, caller: Caller) -> dict[str, Any]:
    caller.require_user()
    rm = request.app.state.rm
    slots = len(rm.slots) if rm is not None else 0
    used = len(rm.occupancy()) if rm is not None else 0
    agents = len(rm.agents) if rm is not None else 0
    pool = {
        "name": "default",
        "description": "this master's slots",
        "type": "RESOURCE_POOL_TYPE_STATIC",
        "numAgents": agents,
        "slotsAvailable": slots,
        "slotsUsed": used,
        "slotType": "TYPE_CUDA" if rm is not None and rm.gpu else "TYPE_CPU",
        "auxContainerCapacity": 0,
        "auxContainersRunning": 0,
        "defaultComputePool": True,
        "defaultAuxPool": True,
        "preemptible": True,
        "minAgents": agents,
        "maxAgents": agents,
        "auxContainerCapacityPerAgent": 0,
        "schedulerType": "SCHEDULER_TYPE_PRIORITY",
        "schedulerFittingPolicy": "FITTING_POLICY_BEST",
        "location": "local",
        "imageId": "",
        "instanceType": "",
        "masterUrl": "",
        "masterCertName": "",
        "startupScript": "",
        "containerStartupScript": "",
        "agentDockerNetwork": "",
        "agentDockerRuntime": "",
        "agentDockerImage": "",
        "agentFluentImage": "",
        "maxIdleAgentPeriod": 0,
        "maxAgentStartingPeriod": 0,
        "details": {},
        "clusterName": "",
        "resourceManagerMetadata": {},
    }
    return {"resourcePools": [pool], "pagination": _pagination(1)}
