"""``GET /api/v1/projects/{id}/columns``: the columns 0.37's experiment table offers for a
project (its fixed experiment columns, then one per metric summary and one per flattened
hyperparameter of the project's experiments), as ``v1ProjectColumn`` rows."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Query

from determined.master._errors import Unimplemented
from determined.master.api import _wire
from determined.master.api._auth import Caller
from determined.master.api._deps import StoreDep
from determined.master.store import _experiments, _projects, _trials

router = APIRouter(prefix="/api/v1")

_EXPERIMENT = "LOCATION_TYPE_EXPERIMENT"
_NUMBER, _TEXT, _DATE = "COLUMN_TYPE_NUMBER", "COLUMN_TYPE_TEXT", "COLUMN_TYPE_DATE"
_UNSPECIFIED = "COLUMN_TYPE_UNSPECIFIED"

# 0.37's fixed experiment-table columns, in its order: (column, display name, type).
FIXED_COLUMNS = (
    ("id", "ID", _NUMBER),
    ("name", "Name", _TEXT),
    ("description", "Description", _TEXT),
    ("tags", "Tags", _TEXT),
    ("forkedFrom", "Forked", _NUMBER),
    ("startTime", "Start time", _DATE),
    ("duration", "Duration", _NUMBER),
    ("numTrials", "Trial count", _NUMBER),
    ("state", "State", _TEXT),
    ("searcherType", "Searcher", _TEXT),
    ("resourcePool", "Resource pool", _TEXT),
    ("progress", "Progress", _NUMBER),
    ("checkpointSize", "Checkpoint size", _NUMBER),
    ("checkpointCount", "Checkpoints", _NUMBER),
    ("user", "User", _TEXT),
    ("searcherMetric", "Searcher Metric", _TEXT),
    ("searcherMetricsVal", "Searcher Metric Value", _NUMBER),
    ("externalExperimentId", "External Experiment ID", _TEXT),
    ("externalTrialId", "External Trial ID", _TEXT),
)

# A summary group's column prefix and location (other groups: custom metrics).
_GROUPS = {
    "avg_metrics": ("training", "LOCATION_TYPE_TRAINING"),
    "validation_metrics": ("validation", "LOCATION_TYPE_VALIDATIONS"),
}
# A summarised value's kind -> its column type (0.37's parseMetricsType: booleans are text).
_KINDS = {"number": _NUMBER, "string": _TEXT, "boolean": _TEXT, "date": _DATE}
_HP_TYPES = {"int", "double", "log", "const", "categorical"}


def _flat_hparams(hparams: Any, prefix: str = "") -> dict[str, Any]:
    """Nested hyperparameters flattened to dotted names (``metrics_base.min_val``)."""
    out: dict[str, Any] = {}
    for name, value in (hparams or {}).items():
        key = f"{prefix}{name}"
        if isinstance(value, dict) and value.get("type") not in _HP_TYPES:
            out.update(_flat_hparams(value, key + "."))
        else:
            out[key] = value
    return out


def _hparam_type(value: Any) -> str:
    if not isinstance(value, dict):  # a bare value is a constant
        value = {"type": "const", "val": value}
    kind = value.get("type")
    if kind in ("int", "double", "log"):
        return _NUMBER
    if kind == "const":
        val = value.get("val")
        if isinstance(val, int | float) and not isinstance(val, bool):
            return _NUMBER
        if isinstance(val, str):
            return _TEXT
    return _UNSPECIFIED


def _metric_columns(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One column per summarised metric (four aggregates of a number), by group and name; a
    metric summarised with different kinds in different trials is one UNSPECIFIED column."""
    kinds: dict[tuple[str, str], set[str]] = {}
    for summary in summaries:
        for group, values in (summary or {}).items():
            if not isinstance(values, dict):
                continue
            for name, entry in values.items():
                kind = entry.get("type") if isinstance(entry, dict) else None
                kinds.setdefault((group, name), set()).add(str(kind))
    columns = []
    for (group, name), seen in sorted(kinds.items()):
        prefix, location = _GROUPS.get(group, (group, "LOCATION_TYPE_CUSTOM_METRIC"))
        kind = _KINDS.get(next(iter(seen)), _UNSPECIFIED) if len(seen) == 1 else _UNSPECIFIED
        aggregates = ("last", "max", "mean", "min") if kind == _NUMBER else ("last",)
        columns += [
            {"column": f"{prefix}.{name}.{agg}", "location": location, "type": kind}
            for agg in aggregates
        ]
    return columns


def project_columns(conn: sa.Connection, project_id: int) -> list[dict[str, Any]]:
    """The project's ``v1ProjectColumn`` list (raises NotFound for an unknown project)."""
    _projects.require_project(conn, project_id)
    columns = [
        {"column": c, "displayName": shown, "location": _EXPERIMENT, "type": kind}
        for c, shown, kind in FIXED_COLUMNS
    ]
    summaries: list[dict[str, Any]] = []
    hparams: dict[str, str] = {}
    for exp_id in _projects.project_experiment_ids(conn, project_id):
        config = _experiments.require_experiment(conn, exp_id)["config"] or {}
        # Every trial's summaries (0.37 reads each experiment's best trial only).
        summaries += [dict(t["summary_metrics"] or {}) for t in _trials.trials_of(conn, exp_id)]
        for key, value in sorted(_flat_hparams(config.get("hyperparameters")).items()):
            hparams.setdefault(key, _hparam_type(value))
    columns += _metric_columns(summaries)
    columns += [
        {"column": f"hp.{key}", "location": "LOCATION_TYPE_HYPERPARAMETERS", "type": kind}
        for key, kind in hparams.items()
    ]
    return columns


@router.get("/projects/{project_id}/columns")
def get_project_columns(
    project_id: int,
    caller: Caller,
    store: StoreDep,
    table_type: str = Query("TABLE_TYPE_EXPERIMENT", alias="tableType"),
) -> dict[str, Any]:
    """``GetProjectColumnsResponse`` ``{columns}`` of the experiment table."""
    caller.require_user()
    if table_type not in ("TABLE_TYPE_EXPERIMENT", "TABLE_TYPE_UNSPECIFIED"):
        raise Unimplemented(
            f"tableType {table_type}: only the experiment table's columns are served here "
            "(TABLE_TYPE_EXPERIMENT, the default)"
        )
    with store.read() as conn:
        return {"columns": project_columns(conn, project_id)}


@router.get("/projects/{project_id}/experiments/metric-ranges")
def get_metric_ranges(project_id: int, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """``GetProjectNumericMetricsRangeResponse`` ``{ranges: [{metricsName, min, max}]}``: over
    each experiment's best trial, the range of every aggregate of a number it summarised
    (named as the columns are) and of the searcher metric's best value
    (``searcherMetricsVal``), as 0.37."""
    caller.require_user()
    values: dict[str, list[float]] = {}
    with store.read() as conn:
        _projects.require_project(conn, project_id)
        by_id = _experiments.experiments_by_id(
            conn, _projects.project_experiment_ids(conn, project_id)
        )
        for exp in _wire.experiment_jsons(conn, list(by_id.values())):
            if exp["bestTrialId"] is None:
                continue
            best = exp["bestTrialSearcherMetric"]
            if isinstance(best, int | float) and not isinstance(best, bool):
                values.setdefault("searcherMetricsVal", []).append(float(best))
            summary = _trials.require_trial(conn, int(exp["bestTrialId"]))["summary_metrics"]
            for group, metrics in (summary or {}).items():
                prefix = _GROUPS.get(group, (group, ""))[0]
                for name, entry in (metrics if isinstance(metrics, dict) else {}).items():
                    if not isinstance(entry, dict) or entry.get("type") != "number":
                        continue
                    for agg in ("last", "max", "mean", "min"):
                        v = entry.get(agg)
                        if isinstance(v, int | float) and not isinstance(v, bool):
                            values.setdefault(f"{prefix}.{name}.{agg}", []).append(float(v))
    ranges = [{"metricsName": n, "min": min(v), "max": max(v)} for n, v in values.items()]
    return {"ranges": ranges}
