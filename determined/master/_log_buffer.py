"""The master's own log lines, kept in memory for ``GET /api/v1/master/logs``: a logging handler
on the root logger that numbers each record it sees (at the master's ``--log-level``) and keeps
the newest :data:`KEEP`."""

from __future__ import annotations

import collections
import datetime
import logging
import threading
from typing import Any

KEEP = 10_000

_LEVELS = {
    logging.DEBUG: "LOG_LEVEL_DEBUG",
    logging.INFO: "LOG_LEVEL_INFO",
    logging.WARNING: "LOG_LEVEL_WARNING",
    logging.ERROR: "LOG_LEVEL_ERROR",
    logging.CRITICAL: "LOG_LEVEL_CRITICAL",
}


class MasterLog(logging.Handler):
    """Numbered ``v1LogEntry`` dicts of the records logged since the handler was installed."""

    def __init__(self, keep: int = KEEP) -> None:
        super().__init__()
        self._entries: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep)
        self._next_id = 1
        self._cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
        except Exception:  # a bad format string must not take the master down
            message = str(record.msg)
        when = datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
        with self._cond:
            self._entries.append(
                {
                    "id": self._next_id,
                    "timestamp": when.isoformat().replace("+00:00", "Z"),
                    "message": f"{record.name}: {message}",
                    "level": _LEVELS.get(record.levelno, "LOG_LEVEL_UNSPECIFIED"),
                }
            )
            self._next_id += 1
            self._cond.notify_all()

    def since(self, after_id: int) -> list[dict[str, Any]]:
        """Entries with an id above ``after_id``, oldest first."""
        with self._cond:
            return [e for e in self._entries if e["id"] > after_id]

    def wait(self, after_id: int, timeout: float) -> None:
        """Block until an entry newer than ``after_id`` arrives or ``timeout`` passes."""
        with self._cond:
            self._cond.wait_for(lambda: self._next_id - 1 > after_id, timeout)


def install() -> MasterLog:
    """Attach a :class:`MasterLog` to the root logger and return it."""
    handler = MasterLog()
    logging.getLogger().addHandler(handler)
    return handler
