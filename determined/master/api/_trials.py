"""What a trial's process calls about itself: its record, status, metrics and searcher ops
(docs/reference/master.md §3.2)."""

from __future__ import annotations

import math
from typing import Any

from fastapi import APIRouter, Body, Query, Request

from determined.common.api._session import json_safe
from determined.master import ingest
from determined.master._errors import InvalidArgument
from determined.master.api._auth import Caller, check_reporter
from determined.master.api._deps import ExperimentsDep, StoreDep
from determined.master.api._models import (
    CompleteOperation,
    EarlyExit,
    Progress,
    ReportMetrics,
    ReportTrainingMetrics,
    ReportValidationMetrics,
    RunnerMetadata,
    TrialMetrics,
)
from determined.master.api._responses import TrialAnswer
from determined.master.api._services import Services, services
from determined.master.api._wire import trial_json
from determined.master.store import _time, _trials

router = APIRouter(prefix="/api/v1")


@router.get("/trials/{trial_id}")
def get_trial(trial_id: int, caller: Caller, store: StoreDep) -> TrialAnswer:
    caller.check_trial(trial_id)
    with store.read() as conn:
        return {"trial": trial_json(conn, _trials.require_trial(conn, trial_id))}


@router.post("/trials/{trial_id}/runner/metadata")
def runner_metadata(
    trial_id: int, body: RunnerMetadata, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    caller.check_reporter(store, trial_id)
    with store.tx() as conn:
        _trials.require_trial(conn, trial_id)
        _trials.update_trial(conn, trial_id, runner_state=body.state)
    return {}


def parsed_report(trial_id: int, group: str, body: TrialMetrics) -> ingest.Report:
    """The report ``body`` posted to ``trial_id``'s ``group``, as ingestion takes it.

    Raises:
        InvalidArgument: it names another trial, or its time is not an RFC 3339 time.
    """
    if body.trial_id != trial_id:
        raise InvalidArgument(f"metrics for trial {body.trial_id} posted to trial {trial_id}")
    try:
        when = _time.parse(body.report_time)
    except ValueError as e:
        raise InvalidArgument(f"reportTime {body.report_time!r} is not an RFC 3339 time") from e
    avg, batch = _safe(body.metrics.avg_metrics), _safe(body.metrics.batch_metrics)
    return ingest.Report(trial_id, group, body.trial_run_id, body.steps_completed, avg, batch, when)


def _safe(value: Any) -> Any:
    """``json_safe(value)``, but a flat dict of finite numbers, strings, booleans and nulls (a
    report's usual metrics) as it is: json_safe's walk was a seventh of the hot lane's CPU."""
    if type(value) is not dict:
        return None if value is None else json_safe(value)
    for v in value.values():
        kind = type(v)
        if kind is float:
            if not math.isfinite(v):
                return json_safe(value)
        elif kind is not int and kind is not str and kind is not bool and v is not None:
            return json_safe(value)
    return value


async def record_report(found: Services, trial_id: int, group: str, body: TrialMetrics) -> None:
    """Parse ``body`` (its caller checked) and hand it to the master's ingestion. The three
    report routes and their hot path (``_hot``) end here."""
    await found.ingest.record(parsed_report(trial_id, group, body))


@router.post("/trials/{trial_id}/metrics")
async def report_metrics(
    trial_id: int, body: ReportMetrics, caller: Caller, request: Request
) -> dict[str, Any]:
    await check_reporter(caller, services(request).store, trial_id)
    await record_report(services(request), trial_id, body.group, body.metrics)
    return {}


@router.post("/trials/{trial_id}/training_metrics")
async def report_training_metrics(
    trial_id: int, body: ReportTrainingMetrics, caller: Caller, request: Request
) -> dict[str, Any]:
    await check_reporter(caller, services(request).store, trial_id)
    await record_report(services(request), trial_id, "training", body.training_metrics)
    return {}


@router.post("/trials/{trial_id}/validation_metrics")
async def report_validation_metrics(
    trial_id: int, body: ReportValidationMetrics, caller: Caller, request: Request
) -> dict[str, Any]:
    await check_reporter(caller, services(request).store, trial_id)
    await record_report(services(request), trial_id, "validation", body.validation_metrics)
    return {}


@router.get("/trials/{trial_id}/searcher/operation")
def searcher_operation(trial_id: int, caller: Caller, exps: ExperimentsDep) -> dict[str, Any]:
    caller.check_trial(trial_id)
    return exps.current_operation(trial_id)


@router.post("/trials/{trial_id}/searcher/completed_operation")
def completed_operation(
    trial_id: int, body: CompleteOperation, caller: Caller, exps: ExperimentsDep, store: StoreDep
) -> dict[str, Any]:
    caller.check_reporter(store, trial_id)
    exps.complete_operation(trial_id, body.op.length, json_safe(body.searcher_metric))
    return {}


@router.post("/trials/{trial_id}/progress")
def progress(
    trial_id: int,
    caller: Caller,
    exps: ExperimentsDep,
    store: StoreDep,
    body: Any = Body(...),
    is_raw: bool = Query(False, alias="isRaw"),
) -> dict[str, Any]:
    """Body ``{progress, isRaw}``, or a bare number (the 0.37 op-progress form)."""
    caller.check_reporter(store, trial_id)
    if isinstance(body, (int, float)) and not isinstance(body, bool):
        parsed = Progress(progress=float(body), is_raw=is_raw)
    else:
        parsed = Progress.model_validate(body)
    if not math.isfinite(parsed.progress) or parsed.progress < 0:
        raise InvalidArgument(f"progress must be a finite number >= 0, not {parsed.progress}")
    if parsed.is_raw and parsed.progress > 1:
        raise InvalidArgument(f"raw progress is a fraction in [0, 1], not {parsed.progress}")
    exps.report_progress(trial_id, parsed.progress, is_raw=parsed.is_raw)
    return {}


@router.post("/trials/{trial_id}/early_exit")
def early_exit(
    trial_id: int, body: EarlyExit, caller: Caller, exps: ExperimentsDep, store: StoreDep
) -> dict[str, Any]:
    caller.check_reporter(store, trial_id)
    exps.early_exit(trial_id, body.reason)
    return {}


@router.post("/trials/{trial_id}/kill")
def kill_trial(
    trial_id: int, caller: Caller, exps: ExperimentsDep, store: StoreDep
) -> dict[str, Any]:
    """Kill one trial: its process group is killed; it ends CANCELED and is not replaced."""
    caller.check_trial_owner(store, trial_id, "kill")
    exps.kill_trial(trial_id)
    return {}
