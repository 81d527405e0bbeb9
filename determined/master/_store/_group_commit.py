"""Group commit: many threads' small writes share one transaction, so one commit (one fsync
under ``synchronous=FULL``) covers every write that arrived while the previous commit ran.

Why: a metric report is a few row writes but its commit is an fsync of the WAL (milliseconds
on most disks), and the master's writes are serialized; committing each report alone caps the
master at a few hundred reports per second. Batching keeps the contract of ``Store.tx``: a
caller returns only after its write is committed, and a write that raises changes nothing.

How: the first caller to find no batch running becomes the leader; it takes every pending
write and runs them one after the other in one transaction, in arrival order (each sees the
writes before it, as if they had run alone in that order), then commits. If any write raises,
the whole transaction is rolled back and each write of that batch runs again in a transaction
of its own, so one bad report neither fails nor duplicates the others. Writes must therefore
touch nothing but ``conn`` (they may run twice; only a committed run counts).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import sqlalchemy as sa

T = TypeVar("T")

MAX_BATCH = 256  # bounds how long one commit keeps the writer lock


class _Write(Generic[T]):
    def __init__(self, fn: Callable[[sa.Connection], T]) -> None:
        self.fn = fn
        self.done = False  # the leader is finished with it (waiters may return)
        self.settled = False  # value or error is final
        self.value: Any = None
        self.error: BaseException | None = None

    def result(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value


class GroupCommit:
    """Runs ``fn(conn)`` writes from many threads in shared transactions (see module doc).

    Args:
        begin: opens one write transaction (``Store.tx``): a context manager yielding a
            connection, committing on exit and rolling back if the block raises.
    """

    def __init__(self, begin: Callable[[], Any]) -> None:
        self._begin = begin
        self._cond = threading.Condition()
        self._pending: list[_Write[Any]] = []
        self._leading = False

    def run(self, fn: Callable[[sa.Connection], T]) -> T:
        """Run ``fn`` in a committed transaction; returns its value or raises its error."""
        write: _Write[T] = _Write(fn)
        with self._cond:
            self._pending.append(write)
        while True:
            with self._cond:
                while self._leading and not write.done:
                    self._cond.wait()
                if write.done:
                    return write.result()
                self._leading = True
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            try:
                self._commit(batch)
            finally:
                with self._cond:
                    self._leading = False
                    for w in batch:
                        if not w.settled:  # the leader was interrupted (KeyboardInterrupt)
                            w.error = RuntimeError("the write was interrupted; nothing stored")
                        w.done = True
                    self._cond.notify_all()
            # Our own write may lie past MAX_BATCH in the queue: then lead again.

    def _commit(self, batch: list[_Write[Any]]) -> None:
        try:
            with self._begin() as conn:
                values = [w.fn(conn) for w in batch]
        except Exception as e:
            if len(batch) == 1:
                batch[0].error = e
                batch[0].settled = True
            else:
                for w in batch:
                    self._alone(w)
            return
        for w, value in zip(batch, values, strict=True):
            w.value = value
            w.settled = True

    def _alone(self, write: _Write[Any]) -> None:
        try:
            with self._begin() as conn:
                write.value = write.fn(conn)
        except Exception as e:
            write.error = e
        write.settled = True
