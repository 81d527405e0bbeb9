"""Group commit: many callers' small writes share one transaction, so one commit (one fsync
under ``synchronous=FULL``) covers every write that arrived while the previous commit ran.

Why: a metric report is a few row writes but its commit is an fsync of the WAL (milliseconds
on most disks), and the master's writes are serialized; committing each report alone caps the
master at a few hundred reports per second. Batching keeps the contract of ``Store.tx``: a
caller returns only after its write is committed, and a write that raises changes nothing.

How: one writer thread (started on the first write) takes every pending write and runs them
one after the other in one transaction, in arrival order (each sees the writes before it, as if
they had run alone in that order), then commits and wakes their callers. If any write raises,
the whole transaction is rolled back and each write of that batch runs again in a transaction
of its own, so one bad report neither fails nor duplicates the others. Writes must therefore
touch nothing but ``conn`` (they may run twice; only a committed run counts).

A write may name a ``combine`` function: consecutive writes with the same one run as one call
``combine(conn, fns)`` (one statement for many reports instead of a few each), which must
leave the database as running each ``fn`` in turn would. If it raises, the batch falls back to
running each write alone, as above, with its own ``fn``.

A write may also name an ``offload`` function: consecutive writes with the same one are
handed to it, and it commits them in a transaction of its own elsewhere (another process, see
``_write_worker``), so that their Python work does not hold this process's GIL. The writer commits
the writes before them first and holds the store's write lock (``exclusive``) meanwhile, so
writes still happen one transaction at a time, in arrival order. If the offload raises
:class:`RolledBack` (nothing of it was committed), its writes run here instead, as above; any
other error leaves their outcome unknown, and each of them fails with it rather than risk
storing a report twice.

Callers wait in their own thread (:meth:`GroupCommit.run`) or on the event loop
(:meth:`GroupCommit.run_async`): the HTTP handlers of metric reports await their write without
holding a worker thread each (a thread-pool hop per report, and a herd of waiting threads).
:meth:`GroupCommit.run_soon` is the same without a coroutine: a callback on the event loop
(the HTTP protocol's hot lane answers a report from it, with no task or future per report).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import sqlalchemy as sa

T = TypeVar("T")
logger = logging.getLogger("determined.master")
# Runs several writes' ``fn`` at once (see module doc): their values, in order.
Combine = Callable[[sa.Connection, list[Callable[[sa.Connection], Any]]], list[Any]]
# Commits several writes in a transaction of its own, elsewhere: their values, in order (see
# module doc).
Offload = Callable[[list[Callable[[sa.Connection], Any]]], list[Any]]
# Told a write's outcome on its event loop (run_soon): (value, None) or (None, error).
Done = Callable[[Any, BaseException | None], None]


class RolledBack(Exception):
    """An offload committed nothing (its writes may run here instead): why."""


MAX_BATCH = 1024  # bounds how long one commit keeps the writer lock
# Under a stream of writes (the last commit ended less than BUSY_S ago), the writer waits up to
# LINGER_S for more before it commits, until LINGER_UNTIL are pending: each commit costs a
# transaction, its statements and an fsync whatever its size, and writes arriving one by one
# (2,000 reports a second from 200 trials) otherwise commit one or two at a time. A batch of
# LINGER_UNTIL spreads that cost well enough: waiting longer only adds to every write's
# latency (at 8,000 reports a second, ~80 are pending when a commit ends). A lone write
# commits at once.
LINGER_S = 0.003
LINGER_UNTIL = 64
BUSY_S = 0.02


OFFLOAD_OUTCOMES = ("offloaded", "offloadRolledBack", "offloadFailed")


class CommitStats:
    """What the recent writes waited, seen from inside (``benchmarks/master_metrics.py`` reads
    it through ``GET /api/v1/dev/group-commit``): a client's latency also counts its own
    process and the HTTP layer, which on a shared machine can hide what the store does.

    Per write: submitted -> its commit ended (or failed). Per commit: its wall time, the writer
    thread's CPU time in it (an offload's own CPU is its process's), and its size. The newest
    ``max_writes`` / ``max_commits`` are kept. Counted since the last reset: the writes an
    offload committed (``offloaded``), ran here after it committed nothing
    (``offloadRolledBack``), and failed with an unknown outcome (``offloadFailed``).
    """

    def __init__(self, max_writes: int = 200_000, max_commits: int = 20_000) -> None:
        self._lock = threading.Lock()
        self._waits: collections.deque[float] = collections.deque(maxlen=max_writes)
        self._commits: collections.deque[tuple[float, float, int]] = collections.deque(
            maxlen=max_commits
        )
        self._offloads: collections.Counter[str] = collections.Counter()

    def count_offload(self, outcome: str, writes: int) -> None:
        """``outcome``: offloaded, offloadRolledBack or offloadFailed."""
        with self._lock:
            self._offloads[outcome] += writes

    def record(self, batch: list[_Write[Any]], started: float, cpu: float) -> None:
        ended = time.monotonic()
        with self._lock:
            self._commits.append((ended - started, cpu, len(batch)))
            self._waits.extend(ended - w.submitted for w in batch)

    def reset(self) -> None:
        with self._lock:
            self._waits.clear()
            self._commits.clear()
            self._offloads.clear()

    def summary(self) -> dict[str, Any]:
        """Counts, and p50 / p90 / p99 / max of: ``waitMs`` (per write), ``commitWallMs``,
        ``commitCpuMs`` and ``batchSize`` (per commit)."""
        with self._lock:  # copied under the lock, sorted outside it: the writer records on
            waits = list(self._waits)
            commits = list(self._commits)
            offloads = {k: self._offloads[k] for k in OFFLOAD_OUTCOMES}
        waits.sort()
        return {
            "writes": len(waits),
            "commits": len(commits),
            "waitMs": _percentiles([w * 1e3 for w in waits]),
            "commitWallMs": _percentiles(sorted(c[0] * 1e3 for c in commits)),
            "commitCpuMs": _percentiles(sorted(c[1] * 1e3 for c in commits)),
            "batchSize": _percentiles(sorted(float(c[2]) for c in commits)),
            **offloads,
        }


def _percentiles(ordered: list[float]) -> dict[str, float]:
    if not ordered:
        return {}
    at = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
    out = {
        k: round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3) for k, q in at.items()
    }
    out["max"] = round(ordered[-1], 3)
    return out


class _Write(Generic[T]):
    def __init__(
        self,
        fn: Callable[[sa.Connection], T],
        combine: Combine | None = None,
        offload: Offload | None = None,
    ) -> None:
        self.submitted = time.monotonic()
        self.fn = fn
        self.combine = combine
        self.offload = offload
        self.settled = False  # value or error is final
        self.value: Any = None
        self.error: BaseException | None = None
        # How its caller waits: a thread on ``event``, or on ``loop`` a task on ``future`` or
        # the callback ``done``.
        self.event: threading.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.future: asyncio.Future[Any] | None = None
        self.done: Done | None = None

    def result(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value


def _resolve(writes: list[_Write[Any]]) -> None:
    """On the writes' event loop: hand each awaiting task (or callback) its outcome."""
    for w in writes:
        if w.done is not None:
            try:
                w.done(w.value, w.error)
            except Exception:  # one caller's failure must not keep the others waiting
                logger.exception("a write's callback failed")
            continue
        assert w.future is not None
        if w.future.done():  # the task was cancelled; the write happened all the same
            continue
        if w.error is not None:
            w.future.set_exception(w.error)
        else:
            w.future.set_result(w.value)


class GroupCommit:
    """Runs ``fn(conn)`` writes from many threads and tasks in shared transactions (see module
    doc).

    Args:
        begin: opens one write transaction (``Store.tx``): a context manager yielding a
            connection, committing on exit and rolling back if the block raises.
        exclusive: holds off every other write of this process (the store's write lock, a
            context manager) while an offload commits elsewhere.
    """

    def __init__(
        self, begin: Callable[[], Any], exclusive: Callable[[], Any] = contextlib.nullcontext
    ) -> None:
        self._begin = begin
        self._exclusive = exclusive
        self._cond = threading.Condition()
        self._pending: list[_Write[Any]] = []
        self._writer: threading.Thread | None = None
        self._closed = False
        self._lingering = False  # the writer waits for more writes to join its batch
        self.stats = CommitStats()

    def run(
        self,
        fn: Callable[[sa.Connection], T],
        combine: Combine | None = None,
        offload: Offload | None = None,
    ) -> T:
        """Run ``fn`` in a committed transaction; returns its value or raises its error.
        ``combine``, ``offload``: see the module doc."""
        write: _Write[T] = _Write(fn, combine, offload)
        write.event = threading.Event()
        self._submit(write)
        write.event.wait()
        return write.result()

    async def run_async(
        self,
        fn: Callable[[sa.Connection], T],
        combine: Combine | None = None,
        offload: Offload | None = None,
    ) -> T:
        """``run`` for a coroutine: the event loop is free while the write waits for its
        commit."""
        write: _Write[T] = _Write(fn, combine, offload)
        write.loop = asyncio.get_running_loop()
        write.future = write.loop.create_future()
        self._submit(write)
        return await write.future

    def run_soon(
        self,
        fn: Callable[[sa.Connection], Any],
        done: Done,
        combine: Combine | None = None,
        offload: Offload | None = None,
    ) -> None:
        """``run_async`` without a coroutine: call from the event loop; ``done(value, None)``
        or ``done(None, error)`` is called on it once the write has committed or failed."""
        write: _Write[Any] = _Write(fn, combine, offload)
        write.loop = asyncio.get_running_loop()
        write.done = done
        self._submit(write)

    def close(self) -> None:
        """Commit what is pending, then stop the writer thread; later writes raise."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            writer = self._writer
        if writer is not None and writer is not threading.current_thread():
            writer.join()

    def _submit(self, write: _Write[Any]) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("the store is closed: nothing stored")
            self._pending.append(write)
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_forever, name="group-commit", daemon=True
                )
                self._writer.start()
            # A lingering writer wakes at its deadline or when the batch is big enough, not
            # for every write that joins it.
            if not self._lingering or len(self._pending) >= LINGER_UNTIL:
                self._cond.notify()

    def _write_forever(self) -> None:
        last_commit = 0.0
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                if time.monotonic() - last_commit < BUSY_S and len(self._pending) < LINGER_UNTIL:
                    self._linger()
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            started, cpu = time.monotonic(), time.thread_time()
            try:
                for segment in _segments(batch):
                    if segment[0].offload is None:
                        self._commit(segment)
                    else:
                        self._commit_elsewhere(segment, segment[0].offload)
                last_commit = time.monotonic()
            except BaseException as e:  # noqa: BLE001 - the writer must outlive any write
                for w in batch:
                    if not w.settled:
                        w.error = RuntimeError(f"the write was interrupted ({e!r}); nothing stored")
                        w.settled = True
            self.stats.record(batch, started, time.thread_time() - cpu)
            self._wake(batch)

    def _linger(self) -> None:
        """Under a stream of writes, wait up to LINGER_S for more to join the batch, until
        LINGER_UNTIL are pending (holding ``_cond``'s lock only while not waiting)."""
        deadline = time.monotonic() + LINGER_S
        self._lingering = True
        try:
            while len(self._pending) < LINGER_UNTIL and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)
        finally:
            self._lingering = False

    @staticmethod
    def _wake(batch: list[_Write[Any]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[_Write[Any]]] = {}
        for w in batch:
            if w.event is not None:
                w.event.set()
            elif w.loop is not None:
                by_loop.setdefault(w.loop, []).append(w)
        for loop, writes in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve, writes)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

    def _commit(self, batch: list[_Write[Any]]) -> None:
        try:
            with self._begin() as conn:
                values = _run_all(conn, batch)
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

    def _commit_elsewhere(self, run: list[_Write[Any]], offload: Offload) -> None:
        try:
            with self._exclusive():
                values = offload([w.fn for w in run])
            if len(values) != len(run):
                raise RuntimeError(f"the offload gave {len(values)} values for {len(run)} writes")
        except RolledBack:
            self.stats.count_offload("offloadRolledBack", len(run))
            self._commit(run)
            return
        except Exception as e:  # noqa: BLE001 - committed or not: each write fails with it
            self.stats.count_offload("offloadFailed", len(run))
            for w in run:
                w.error = e
                w.settled = True
            return
        self.stats.count_offload("offloaded", len(run))
        for w, value in zip(run, values, strict=True):
            w.value = value
            w.settled = True

    def _alone(self, write: _Write[Any]) -> None:
        try:
            with self._begin() as conn:
                write.value = write.fn(conn)
        except Exception as e:
            write.error = e
        write.settled = True


def _segments(batch: list[_Write[Any]]) -> list[list[_Write[Any]]]:
    """The batch cut into runs committed one after the other: each run of writes with the same
    offload, and the writes between them (committed here together)."""
    segments: list[list[_Write[Any]]] = []
    for w in batch:
        if segments and segments[-1][0].offload is w.offload:
            segments[-1].append(w)
        else:
            segments.append([w])
    return segments


def _run_all(conn: sa.Connection, batch: list[_Write[Any]]) -> list[Any]:
    """Each write's value, in order; runs of writes sharing a ``combine`` run as one call."""
    values: list[Any] = []
    i = 0
    while i < len(batch):
        combine = batch[i].combine
        j = i + 1
        while combine is not None and j < len(batch) and batch[j].combine is combine:
            j += 1
        if combine is None or j - i == 1:
            values.append(batch[i].fn(conn))
        else:
            run = combine(conn, [w.fn for w in batch[i:j]])
            if len(run) != j - i:
                raise RuntimeError(f"combine gave {len(run)} values for {j - i} writes")
            values.extend(run)
        i = j
    return values
