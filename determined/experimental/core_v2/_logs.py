"""The script's stdout and stderr, copied to the master as its unmanaged trial's logs (so
``det trial logs`` and the web UI show them, as for a trial the master ran). The output still
goes to the terminal; shipping happens on a background thread, in batches, and a master that
cannot be reached only costs a warning."""

from __future__ import annotations

import datetime
import logging
import sys
import threading
from typing import Any, TextIO

from determined.common.api import Session, _routes

logger = logging.getLogger("determined.core")

FLUSH_S = 1.0
MAX_BATCH = 1000
MAX_PENDING = 10_000  # lines held while the master is unreachable; older ones are dropped


class _Tee:
    """A text stream that writes through to ``original`` and hands complete lines on."""

    def __init__(self, original: TextIO, shipper: LogShipper, stdtype: str) -> None:
        self._original = original
        self._shipper = shipper
        self._stdtype = stdtype
        self._partial = ""

    def write(self, data: str) -> int:
        text = self._partial + data
        lines = text.split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._shipper.add(line, self._stdtype)
        return self._original.write(data)

    def finish(self) -> None:
        if self._partial:
            self._shipper.add(self._partial, self._stdtype)
            self._partial = ""

    def flush(self) -> None:
        self._original.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


class LogShipper:
    def __init__(self, session: Session, task_id: str, rank: int) -> None:
        self._session = session
        self._task_id = task_id
        self._rank = rank
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tees: list[tuple[str, _Tee, TextIO]] = []
        self._warned = False

    def add(self, line: str, stdtype: str) -> None:
        now = datetime.datetime.now(datetime.timezone.utc).isoformat()
        entry = {
            "taskId": self._task_id,
            "rankId": self._rank,
            "timestamp": now,
            "stdtype": stdtype,
            "source": "unmanaged",
            "log": line + "\n",
        }
        with self._lock:
            self._pending.append(entry)
            del self._pending[:-MAX_PENDING]

    def start(self) -> None:
        for name in ("stdout", "stderr"):
            original = getattr(sys, name)
            tee = _Tee(original, self, name)
            setattr(sys, name, tee)
            self._tees.append((name, tee, original))
        self._thread = threading.Thread(target=self._run, name="unmanaged-logs", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_S):
            self._ship()

    def _ship(self) -> None:
        while True:
            with self._lock:
                batch = self._pending[:MAX_BATCH]
            if not batch:
                return
            try:
                _routes.post_task_logs(self._session, batch)
            except Exception as e:
                if not self._warned:
                    self._warned = True
                    logger.warning(f"core_v2: could not ship logs to the master: {e}")
                return
            with self._lock:
                del self._pending[: len(batch)]

    def close(self) -> None:
        for name, tee, original in reversed(self._tees):
            tee.finish()
            if getattr(sys, name) is tee:
                setattr(sys, name, original)
        self._tees.clear()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._ship()
