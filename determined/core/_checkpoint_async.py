"""Checkpoints written in the background: one at a time, failures kept for the next wait.

The caller stages what it saves (copies it to host memory) before submitting; the worker
thread then serialises, commits and reports through the ordinary ``store_path`` path, so a
checkpoint is either committed and reported whole or not at all (a crash mid-write leaves only
an uncommitted staging directory, which nothing lists or resumes from).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable

from determined import errors

logger = logging.getLogger("determined.core")


class BackgroundWriter:
    """Runs at most one checkpoint write at a time on a non-daemon thread (so that a normal
    interpreter exit still waits for it)."""

    def __init__(self) -> None:
        self._future: concurrent.futures.Future[str] | None = None
        self._thread: threading.Thread | None = None

    def submit(self, write: Callable[[], str]) -> concurrent.futures.Future[str]:
        """Wait for the previous write (raising its failure), then start ``write``."""
        self.wait()
        future: concurrent.futures.Future[str] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()

        def run() -> None:
            # Hand the GIL straight back: the caller is waiting to return to training, and would
            # otherwise wait out the interpreter's switch interval (5 ms) behind this thread.
            time.sleep(0)
            try:
                future.set_result(write())
            except BaseException as e:  # kept for the main thread: raised at the next wait
                logger.error(f"background checkpoint failed: {type(e).__name__}: {e}")
                future.set_exception(e)

        self._future = future
        self._thread = threading.Thread(target=run, name="det-checkpoint-writer", daemon=False)
        self._thread.start()
        return future

    def busy(self) -> bool:
        """Whether a write is still running."""
        return self._future is not None and not self._future.done()

    def done(self) -> bool:
        """Whether a submitted write has finished (and not yet been collected by ``wait``)."""
        return self._future is not None and self._future.done()

    def wait(self) -> str | None:
        """Block until the outstanding write ends; return its storage id (None if there was
        none). Raises :class:`determined.errors.CheckpointFailed` if it failed; the failure is
        raised once, then forgotten."""
        future, thread = self._future, self._thread
        if future is None:
            return None
        if thread is not None:
            thread.join()
        self._future = self._thread = None
        error = future.exception()
        if error is not None:
            raise errors.CheckpointFailed(
                f"a checkpoint written in the background was not saved "
                f"({type(error).__name__}: {error}); nothing of it was registered, and the "
                "latest registered checkpoint is still the one to resume from"
            ) from error
        return future.result()
