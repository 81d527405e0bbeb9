"""What a trial's process calls about itself: its record, status, metrics and searcher ops
(docs/reference/master.md §3.2)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Body, Query
from starlette.concurrency import run_in_threadpool

from determined.common.api._session import json_safe
from determined.master import experiment
from determined.master._errors import InvalidArgument
from determined.master._signals import STREAM_KEY, Signals
from determined.master.api._auth import Caller, check_reporter
from determined.master.api._deps import ExperimentsDep, SignalsDep, StoreDep, WebhooksDep
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
from determined.master.api._wire import trial_json
from determined.master.experiment import Experiments
from determined.master.store import Store, _experiments, _metrics, _time, _trials
from determined.master.webhooks import Webhooks

router = APIRouter(prefix="/api/v1")


@router.get("/trials/{trial_id}")
def get_trial(trial_id: int, caller: Caller, store: StoreDep) -> dict[str, Any]:
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


def _report_write(
    trial_id: int, group: str, report: TrialMetrics, hooks: Webhooks | None = None
) -> Callable[[Any], None]:
    """The write storing one report, once the report is checked (InvalidArgument if not);
    ``hooks`` sees the metrics in the same transaction (metric threshold webhooks)."""
    if report.trial_id != trial_id:
        raise InvalidArgument(f"metrics for trial {report.trial_id} posted to trial {trial_id}")
    try:
        when = _time.parse(report.report_time)
    except ValueError as e:
        raise InvalidArgument(f"reportTime {report.report_time!r} is not an RFC 3339 time") from e
    avg, batch = json_safe(report.metrics.avg_metrics), json_safe(report.metrics.batch_metrics)

    def write(conn: Any) -> None:
        trial = _trials.require_trial(conn, trial_id)
        metric, smaller = None, True
        # Only validations and rollbacks (a later run) use the searcher metric: training
        # reports of a first run skip reading (and parsing) the experiment's config.
        if group == "validation" or int(trial["run_id"]) > 1:
            exp = _experiments.require_experiment(conn, trial["experiment_id"])
            metric, smaller = experiment.searcher_metric(exp["config"])
        _metrics.report(
            conn,
            trial,
            group=group,
            run_id=report.trial_run_id,
            steps_completed=report.steps_completed,
            avg_metrics=avg,
            batch_metrics=batch,
            report_time=when,
            searcher_metric=metric,
            smaller_is_better=smaller,
        )
        if hooks is not None:
            hooks.metrics_reported(conn, trial_id, group, avg)

    return write


async def _report(
    store: Store,
    signals: Signals,
    trial_id: int,
    group: str,
    report: TrialMetrics,
    hooks: Webhooks,
    exps: Experiments | None = None,
) -> None:
    # Group commit: one fsync for all reports arriving together. Awaited on the event loop,
    # no worker thread waits for it (see store/_group_commit).
    await store.write_async(_report_write(trial_id, group, report, hooks))
    signals.notify(STREAM_KEY)  # /stream subscribers to metrics
    if exps is not None and group == "validation":
        avg = json_safe(report.metrics.avg_metrics)
        await run_in_threadpool(exps.validation_reported, trial_id, report.steps_completed, avg)


@router.post("/trials/{trial_id}/metrics")
async def report_metrics(
    trial_id: int,
    body: ReportMetrics,
    caller: Caller,
    store: StoreDep,
    exps: ExperimentsDep,
    hooks: WebhooksDep,
    signals: SignalsDep,
) -> dict[str, Any]:
    await check_reporter(caller, store, trial_id)
    await _report(store, signals, trial_id, body.group, body.metrics, hooks, exps)
    return {}


@router.post("/trials/{trial_id}/training_metrics")
async def report_training_metrics(
    trial_id: int,
    body: ReportTrainingMetrics,
    caller: Caller,
    store: StoreDep,
    hooks: WebhooksDep,
    signals: SignalsDep,
) -> dict[str, Any]:
    await check_reporter(caller, store, trial_id)
    await _report(store, signals, trial_id, "training", body.training_metrics, hooks)
    return {}


@router.post("/trials/{trial_id}/validation_metrics")
async def report_validation_metrics(
    trial_id: int,
    body: ReportValidationMetrics,
    caller: Caller,
    store: StoreDep,
    exps: ExperimentsDep,
    hooks: WebhooksDep,
    signals: SignalsDep,
) -> dict[str, Any]:
    await check_reporter(caller, store, trial_id)
    await _report(store, signals, trial_id, "validation", body.validation_metrics, hooks, exps)
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
