"""Task logs of locally run trials: lines from their stdout/stderr (and the master's own notes
about them) batched into the store, as the reference's ``ship_logs.py`` does
(docs/reference/master.md §4.6)."""

from __future__ import annotations

import logging
import queue
import re
import threading
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from determined.master.store import Store, _logs, _time

logger = logging.getLogger("determined.master")

_RANK = re.compile(r"^\[rank=(\d+)\] ")
_LEVEL = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL): ")
BATCH_LINES = 1000
BATCH_SECONDS = 0.25
# Lines waiting for the store. A full queue blocks the threads reading the runs' output, so a
# trial printing faster than the store writes blocks on its own stdout (back-pressure) rather
# than growing the master's memory.
MAX_QUEUED_LINES = 20 * BATCH_LINES


def parse_line(text: str) -> tuple[int | None, str | None, str]:
    """``(rank, level, rest)``: a leading ``[rank=N] `` and then ``LEVEL: `` are taken off."""
    rank = None
    m = _RANK.match(text)
    if m:
        rank, text = int(m.group(1)), text[m.end() :]
    level = None
    m = _LEVEL.match(text)
    if m:
        level, text = "LOG_LEVEL_" + m.group(1), text[m.end() :]
    return rank, level, text


# Called with each stored batch of lines, inside the transaction that stores them.
LogHook = Callable[[sa.Connection, list[dict[str, Any]]], None]


class LogWriter:
    """One thread that writes queued lines to the store in batches (≤1000 lines / 0.25 s)."""

    def __init__(self, store: Store, hook: LogHook | None = None) -> None:
        self._store = store
        self._hook = hook
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(MAX_QUEUED_LINES)
        # Started by the first line: the master forks its read workers at start-up, cheaply
        # only while it has one thread (_read_workers._context).
        self._thread = threading.Thread(target=self._run, name="task-logs", daemon=True)
        self._start_lock = threading.Lock()

    def put(self, row: dict[str, Any]) -> None:
        """Queue a line; blocks while :data:`MAX_QUEUED_LINES` wait (back-pressure)."""
        if self._thread.ident is None:
            with self._start_lock:
                if self._thread.ident is None:
                    self._thread.start()
        self._queue.put(row)

    def flush(self) -> None:
        """Return once every line queued so far is stored."""
        self._queue.join()

    def close(self) -> None:
        with self._start_lock:
            if self._thread.ident is None:
                return  # never started: nothing queued
        self._queue.put(None)
        self._thread.join(5)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            batch = [first]
            while first is not None and len(batch) < BATCH_LINES:
                try:
                    batch.append(self._queue.get(timeout=BATCH_SECONDS))
                except queue.Empty:
                    break
                if batch[-1] is None:
                    break
            rows = [r for r in batch if r is not None]
            try:
                with self._store.tx() as conn:
                    _logs.append(conn, rows)
                    if self._hook is not None:
                        self._hook(conn, rows)
            except Exception:  # a lost batch of logs must not stop the master
                logger.exception("could not store %d task log lines", len(rows))
            for _ in batch:
                self._queue.task_done()
            if batch[-1] is None:
                return


# How long a held sink keeps a process's lines back at most (a release that never comes).
RELEASE_TIMEOUT_S = 10.0


class LogSink:
    """The lines of one allocation: ``line()`` is called from its output-reading threads."""

    def __init__(
        self,
        writer: LogWriter,
        task_id: str,
        allocation_id: str,
        container_id: str | None = None,
        *,
        held: bool = False,
    ) -> None:
        """``held``: the process's lines wait (in their reading threads) until :meth:`release`,
        so that the master's note that it started comes first."""
        self._writer = writer
        self.task_id = task_id
        self.allocation_id = allocation_id
        self.container_id = container_id or allocation_id
        self._open = threading.Event()
        if not held:
            self._open.set()

    def release(self) -> None:
        """Let the held lines through."""
        self._open.set()

    def line(self, text: str, *, stdtype: str = "stdout", source: str = "task") -> None:
        if source != "master":
            self._open.wait(RELEASE_TIMEOUT_S)
        rank, level, rest = parse_line(text)
        self._writer.put(
            {
                "task_id": self.task_id,
                "allocation_id": self.allocation_id,
                "agent_id": "local",
                "container_id": self.container_id,
                "rank_id": rank,
                "timestamp": _time.now(),
                "level": level or "LOG_LEVEL_INFO",
                "stdtype": stdtype,
                "source": source,
                "log": rest + "\n",
            }
        )

    def master(self, text: str) -> None:
        """A note of the master about this allocation ("... have started", "crashed: ...")."""
        self.line(text, stdtype="stdout", source="master")
