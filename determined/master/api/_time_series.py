"""``GET /api/v1/trials/time-series`` (the reference's ``CompareTrials``): chosen metrics of
several trials as series of points, thinned to ``maxDatapoints`` per series, for charts that
compare trials. Included before ``/trials/{id}`` so the fixed path is not read as an id."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Query, Request, Response

from determined.master._errors import InvalidArgument
from determined.master.api._auth import Caller
from determined.master.api._deps import ReadsDep
from determined.master.api._wire import trial_json
from determined.master.store import _metrics, _time, _trials

router = APIRouter(prefix="/api/v1")

DEFAULT_MAX_DATAPOINTS = 200  # the reference's default when the request leaves it 0
_LEGACY_TYPES = {
    "METRIC_TYPE_UNSPECIFIED": "",
    "METRIC_TYPE_TRAINING": "training",
    "METRIC_TYPE_VALIDATION": "validation",
    "METRIC_TYPE_PROFILING": "profiling",
}
_PROTO_TYPES = {v: k for k, v in _LEGACY_TYPES.items() if v}


def metric_groups(
    metric_names: list[str], metric_ids: list[str], group: str, metric_type: str
) -> dict[str, list[str]]:
    """Which names to read from which group: ``metricNames`` from ``group`` (or the legacy
    ``metricType``; neither: training and validation both), ``metricIds`` as ``group.name``."""
    if metric_type not in _LEGACY_TYPES:
        raise InvalidArgument(f"metricType must be one of {', '.join(_LEGACY_TYPES)}")
    legacy = _LEGACY_TYPES[metric_type]
    if legacy and group:
        raise InvalidArgument("give either group or the legacy metricType, not both")
    if metric_names and metric_ids:
        raise InvalidArgument("give either metricNames or metricIds, not both")
    chosen = group or legacy
    wanted: dict[str, list[str]] = {}
    if metric_names:
        for g in [chosen] if chosen else ["training", "validation"]:
            wanted[g] = list(metric_names)
    for metric_id in metric_ids:
        g, sep, name = metric_id.partition(".")
        if not sep or not g or not name:
            raise InvalidArgument(
                f"metricIds: {metric_id!r} is not 'group.name' (for example validation.loss)"
            )
        wanted.setdefault(g, []).append(name)
    return dict(sorted(wanted.items()))


def downsample(points: list[Any], most: int) -> list[Any]:
    """At most ``most`` of ``points``, evenly spread, the first and the last always kept.
    (The reference uses largest-triangle sampling; both keep the ends and the order.)"""
    if most <= 0 or len(points) <= most:
        return list(points)
    if most == 1:
        return [points[-1]]
    step = (len(points) - 1) / (most - 1)
    return [points[round(i * step)] for i in range(most)]


def _series(
    rows: list[dict[str, Any]], names: list[str], start: int, end: int, most: int
) -> list[dict[str, Any]]:
    points = []
    for row in rows:
        steps = int(row["steps_completed"])
        if steps < start or steps > end:
            continue
        values = row["metrics"] or {}
        picked = {n: values[n] for n in names if n in values}
        if not picked:
            continue
        point: dict[str, Any] = {
            "batches": steps,
            "time": _time.rfc3339(row["report_time"]),
            "values": picked,
        }
        epoch = values.get("epoch")
        if isinstance(epoch, int | float) and not isinstance(epoch, bool):
            point["epoch"] = float(epoch)
        points.append(point)
    return downsample(points, most)


@router.get("/trials/time-series", response_model=None)
async def compare_trials(
    request: Request,
    caller: Caller,
    reads: ReadsDep,
    trial_ids: list[int] = Query(default=[], alias="trialIds"),
    max_datapoints: int = Query(0, alias="maxDatapoints", ge=0),
    metric_names: list[str] = Query(default=[], alias="metricNames"),
    metric_ids: list[str] = Query(default=[], alias="metricIds"),
    start_batches: int = Query(0, alias="startBatches", ge=0),
    end_batches: int = Query(0, alias="endBatches", ge=0),
    metric_type: str = Query("METRIC_TYPE_UNSPECIFIED", alias="metricType"),
    group: str = "",
) -> Response:
    """``{trials: [{trial, metrics: [{type, group, data: [{batches, time, epoch?,
    values}]}]}]}`` in the order of ``trialIds``; a group with no matching points is left out."""
    # Refused rather than ignored: a chart filtered by them would silently show other data.
    filters = sorted(k for k in request.query_params if k.startswith("timeSeriesFilter"))
    if filters:
        raise InvalidArgument(
            f"{', '.join(filters)}: time series filters are not supported here; ask for "
            "the batch range with startBatches/endBatches instead"
        )
    wanted = metric_groups(metric_names, metric_ids, group, metric_type)
    most = max_datapoints or DEFAULT_MAX_DATAPOINTS
    end = end_batches or 2**31 - 1
    for trial_id in trial_ids:
        caller.check_trial(trial_id)
    return await reads.answer(trial_series, trial_ids, wanted, start_batches, end, most)


def trial_series(
    conn: sa.Connection,
    trial_ids: list[int],
    wanted: dict[str, list[str]],
    start: int,
    end: int,
    most: int,
) -> dict[str, Any]:
    """``GET /trials/time-series``' body (a read function: see _read_workers)."""
    out = []
    for trial_id in trial_ids:
        trial = _trials.require_trial(conn, trial_id)
        series = []
        for g, names in wanted.items():
            rows = _metrics.list_rows(conn, trial_id, g)
            data = _series(rows, names, start, end, most)
            if data:
                kind = _PROTO_TYPES.get(g, "METRIC_TYPE_UNSPECIFIED")
                series.append({"type": kind, "group": g, "data": data})
        out.append({"trial": trial_json(conn, trial), "metrics": series})
    return {"trials": out}
