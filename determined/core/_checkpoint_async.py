"""Checkpoints written in the background: one at a time, failures kept for the next wait.

The caller stages what it saves (copies it to host memory) before submitting; the worker
thread then serialises, commits and reports through the ordinary ``store_path`` path, so a
checkpoint is either committed and reported whole or not at all (a crash mid-write leaves only
an uncommitted staging directory, which nothing lists or resumes from).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable

from determined import errors

logger = logging.getLogger("determined.core")


class BackgroundWriter:
    """Runs at most one checkpoint write at a time on one worker thread, started with the first
    write and kept until :meth:`close` (handing a write to a waiting thread costs the training
    loop ~20 us; starting a thread per checkpoint cost ~300 us).

    Interpreter exit waits for a write in progress, in an exit hook that runs before executors
    stop taking work: the commit hashes and flushes on a thread pool, and cloud clients upload
    on theirs."""

    def __init__(self) -> None:
        self._future: concurrent.futures.Future[str] | None = None
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None

    def submit(self, write: Callable[[], str]) -> concurrent.futures.Future[str]:
        """Wait for the previous write (raising its failure), then start ``write``."""
        self.wait()

        def run() -> str:
            # Hand the GIL straight back: the caller is returning to training, and would
            # otherwise wait out the interpreter's switch interval (5 ms) behind this thread.
            time.sleep(0)
            try:
                return write()
            except BaseException as e:  # kept in the future: raised at the next wait
                logger.error(f"background checkpoint failed: {type(e).__name__}: {e}")
                raise

        if self._worker is None:
            self._worker = concurrent.futures.ThreadPoolExecutor(1, "det-checkpoint-writer")
            _wait_at_exit(self)
        self._future = self._worker.submit(run)
        return self._future

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
        future = self._future
        if future is None:
            return None
        error = future.exception()  # waits for the write to end
        self._future = None
        if error is not None:
            raise errors.CheckpointFailed(
                f"a checkpoint written in the background was not saved "
                f"({type(error).__name__}: {error}); nothing of it was registered, and the "
                "latest registered checkpoint is still the one to resume from"
            ) from error
        return future.result()

    def close(self) -> None:
        """:meth:`wait`, then stop the worker thread (also when the write failed)."""
        try:
            self.wait()
        finally:
            if self._worker is not None:
                self._worker.shutdown(wait=True)
                self._worker = None


def _wait_at_exit(writer: BackgroundWriter) -> None:
    """Make interpreter exit wait for ``writer``'s write in progress (its failure is logged by
    the writer). threading's exit hooks run in reverse order of registration before threads are
    joined; concurrent.futures registered its own (which stops executors) when it was first
    used, before this, so this one runs first."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # not this CPython: the executor's own join at exit still waits
        return
    ref = weakref.ref(writer)

    def wait() -> None:
        alive = ref()
        future = alive._future if alive is not None else None
        if future is not None:
            concurrent.futures.wait([future])

    with contextlib.suppress(RuntimeError):  # exit has already begun: too late to wait
        register(wait)
