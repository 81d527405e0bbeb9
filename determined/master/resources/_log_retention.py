"""Log retention (0.37's ``retention_policy``): on a schedule, the logs of trials that ended
more than their retention days ago are deleted; the trials and their metrics stay."""

from __future__ import annotations

import logging

from determined.master._periodic import Periodic
from determined.master.store import Store, _log_retention

logger = logging.getLogger("determined.master")


class LogRetention:
    """Sweeps every ``every`` seconds (and once at start) with ``default_days`` for trials
    that have no days of their own; ``default_days`` -1 with no per-trial days never drops."""

    def __init__(self, store: Store, default_days: int, every: float) -> None:
        self._store = store
        self._default_days = default_days
        self._schedule = Periodic("log-retention", self.sweep, max(every, 1.0))

    def sweep(self) -> int:
        """Drop what is due now; returns how many log lines went."""
        with self._store.read() as conn:
            due = _log_retention.due_tasks(conn, self._default_days)
        if not due:
            return 0
        dropped = self._store.write(lambda conn: _log_retention.drop_logs(conn, due))
        if dropped:
            logger.info("log retention: dropped %d lines of %d trials", dropped, len(due))
        return dropped

    def start(self) -> None:
        self._schedule.start()

    def stop(self) -> None:
        self._schedule.stop()
