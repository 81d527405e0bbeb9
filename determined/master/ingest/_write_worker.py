"""A process of its own that commits the metric reports' writes (the group commit's offload,
see ``store/_group_commit``). It imports no web code: the writes it runs come from
``ingest/_offload``, below the API.

Why: the master is one Python process; its event loop (every request) and the group-commit
writer share one GIL. Under 2,000 reports a second the writer's Python work (reading the
trials, folding summaries, encoding rows) was a third of the GIL's busy time, and each SQLite
call it made gave the GIL up and then waited to get it back from a busy loop
(``benchmarks/master_metrics.py``). In a process of its own that work runs beside the loop.

How: the master's writer thread sends ``(fn, arg)`` over a pipe, where ``fn`` is a
module-level function (pickled by name) and ``arg`` plain data; the worker runs
``fn(conn, arg)`` in a transaction on its own engine (same database), commits, and sends the
value back. The writer waits holding the store's write lock, so the database still sees one
writer at a time. :meth:`WriteWorker.run` raises :class:`RolledBack` when nothing was
committed (the worker is not running, could not be reached, or ``fn`` raised and its
transaction was rolled back): the group commit then runs the writes in this process. A worker
that dies between the request and its answer leaves the outcome unknown:
:class:`OutcomeUnknown` (503, the trial's client sends the report again, which the master
merges as a repeated report). A dead worker is started again in the background (at most
every RESTART_INTERVAL_S); until a new worker says it is ready (its engine connected), the
master writes the reports itself rather than queue them behind the worker's start.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from determined.master import _worker_processes
from determined.master._errors import Unavailable
from determined.master._interpreter_tuning import tune_gc
from determined.master.store import _engine
from determined.master.store._group_commit import RolledBack

logger = logging.getLogger("determined.master")

WriteFn = Callable[[sa.Connection, Any], Any]

# The longest one offloaded transaction may take before the worker counts as hung (SQLite's
# own busy timeout is 30 s).
ANSWER_TIMEOUT_S = 60.0
# A worker that cannot start (its database unreachable) is not started again more often.
RESTART_INTERVAL_S = 5.0
_READY = "ready"  # a worker's first message, once its engine is connected

# In the worker: what write functions keep between requests (see kept()).
_kept: dict[str, Any] = {}


def kept() -> dict[str, Any]:
    """In the worker: a dict where a write function may keep rows between requests (a cache of
    the rows it read and wrote, so the next request need not read them again).

    Whatever it holds was true when the previous request committed: the worker empties it
    when a request does not commit, and when the master has ended a write transaction of its
    own since the previous request (``Store.transactions`` moved; the master holds its write
    lock while the worker writes, so nothing else writes meanwhile). A worker started without
    that count empties it before every request.
    """
    return _kept


class OutcomeUnknown(Unavailable):
    """The worker went away after it was handed writes: they may or may not be committed."""


def _serve(conn: multiprocessing.connection.Connection, url: str, master_pid: int) -> None:
    """The worker's loop: ``_READY`` out, then ``(fn, arg, generation)`` in, ``(True, value)``
    or ``(False, why)`` out; None ends it. ``generation`` is the master's count of its own
    write transactions (None: unknown), see :func:`kept`."""
    _worker_processes.die_with(master_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the master stops it (as its read workers)
    tune_gc()
    engine = _engine.make_engine(url)
    # Connect before saying ready: an unreachable database ends this worker here, and the
    # master keeps writing the reports itself, instead of failing every offloaded run.
    engine.connect().close()
    conn.send(_READY)
    last_generation: int | None = None
    while True:
        try:
            request = conn.recv()
        except EOFError:  # the master closed its end
            return
        if request is None:
            return
        fn, arg, generation = request
        if generation is None or generation != last_generation:
            _kept.clear()
        last_generation = generation
        try:
            with engine.begin() as tx:
                value = fn(tx, arg)
        except Exception as e:  # noqa: BLE001 - rolled back: the master runs them itself
            _kept.clear()
            conn.send((False, f"{type(e).__name__}: {e}"))
            continue
        conn.send((True, value))


class WriteWorker:
    """The write worker of a master on the database at ``url`` (see module doc).

    Args:
        url: the store's database URL.
        answer_timeout_s: how long :meth:`run` waits for an answer before it counts the worker
            as hung, kills it and raises :class:`OutcomeUnknown` (the attribute of that name
            may be changed later).
        restart_interval_s: the least time between two starts of a worker.
        transactions: the master's count of its own write transactions (``Store.transactions``),
            read while the store's write lock is held; without it the worker keeps nothing
            between requests (see :func:`kept`).
    """

    def __init__(
        self,
        url: str,
        *,
        answer_timeout_s: float = ANSWER_TIMEOUT_S,
        restart_interval_s: float = RESTART_INTERVAL_S,
        transactions: Callable[[], int] | None = None,
    ) -> None:
        self._url = url
        self._transactions = transactions
        self.answer_timeout_s = answer_timeout_s
        self._restart_interval_s = restart_interval_s
        self._lock = threading.Lock()  # one request at a time; guards the fields below
        self._conn: multiprocessing.connection.Connection | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        self._ready = False  # the worker sent _READY
        self._started_at = -restart_interval_s
        self._starting = False
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The worker's pid while one runs and is ready."""
        with self._lock:
            process = self._process
            return process.pid if process is not None and self._check_ready() else None

    def wait_ready(self, timeout: float) -> bool:
        """Whether a worker is ready within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if self._check_ready():
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def _check_ready(self) -> bool:
        """With ``_lock`` held: whether the worker is ready, reading its ready message if it
        has come (a worker that died before it dropped, and started again)."""
        if self._ready:
            return True
        conn = self._conn
        if conn is None:
            return False
        try:
            if conn.poll(0):
                self._ready = conn.recv() == _READY
        except (EOFError, OSError):
            self._restart_later()
        return self._ready

    def start(self) -> None:
        """Start the worker now (forked when this process has one thread: start it before the
        server's threads, as the read workers are)."""
        with self._lock:
            if self._closed or self._process is not None:
                return
            self._start_locked()

    def _start_locked(self) -> None:
        context: Any = _worker_processes.start_context()  # BaseContext types no Process
        forked = context.get_start_method() == "fork"
        parent, child = context.Pipe()
        process = context.Process(
            target=_serve,
            args=(child, self._url, os.getpid() if forked else 0),
            name="write-worker",
            daemon=True,
        )
        process.start()
        child.close()
        self._conn, self._process, self._ready = parent, process, False
        self._started_at = time.monotonic()
        logger.info("write worker: pid %s (%s)", process.pid, context.get_start_method())

    def run(self, fn: WriteFn, arg: Any) -> Any:
        """``fn(conn, arg)`` committed in the worker; its value. Call it holding the store's
        write lock.

        Raises:
            RolledBack: nothing was committed (run the writes here instead).
            OutcomeUnknown: the worker died or hung after it got the request.
        """
        with self._lock:
            conn, process = self._conn, self._process
            if conn is None or process is None or not process.is_alive():
                self._restart_later()
                raise RolledBack("the write worker is not running")
            if not self._check_ready():
                raise RolledBack("the write worker is starting")
            generation = None if self._transactions is None else self._transactions()
            try:
                conn.send((fn, arg, generation))
            except Exception as e:  # noqa: BLE001 - unpicklable, or the pipe is gone
                # A broken pipe is a dead worker even while is_alive() still says otherwise (a
                # fork server's child: its exit status reaches this process a moment later).
                if isinstance(e, OSError) or not process.is_alive():
                    self._restart_later()
                raise RolledBack(f"could not hand the writes to the write worker: {e!r}") from e
            try:
                if not conn.poll(self.answer_timeout_s):
                    raise TimeoutError(f"no answer in {self.answer_timeout_s:.0f} s")
                ok, value = conn.recv()
            except (EOFError, OSError, TimeoutError) as e:
                self._restart_later()
                raise OutcomeUnknown(
                    f"the master's write worker stopped while it stored this ({e!r}); "
                    "whether it was stored is unknown: send it again"
                ) from e
        if not ok:
            raise RolledBack(value)
        return value

    def _restart_later(self) -> None:
        """With ``_lock`` held: drop the dead (or hung) worker and start another in the
        background (a fork server's start takes a second or two; writes meanwhile run in the
        master)."""
        process, self._process, self._ready = self._process, None, False
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if process is not None and process.is_alive():
            process.kill()
        if self._starting or self._closed:
            return
        logger.error("the write worker stopped: starting it again")
        self._starting = True
        threading.Thread(target=self._restart, name="write-worker-restart", daemon=True).start()

    def _restart(self) -> None:
        time.sleep(max(0.0, self._started_at + self._restart_interval_s - time.monotonic()))
        with self._lock:
            self._starting = False
            if self._closed or self._process is not None:
                return
            try:
                self._start_locked()
            except Exception:  # noqa: BLE001 - writes go on in the master; tried again later
                logger.exception("could not start the write worker")

    def close(self) -> None:
        """Stop the worker (after the request it is answering, if any)."""
        with self._lock:
            self._closed = True
            conn, process = self._conn, self._process
            self._conn = self._process = None
        if conn is not None:
            with contextlib.suppress(OSError, ValueError):  # the worker is gone already
                conn.send(None)
            conn.close()
        if process is not None:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join(5)
