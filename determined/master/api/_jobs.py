"""The job queue in 0.37's shapes: ``GET /api/v1/job-queues`` (``v1Job``),
``/api/v1/job-queues-v2`` (``v1RBACJob``) and ``GET /api/v1/resource-pools`` (the one pool,
``default``, that ``det job list`` asks for its scheduler type). Jobs are the experiments not
yet ended, in the queue order the resource manager starts them in (``resources._queue``:
priority, then position). ``POST /api/v1/job-queues`` (``UpdateJobQueue``) changes a job's
priority or weight (written to its config's ``resources``, as ``det e set priority`` does) or
moves it ahead of or behind another job (which also gives it that job's priority, so the move
holds).
"""

from __future__ import annotations

import datetime
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Request

from determined.master._errors import InvalidArgument, NotFound
from determined.master.api._auth import Caller
from determined.master.api._deps import ExperimentsDep, StoreDep
from determined.master.api._models import _Body
from determined.master.api._services import services
from determined.master.resources import _queue
from determined.master.store import (
    AllocationState,
    State,
    _experiments,
    _job_positions,
    _projects,
    _tasks,
    _trials,
    _users,
)
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
        # A PENDING allocation waits for its resources (a Slurm job in Slurm's queue).
        if alloc is not None and alloc["state"] != AllocationState.PENDING.value:
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
        "priority": _queue.priority_of(config),
        "weight": float(resources.get("weight") or 1),
        "entityId": str(exp_id),
        "jobId": f"experiment-{exp_id}",
        "requestedSlots": per_trial * max(len(trials), 1),
        "allocatedSlots": allocated,
        "name": str(config.get("name") or f"Experiment {exp_id}"),
        "progress": float(exp["progress"] or 0.0),
        "workspaceId": 1,
    }


def _queued_ids(conn: sa.Connection) -> list[int]:
    """The experiments not yet ended, in queue order."""
    moved = _job_positions.positions(conn)
    keys = {}
    for exp_id in _experiments.list_experiment_ids(conn):
        exp = _experiments.get_experiment(conn, exp_id)
        if exp is not None and not State(exp["state"]).is_terminal:
            keys[exp_id] = _queue.sort_key(exp["config"] or {}, moved, exp_id)
    return sorted(keys, key=keys.__getitem__)


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
    """``v1Job`` per experiment not yet ended, in queue order, then per live command,
    notebook, shell, TensorBoard or generic task in submission order (``jobsAhead`` counts
    the jobs before it)."""
    out: list[dict[str, Any]] = []
    with store.read() as conn:
        for exp_id in _queued_ids(conn):
            job = _job(conn, exp_id, len(out))
            if job is not None:
                out.append(job)
        for task in sorted(_tasks.live(conn), key=lambda t: _as_utc(t["start_time"])):
            out.append(_task_job(conn, task, len(out)))
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


class QueueControl(_Body):
    """``v1QueueControl``: what to change of one job."""

    job_id: str
    priority: int | None = None
    weight: float | None = None
    resource_pool: str | None = None
    ahead_of: str | None = None
    behind_of: str | None = None


class UpdateJobQueueRequest(_Body):
    updates: list[QueueControl]


def _experiment_of(conn: sa.Connection, job_id: str) -> int:
    """The experiment behind a job id (``experiment-<id>``, or the bare id); 404 if none."""
    raw = job_id.removeprefix("experiment-")
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise InvalidArgument(f"job id {job_id!r}: write it as experiment-<id> (det job list)")
    exp = _experiments.get_experiment(conn, int(raw))
    if exp is None or State(exp["state"]).is_terminal:
        raise NotFound(f"job {job_id!r} not found among the jobs not yet ended (det job list)")
    return int(raw)


def _move(conn: sa.Connection, exp_id: int, target: int, ahead: bool) -> int:
    """Place ``exp_id`` right before (``ahead``) or after ``target`` in the queue; returns the
    priority it must take for the move to hold (the target's)."""
    if exp_id == target:
        raise InvalidArgument("a job cannot move ahead of or behind itself")
    order = [e for e in _queued_ids(conn) if e != exp_id]
    moved = _job_positions.positions(conn)
    pos = [_job_positions.position_of(moved, e) for e in order]
    i = order.index(target)
    if ahead:
        before = pos[i - 1] if i > 0 else pos[i] - 2.0
        new = (before + pos[i]) / 2
    else:
        after = pos[i + 1] if i + 1 < len(order) else pos[i] + 2.0
        new = (pos[i] + after) / 2
    _job_positions.set_position(conn, exp_id, new)
    target_exp = _experiments.require_experiment(conn, target)
    return _queue.priority_of(target_exp["config"] or {})


@router.post("/api/v1/job-queues")
def update_jobs(
    body: UpdateJobQueueRequest,
    request: Request,
    caller: Caller,
    store: StoreDep,
    exps: ExperimentsDep,
) -> dict[str, Any]:
    """``UpdateJobQueue``: each update changes one job; all are checked before any applies."""
    caller.require_user()
    plans: list[tuple[int, QueueControl]] = []
    with store.read() as conn:
        for update in body.updates:
            exp_id = _experiment_of(conn, update.job_id)
            if update.priority is not None and not 1 <= update.priority <= 99:
                raise InvalidArgument(f"priority {update.priority}: use 1 to 99 (1 runs first)")
            if update.weight is not None and update.weight <= 0:
                raise InvalidArgument(f"weight {update.weight}: use a number above 0")
            if update.resource_pool not in (None, "", "default"):
                raise InvalidArgument(
                    f"resource pool {update.resource_pool!r} does not exist; the only pool is "
                    "'default'"
                )
            if update.ahead_of and update.behind_of:
                raise InvalidArgument("give aheadOf or behindOf, not both")
            for other in (update.ahead_of, update.behind_of):
                if other:
                    _experiment_of(conn, other)
            plans.append((exp_id, update))
    for exp_id, _ in plans:
        caller.check_owner(store, exp_id, "change the queue position of")
    for exp_id, update in plans:
        resources: dict[str, Any] = {}
        if update.priority is not None:
            resources["priority"] = update.priority
        if update.weight is not None:
            resources["weight"] = update.weight
        if update.ahead_of or update.behind_of:
            with store.tx() as conn:
                target = _experiment_of(conn, str(update.ahead_of or update.behind_of))
                resources.setdefault("priority", _move(conn, exp_id, target, bool(update.ahead_of)))
        if resources:
            exps.patch(exp_id, {"resources": resources})
    rm = services(request).rm
    if rm is not None:
        rm.wake()
    return {}


# This master's one resource pool (0.37 may have several, bound to workspaces).
POOL_NAME = "default"


@router.get("/api/v1/workspaces/{workspace_id}/available-resource-pools")
def workspace_pools(workspace_id: int, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """``{resourcePools: [name], pagination}``: the pools the workspace's tasks may use. No
    pool here is bound to a workspace, so every workspace may use the one pool (0.37 lists
    unbound pools for every workspace too)."""
    caller.require_user()
    with store.read() as conn:
        _projects.require_workspace(conn, workspace_id)
    return {"resourcePools": [POOL_NAME], "pagination": _pagination(1)}


class PoolBindings(_Body):
    resource_pool_name: str | None = None
    workspace_ids: list[int] = []
    workspace_names: list[str] = []


def _bindable(pool: str, body: PoolBindings | None, store: Any) -> None:
    """0.37's checks of a binding change: the pool exists, is not the default one, and the
    workspaces exist. This master has one pool, ``default``, so nothing can be bound."""
    if body is not None:
        with store.read() as conn:
            for ws_id in body.workspace_ids:
                _projects.require_workspace(conn, ws_id)
            for name in body.workspace_names:
                if _projects.workspace_by_name(conn, name) is None:
                    raise NotFound(f"workspace {name!r} not found")
    if pool != POOL_NAME:
        raise InvalidArgument(f"pool with name {pool} doesn't exist")
    raise InvalidArgument(
        f"default resource pool {pool} cannot be bound to any workspace (it serves them all; "
        "this master has no other pool)"
    )


@router.post("/api/v1/resource-pools/{pool}/workspace-bindings")
def bind_pool(pool: str, body: PoolBindings, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """``BindRPToWorkspace`` (admins). As 0.37, the pool is checked first: a user binding the
    default pool is told why it cannot be bound."""
    caller.require_user()
    _bindable(pool, body, store)
    caller.require_admin("bind resource pools")
    return {}


@router.put("/api/v1/resource-pools/{pool}/workspace-bindings")
def overwrite_pool_bindings(
    pool: str, body: PoolBindings, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """``OverwriteRPWorkspaceBindings`` (admins), checked as :func:`bind_pool`."""
    caller.require_user()
    _bindable(pool, body, store)
    caller.require_admin("bind resource pools")
    return {}


@router.delete("/api/v1/resource-pools/{pool}/workspace-bindings")
def unbind_pool(pool: str, body: PoolBindings, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """``UnbindRPFromWorkspace`` (admins): no binding exists to remove."""
    caller.require_admin("unbind resource pools")
    if pool != POOL_NAME:
        raise InvalidArgument(f"pool with name {pool} doesn't exist")
    ids = [*body.workspace_ids, *body.workspace_names]
    if ids:
        raise InvalidArgument(f"workspace {ids[0]} and pool with name {pool} binding doesn't exist")
    return {}


@router.get("/api/v1/resource-pools/{pool}/workspace-bindings")
def pool_bindings(pool: str, caller: Caller) -> dict[str, Any]:
    """``ListWorkspacesBoundToRP``: the default pool is bound to none (it serves every one)."""
    caller.require_user()
    if pool != POOL_NAME:
        raise InvalidArgument(f"pool with name {pool} doesn't exist or is not available")
    return {"workspaceIds": [], "pagination": _pagination(0)}


@router.get("/api/v1/resource-pools")
def get_resource_pools(request: Request, caller: Caller) -> dict[str, Any]:
    caller.require_user()
    rm = services(request).rm
    # Disabled slots take no work: they are not available (0.37 counts enabled agents' slots).
    slots = len(rm.slots) - len(rm.slot_blocks()[0]) if rm is not None else 0
    used = len(rm.occupancy()) if rm is not None else 0
    agents = len(rm.agents) if rm is not None else 0
    pool = {
        "name": POOL_NAME,
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
