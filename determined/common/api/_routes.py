"""Every REST call the client makes to a master (the CLI, the SDK, a trial's Core API, the
launchers): one function per route.

Each function names its route once, takes typed arguments (ids, filters, bodies) and returns
the part of the answer its callers use: a wire object (the ``TypedDict`` classes below, keys
as 0.37's master sends them, in camelCase), a page of them, or a plain value. Nothing else
in the client (the CLI, the SDK, the Core API, the launchers) spells an ``/api/v1`` path or
reads a raw ``.json()[...]`` (``tests/common/api/test_routes.py`` checks).

The requests are those the callers sent before this module existed: the same methods, paths,
bodies and query parameters (a query parameter that is None is left out; a paged listing may
send ``offset`` and ``limit`` in another order than before).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

import requests

from determined import errors
from determined.common.api._session import Session

Json = dict[str, Any]
"""A JSON object handed through as received or as built (a rendered table, a config)."""

STREAM_TIMEOUT = 24 * 3600.0  # a followed stream may stay quiet for long stretches


class Experiment(TypedDict, total=False):
    """0.37's ``v1Experiment`` (the fields this package reads; the master sends more)."""

    id: int
    state: str
    name: str
    description: str
    notes: str
    labels: list[str]
    archived: bool
    progress: float | None
    config: Json
    projectId: int
    workspaceId: int | None
    username: str
    startTime: str | None
    endTime: str | None


class Trial(TypedDict, total=False):
    """0.37's ``v1TrialsSnapshot``/``trialv1Trial``."""

    id: int
    experimentId: int
    state: str
    hparams: Json
    summaryMetrics: Json
    taskId: str
    startTime: str
    endTime: str
    latestValidation: Json


class Checkpoint(TypedDict, total=False):
    """0.37's ``v1Checkpoint``."""

    uuid: str
    state: str
    metadata: Json
    resources: dict[str, int]
    training: Json
    reportTime: str
    taskId: str
    allocationId: str


class Model(TypedDict, total=False):
    """0.37's ``v1Model``."""

    id: int
    name: str
    description: str
    metadata: Json
    labels: list[str]
    archived: bool
    creationTime: str
    lastUpdatedTime: str
    workspaceId: int
    notes: str
    numVersions: int
    username: str


class ModelVersion(TypedDict, total=False):
    """0.37's ``v1ModelVersion``."""

    id: int
    version: int
    name: str
    model: Model
    checkpoint: Checkpoint
    metadata: Json
    comment: str
    notes: str
    labels: list[str]
    creationTime: str
    lastUpdatedTime: str


class User(TypedDict, total=False):
    """0.37's ``v1User``."""

    id: int
    username: str
    displayName: str
    admin: bool
    active: bool
    remote: bool
    agentUserGroup: Json
    modifiedAt: str


class Workspace(TypedDict, total=False):
    """0.37's ``v1Workspace``."""

    id: int
    name: str
    archived: bool
    username: str
    immutable: bool
    numProjects: int
    numExperiments: int
    defaultComputePool: str
    defaultAuxPool: str
    agentUserGroup: Json
    checkpointStorageConfig: Json


class Project(TypedDict, total=False):
    """0.37's ``v1Project``."""

    id: int
    name: str
    key: str
    description: str
    notes: list[Json]
    archived: bool
    workspaceId: int
    workspaceName: str
    username: str
    numExperiments: int
    numActiveExperiments: int


def _query(params: dict[str, Any]) -> dict[str, Any]:
    """The query string's parameters, in the order given, without those that are None."""
    return {k: v for k, v in params.items() if v is not None}


def _params(query: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if query is None else dict(query)


def _list(items: Sequence[Any] | None) -> list[Any] | None:
    return None if items is None else list(items)


def _field(resp: requests.Response, key: str) -> Any:
    """``key`` of the answer's JSON object.

    Raises:
        MasterError: the answer has no ``key`` (a master that does not speak 0.37's API).
    """
    body = resp.json()
    if not isinstance(body, dict) or key not in body:
        raise errors.MasterError(
            f"{resp.request.method} {urllib.parse.urlsplit(resp.url).path}: the master's "
            f"answer has no {key!r}",
            status=resp.status_code,
            body=body,
        )
    return body[key]


def _quote(segment: str) -> str:
    """A name as one path segment (``/`` and ``?`` in it escaped)."""
    return urllib.parse.quote(segment, safe="")


# The master.


def get_info(sess: Session) -> Json:
    """``GET /info`` (0.37's unversioned route): ``cluster_id``, ``version``, ..."""
    return dict(sess.get("/info").json())


def get_master(sess: Session) -> Json:
    """``GET /api/v1/master``: version, cluster id and name, the cluster message."""
    return dict(sess.get("/api/v1/master").json())


# Experiments.

ExperimentAction = Literal["activate", "pause", "cancel", "kill", "archive", "unarchive"]


class CreatedExperiment(TypedDict, total=False):
    """``POST /api/v1/experiments``'s answer."""

    experiment: Experiment
    config: Json
    warnings: list[str]


def create_experiment(sess: Session, body: Mapping[str, Any]) -> CreatedExperiment:
    """``POST /api/v1/experiments`` (0.37's ``v1CreateExperimentRequest``: ``config`` as YAML
    text, ``modelDefinition``, ``activate``, ``projectId``, ``parentId``, ``template``,
    ``validateOnly``; an unmanaged one adds ``unmanaged``/``externalExperimentId``)."""
    return sess.post("/api/v1/experiments", json=dict(body)).json()


def get_experiment_response(sess: Session, experiment_id: int) -> Json:
    """``GET /api/v1/experiments/{id}`` as received (``experiment``, ``jobSummary``, ...)."""
    return dict(sess.get(f"/api/v1/experiments/{experiment_id}").json())


def get_experiment(sess: Session, experiment_id: int) -> Experiment:
    """The experiment's record."""
    resp = sess.get(f"/api/v1/experiments/{experiment_id}")
    return _field(resp, "experiment")


def get_experiment_by_external_id(sess: Session, external_id: str) -> Experiment:
    """``GET /api/v1/experiments/by-external-id/{id}`` (an unmanaged experiment's)."""
    resp = sess.get(f"/api/v1/experiments/by-external-id/{external_id}")
    return _field(resp, "experiment")


def list_experiments(
    sess: Session,
    *,
    sort_by: str | None = None,
    order_by: str | None = None,
    labels: Sequence[str] | None = None,
    experiment_ids: Sequence[int] | None = None,
    archived: bool | None = None,
    users: Sequence[str] | None = None,
    states: Sequence[str] | None = None,
    name: str | None = None,
    project_id: int | None = None,
    offset: int | None = None,
    limit: int | None = None,
) -> Json:
    """One page of ``GET /api/v1/experiments`` (``experiments`` and ``pagination``)."""
    params = _query(
        {
            "sortBy": sort_by,
            "orderBy": order_by,
            "labels": _list(labels),
            "experimentIdFilter.incl": _list(experiment_ids),
            "archived": None if archived is None else str(archived).lower(),
            "users": _list(users),
            "states": _list(states),
            "name": name,
            "projectId": project_id,
            "offset": offset,
            "limit": limit,
        }
    )
    return dict(sess.get("/api/v1/experiments", params=params).json())


def patch_experiment(sess: Session, experiment_id: int, fields: Mapping[str, Any]) -> Experiment:
    """``PATCH /api/v1/experiments/{id}`` with ``fields`` (``name``, ``description``,
    ``notes``, ``labels``, ``resources``, ``checkpointStorage``, ...); the record after."""
    resp = sess.patch(f"/api/v1/experiments/{experiment_id}", json=dict(fields))
    return resp.json().get("experiment") or Experiment()


def put_experiment_label(sess: Session, experiment_id: int, label: str) -> list[str]:
    """Add ``label``; the experiment's labels after."""
    resp = sess.put(f"/api/v1/experiments/{experiment_id}/labels/{label}")
    return list(resp.json().get("labels") or [])


def delete_experiment_label(sess: Session, experiment_id: int, label: str) -> list[str]:
    """Remove ``label``; the experiment's labels after."""
    resp = sess.delete(f"/api/v1/experiments/{experiment_id}/labels/{label}")
    return list(resp.json().get("labels") or [])


def experiment_action(sess: Session, experiment_id: int, action: ExperimentAction) -> None:
    """``POST /api/v1/experiments/{id}/{action}``."""
    sess.post(f"/api/v1/experiments/{experiment_id}/{action}")


def move_experiment(sess: Session, experiment_id: int, body: Mapping[str, Any]) -> None:
    """``POST /api/v1/experiments/{id}/move`` (``experimentId``, ``destinationProjectId``)."""
    sess.post(f"/api/v1/experiments/{experiment_id}/move", json=dict(body))


def continue_experiment(sess: Session, experiment_id: int, override_config: str) -> None:
    """``POST /api/v1/experiments/continue``: run the ended experiment's trial again."""
    body = {"id": experiment_id, "overrideConfig": override_config}
    sess.post("/api/v1/experiments/continue", json=body)


def delete_experiment(sess: Session, experiment_id: int) -> None:
    sess.delete(f"/api/v1/experiments/{experiment_id}")


def delete_tensorboard_files(sess: Session, experiment_id: int) -> None:
    sess.delete(f"/api/v1/experiments/{experiment_id}/tensorboard-files")


def get_model_def(sess: Session, experiment_id: int) -> str:
    """The experiment's model definition, a base64 tar.gz (``b64Tgz``; "" when none)."""
    resp = sess.get(f"/api/v1/experiments/{experiment_id}/model_def")
    return str(resp.json().get("b64Tgz") or "")


def preview_gc(sess: Session, experiment_id: int, policy: Mapping[str, int]) -> Json:
    """``GET /api/v1/experiments/{id}/preview_gc``: what a GC policy would delete."""
    path = f"/api/v1/experiments/{experiment_id}/preview_gc"
    return dict(sess.get(path, params=dict(policy)).json())


def list_experiment_alerts(sess: Session, experiment_id: int) -> list[Json]:
    """The experiment's alerts (``core.Context.alert()``)."""
    resp = sess.get(f"/api/v1/experiments/{experiment_id}/alerts")
    return list(resp.json().get("alerts") or [])


def list_experiment_trials(
    sess: Session,
    experiment_id: int,
    *,
    sort_by: str | None = None,
    order_by: str | None = None,
    offset: int | None = None,
    limit: int | None = None,
) -> Json:
    """One page of ``GET /api/v1/experiments/{id}/trials`` (``trials``, ``pagination``)."""
    params = _query({"sortBy": sort_by, "orderBy": order_by, "offset": offset, "limit": limit})
    path = f"/api/v1/experiments/{experiment_id}/trials"
    return dict(sess.get(path, params=params or None).json())


def list_experiment_checkpoints(
    sess: Session, experiment_id: int, query: Mapping[str, Any] | None = None
) -> Json:
    """One page of ``GET /api/v1/experiments/{id}/checkpoints`` (``checkpoints``,
    ``pagination``); ``query`` holds 0.37's ``states``, ``sortByAttr``/``sortByMetric``,
    ``orderBy``, ``offset`` and ``limit``."""
    path = f"/api/v1/experiments/{experiment_id}/checkpoints"
    return dict(sess.get(path, params=dict(query) if query is not None else None).json())


def set_log_retention(
    sess: Session, kind: Literal["trials", "experiments"], object_id: int, days: int
) -> None:
    """``PUT /api/v1/{trials|experiments}/{id}/retain_logs``; -1 days keeps them forever."""
    sess.put(f"/api/v1/{kind}/{object_id}/retain_logs", json={"numDays": days})


# Trials.


def get_trial_response(sess: Session, trial_id: int) -> Json:
    """``GET /api/v1/trials/{id}`` as received (``trial``, ...)."""
    return dict(sess.get(f"/api/v1/trials/{trial_id}").json())


def get_trial(sess: Session, trial_id: int) -> Trial:
    """The trial's record."""
    return _field(sess.get(f"/api/v1/trials/{trial_id}"), "trial")


def kill_trial(sess: Session, trial_id: int) -> None:
    sess.post(f"/api/v1/trials/{trial_id}/kill")


def list_trial_checkpoints(
    sess: Session, trial_id: int, query: Mapping[str, Any] | None = None
) -> Json:
    """One page of ``GET /api/v1/trials/{id}/checkpoints`` (``query`` as for an
    experiment's)."""
    path = f"/api/v1/trials/{trial_id}/checkpoints"
    return dict(sess.get(path, params=dict(query) if query is not None else None).json())


def list_trial_workloads(
    sess: Session,
    trial_id: int,
    *,
    include_batch_metrics: bool = False,
    offset: int | None = None,
    limit: int | None = None,
) -> Json:
    """One page of ``GET /api/v1/trials/{id}/workloads`` (``workloads``, ``pagination``)."""
    batch = "true" if include_batch_metrics else None
    params = _query({"includeBatchMetrics": batch, "offset": offset, "limit": limit})
    return dict(sess.get(f"/api/v1/trials/{trial_id}/workloads", params=params).json())


def stream_trial_logs(sess: Session, trial_id: int, params: Mapping[str, Any]) -> requests.Response:
    """``GET /api/v1/trials/{id}/logs``, streamed NDJSON (``{"result": v1TrialLog}`` per
    line); ``params``: ``follow``, ``limit``, ``orderBy`` and 0.37's log filters."""
    path = f"/api/v1/trials/{trial_id}/logs"
    return sess.get(path, params=dict(params), stream=True, timeout=STREAM_TIMEOUT)


def stream_validation_metrics(sess: Session, trial_id: int) -> requests.Response:
    """``GET /api/v1/trials/metrics/validation_metrics`` of one trial, streamed NDJSON."""
    path = "/api/v1/trials/metrics/validation_metrics"
    return sess.get(path, params={"trialIds": trial_id}, stream=True, timeout=STREAM_TIMEOUT)


def stream_trials_metrics(
    sess: Session, trial_ids: Sequence[int], group: str, timeout: float = STREAM_TIMEOUT
) -> requests.Response:
    """``GET /api/v1/trials/metrics/trial_metrics`` of ``group``, streamed NDJSON."""
    params = {"trialIds": list(trial_ids), "group": group}
    path = "/api/v1/trials/metrics/trial_metrics"
    return sess.get(path, params=params, stream=True, timeout=timeout)


# Checkpoints.


def get_checkpoint(sess: Session, uuid: str) -> Checkpoint:
    """The checkpoint's record."""
    return _field(sess.get(f"/api/v1/checkpoints/{uuid}"), "checkpoint")


def post_checkpoint_metadata(sess: Session, uuid: str, metadata: Mapping[str, Any]) -> None:
    """Replace the checkpoint's user metadata on the master."""
    body = {"checkpoint": {"uuid": uuid, "metadata": dict(metadata)}}
    sess.post(f"/api/v1/checkpoints/{uuid}/metadata", json=body)


def delete_checkpoints(sess: Session, uuids: Sequence[str]) -> None:
    """Delete the checkpoints' files from storage and mark them DELETED."""
    sess.delete("/api/v1/checkpoints", json={"checkpointUuids": list(uuids)})


def remove_checkpoint_files(sess: Session, uuids: Sequence[str], globs: Sequence[str]) -> None:
    """``POST /api/v1/checkpoints/rm``: delete the files matching any of ``globs``."""
    body = {"checkpointUuids": list(uuids), "checkpointGlobs": list(globs)}
    sess.post("/api/v1/checkpoints/rm", json=body)


def get_checkpoint_metrics(sess: Session, uuid: str, group: str | None) -> list[Json]:
    """Metric reports of the tasks that used the checkpoint (0.37: inference metrics)."""
    params = _query(
        {"trialSourceInfoType": "TRIAL_SOURCE_INFO_TYPE_INFERENCE", "metricGroup": group}
    )
    resp = sess.get(f"/api/v1/checkpoints/{uuid}/metrics", params=params)
    return list(resp.json().get("metrics") or [])


# Tasks: commands, notebooks, shells, TensorBoards, generic tasks, allocations.

TaskNoun = Literal["commands", "notebooks", "shells", "tensorboards"]
_ONE = {
    "commands": "command",
    "notebooks": "notebook",
    "shells": "shell",
    "tensorboards": "tensorboard",
}


def launch_ntsc(sess: Session, noun: TaskNoun, body: Mapping[str, Any]) -> Json:
    """``POST /api/v1/{noun}``: start a command, notebook, shell or TensorBoard; its record."""
    return dict(_field(sess.post(f"/api/v1/{noun}", json=dict(body)), _ONE[noun]))


def preview_notebook(sess: Session, body: Mapping[str, Any]) -> Json:
    """The config a notebook launch would run (``body`` has ``preview: true``)."""
    return dict(_field(sess.post("/api/v1/notebooks", json=dict(body)), "config"))


def get_ntsc_response(sess: Session, noun: TaskNoun, task_id: str) -> Json:
    """``GET /api/v1/{noun}/{id}`` as received (the record and its ``config``)."""
    return dict(sess.get(f"/api/v1/{noun}/{task_id}").json())


def get_ntsc(sess: Session, noun: TaskNoun, task_id: str) -> Json:
    """The command's, notebook's, shell's or TensorBoard's record."""
    return dict(_field(sess.get(f"/api/v1/{noun}/{task_id}"), _ONE[noun]))


def list_ntsc(
    sess: Session, noun: TaskNoun, *, users: str | None = None, workspace_id: int | None = None
) -> list[Json]:
    """``GET /api/v1/{noun}``: every command (notebook, ...) of ``users``, in the workspace."""
    params = _query({"users": users, "workspaceId": workspace_id})
    return list(_field(sess.get(f"/api/v1/{noun}", params=params or None), noun) or [])


def set_ntsc_priority(sess: Session, noun: TaskNoun, task_id: str, priority: int) -> None:
    sess.post(f"/api/v1/{noun}/{task_id}/set_priority", json={"priority": priority})


def kill_ntsc(sess: Session, noun: TaskNoun, task_id: str) -> None:
    sess.post(f"/api/v1/{noun}/{task_id}/kill")


def list_allocations(sess: Session) -> dict[str, Json]:
    """``GET /api/v1/tasks``: every live allocation's summary, by allocation id."""
    return dict(sess.get("/api/v1/tasks").json().get("allocationIdToSummary") or {})


def create_generic_task(sess: Session, body: Mapping[str, Any]) -> str:
    """``POST /api/v1/generic-tasks``; the new task's id."""
    return str(_field(sess.post("/api/v1/generic-tasks", json=dict(body)), "taskId"))


def get_task_config(sess: Session, task_id: str) -> str:
    """A generic task's config, as JSON text."""
    return str(_field(sess.get(f"/api/v1/tasks/{task_id}/config"), "config") or "")


def kill_task(sess: Session, task_id: str, *, kill_from_root: bool) -> None:
    body = {"taskId": task_id, "killFromRoot": kill_from_root}
    sess.post(f"/api/v1/tasks/{task_id}/kill", json=body)


def pause_task(sess: Session, task_id: str) -> None:
    sess.post(f"/api/v1/tasks/{task_id}/pause")


def unpause_task(sess: Session, task_id: str) -> None:
    sess.post(f"/api/v1/tasks/{task_id}/unpause")


def cleanup_logs(sess: Session) -> int:
    """``POST /api/v1/cleanup_logs``: delete logs past their retention; the rows removed."""
    return int(_field(sess.post("/api/v1/cleanup_logs"), "removedCount"))


def get_task_logs(sess: Session, task_id: str, params: Mapping[str, Any]) -> Json:
    """One page of a task's log entries (``logs``), those after ``searchAfter``."""
    return dict(sess.get(f"/api/v1/tasks/{task_id}/logs", params=dict(params)).json())


def follow_task_logs(sess: Session, task_id: str) -> requests.Response:
    """``GET /api/v1/tasks/{id}/logs?follow=true``, streamed NDJSON until the task ends."""
    path = f"/api/v1/tasks/{task_id}/logs"
    return sess.get(path, params={"follow": "true"}, stream=True, timeout=None)


# Workspaces and projects.


def list_workspaces(sess: Session, query: Mapping[str, Any] | None = None) -> Json:
    """One page of ``GET /api/v1/workspaces`` (``workspaces``, ``pagination``); ``query``:
    0.37's ``name``, ``sortBy``, ``orderBy``, ``offset``, ``limit``."""
    return dict(sess.get("/api/v1/workspaces", params=_params(query)).json())


def get_workspace(sess: Session, workspace_id: int) -> Workspace:
    return _field(sess.get(f"/api/v1/workspaces/{workspace_id}"), "workspace")


def create_workspace(sess: Session, body: Mapping[str, Any]) -> Workspace:
    """``POST /api/v1/workspaces`` (``name`` and 0.37's optional settings)."""
    return _field(sess.post("/api/v1/workspaces", json=dict(body)), "workspace")


def patch_workspace(sess: Session, workspace_id: int, body: Mapping[str, Any]) -> Workspace:
    resp = sess.patch(f"/api/v1/workspaces/{workspace_id}", json=dict(body))
    return _field(resp, "workspace")


def delete_workspace(sess: Session, workspace_id: int) -> None:
    sess.delete(f"/api/v1/workspaces/{workspace_id}")


def workspace_action(
    sess: Session, workspace_id: int, action: Literal["archive", "unarchive"]
) -> None:
    sess.post(f"/api/v1/workspaces/{workspace_id}/{action}")


def list_workspace_pools(sess: Session, workspace_id: int, offset: int | None = None) -> Json:
    """One page of the resource pools the workspace may use (``resourcePools``: names)."""
    path = f"/api/v1/workspaces/{workspace_id}/available-resource-pools"
    return dict(sess.get(path, params=_query({"offset": offset}) or None).json())


def list_workspace_projects(
    sess: Session, workspace_id: int, query: Mapping[str, Any] | None = None
) -> Json:
    """One page of the workspace's projects (``projects``, ``pagination``); ``query``:
    ``name``, ``offset``, ``limit``."""
    path = f"/api/v1/workspaces/{workspace_id}/projects"
    return dict(sess.get(path, params=_params(query)).json())


def create_project(sess: Session, workspace_id: int, body: Mapping[str, Any]) -> Project:
    """``POST /api/v1/workspaces/{id}/projects`` (``name``, ``description``, ``key``, ...)."""
    resp = sess.post(f"/api/v1/workspaces/{workspace_id}/projects", json=dict(body))
    return _field(resp, "project")


def get_project(sess: Session, project_id: int) -> Project:
    return _field(sess.get(f"/api/v1/projects/{project_id}"), "project")


def patch_project(sess: Session, project_id: int, fields: Mapping[str, Any]) -> Project:
    """``PATCH /api/v1/projects/{id}`` (``name``, ``description``, ``key``); the record
    after (empty when the master sends none)."""
    resp = sess.patch(f"/api/v1/projects/{project_id}", json=dict(fields))
    return resp.json().get("project") or Project()


def delete_project(sess: Session, project_id: int) -> None:
    sess.delete(f"/api/v1/projects/{project_id}")


def project_action(sess: Session, project_id: int, action: Literal["archive", "unarchive"]) -> None:
    sess.post(f"/api/v1/projects/{project_id}/{action}")


def put_project_notes(
    sess: Session, project_id: int, notes: Sequence[Mapping[str, Any]]
) -> list[Json]:
    """Replace the project's notes; the notes after."""
    body = {"notes": [dict(n) for n in notes], "projectId": project_id}
    resp = sess.put(f"/api/v1/projects/{project_id}/notes", json=body)
    return list(resp.json().get("notes") or [])


# The model registry. A model is named by its name or its id, in one path segment.


def _model(model: str | int) -> str:
    return "/api/v1/models/" + _quote(str(model))


def list_models(sess: Session, query: Mapping[str, Any] | None = None) -> Json:
    """One page of ``GET /api/v1/models`` (``models``, ``pagination``); ``query``: 0.37's
    ``sortBy``, ``orderBy``, ``name``, ``description``, ``id``, ``workspaceNames``,
    ``workspaceIds``, ``offset``, ``limit``."""
    return dict(sess.get("/api/v1/models", params=_params(query)).json())


def create_model(sess: Session, body: Mapping[str, Any]) -> Model:
    """``POST /api/v1/models`` (``name``, ``description``, ``metadata``, ``labels``,
    ``workspaceName``)."""
    return _field(sess.post("/api/v1/models", json=dict(body)), "model")


def get_model(sess: Session, model: str | int) -> Model:
    return _field(sess.get(_model(model)), "model")


def patch_model(sess: Session, model: str | int, fields: Mapping[str, Any]) -> None:
    sess.patch(_model(model), json=dict(fields))


def delete_model(sess: Session, model: str | int) -> None:
    sess.delete(_model(model))


def model_action(sess: Session, model: str | int, action: Literal["archive", "unarchive"]) -> None:
    sess.post(f"{_model(model)}/{action}")


def move_model(sess: Session, model: str | int, body: Mapping[str, Any]) -> None:
    """``POST /api/v1/models/{model}/move`` (``destinationWorkspaceId``, ``modelName``)."""
    sess.post(f"{_model(model)}/move", json=dict(body))


def get_model_labels(sess: Session) -> list[str]:
    """Every label of any model, most used first."""
    return list(sess.get("/api/v1/model/labels").json().get("labels") or [])


def list_model_versions_response(
    sess: Session, model: str | int, query: Mapping[str, Any] | None = None
) -> Json:
    """One page of the model's versions (``model``, ``modelVersions``, ``pagination``);
    ``query``: ``sortBy``, ``orderBy``, ``offset``, ``limit``."""
    return dict(sess.get(f"{_model(model)}/versions", params=_params(query)).json())


def post_model_version_response(sess: Session, model: str | int, body: Mapping[str, Any]) -> Json:
    """``POST /api/v1/models/{model}/versions`` (``checkpointUuid``, ``name``, ...), as
    received (``modelVersion``)."""
    return dict(sess.post(f"{_model(model)}/versions", json=dict(body)).json())


def get_model_version(sess: Session, model: str | int, version: int) -> ModelVersion:
    return _field(sess.get(f"{_model(model)}/versions/{version}"), "modelVersion")


def patch_model_version(
    sess: Session, model: str | int, version: int, fields: Mapping[str, Any]
) -> None:
    sess.patch(f"{_model(model)}/versions/{version}", json=dict(fields))


def delete_model_version(sess: Session, model: str | int, version: int) -> None:
    sess.delete(f"{_model(model)}/versions/{version}")


def get_model_version_metrics(
    sess: Session, model: str | int, version: int, query: Mapping[str, Any]
) -> Json:
    """``GET /api/v1/models/{model}/versions/{v}/metrics`` (``metrics``)."""
    path = f"{_model(model)}/versions/{version}/metrics"
    return dict(sess.get(path, params=dict(query)).json())


# Users and logins.


def login(sess: Session, username: str, hashed_password: str) -> Json:
    """``POST /api/v1/auth/login`` with an already hashed password (``token``, ``user``)."""
    body = {"username": username, "password": hashed_password, "isHashed": True}
    return dict(sess.post("/api/v1/auth/login", json=body).json())


def logout(sess: Session) -> None:
    """End the session's token on the master."""
    sess.post("/api/v1/auth/logout")


def get_me(sess: Session) -> User:
    """The user the session's token belongs to."""
    return _field(sess.get("/api/v1/me"), "user")


def get_user(sess: Session, user_id: int) -> User:
    return _field(sess.get(f"/api/v1/users/{user_id}"), "user")


def get_user_by_name(sess: Session, username: str) -> User:
    return _field(sess.get(f"/api/v1/users/{username}/by-username"), "user")


def list_users(sess: Session, query: Mapping[str, Any] | None = None) -> Json:
    """One page of ``GET /api/v1/users`` (``users``, ``pagination``); ``query``: ``active``,
    ``offset``, ``limit``."""
    return dict(sess.get("/api/v1/users", params=_params(query)).json())


def create_user(sess: Session, body: Mapping[str, Any]) -> User:
    """``POST /api/v1/users`` (``user``, ``password``, ``isHashed``)."""
    return _field(sess.post("/api/v1/users", json=dict(body)), "user")


def patch_user(sess: Session, user_id: int, fields: Mapping[str, Any]) -> None:
    """``PATCH /api/v1/users/{id}`` (``active``, ``admin``, ``username``, ``displayName``,
    ``password``/``isHashed``, ``agentUserGroup``, ...)."""
    sess.patch(f"/api/v1/users/{user_id}", json=dict(fields))


# Config templates.


def list_templates(sess: Session) -> list[Json]:
    return list(_field(sess.get("/api/v1/templates"), "templates") or [])


def get_template(sess: Session, name: str) -> Json:
    return dict(_field(sess.get(f"/api/v1/templates/{name}"), "template"))


def create_template(sess: Session, name: str, body: Mapping[str, Any]) -> None:
    """``POST /api/v1/templates/{name}`` (``name``, ``config``, ``workspaceId``)."""
    sess.post(f"/api/v1/templates/{name}", json=dict(body))


def put_template(sess: Session, name: str, body: Mapping[str, Any]) -> None:
    sess.put(f"/api/v1/templates/{name}", json=dict(body))


def patch_template_config(sess: Session, name: str, config: Mapping[str, Any]) -> None:
    sess.patch(f"/api/v1/templates/{name}", json=dict(config))


def delete_template(sess: Session, name: str) -> None:
    sess.delete(f"/api/v1/templates/{name}")


# The master and its cluster.


def get_master_config(sess: Session) -> Json:
    return dict(_field(sess.get("/api/v1/master/config"), "config"))


def patch_master_log_config(sess: Session, log: Mapping[str, Any], paths: Sequence[str]) -> None:
    """Change the master's ``log`` settings named by ``paths`` (0.37's field mask)."""
    body = {"config": {"log": dict(log)}, "fieldMask": {"paths": list(paths)}}
    sess.patch("/api/v1/master/config", json=body)


def stream_master_logs(sess: Session, *, follow: bool, tail: int | None) -> requests.Response:
    """``GET /api/v1/master/logs``, streamed NDJSON (admins only)."""
    params: dict[str, object] = {"follow": "true" if follow else "false"}
    if tail:
        params["offset"] = -tail
    return sess.get("/api/v1/master/logs", params=params, stream=True, timeout=None)


def put_cluster_message(sess: Session, body: Mapping[str, Any]) -> None:
    """``PUT /api/v1/master/cluster_message`` (``message``, ``startTime``, ``endTime``,
    ``duration``)."""
    sess.put("/api/v1/master/cluster_message", json=dict(body))


def delete_cluster_message(sess: Session) -> None:
    sess.delete("/api/v1/master/cluster_message")


def get_cluster_message(sess: Session) -> Json:
    return dict(sess.get("/api/v1/master/cluster_message").json())


def list_agents(sess: Session) -> list[Json]:
    return list(sess.get("/api/v1/agents").json().get("agents") or [])


def toggle_agent(
    sess: Session, agent_id: str, action: Literal["enable", "disable"], *, drain: bool = False
) -> None:
    """Enable or disable an agent; a disabled one with ``drain`` lets running work finish."""
    sess.post(f"/api/v1/agents/{agent_id}/{action}", json={"drain": True} if drain else None)


def toggle_slot(
    sess: Session, agent_id: str, slot_id: str, action: Literal["enable", "disable"], body: Json
) -> None:
    sess.post(f"/api/v1/agents/{agent_id}/slots/{slot_id}/{action}", json=body)


def list_job_queue(sess: Session) -> list[Json]:
    """``GET /api/v1/job-queues``: every job (``jobs``)."""
    return list(sess.get("/api/v1/job-queues").json().get("jobs") or [])


def list_job_queue_v2(sess: Session, query: Mapping[str, Any]) -> Json:
    """``GET /api/v1/job-queues-v2`` (``jobs``: ``{"full": v1Job}`` or ``{"limited": ...}``)."""
    return dict(sess.get("/api/v1/job-queues-v2", params=dict(query)).json())


def update_job_queue(sess: Session, updates: Sequence[Mapping[str, Any]]) -> None:
    """``POST /api/v1/job-queues``: priority, weight, pool and queue position changes."""
    sess.post("/api/v1/job-queues", json={"updates": [dict(u) for u in updates]})


def list_resource_pools(sess: Session) -> list[Json]:
    return list(sess.get("/api/v1/resource-pools").json().get("resourcePools") or [])


PoolBindingAction = Literal["post", "delete", "put"]


def bind_pool_workspaces(
    sess: Session, pool: str, method: PoolBindingAction, workspace_names: Sequence[str]
) -> None:
    """Add (``post``), remove (``delete``) or replace (``put``) a pool's workspace bindings."""
    body = {"resourcePoolName": pool, "workspaceNames": workspace_names}
    path = f"/api/v1/resource-pools/{pool}/workspace-bindings"
    sess.request(method.upper(), path, json=body)


def list_pool_workspace_ids(sess: Session, pool: str) -> list[int]:
    resp = sess.get(f"/api/v1/resource-pools/{pool}/workspace-bindings")
    return list(resp.json().get("workspaceIds") or [])


def get_allocation_report(
    sess: Session, which: Literal["raw", "aggregated"], params: Mapping[str, Any]
) -> bytes:
    """``GET /api/v1/resources/allocation/{raw|aggregated}``: the usage report as JSON."""
    return sess.get(f"/api/v1/resources/allocation/{which}", params=dict(params)).content


# Unmanaged experiments and trials (core_v2), and the runs both Core APIs start.


def put_experiment_by_external_id(
    sess: Session, external_id: str, body: Mapping[str, Any]
) -> CreatedExperiment:
    """Create the unmanaged experiment ``external_id`` names, or get the one it named."""
    path = f"/api/v1/experiments/by-external-id/{external_id}"
    return sess.put(path, json=dict(body), idempotent=True).json()


def create_trial(sess: Session, body: Mapping[str, Any]) -> Trial:
    """``POST /api/v1/trials`` (an unmanaged trial: ``experimentId``, ``hparams``)."""
    return _field(sess.post("/api/v1/trials", json=dict(body)), "trial")


def put_trial_by_external_id(
    sess: Session, body: Mapping[str, Any], external_trial_id: str
) -> Trial:
    """Create the unmanaged trial ``external_trial_id`` names, or get the one it named."""
    request = {"createTrialRequest": dict(body), "externalTrialId": external_trial_id}
    return _field(sess.put("/api/v1/trials", json=request, idempotent=True), "trial")


def start_trial(sess: Session, trial_id: int) -> Json:
    """``POST /api/v1/trials/{id}/start`` with ``resume``, as received."""
    body = {"trialId": trial_id, "resume": True}
    return dict(sess.post(f"/api/v1/trials/{trial_id}/start", json=body).json())


def patch_trial(sess: Session, trial_id: int, body: Mapping[str, Any]) -> None:
    """``PATCH /api/v1/trials/{id}``: an unmanaged trial's heartbeat or end state."""
    sess.patch(f"/api/v1/trials/{trial_id}", json=dict(body), idempotent=True)


def start_run(sess: Session, run_id: int, checkpoint_storage: Mapping[str, Any] | None) -> Any:
    """``POST /api/v1/runs/start``; the storage id the master gave the run's checkpoints."""
    body = {"runId": run_id, "checkpointStorage": checkpoint_storage}
    return sess.post("/api/v1/runs/start", json=body, idempotent=True).json().get("storageId")


def post_task_logs(sess: Session, logs: Sequence[Mapping[str, Any]]) -> None:
    """``POST /api/v1/task/logs``: ship log entries (retried: the master drops duplicates)."""
    sess.post("/api/v1/task/logs", json={"logs": list(logs)}, idempotent=True)


# The trial side: what a trial's Core API, its launchers and a custom searcher send, with
# its allocation token. Reports are retried (idempotent=True): the master drops duplicates.


def report_checkpoint(sess: Session, body: Mapping[str, Any]) -> None:
    """``POST /api/v1/checkpoints`` (0.37's ``v1Checkpoint`` of a new checkpoint)."""
    sess.post("/api/v1/checkpoints", json=dict(body), idempotent=True)


def patch_checkpoints(sess: Session, body: Mapping[str, Any]) -> None:
    """``PATCH /api/v1/checkpoints`` (``checkpoints``: uuids with their new resources)."""
    sess.patch("/api/v1/checkpoints", json=dict(body), idempotent=True)


def report_trial_metrics(sess: Session, trial_id: int, body: Mapping[str, Any]) -> None:
    """``POST /api/v1/trials/{id}/metrics`` (``group``, ``metrics``)."""
    sess.post(f"/api/v1/trials/{trial_id}/metrics", json=dict(body), idempotent=True)


def post_custom_webhook(sess: Session, body: Mapping[str, Any]) -> None:
    """``POST /api/v1/webhooks/custom``: ``core.Context.alert()``'s event."""
    sess.post("/api/v1/webhooks/custom", json=dict(body))


def post_trial_source_info(sess: Session, info: Mapping[str, Any]) -> None:
    """``POST /api/v1/trial-source-info``: which checkpoint or model version a task used."""
    sess.post("/api/v1/trial-source-info", json={"trialSourceInfo": dict(info)})


def ack_preemption(sess: Session, allocation_id: str) -> None:
    """``POST /api/v1/allocations/{id}/signals/ack_preemption``."""
    sess.post(f"/api/v1/allocations/{allocation_id}/signals/ack_preemption", idempotent=True)


def poll_preemption(sess: Session, allocation_id: str, timeout_s: int) -> bool:
    """Whether the master asks the allocation to stop; waits up to ``timeout_s`` for it."""
    resp = sess.get(
        f"/api/v1/allocations/{allocation_id}/signals/preemption",
        params={"timeout_seconds": str(timeout_s)},
        timeout=timeout_s + 10,
    )
    return resp.json().get("preempt") is True


def get_rendezvous_info(sess: Session, allocation_id: str, resources_id: str) -> Json:
    """The addresses, rank and slot counts of the allocation's containers."""
    path = f"/api/v1/allocations/{allocation_id}/resources/{resources_id}/rendezvous"
    return dict(_field(sess.get(path), "rendezvousInfo"))


def mark_resources_daemon(sess: Session, allocation_id: str, resources_id: str) -> None:
    """Tell the master these resources only serve others (it may end them with the chief)."""
    sess.post(f"/api/v1/allocations/{allocation_id}/resources/{resources_id}/daemon")


def get_searcher_operation(sess: Session, trial_id: int) -> Json:
    """``GET /api/v1/trials/{id}/searcher/operation`` (``op``, ``completed``)."""
    return dict(sess.get(f"/api/v1/trials/{trial_id}/searcher/operation").json())


def complete_searcher_operation(sess: Session, trial_id: int, body: Mapping[str, Any]) -> None:
    """``POST /api/v1/trials/{id}/searcher/completed_operation`` (``op``, ``searcherMetric``)."""
    path = f"/api/v1/trials/{trial_id}/searcher/completed_operation"
    sess.post(path, json=dict(body), idempotent=True)


def report_trial_progress(sess: Session, trial_id: int, body: Mapping[str, Any]) -> None:
    """``POST /api/v1/trials/{id}/progress`` (``progress``, and ``is_raw`` for a fraction)."""
    sess.post(f"/api/v1/trials/{trial_id}/progress", json=dict(body), idempotent=True)


def set_runner_state(sess: Session, trial_id: int, state: str) -> None:
    """``POST /api/v1/trials/{id}/runner/metadata``: what the trial is doing now."""
    path = f"/api/v1/trials/{trial_id}/runner/metadata"
    sess.post(path, json={"state": state}, idempotent=True)


def report_early_exit(sess: Session, trial_id: int, reason: str) -> None:
    sess.post(f"/api/v1/trials/{trial_id}/early_exit", json={"reason": reason})


def get_best_searcher_validation(sess: Session, experiment_id: int) -> float:
    """The experiment's best searcher metric so far (MasterNotFound: no validation yet)."""
    path = f"/api/v1/experiments/{experiment_id}/searcher/best_searcher_validation_metric"
    return float(_field(sess.get(path), "metric"))


def post_run_metadata(sess: Session, run_id: int, metadata: Mapping[str, Any]) -> Any:
    """Replace the run's metadata; the metadata after (None when the master sends none)."""
    body = {"metadata": dict(metadata), "runId": run_id}
    return sess.post(f"/api/v1/runs/{run_id}/metadata", json=body).json().get("metadata")


def get_run_metadata(sess: Session, run_id: int) -> Any:
    return sess.get(f"/api/v1/runs/{run_id}/metadata").json().get("metadata")


def post_searcher_operations(sess: Session, experiment_id: int, body: Mapping[str, Any]) -> None:
    """A custom searcher's operations for an event (``searcherOperations``,
    ``triggeredByEvent``)."""
    sess.post(f"/api/v1/experiments/{experiment_id}/searcher_operations", json=dict(body))


def get_searcher_events(sess: Session, experiment_id: int, timeout: float) -> list[Json]:
    """A custom searcher's pending events, long-polled by the master for up to ``timeout``."""
    path = f"/api/v1/experiments/{experiment_id}/searcher_events"
    return list(sess.get(path, timeout=timeout).json().get("searcherEvents") or [])
