"""Webhooks (0.37's): events on experiment state changes, task-log patterns,
``core.Context.alert()`` and metrics above a threshold, queued in the store's outbox within the
transaction that caused them (``_events``) and delivered, signed and retried, by a background
thread (``_shipper``)."""

from determined.master.webhooks._events import (
    custom_alert,
    experiment_state_changed,
    matches,
    metric_threshold,
    task_logs,
    test_body,
)
from determined.master.webhooks._service import Webhooks
from determined.master.webhooks._shipper import Shipper, post, signature

__all__ = [
    "Shipper",
    "Webhooks",
    "custom_alert",
    "experiment_state_changed",
    "matches",
    "metric_threshold",
    "post",
    "signature",
    "task_logs",
    "test_body",
]
