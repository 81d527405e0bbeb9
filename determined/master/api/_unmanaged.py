"""Unmanaged experiments (core_v2): the routes 0.37's ``determined.experimental.core_v2``
calls, with 0.37's wire shapes. The caller is a user's own process with the user's login
token; nothing here schedules anything (docs/core_v2.md).

- ``POST /experiments`` with ``unmanaged: true`` (in ``_experiments``) creates one;
- ``PUT /experiments/by-external-id/{id}`` finds or creates one by its external id;
- ``POST /trials`` and ``PUT /trials`` create a trial (the latter finds it by external id);
- ``POST /trials/{id}/start`` starts a run: ``{trialRunId, stepsCompleted, latestCheckpoint}``;
- ``PATCH /trials/{id}`` reports the trial's state (none: a heartbeat);
- ``POST /task-logs`` (no ``/api/v1``): 0.37's unmanaged log shipper's lines.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body

from determined.common.api._session import json_safe
from determined.master import experiment
from determined.master._errors import InvalidArgument
from determined.master.api import _logs, _redact
from determined.master.api._auth import Caller
from determined.master.api._deps import ExperimentsDep, LogHookDep, StoreDep
from determined.master.api._models import (
    CreateExperiment,
    CreateTrial,
    PatchTrial,
    PostTaskLogs,
    PutTrial,
    StartTrial,
    TaskLog,
)
from determined.master.api._wire import experiment_json, trial_json
from determined.master.experiment import Experiments
from determined.master.store import Store, _experiments, _projects, _trials

router = APIRouter(prefix="/api/v1")
# 0.37's unmanaged log shipper posts to the master's root (the path of its log forwarder).
root_router = APIRouter()


MAX_EXTERNAL_ID = 255  # the column's width


def _check_external_id(what: str, value: str) -> None:
    if not value.strip() or len(value) > MAX_EXTERNAL_ID:
        raise InvalidArgument(f"{what} must be 1 to {MAX_EXTERNAL_ID} characters, not {len(value)}")


def create_unmanaged_experiment(
    body: CreateExperiment,
    caller: Caller,
    exps: Experiments,
    store: Store,
    external_id: str | None = None,
) -> dict[str, Any]:
    """``{experiment, config}`` of the new (or, by external id, existing) experiment."""
    caller.require_user()
    if not body.unmanaged:
        raise InvalidArgument(
            "only unmanaged experiments can be created here: send unmanaged: true (an "
            "experiment the master runs is created with POST /api/v1/experiments)"
        )
    config = experiment.parse_unmanaged_config(body.config)
    with store.read() as conn:
        names = {"workspace": config.workspace, "project": config.project}
        project_id = _projects.target_project(conn, body.project_id, names)
    exp_id = exps.create_unmanaged(
        config,
        body.config,
        owner_id=caller.info.user_id,
        external_id=external_id,
        project_id=project_id,
    )
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, exp_id)
        created = experiment_json(conn, exp)
    return {"experiment": created, "config": _redact.redact(exp["config"]), "warnings": []}


@router.put("/experiments/by-external-id/{external_experiment_id}")
def put_experiment(
    external_experiment_id: str,
    body: CreateExperiment,
    caller: Caller,
    exps: ExperimentsDep,
    store: StoreDep,
) -> dict[str, Any]:
    _check_external_id("externalExperimentId", external_experiment_id)
    return create_unmanaged_experiment(body, caller, exps, store, external_experiment_id)


def _create_trial(
    body: CreateTrial, caller: Caller, exps: Experiments, store: Store, external_id: str | None
) -> dict[str, Any]:
    if not body.unmanaged:
        raise InvalidArgument(
            "only unmanaged trials can be created (send unmanaged: true); the trials of an "
            "experiment the master runs come from its searcher"
        )
    caller.check_owner(store, body.experiment_id, "add a trial to")
    trial_id = exps.create_unmanaged_trial(
        body.experiment_id, json_safe(body.hparams or {}), external_id=external_id
    )
    with store.read() as conn:
        return {"trial": trial_json(conn, _trials.require_trial(conn, trial_id))}


@router.post("/trials")
def create_trial(
    body: CreateTrial, caller: Caller, exps: ExperimentsDep, store: StoreDep
) -> dict[str, Any]:
    return _create_trial(body, caller, exps, store, None)


@router.put("/trials")
def put_trial(
    body: PutTrial, caller: Caller, exps: ExperimentsDep, store: StoreDep
) -> dict[str, Any]:
    _check_external_id("externalTrialId", body.external_trial_id)
    return _create_trial(body.create_trial_request, caller, exps, store, body.external_trial_id)


@router.post("/trials/{trial_id}/start")
def start_trial(
    trial_id: int, body: StartTrial, caller: Caller, exps: ExperimentsDep, store: StoreDep
) -> dict[str, Any]:
    caller.check_reporter(store, trial_id)
    start = exps.start_unmanaged_trial(trial_id)
    return {
        "trialRunId": start.trial_run_id,
        "stepsCompleted": start.steps_completed,
        "latestCheckpoint": start.latest_checkpoint,
    }


@router.patch("/trials/{trial_id}")
def patch_trial(
    trial_id: int, body: PatchTrial, caller: Caller, exps: ExperimentsDep, store: StoreDep
) -> dict[str, Any]:
    caller.check_reporter(store, trial_id)
    if body.trial_id is not None and body.trial_id != trial_id:
        raise InvalidArgument(f"trialId {body.trial_id} in the body, {trial_id} in the path")
    # With a state or without (0.37's heartbeat), the trial's process lives.
    exps.report_unmanaged_state(trial_id, body.state or None)
    with store.read() as conn:
        return {"trial": trial_json(conn, _trials.require_trial(conn, trial_id))}


@root_router.post("/task-logs", include_in_schema=False)
def post_task_logs_037(
    caller: Caller,
    store: StoreDep,
    on_logs: LogHookDep,
    body: list[dict[str, Any]] = Body(...),
) -> dict[str, Any]:
    """``[{task_id, timestamp, rank?, log}]``: stored as ``POST /api/v1/task/logs`` stores
    lines; only the trial's owner may post them."""
    lines = []
    for entry in body:
        if not isinstance(entry.get("task_id"), str) or not isinstance(entry.get("log"), str):
            raise InvalidArgument("each log line needs a task_id and a log (both strings)")
        rank = str(entry.get("rank", ""))
        lines.append(
            TaskLog(
                task_id=entry["task_id"],
                timestamp=entry.get("timestamp"),
                rank_id=int(rank) if rank.isascii() and rank.isdigit() and len(rank) < 6 else None,
                stdtype="stdout",
                source="unmanaged",
                log=entry["log"],
            )
        )
    if not lines:
        return {}
    with store.read() as conn:
        trial = _trials.trial_by_task(conn, lines[0].task_id)
    if trial is None:
        raise InvalidArgument(f"task {lines[0].task_id} is not a trial's task")
    caller.check_reporter(store, int(trial["id"]))
    return _logs.post_task_logs(PostTaskLogs(logs=lines), caller, store, on_logs)
