"""Asynchronous shipping of metric reports to the master.

Reports go on a bounded queue (1000, as the reference) and a thread posts them in order, so a
training loop never waits on the network unless it outruns the master by 1000 reports. An error
in the thread is raised on the caller's next report, or on ``close()``, so nothing is lost quietly.
"""

from __future__ import annotations

import datetime
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any

from determined.common.api import Session, _routes

logger = logging.getLogger("determined.core")

METRICS_QUEUE_MAXSIZE = 1000


@dataclass(frozen=True)
class _Report:
    group: str
    steps_completed: int | None
    metrics: dict[str, Any]
    batch_metrics: list[dict[str, Any]] | None
    report_time: datetime.datetime | None


class MetricsShipper:
    """Posts ``POST /api/v1/trials/{id}/metrics`` from a background thread, in report order."""

    def __init__(self, session: Session, trial_id: int, run_id: int) -> None:
        self._session = session
        self._trial_id = trial_id
        self._run_id = run_id
        self._queue: queue.Queue[_Report | None] = queue.Queue(maxsize=METRICS_QUEUE_MAXSIZE)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="metrics-shipper", daemon=True)
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    def report(
        self,
        group: str,
        steps_completed: int | None,
        metrics: dict[str, Any],
        batch_metrics: list[dict[str, Any]] | None = None,
        report_time: datetime.datetime | None = None,
    ) -> None:
        """Queue one report; raises the error of an earlier failed report, if any."""
        self._raise_pending()
        if not self._started:
            self.start()
        self._queue.put(_Report(group, steps_completed, metrics, batch_metrics, report_time))

    def close(self) -> None:
        """Drain the queue (every queued report is sent), stop the thread, raise any error."""
        if self._started and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise_pending()

    def _raise_pending(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._post(item)
            except Exception as e:
                # Keep shipping later reports; the first error reaches the training thread.
                logger.error(f"reporting {item.group} metrics failed: {e}")
                if self._error is None:
                    self._error = e

    def _post(self, r: _Report) -> None:
        # Every key is always present (null when unset), as the reference client sends it.
        trial_metrics: dict[str, Any] = {
            "trialId": self._trial_id,
            "trialRunId": self._run_id,
            "stepsCompleted": r.steps_completed,
            "metrics": {"avgMetrics": r.metrics, "batchMetrics": r.batch_metrics},
            "reportTime": None if r.report_time is None else r.report_time.isoformat(),
        }
        body = {"group": r.group, "metrics": trial_metrics}
        _routes.report_trial_metrics(self._session, self._trial_id, body)
