"""JSON bodies in the reference's v1 shapes (grpc-gateway: lowerCamelCase keys, unset
messages as null, int64 as strings where the gateway writes them so)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import sqlalchemy as sa

from determined.master import experiment
from determined.master._errors import NotFound
from determined.master.api import _redact
from determined.master.experiment import State
from determined.master.store import (
    AllocationRow,
    AllocationState,
    CheckpointRow,
    ExperimentRow,
    TrialRow,
    _checkpoints,
    _experiments,
    _metrics,
    _projects,
    _time,
    _trials,
    _unmanaged,
    _users,
)


def placement(conn: sa.Connection, project_id: int) -> dict[str, Any]:
    """The experiment's project and workspace fields of ``v1Experiment``."""
    project = _projects.get_project(conn, project_id)
    workspace = None if project is None else _projects.get_workspace(conn, project["workspace_id"])
    return _placement(project_id, project, workspace)


def _placement(
    project_id: int, project: dict[str, Any] | None, workspace: dict[str, Any] | None
) -> dict[str, Any]:
    if project is None:  # not possible through the API; say so instead of failing the read
        return {"projectId": project_id, "projectName": "", "projectOwnerId": 0}
    return {
        "projectId": project_id,
        "projectName": project["name"],
        "projectOwnerId": project["user_id"],
        "workspaceId": project["workspace_id"],
        "workspaceName": "" if workspace is None else workspace["name"],
        "parentArchived": bool(project["archived"])
        or bool(workspace is not None and workspace["archived"]),
    }


# What the reference answers for a ``validateOnly`` create: an empty ``v1Experiment`` as its
# gateway writes one (every field at its zero value, int64 as a string, messages null,
# proto3 ``optional`` fields left out). The reference CLI's ``--test-mode`` parses it.
EMPTY_EXPERIMENT: dict[str, Any] = {
    "id": 0,
    "description": "",
    "labels": [],
    "startTime": None,
    "endTime": None,
    "state": "STATE_UNSPECIFIED",
    "archived": False,
    "numTrials": 0,
    "trialIds": [],
    "displayName": "",
    "userId": 0,
    "username": "",
    "resourcePool": "",
    "searcherType": "",
    "searcherMetric": "",
    "hyperparameters": None,
    "name": "",
    "notes": "",
    "jobId": "",
    "forkedFrom": None,
    "progress": None,
    "projectId": 0,
    "projectName": "",
    "workspaceId": 0,
    "workspaceName": "",
    "parentArchived": False,
    "config": None,
    "originalConfig": "",
    "projectOwnerId": 0,
    "checkpointSize": "0",
    "checkpointCount": 0,
}


def experiment_json(
    conn: sa.Connection, exp: ExperimentRow, *, redacted: bool = True
) -> dict[str, Any]:
    """``v1Experiment``: every field the reference's bindings require, and the optional ones
    this master knows. ``config`` and ``originalConfig`` have their secrets hidden unless
    ``redacted`` is False (for the experiment's own trials only; see ``_redact``)."""
    return experiment_jsons(conn, [exp], redacted=redacted)[0]


def experiment_jsons(
    conn: sa.Connection, exps: list[ExperimentRow], *, redacted: bool = True
) -> list[dict[str, Any]]:
    """``experiment_json`` of each of ``exps``, read with a few queries for all of them."""
    facts = ExperimentFacts(conn, exps, whole=True)
    return [{**experiment_head(facts, e), **_experiment_rest(facts, e, redacted)} for e in exps]


# The fields of ``experiment_head``: an experiment list can filter and sort on these without
# the rest of each experiment (its checkpoints, best trial and config).
HEAD_FIELDS = frozenset(
    {
        "id", "name", "description", "labels", "state", "archived", "startTime", "endTime",
        "progress", "username", "displayName", "userId", "forkedFrom", "resourcePool",
        "numTrials", "projectId", "projectName", "projectOwnerId", "workspaceId",
        "workspaceName", "parentArchived",
    }
)  # fmt: skip


class ExperimentFacts:
    """What the ``v1Experiment`` of some experiments needs beyond their rows, read for all of
    them at once (a listing of N experiments makes a dozen queries, not ten per experiment).

    Args:
        conn: a connection.
        exps: the experiments' rows.
        whole: also read what only the whole ``v1Experiment`` needs (checkpoints, the
            trials' best validations); without it, enough for ``experiment_head``.
    """

    def __init__(self, conn: sa.Connection, exps: list[ExperimentRow], *, whole: bool) -> None:
        ids = [int(e["id"]) for e in exps]
        self.owners = _users.users_by_id(conn, {int(e["owner_id"]) for e in exps})
        self.external_ids = _unmanaged.external_ids(conn, ids)  # keys: the unmanaged ones
        # Counted and checked by the database: a listing need not read every trial's row.
        self.num_trials = _trials.trial_counts(conn, ids)
        active = [int(e["id"]) for e in exps if e["state"] == State.ACTIVE.value]
        self.running = _trials.running_experiments(conn, active, self.external_ids)
        self.projects = _projects.projects_by_id(conn, {_project_of(e) for e in exps})
        workspace_ids = {int(p["workspace_id"]) for p in self.projects.values()}
        self.workspaces = _projects.workspaces_by_id(conn, workspace_ids)
        # whole: each experiment's (trial id, its best validation's metrics), checkpoints
        self.trials: dict[int, list[tuple[int, dict[str, Any] | None]]] = {}
        self.checkpoints: dict[int, list[CheckpointRow]] = {}
        if whole:
            self.trials = _trials.best_of_experiments(conn, ids)
            trial_ids = [t for ts in self.trials.values() for t, _ in ts]
            self.checkpoints = _checkpoints.of_trials(conn, trial_ids)

    def owner(self, exp: ExperimentRow) -> dict[str, Any]:
        owner = self.owners.get(int(exp["owner_id"]))
        if owner is None:
            raise NotFound(f"user {exp['owner_id']} not found")
        return owner

    def placement(self, exp: ExperimentRow) -> dict[str, Any]:
        project = self.projects.get(_project_of(exp))
        workspace = None if project is None else self.workspaces.get(project["workspace_id"])
        return _placement(_project_of(exp), project, workspace)

    def display_state(self, exp: ExperimentRow) -> str:
        # As the reference's API derives it: an ACTIVE experiment is RUNNING while any of its
        # trials runs (this master launches processes, so there is no PULLING/STARTING stage),
        # else QUEUED. Every other state shows as stored.
        if exp["state"] != State.ACTIVE.value:
            return str(exp["state"])
        return "STATE_RUNNING" if int(exp["id"]) in self.running else "STATE_QUEUED"


def _project_of(exp: ExperimentRow) -> int:
    return int(exp.get("project_id") or 1)


def experiment_head(facts: ExperimentFacts, exp: ExperimentRow) -> dict[str, Any]:
    """The ``HEAD_FIELDS`` of ``experiment_json``: what its row, owner, trials' states and
    project give, without its checkpoints or metrics."""
    config = exp["config"]
    owner = facts.owner(exp)
    return {
        "id": exp["id"],
        "name": config.get("name") or "",
        "description": config.get("description") or "",
        "labels": list(config.get("labels") or []),
        "state": facts.display_state(exp),
        "archived": bool(exp["archived"]),
        "startTime": _time.rfc3339(exp["start_time"]),
        "endTime": _time.rfc3339(exp["end_time"]),
        "progress": exp["progress"],
        "username": owner["username"],
        "displayName": owner["display_name"] or "",
        "userId": exp["owner_id"],
        "forkedFrom": exp["parent_id"],
        "resourcePool": (config.get("resources") or {}).get("resource_pool") or "default",
        "numTrials": facts.num_trials[int(exp["id"])],
        **facts.placement(exp),
    }


def _experiment_rest(facts: ExperimentFacts, exp: ExperimentRow, redacted: bool) -> dict[str, Any]:
    config = exp["config"]
    metric, smaller = experiment.searcher_metric(config)
    trials = facts.trials[int(exp["id"])]
    ckpts = [
        c
        for t, _ in trials
        for c in facts.checkpoints.get(t, [])
        if c["state"] != _checkpoints.DELETED
    ]
    best_trial, best_value = _best_trial(trials, metric, smaller)
    start, end = exp["start_time"], exp["end_time"]
    duration = None
    if start is not None:
        stop = _time.as_utc(end) if end is not None else _time.now()
        duration = int((stop - _time.as_utc(start)).total_seconds() * 1000)
    # experiments_by_id leaves the definition's bytes out and gives their length.
    size = cast(dict[str, Any], exp).get("model_definition_size")
    return {
        "notes": exp["notes"],
        "config": _redact.redact(config) if redacted else config,
        "originalConfig": (
            _redact.redact_text(exp["original_config"]) if redacted else exp["original_config"]
        ),
        "duration": duration,
        "parentId": exp["parent_id"],
        "jobId": f"experiment-{exp['id']}",
        "searcherType": (config.get("searcher") or {}).get("name") or "",
        "searcherMetric": metric,
        "hyperparameters": config.get("hyperparameters") or {},
        "trialIds": [t for t, _ in trials],
        "bestTrialId": best_trial,
        "bestTrialSearcherMetric": best_value,
        "checkpointCount": len(ckpts),
        "checkpointSize": str(sum(int(c["size"]) for c in ckpts)),
        "modelDefinitionSize": int(size)
        if size is not None
        else len(exp["model_definition"] or b""),
        "unmanaged": int(exp["id"]) in facts.external_ids,
        "externalExperimentId": facts.external_ids.get(int(exp["id"])),
        "externalTrialId": None,
    }


def _best_trial(
    trials: list[tuple[int, dict[str, Any] | None]], metric: str, smaller: bool
) -> tuple[int | None, float | None]:
    best: tuple[int | None, float | None] = (None, None)
    for trial_id, values in trials:
        value = (values or {}).get(metric)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if best[1] is None or (value < best[1] if smaller else value > best[1]):
            best = (trial_id, float(value))
    return best


def _runs(trial: Mapping[str, Any], unmanaged: bool, live: AllocationRow | None) -> bool:
    """Whether an ACTIVE trial runs now: it has a live allocation (``live``), or (unmanaged:
    no allocations) its user's process has started a run."""
    if trial["state"] != State.ACTIVE.value:
        return False
    if unmanaged:
        return int(trial["run_id"]) > 0
    # PENDING: its resources are not there yet (a Slurm job in Slurm's queue).
    return live is not None and live["state"] != AllocationState.PENDING.value


def _display_state(conn: sa.Connection, trial: TrialRow) -> str:
    # An ACTIVE trial shows what its allocation is doing, as the reference's API does.
    if trial["state"] != State.ACTIVE.value:
        return str(trial["state"])
    unmanaged = _unmanaged.is_unmanaged(conn, int(trial["experiment_id"]))
    live = None if unmanaged else _trials.live_allocation(conn, int(trial["id"]))
    return "STATE_RUNNING" if _runs(trial, unmanaged, live) else "STATE_QUEUED"


def trial_json(conn: sa.Connection, trial: TrialRow) -> dict[str, Any]:
    """``v1Trial``."""
    exp = _experiments.require_shown(conn, trial["experiment_id"])
    metric, _ = experiment.searcher_metric(exp["config"])
    best = _metrics.get_row(conn, trial["best_validation_id"])
    ckpts = [
        c for c in _checkpoints.of_trial(conn, int(trial["id"])) if c["state"] != "STATE_DELETED"
    ]
    return {
        "id": trial["id"],
        "experimentId": trial["experiment_id"],
        "startTime": _time.rfc3339(trial["start_time"]),
        "endTime": _time.rfc3339(trial["end_time"]),
        "state": _display_state(conn, trial),
        # As 0.37 reports it: the count is raised before the check against max_restarts, so
        # a trial that exhausted them stored max + 1; shown no higher than max_restarts.
        "restarts": min(int(trial["restarts"]), int(exp["config"].get("max_restarts", 5) or 0)),
        "hparams": trial["hparams"],
        "totalBatchesProcessed": int(trial["total_batches"]),
        "bestValidation": _metrics.workload_json(best),
        "latestValidation": _metrics.workload_json(
            _metrics.get_row(conn, trial["latest_validation_id"])
        ),
        "bestCheckpoint": None,
        "runnerState": trial["runner_state"],
        "wallClockTime": 0,
        "warmStartCheckpointUuid": trial["warm_start_checkpoint"],
        "taskId": trial["task_id"],
        "totalCheckpointSize": str(sum(int(c["size"]) for c in ckpts)),
        "checkpointCount": len(ckpts),
        "searcherMetricValue": None if best is None else best["metrics"].get(metric),
        "taskIds": _trials.task_ids_of(conn, trial),
        "summaryMetrics": trial["summary_metrics"],
        "logRetentionDays": trial.get("log_retention_days"),
        "metadata": {},
    }


def checkpoint_json(
    conn: sa.Connection, ckpt: CheckpointRow, *, redacted: bool = True
) -> dict[str, Any]:
    """``v1Checkpoint`` with its training metadata (its experiment's config redacted unless
    ``redacted`` is False)."""
    trial = _trials.require_trial(conn, ckpt["trial_id"])
    exp = _experiments.require_experiment(conn, trial["experiment_id"])
    metric, _ = experiment.searcher_metric(exp["config"])
    steps = int(ckpt["steps_completed"])
    train = _metrics.at_steps(conn, int(ckpt["trial_id"]), "training", steps)
    val = _metrics.at_steps(conn, int(ckpt["trial_id"]), "validation", steps)
    return {
        "taskId": ckpt["task_id"],
        "allocationId": ckpt["allocation_id"],
        "uuid": ckpt["uuid"],
        "reportTime": _time.rfc3339(ckpt["report_time"]),
        "resources": ckpt["resources"],
        "metadata": ckpt["metadata"],
        "state": ckpt["state"],
        "training": {
            "trialId": trial["id"],
            "experimentId": trial["experiment_id"],
            "experimentConfig": _redact.redact(exp["config"]) if redacted else exp["config"],
            "hparams": trial["hparams"],
            "trainingMetrics": _metrics_json(train),
            "validationMetrics": _metrics_json(val),
            "searcherMetric": None if val is None else val["metrics"].get(metric),
        },
        "storageId": ckpt["storage_id"],
    }


def _metrics_json(row: dict[str, Any] | None) -> dict[str, Any]:
    if row is None:
        return {"avgMetrics": None, "batchMetrics": None}
    return {"avgMetrics": row["metrics"], "batchMetrics": row["batch_metrics"]}


def page(rows: list[Any], offset: int, limit: int) -> tuple[list[Any], dict[str, int]]:
    """One page of a listing and the gateway's ``pagination`` object (``limit`` 0: all)."""
    chunk = rows[offset : offset + limit] if limit else rows[offset:]
    return chunk, pagination(len(rows), offset, limit)


def pagination(total: int, offset: int, limit: int) -> dict[str, int]:
    """The gateway's ``pagination`` object of the page at ``offset`` (``limit`` 0: all) of a
    listing of ``total`` rows."""
    start = min(offset, total)
    count = max(0, min(total - start, limit) if limit else total - start)
    return {
        "offset": offset,
        "limit": limit,
        "startIndex": start,
        "endIndex": start + count,
        "total": total,
    }
