"""What the master does with one metric report once its route has checked it."""

from __future__ import annotations

import functools
from collections.abc import Callable

import anyio.to_thread

from determined.master._signals import STREAM_METRICS_KEY, Signals
from determined.master.experiment import Experiments
from determined.master.ingest._offload import ReportOffload
from determined.master.ingest._report import Report, ReportWrite, write_reports
from determined.master.ingest._write_worker import WriteWorker
from determined.master.store import Store
from determined.master.webhooks import Webhooks


class Ingest:
    """The master's metric ingestion: the three report routes and their hot path end in
    :meth:`record`.

    Args:
        store: the master's store (its group commit).
        signals: told of each report (``/stream`` subscribers).
        experiments: told of each validation (0.38-style searches judge them).
        webhooks: checks metric thresholds in each report's transaction.
        worker: the write worker that commits runs of reports (None: this process does).
    """

    def __init__(
        self,
        store: Store,
        signals: Signals,
        experiments: Experiments,
        webhooks: Webhooks,
        worker: WriteWorker | None,
    ) -> None:
        self.store, self.signals, self.experiments = store, signals, experiments
        self.webhooks = webhooks
        self.offload = None if worker is None else ReportOffload(worker, store, webhooks)

    async def record(self, report: Report) -> None:
        """Store ``report`` (its caller checked that the caller may) and tell who waits for
        it: ``/stream`` subscribers, the searcher for a validation."""
        # Group commit: one fsync for all reports arriving together. Awaited on the event loop,
        # no worker thread waits for it (see store/_group_commit).
        write = ReportWrite(report, self.webhooks)
        await self.store.write_async(write, write_reports, offload=self.offload)
        self.signals.notify(STREAM_METRICS_KEY)  # /stream subscribers to metrics
        if report.group == "validation":
            validated = functools.partial(
                self.experiments.validation_reported, report.trial_id, report.steps, report.avg
            )
            await anyio.to_thread.run_sync(validated)

    def record_soon(self, report: Report, done: Callable[[BaseException | None], None]) -> None:
        """:meth:`record` without a coroutine, for a report outside validation (which the
        searcher waits for): call it from the event loop; ``done(None)`` or ``done(error)``
        runs on the loop once the report is stored or refused (the HTTP protocol's hot lane
        answers from it, see ``api._hot.HotLane``)."""
        if report.group == "validation":
            raise ValueError("record_soon takes no validation: use record")

        def stored(_: object, error: BaseException | None) -> None:
            if error is None:
                self.signals.notify(STREAM_METRICS_KEY)
            done(error)

        write = ReportWrite(report, self.webhooks)
        self.store.write_soon(write, stored, write_reports, offload=self.offload)
