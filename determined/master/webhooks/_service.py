"""``Webhooks``: what the rest of the master calls (inside its transactions) and the delivery
thread, configured by the master config's ``webhooks: {signing_key, base_url}``."""

from __future__ import annotations

import secrets
import time
from typing import Any

import sqlalchemy as sa

from determined.master.store import ExperimentRow, Store, _webhooks
from determined.master.webhooks import _events
from determined.master.webhooks._shipper import Shipper


class Webhooks:
    """Args:
    store: the master's store (the outbox lives there).
    signing_key: the HMAC key of ``X-Determined-AI-Signature``; without one, a random key
        per start, as 0.37 does.
    base_url: the web UI's address for links in Slack messages ("" leaves links out).
    """

    def __init__(self, store: Store, *, signing_key: str = "", base_url: str = "") -> None:
        self.signing_key = signing_key or secrets.token_hex(32)
        self.base_url = base_url
        self.shipper = Shipper(store, self.signing_key)
        # Metric reports are the hot path: their triggers are read at most every few seconds.
        self._metric_triggers: list[dict[str, Any]] | None = None
        self._metric_triggers_at = 0.0

    def start(self) -> None:
        self.shipper.start()

    def close(self) -> None:
        self.shipper.close()

    def wake(self) -> None:
        self.shipper.wake()

    # Called inside the transaction that caused the event; the shipper sees it once committed.
    def experiment_state_changed(self, conn: sa.Connection, exp: ExperimentRow) -> None:
        _events.experiment_state_changed(conn, exp, self.base_url)

    def task_logs(self, conn: sa.Connection, rows: list[dict[str, Any]]) -> None:
        _events.task_logs(conn, rows, self.base_url)

    def custom_alert(
        self, conn: sa.Connection, experiment_id: int, trial_id: int | None, data: dict[str, Any]
    ) -> None:
        _events.custom_alert(conn, experiment_id, trial_id, data, self.base_url)

    def metrics_reported(
        self, conn: sa.Connection, trial_id: int, group: str, metrics: dict[str, Any]
    ) -> None:
        triggers = self.metric_triggers(conn)
        if triggers:
            _events.metrics_reported(conn, trial_id, group, metrics, triggers, self.base_url)

    def metric_triggers(self, conn: sa.Connection) -> list[dict[str, Any]]:
        """The METRIC_THRESHOLD_EXCEEDED triggers, read through ``conn`` when the cached ones
        are stale."""
        triggers = self.cached_metric_triggers()
        if triggers is None:
            triggers = _webhooks.triggers_of_type(conn, _events.METRIC_THRESHOLD)
            self._metric_triggers, self._metric_triggers_at = triggers, time.monotonic()
        return triggers

    def cached_metric_triggers(self) -> list[dict[str, Any]] | None:
        """The metric triggers read less than TRIGGER_CACHE_S ago; None: read them again."""
        triggers = self._metric_triggers
        if triggers is None or time.monotonic() - self._metric_triggers_at > TRIGGER_CACHE_S:
            return None
        return triggers

    def triggers_changed(self) -> None:
        """A webhook was created, changed or deleted: read the triggers again."""
        self._metric_triggers = None


TRIGGER_CACHE_S = 5.0
