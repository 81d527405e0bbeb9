"""The resource manager's side of allocations, over HTTP, for tests and external launchers;
and the group commit's own figures, for benchmarks.

Served only when the master runs with ``--dev-endpoints`` and only to admins: the local
resource manager (next) calls :class:`Experiments` directly instead.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from determined.master._errors import PermissionDenied
from determined.master.api._auth import Caller
from determined.master.api._deps import ExperimentsDep, StoreDep
from determined.master.api._models import Allocate, AllocationExit
from determined.master.api._services import services

router = APIRouter(prefix="/api/v1/dev")


def _admin(caller: Caller) -> None:
    caller.require_user()
    if not caller.info.admin:
        raise PermissionDenied("the dev endpoints are for admins")


@router.post("/trials/{trial_id}/allocate")
def allocate(trial_id: int, body: Allocate, caller: Caller, exps: ExperimentsDep) -> dict[str, Any]:
    """Start a run: ``{allocationId, taskId, runId, token}``."""
    _admin(caller)
    resources = body.resources or [{"resourcesId": "0", "address": "127.0.0.1", "slots": 1}]
    alloc, token = exps.allocate(trial_id, resources)
    return {
        "allocationId": alloc["id"],
        "taskId": alloc["task_id"],
        "runId": alloc["run_id"],
        "token": token,
    }


@router.post("/allocations/{allocation_id}/preempt")
def preempt(allocation_id: str, caller: Caller, exps: ExperimentsDep) -> dict[str, Any]:
    _admin(caller)
    exps.preempt(allocation_id)
    return {}


@router.post("/allocations/{allocation_id}/exit")
def exit_(
    allocation_id: str, body: AllocationExit, caller: Caller, exps: ExperimentsDep
) -> dict[str, Any]:
    """The allocation's processes exited with ``exitCode``: ``{trialState}`` afterwards."""
    _admin(caller)
    return {"trialState": exps.allocation_exited(allocation_id, body.exit_code).value}


@router.get("/group-commit")
def group_commit_stats(caller: Caller, store: StoreDep, request: Request) -> dict[str, Any]:
    """What the recent writes waited inside the master (``_group_commit.CommitStats``), and
    the pid of its write worker (``ingest._write_worker``; null: none runs)."""
    _admin(caller)
    worker = services(request).write_worker
    return {
        **store.commit_stats.summary(),
        "writeWorkerPid": None if worker is None else worker.pid,
    }


@router.post("/group-commit/reset")
def reset_group_commit_stats(caller: Caller, store: StoreDep) -> dict[str, Any]:
    """Forget the figures so far (a benchmark's measured phase starts)."""
    _admin(caller)
    store.commit_stats.reset()
    return {}
