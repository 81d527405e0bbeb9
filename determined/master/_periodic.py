"""A sweep the master runs on a schedule in a thread of its own (log retention, lost unmanaged
trials): ``first_after`` seconds after start, then every ``every`` seconds until stopped. A
sweep that raises is logged and tried again at the next tick, so one bad row never ends the
schedule."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger("determined.master")


class Periodic:
    def __init__(
        self, name: str, sweep: Callable[[], object], every: float, first_after: float = 0.0
    ) -> None:
        self._name = name
        self._first_after = first_after
        self._sweep = sweep
        self._every = max(every, 0.05)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        def run() -> None:
            if self._stop.wait(self._first_after):
                return
            while True:
                try:
                    self._sweep()
                except Exception:
                    logger.exception(
                        "%s: sweep failed; next try in %.0f s", self._name, self._every
                    )
                if self._stop.wait(self._every):
                    return

        self._thread = threading.Thread(target=run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
