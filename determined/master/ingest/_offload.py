"""The group commit's offload of metric reports to the write worker (``_write_worker``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import sqlalchemy as sa

from determined.master.ingest import _write_worker
from determined.master.ingest._report import Report, ReportWrite, write_reports
from determined.master.ingest._write_worker import WriteWorker
from determined.master.store import Store
from determined.master.store._rows import TrialRow
from determined.master.webhooks import Webhooks, _events

# The most trial rows the write worker keeps between runs of reports (a few hundred bytes each).
KEPT_TRIALS = 10_000


class _Triggers:
    """The write worker's ``MetricsHook``: the master's metric triggers of the moment."""

    def __init__(self, triggers: list[dict[str, Any]], base_url: str) -> None:
        self.triggers, self.base_url = triggers, base_url

    def metrics_reported(
        self, conn: sa.Connection, trial_id: int, group: str, metrics: dict[str, Any]
    ) -> None:
        _events.metrics_reported(conn, trial_id, group, metrics, self.triggers, self.base_url)


def write_plain_reports(conn: sa.Connection, arg: tuple[Any, ...]) -> list[Any]:
    """In the write worker: ``write_reports`` of reports sent as plain data. The trial rows
    stay in the worker (``_write_worker.kept``): the next run of reports of those trials reads
    none of them again (a bounded cache, emptied when it grows past KEPT_TRIALS)."""
    reports, triggers, base_url = arg
    hooks = _Triggers(triggers, base_url) if triggers else None
    known: dict[int, TrialRow] = _write_worker.kept().setdefault("report_trials", {})
    if len(known) > KEPT_TRIALS:
        known.clear()
    return write_reports(conn, [ReportWrite(Report(*r), hooks) for r in reports], known)


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
        reports = [tuple(cast(ReportWrite, fn).report) for fn in fns]
        triggers: list[dict[str, Any]] = []
        if self.webhooks is not None:
            cached = self.webhooks.cached_metric_triggers()
            if cached is None:
                with self.store.read() as conn:
                    cached = self.webhooks.metric_triggers(conn)
            triggers = cached
        base_url = "" if self.webhooks is None else self.webhooks.base_url
        values = self.worker.run(write_plain_reports, (reports, triggers, base_url))
        if triggers and self.webhooks is not None:
            self.webhooks.wake()  # the worker may have queued events
        return list(values)
