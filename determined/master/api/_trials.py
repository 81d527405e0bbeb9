"""What a trial's process calls about itself: its record, status, metrics and searcher ops
(docs/reference/master.md §3.2)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol, cast

import sqlalchemy as sa
from fastapi import APIRouter, Body, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import State

from determined.common.api._session import json_safe
from determined.master import _write_worker, experiment
from determined.master._errors import InvalidArgument
from determined.master._signals import STREAM_KEY, Signals
from determined.master._write_worker import WriteWorker
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
from determined.master.api._wire import trial_json
from determined.master.experiment import Experiments
from determined.master.store import Store, _experiments, _metrics, _time, _trials
from determined.master.store._rows import TrialRow
from determined.master.webhooks import Webhooks, _events

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


class MetricsHook(Protocol):
    """Told of each stored report in its transaction (``Webhooks``: metric thresholds)."""

    def metrics_reported(
        self, conn: sa.Connection, trial_id: int, group: str, metrics: dict[str, Any]
    ) -> None: ...


class _ReportWrite:
    """The write storing one report, once the report is checked (InvalidArgument if not);
    ``hooks`` sees the metrics in the same transaction (metric threshold webhooks). Called
    with a connection it writes alone; ``_write_reports`` writes many at once."""

    def __init__(
        self, trial_id: int, group: str, report: TrialMetrics, hooks: MetricsHook | None = None
    ) -> None:
        if report.trial_id != trial_id:
            raise InvalidArgument(f"metrics for trial {report.trial_id} posted to trial {trial_id}")
        try:
            self.when = _time.parse(report.report_time)
        except ValueError as e:
            raise InvalidArgument(
                f"reportTime {report.report_time!r} is not an RFC 3339 time"
            ) from e
        self.trial_id, self.group, self.hooks = trial_id, group, hooks
        self.run_id, self.steps = report.trial_run_id, report.steps_completed
        self.avg = json_safe(report.metrics.avg_metrics)
        self.batch = json_safe(report.metrics.batch_metrics)

    def plain(self) -> tuple[Any, ...]:
        """What :meth:`from_plain` needs, as plain data (for the write worker)."""
        return (self.trial_id, self.group, self.run_id, self.steps, self.avg, self.batch, self.when)

    @classmethod
    def from_plain(cls, plain: tuple[Any, ...], hooks: MetricsHook | None) -> _ReportWrite:
        write = cls.__new__(cls)
        write.trial_id, write.group, write.run_id, write.steps = plain[:4]
        write.avg, write.batch, write.when = plain[4:]
        write.hooks = hooks
        return write

    def __call__(self, conn: sa.Connection) -> None:
        trial = _trials.require_trial(conn, self.trial_id)
        metric, smaller = None, True
        # Only validations and rollbacks (a later run) use the searcher metric: training
        # reports of a first run skip reading (and parsing) the experiment's config.
        if self.group == "validation" or int(trial["run_id"]) > 1:
            exp = _experiments.require_experiment(conn, trial["experiment_id"])
            metric, smaller = experiment.searcher_metric(exp["config"])
        _metrics.report(
            conn,
            trial,
            group=self.group,
            run_id=self.run_id,
            steps_completed=self.steps,
            avg_metrics=self.avg,
            batch_metrics=self.batch,
            report_time=self.when,
            searcher_metric=metric,
            smaller_is_better=smaller,
        )
        self.notify_hooks(conn)

    def notify_hooks(self, conn: sa.Connection) -> None:
        if self.hooks is not None:
            self.hooks.metrics_reported(conn, self.trial_id, self.group, self.avg)


def _write_reports(
    conn: sa.Connection,
    writes: list[Callable[[sa.Connection], Any]],
    known: dict[int, TrialRow] | None = None,
) -> list[Any]:
    """Consecutive reports of one group commit, as each would be written alone, in order:
    the common ones through one ``ReportBatch`` (``known``: its trial rows kept from earlier
    commits, see ``ReportBatch``), the others one by one."""
    reports = [cast(_ReportWrite, w) for w in writes]
    keys = [(r.trial_id, r.group, r.steps) for r in reports]
    batch = _metrics.ReportBatch(conn, keys, known)
    taken: list[_ReportWrite] = []
    for r in reports:
        kept = batch.add(
            r.trial_id,
            group=r.group,
            run_id=r.run_id,
            steps_completed=r.steps,
            avg_metrics=r.avg,
            batch_metrics=r.batch,
            report_time=r.when,
        )
        if kept:
            taken.append(r)
            continue
        _flush(conn, batch, taken)
        r(conn)
        batch.reload(r.trial_id, r.group, r.steps)
    _flush(conn, batch, taken)
    return [None] * len(reports)


def _flush(conn: sa.Connection, batch: _metrics.ReportBatch, taken: list[_ReportWrite]) -> None:
    batch.flush()
    for r in taken:
        r.notify_hooks(conn)
    taken.clear()


# The most trial rows the write worker keeps between runs of reports (a few hundred bytes each).
KEPT_TRIALS = 10_000


class _Triggers:
    """The write worker's :class:`MetricsHook`: the master's metric triggers of the moment."""

    def __init__(self, triggers: list[dict[str, Any]], base_url: str) -> None:
        self.triggers, self.base_url = triggers, base_url

    def metrics_reported(
        self, conn: sa.Connection, trial_id: int, group: str, metrics: dict[str, Any]
    ) -> None:
        _events.metrics_reported(conn, trial_id, group, metrics, self.triggers, self.base_url)


def _write_plain_reports(conn: sa.Connection, arg: tuple[Any, ...]) -> list[Any]:
    """In the write worker: ``_write_reports`` of reports sent as plain data. The trial rows
    stay in the worker (``_write_worker.kept``): the next run of reports of those trials reads
    none of them again (a bounded cache, emptied when it grows past KEPT_TRIALS)."""
    plain, triggers, base_url = arg
    hooks = _Triggers(triggers, base_url) if triggers else None
    known: dict[int, TrialRow] = _write_worker.kept().setdefault("report_trials", {})
    if len(known) > KEPT_TRIALS:
        known.clear()
    return _write_reports(conn, [_ReportWrite.from_plain(p, hooks) for p in plain], known)


class ReportOffload:
    """The group commit's offload of metric reports: commits runs of them in the write worker
    (``_write_worker``), which checks the metric-threshold webhooks as this process would.

    Args:
        worker: the write worker.
        store: the master's store (to read the webhooks' triggers when they are stale).
        webhooks: the master's webhooks (None: no metric-threshold checks).
    """

    def __init__(self, worker: WriteWorker, store: Store, webhooks: Webhooks | None) -> None:
        self.worker, self.store, self.webhooks = worker, store, webhooks

    def __call__(self, fns: list[Callable[[sa.Connection], Any]]) -> list[Any]:
        reports = [cast(_ReportWrite, fn) for fn in fns]
        triggers: list[dict[str, Any]] = []
        if self.webhooks is not None:
            cached = self.webhooks.cached_metric_triggers()
            if cached is None:
                with self.store.read() as conn:
                    cached = self.webhooks.metric_triggers(conn)
            triggers = cached
        base_url = "" if self.webhooks is None else self.webhooks.base_url
        values = self.worker.run(
            _write_plain_reports, ([r.plain() for r in reports], triggers, base_url)
        )
        if triggers and self.webhooks is not None:
            self.webhooks.wake()  # the worker may have queued events
        return list(values)


async def record_report(state: State, trial_id: int, group: str, report: TrialMetrics) -> None:
    """Store one metric report of ``trial_id`` (its caller checked) and tell who waits for it:
    /stream subscribers, the searcher for a validation. The three report routes and their hot
    path (``_hot``) end here."""
    # Group commit: one fsync for all reports arriving together. Awaited on the event loop,
    # no worker thread waits for it (see store/_group_commit).
    store: Store = state.store
    write = _ReportWrite(trial_id, group, report, state.webhooks)
    await store.write_async(write, _write_reports, offload=state.report_offload)
    signals: Signals = state.signals
    signals.notify(STREAM_KEY)  # /stream subscribers to metrics
    if group == "validation":
        exps: Experiments = state.experiments
        await run_in_threadpool(exps.validation_reported, trial_id, write.steps, write.avg)


@router.post("/trials/{trial_id}/metrics")
async def report_metrics(
    trial_id: int, body: ReportMetrics, caller: Caller, request: Request
) -> dict[str, Any]:
    await check_reporter(caller, request.app.state.store, trial_id)
    await record_report(request.app.state, trial_id, body.group, body.metrics)
    return {}


@router.post("/trials/{trial_id}/training_metrics")
async def report_training_metrics(
    trial_id: int, body: ReportTrainingMetrics, caller: Caller, request: Request
) -> dict[str, Any]:
    await check_reporter(caller, request.app.state.store, trial_id)
    await record_report(request.app.state, trial_id, "training", body.training_metrics)
    return {}


@router.post("/trials/{trial_id}/validation_metrics")
async def report_validation_metrics(
    trial_id: int, body: ReportValidationMetrics, caller: Caller, request: Request
) -> dict[str, Any]:
    await check_reporter(caller, request.app.state.store, trial_id)
    await record_report(request.app.state, trial_id, "validation", body.validation_metrics)
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
