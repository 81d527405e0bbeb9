"""Reading a trial's metrics back: the reference's metric streams (what the SDK's
``trial.iter_metrics`` reads) and the workloads listing (``det e describe``, ``det t describe``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from determined.master._errors import InvalidArgument
from determined.master.api import _wire
from determined.master.api._auth import Caller
from determined.master.api._deps import Limit, StoreDep
from determined.master.experiment import State
from determined.master.store import (
    CheckpointRow,
    Store,
    _checkpoints,
    _metrics,
    _models,
    _time,
    _trial_sources,
    _trials,
)

router = APIRouter(prefix="/api/v1")
STREAM_POLL_S = 0.5
STREAM_BATCH = 1000
# The key the reference keeps a report's values under, by group (others: avg_metrics).
_VALUES_KEY = {"validation": "validation_metrics"}
_FILTERS = {
    "FILTER_OPTION_UNSPECIFIED": ("training", "validation", "checkpoint"),
    "FILTER_OPTION_CHECKPOINT": ("checkpoint",),
    "FILTER_OPTION_VALIDATION": ("validation",),
    "FILTER_OPTION_CHECKPOINT_OR_VALIDATION": ("validation", "checkpoint"),
}
_KIND_ORDER = {"training": 0, "validation": 1, "checkpoint": 2}


def metrics_report_json(row: dict[str, Any]) -> dict[str, Any]:
    """``v1MetricsReport`` of one stored report."""
    group = row["metric_group"]
    values: dict[str, Any] = {_VALUES_KEY.get(group, "avg_metrics"): row["metrics"]}
    if row["batch_metrics"] is not None:
        values["batch_metrics"] = row["batch_metrics"]
    return {
        "id": row["id"],
        "trialId": row["trial_id"],
        "trialRunId": row["trial_run_id"],
        "group": group,
        "totalBatches": int(row["steps_completed"]),
        "endTime": _time.rfc3339(row["report_time"]),
        "metrics": values,
        "archived": bool(row["archived"]),
    }


def _stream(store: Store, trial_ids: list[int], group: str) -> Iterator[bytes]:
    """``{"result": {"metrics": [...]}}`` lines: what is stored, then new reports until every
    trial is terminal (the reference's stream ends there too)."""
    seen: set[int] = set()
    while True:
        with store.read() as conn:
            done = all(
                State((_trials.get_trial(conn, t) or {"state": "STATE_ERROR"})["state"]).is_terminal
                for t in trial_ids
            )
            rows = [r for t in trial_ids for r in _metrics.list_rows(conn, t, group)]
        rows = [r for r in rows if r["id"] not in seen]
        for i in range(0, len(rows), STREAM_BATCH):
            batch = [metrics_report_json(r) for r in rows[i : i + STREAM_BATCH]]
            yield (json.dumps({"result": {"metrics": batch}}) + "\n").encode()
        seen.update(r["id"] for r in rows)
        if done:
            return
        time.sleep(STREAM_POLL_S)


def _metrics_stream(caller: Caller, store: Store, trial_ids: list[int], group: str) -> Any:
    _metrics.validate_group(group)
    if not trial_ids:
        raise InvalidArgument("trialIds: name at least one trial (?trialIds=N)")
    with store.read() as conn:
        for t in trial_ids:
            caller.check_trial(t)
            _trials.require_trial(conn, t)
    return StreamingResponse(_stream(store, trial_ids, group), media_type="application/json")


@router.get("/trials/metrics/trial_metrics")
def trial_metrics(
    caller: Caller,
    store: StoreDep,
    trial_ids: list[int] = Query(default=[], alias="trialIds"),
    group: str = "",
) -> StreamingResponse:
    """The reports of ``group`` of the trials, oldest step first, as NDJSON."""
    return _metrics_stream(caller, store, trial_ids, group)


@router.get("/trials/metrics/training_metrics")
def training_metrics(
    caller: Caller,
    store: StoreDep,
    trial_ids: list[int] = Query(default=[], alias="trialIds"),
) -> StreamingResponse:
    return _metrics_stream(caller, store, trial_ids, "training")


@router.get("/trials/metrics/validation_metrics")
def validation_metrics(
    caller: Caller,
    store: StoreDep,
    trial_ids: list[int] = Query(default=[], alias="trialIds"),
) -> StreamingResponse:
    return _metrics_stream(caller, store, trial_ids, "validation")


def _metrics_workload(row: dict[str, Any], batch_metrics: bool) -> dict[str, Any]:
    body = _metrics.workload_json(row) or {}
    if not batch_metrics:
        body["metrics"].pop("batchMetrics", None)
    return body


def _checkpoint_workload(ckpt: CheckpointRow) -> dict[str, Any]:
    return {
        "uuid": ckpt["uuid"],
        "endTime": _time.rfc3339(ckpt["report_time"]),
        "state": ckpt["state"],
        "resources": ckpt["resources"],
        "totalBatches": int(ckpt["steps_completed"]),
        "metadata": ckpt["metadata"],
    }


def workloads(
    conn: Any, trial_id: int, kinds: tuple[str, ...], batch_metrics: bool
) -> list[tuple[int, int, dict[str, Any]]]:
    """``(steps, kind order, v1WorkloadContainer)`` of every workload of the trial."""
    out: list[tuple[int, int, dict[str, Any]]] = []
    for group in ("training", "validation"):
        if group in kinds:
            for row in _metrics.list_rows(conn, trial_id, group):
                body: dict[str, Any] = {group: _metrics_workload(row, batch_metrics)}
                out.append((int(row["steps_completed"]), _KIND_ORDER[group], body))
    if "checkpoint" in kinds:
        for ckpt in _checkpoints.of_trial(conn, trial_id):
            body = {"checkpoint": _checkpoint_workload(ckpt)}
            out.append((int(ckpt["steps_completed"]), _KIND_ORDER["checkpoint"], body))
    return sorted(out, key=lambda w: (w[0], w[1]))


@router.get("/trials/{trial_id}/workloads")
def trial_workloads(
    trial_id: int,
    caller: Caller,
    store: StoreDep,
    offset: int = Query(0, ge=0),
    limit: Limit = 0,
    order_by: str = Query("ORDER_BY_ASC", alias="orderBy"),
    filter_: str = Query("FILTER_OPTION_UNSPECIFIED", alias="filter"),
    include_batch_metrics: bool = Query(False, alias="includeBatchMetrics"),
) -> dict[str, Any]:
    """``{workloads: [{training} | {validation} | {checkpoint}], pagination}`` by steps
    (training, then validation, then checkpoint at the same steps); ``limit`` 0 is all."""
    caller.check_trial(trial_id)
    kinds = _FILTERS.get(filter_)
    if kinds is None:
        raise InvalidArgument(f"filter {filter_!r} is not one of: {', '.join(_FILTERS)}")
    with store.read() as conn:
        _trials.require_trial(conn, trial_id)
        found = [w[2] for w in workloads(conn, trial_id, kinds, include_batch_metrics)]
    if order_by in ("ORDER_BY_DESC", "desc"):
        found.reverse()
    chunk, pagination = _wire.page(found, offset, limit)
    return {"workloads": chunk, "pagination": pagination}


# Trial source infos (0.37's core.experimental.report_task_using_checkpoint /
# report_task_using_model_version) and the metrics routes that read them.

# 0.37 answers at most this many reports per linked trial.
_SOURCE_METRICS_LIMIT = 1000


class TrialSourceInfo(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    trial_id: int = Field(alias="trialId")
    checkpoint_uuid: str = Field(alias="checkpointUuid")
    trial_source_info_type: str = Field(alias="trialSourceInfoType")
    model_id: int | None = Field(None, alias="modelId")
    model_version: int | None = Field(None, alias="modelVersion")


class ReportTrialSourceInfo(BaseModel):
    trial_source_info: TrialSourceInfo = Field(alias="trialSourceInfo")


def _check_source_type(kind: str | None) -> str | None:
    if kind in (None, ""):
        return None
    if kind not in _trial_sources.TYPES:
        raise InvalidArgument(
            f"trialSourceInfoType {kind!r} is not one of: {', '.join(_trial_sources.TYPES)}"
        )
    return kind


@router.post("/trial-source-info")
def report_trial_source_info(
    body: ReportTrialSourceInfo, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """Link a trial to the checkpoint (and model version) it used; ``{trialId, checkpointUuid}``.
    The trial's own allocation token or its experiment's owner may report."""
    info = body.trial_source_info
    kind = _check_source_type(info.trial_source_info_type)
    if kind is None:
        raise InvalidArgument("trialSourceInfoType: name the kind of use (INFERENCE, FINE_TUNING)")
    if (info.model_id is None) != (info.model_version is None):
        raise InvalidArgument("modelId and modelVersion go together: give both or neither")
    caller.check_reporter(store, info.trial_id)

    def link(conn: Any) -> None:
        _checkpoints.require(conn, info.checkpoint_uuid)
        if info.model_id is not None and info.model_version is not None:
            model = _models.require_model(conn, info.model_id)
            version = _models.require_version(conn, model, info.model_version)
            if version["checkpoint_uuid"] != info.checkpoint_uuid:
                raise InvalidArgument(
                    f"version {info.model_version} of model {info.model_id} holds checkpoint "
                    f"{version['checkpoint_uuid']}, not {info.checkpoint_uuid}"
                )
        _trial_sources.record(
            conn, info.trial_id, info.checkpoint_uuid, kind, info.model_id, info.model_version
        )

    store.write(link)
    return {"trialId": info.trial_id, "checkpointUuid": info.checkpoint_uuid}


def _reports_of(conn: Any, trial_ids: list[int], group: str | None) -> list[dict[str, Any]]:
    found = []
    for t in trial_ids:
        rows = _metrics.list_rows(conn, t, group or None)[:_SOURCE_METRICS_LIMIT]
        found += [metrics_report_json(r) for r in rows]
    return found


@router.get("/checkpoints/{checkpoint_uuid}/metrics")
def metrics_by_checkpoint(
    checkpoint_uuid: str,
    caller: Caller,
    store: StoreDep,
    metric_group: str | None = Query(None, alias="metricGroup"),
    trial_source_info_type: str | None = Query(None, alias="trialSourceInfoType"),
) -> dict[str, Any]:
    """``{metrics: [v1MetricsReport]}``: the reports of every trial that used the checkpoint
    (``metricGroup``: one group; ``trialSourceInfoType``: one kind of use)."""
    caller.require_user()
    kind = _check_source_type(trial_source_info_type)
    if metric_group:
        _metrics.validate_group(metric_group)
    with store.read() as conn:
        _checkpoints.require(conn, checkpoint_uuid)
        trial_ids = _trial_sources.trials_using_checkpoint(conn, checkpoint_uuid, kind)
        return {"metrics": _reports_of(conn, trial_ids, metric_group)}


@router.get("/models/{model_name}/versions/{version}/metrics")
def metrics_by_model_version(
    model_name: str,
    version: int,
    caller: Caller,
    store: StoreDep,
    metric_group: str | None = Query(None, alias="metricGroup"),
    trial_source_info_type: str | None = Query(None, alias="trialSourceInfoType"),
) -> dict[str, Any]:
    """``{metrics: [v1MetricsReport]}``: the reports of every trial that reported using this
    model version."""
    caller.require_user()
    kind = _check_source_type(trial_source_info_type)
    if metric_group:
        _metrics.validate_group(metric_group)
    with store.read() as conn:
        model = _models.require_model(conn, model_name)
        v = _models.require_version(conn, model, version)
        trial_ids = _trial_sources.trials_using_version(
            conn, int(model["id"]), int(v["version"]), kind
        )
        return {"metrics": _reports_of(conn, trial_ids, metric_group)}
