"""What a ``/stream`` subscription sees: the rows of one kind (projects, models, model versions,
experiments, trials, metrics) that match a subscription's ids, as the message bodies 0.37's
streaming client reads (``determined.common.streams.wire``), without their ``seq``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from determined.master.store import _time
from determined.master.store._experiments import config_of
from determined.master.store._schema import (
    experiments,
    metrics,
    model_versions,
    models,
    projects,
    trials,
)

# The filters each kind's subscription takes (0.37's ``*SubscriptionSpec`` fields).
SPEC_FIELDS: dict[str, tuple[str, ...]] = {
    "projects": ("workspace_ids", "project_ids"),
    "models": ("workspace_ids", "model_ids", "user_ids"),
    "modelversions": ("model_ids", "model_version_ids", "user_ids"),
    "experiments": ("workspace_ids", "project_ids", "experiment_ids"),
    "trials": ("experiment_ids", "trial_ids"),
    "metrics": ("experiment_ids", "trial_ids"),
}


def _project(r: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": r["id"],
        "name": r["name"],
        "description": r["description"],
        "archived": bool(r["archived"]),
        "created_at": _time.rfc3339(r["created_at"]),
        "notes": r["notes"],
        "workspace_id": r["workspace_id"],
        "user_id": r["user_id"],
        "immutable": bool(r["immutable"]),
        "state": "WORKSPACE_STATE_UNSPECIFIED",
        "key": r["key"],
    }


def _model(r: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": r["id"],
        "name": r["name"],
        "description": r["description"],
        "archived": bool(r["archived"]),
        "creation_time": _time.rfc3339(r["creation_time"]),
        "notes": r["notes"],
        "workspace_id": r["workspace_id"],
        "user_id": r["user_id"],
        "last_updated_time": _time.rfc3339(r["last_updated_time"]),
        "metadata": r["metadata"],
        "labels": list(r["labels"] or []),
    }


def _model_version(r: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": r["id"],
        "name": r["name"],
        "version": r["version"],
        "checkpoint_uuid": r["checkpoint_uuid"],
        "creation_time": _time.rfc3339(r["creation_time"]),
        "last_updated_time": _time.rfc3339(r["last_updated_time"]),
        "metadata": r["metadata"],
        "model_id": r["model_id"],
        "user_id": r["user_id"],
        "comment": r["comment"],
        "labels": list(r["labels"] or []),
        "notes": r["notes"],
        "workspace_id": r["workspace_id"],
    }


def _experiment(r: Mapping[str, Any]) -> dict[str, Any]:
    config = config_of(r["config_text"]) or {}
    return {
        "id": r["id"],
        "name": config.get("name", ""),
        "state": r["state"],
        "archived": bool(r["archived"]),
        "progress": r["progress"],
        "start_time": _time.rfc3339(r["start_time"]),
        "end_time": _time.rfc3339(r["end_time"]),
        "owner_id": r["owner_id"],
        "project_id": r["project_id"],
        "workspace_id": r["workspace_id"],
        "parent_id": r["parent_id"],
        "notes": r["notes"],
        "searcher_type": (config.get("searcher") or {}).get("name", ""),
    }


def _trial(r: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": r["id"],
        "experiment_id": r["experiment_id"],
        "request_id": r["request_id"],
        "task_id": r["task_id"],
        "state": r["state"],
        "hparams": r["hparams"],
        "seed": r["seed"],
        "restarts": r["restarts"],
        "run_id": r["run_id"],
        "total_batches": r["total_batches"],
        "searcher_metric_value": None,
        "latest_validation_id": r["latest_validation_id"],
        "best_validation_id": r["best_validation_id"],
        "summary_metrics": r["summary_metrics"],
        "start_time": _time.rfc3339(r["start_time"]),
        "end_time": _time.rfc3339(r["end_time"]),
        "archived": bool(r["archived"]),
    }


def _metric(r: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": r["id"],
        "trial_id": r["trial_id"],
        "trial_run_id": r["trial_run_id"],
        "metric_group": r["metric_group"],
        "partition_type": r["partition"],
        "total_batches": r["steps_completed"],
        "end_time": _time.rfc3339(r["report_time"]),
        "metrics": r["metrics"],
        "archived": bool(r["archived"]),
    }


def _where(q: sa.Select[Any], spec: Mapping[str, Sequence[int] | None], cols: Any) -> Any:
    """AND of the spec's id lists (a field left out: no limit on it); a spec naming no ids at
    all matches nothing, as in 0.37 (a subscription must say what it wants)."""
    named = [f for f, ids in spec.items() if ids is not None]
    if not named:
        return None
    for field in named:
        q = q.where(cols[field].in_(list(spec[field] or [])))
    return q


def _select(kind: str) -> tuple[sa.Select[Any], dict[str, Any], Callable[..., dict[str, Any]]]:
    if kind == "projects":
        q = sa.select(projects)
        cols = {"workspace_ids": projects.c.workspace_id, "project_ids": projects.c.id}
        return q, cols, _project
    if kind == "models":
        cols = {
            "workspace_ids": models.c.workspace_id,
            "model_ids": models.c.id,
            "user_ids": models.c.user_id,
        }
        return sa.select(models), cols, _model
    if kind == "modelversions":
        q = sa.select(model_versions, models.c.workspace_id).join(
            models, models.c.id == model_versions.c.model_id
        )
        cols = {
            "model_ids": model_versions.c.model_id,
            "model_version_ids": model_versions.c.id,
            "user_ids": model_versions.c.user_id,
        }
        return q, cols, _model_version
    if kind == "experiments":
        # Not the model definition's bytes; the config as its text, decoded once (config_of).
        columns = [c for c in experiments.c if c.name not in ("config", "model_definition")]
        text = sa.cast(experiments.c.config, sa.Text).label("config_text")
        q = sa.select(*columns, text, projects.c.workspace_id).join(
            projects, projects.c.id == experiments.c.project_id, isouter=True
        )
        cols = {
            "workspace_ids": projects.c.workspace_id,
            "project_ids": experiments.c.project_id,
            "experiment_ids": experiments.c.id,
        }
        return q, cols, _experiment
    if kind == "trials":
        cols = {"experiment_ids": trials.c.experiment_id, "trial_ids": trials.c.id}
        return sa.select(trials), cols, _trial
    if kind == "metrics":
        q = sa.select(metrics, trials.c.experiment_id).join(
            trials, trials.c.id == metrics.c.trial_id
        )
        cols = {"experiment_ids": trials.c.experiment_id, "trial_ids": metrics.c.trial_id}
        return q, cols, _metric
    raise KeyError(kind)


def matching(
    conn: sa.Connection, kind: str, spec: Mapping[str, Sequence[int] | None]
) -> dict[int, str]:
    """``{id: message body's JSON text}`` of the rows of ``kind`` the subscription ``spec``
    matches (the text as ``json.dumps`` writes it: ``api._stream`` compares it to know a
    changed row, and writes the upsert around it)."""
    q, cols, body = _select(kind)
    q = _where(q, spec, cols)
    if q is None:
        return {}
    if kind != "experiments":
        return {int(r["id"]): json.dumps(body(r)) for r in conn.execute(q).mappings()}
    # An experiment's row holds no decoded JSON (its config is text): a row read before gives
    # the very text written then (1,000 experiments of a project, on every sync).
    out = {}
    for r in conn.execute(q).mappings():
        key = tuple(r.values())
        text = _EXPERIMENTS.get(key)
        if text is None:
            if len(_EXPERIMENTS) >= _EXPERIMENTS_KEPT:
                _EXPERIMENTS.clear()
            text = _EXPERIMENTS[key] = json.dumps(body(r))
        out[int(r["id"])] = text
    return out


def read(
    conn: sa.Connection, specs: Mapping[str, Mapping[str, Sequence[int] | None]]
) -> dict[str, dict[int, str]]:
    """``matching`` of each kind of a subscription (``{kind: spec}``): a read function (see
    ``_read_workers``), so that a sync of 1,000 experiments is read and written out beside
    the master's process, not in it."""
    return {kind: matching(conn, kind, spec) for kind, spec in specs.items()}


# Experiment messages' text by their row's values.
_EXPERIMENTS: dict[tuple[Any, ...], str] = {}
_EXPERIMENTS_KEPT = 8192
