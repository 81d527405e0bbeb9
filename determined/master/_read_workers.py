"""Heavy reads answered in worker processes, beside the master's own.

The master is one Python process: every request, the metric reports that stream in from
trials and the group-commit writer share one GIL. A read that builds a large answer (a page of
the experiment list: ~20 ms of Python) holds that GIL in 5 ms slices, and every report waiting
behind it waits too (benchmarks/master_metrics.py, readers beside 2,000 reports/s). Such reads
are pure functions of the database, so a small pool of processes, each with its own engine on
the same database (SQLite in WAL mode or PostgreSQL), can answer them: the master checks the
caller, hands the worker the function and its arguments, and sends the JSON bytes it gets back.

A read function is ``fn(conn, *args) -> JSON-able`` (or the body's bytes), defined at module
level (the worker imports it by name). The same function answers in-process where no pool
runs, so both paths give the same bytes (``tests/master/test_read_workers.py``). Reads see what
was committed, as ``Store.read`` does: the master answers a write only after its commit.

The pool starts with the first read that is sent to it; a worker that dies breaks the pool,
which is then started anew, and that read is answered in-process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import concurrent.futures.process
import json
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import pydantic_core
import sqlalchemy as sa
from fastapi import Response
from starlette.concurrency import run_in_threadpool

from determined.master._interpreter_tuning import tune_gc
from determined.master._worker_processes import die_with, start_context
from determined.master.store import Store, _engine

logger = logging.getLogger("determined.master")

ReadFn = Callable[..., Any]

_worker_engine: sa.Engine | None = None  # in a worker process: its engine


def encode(body: Any) -> bytes:
    """JSON bytes as FastAPI's JSONResponse renders a plain dict (no spaces, UTF-8, no NaN);
    bytes as they are (a read function's answer already written, such as NDJSON lines).

    pydantic-core writes them (5x the json module's speed: a page of 200 experiments, 500 KB,
    took 5.5 ms); where its bytes may hold a NaN or an infinity (it writes them bare), or it
    cannot write the body (a lone surrogate), the json module writes it again and refuses what
    JSONResponse refuses. The two differ only in how some floats are spelled (``1e-05`` and
    ``0.00001``): the same numbers."""
    if isinstance(body, bytes):
        return body
    try:
        data = pydantic_core.to_json(body)
    except pydantic_core.PydanticSerializationError:
        data = b"NaN"  # written again below, where the json module says why
    if b"NaN" in data or b"Infinity" in data:
        text = json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode()
    return data


# The read workers' nice value: on a busy machine the master's own process and its write
# worker (every trial's metric reports, which the trials wait for) go first, and a read takes
# the CPU they leave. At 8,000 reports a second beside 20 readers on 2 cores, reports' p50 went
# from 56 to 29 ms and readers' from 160 to 95 ms (the master relays reads sooner too).
READ_WORKER_NICE = 10


def _start_worker(url: str, master_pid: int) -> None:
    """A worker's start: ``master_pid`` is its parent's pid where it was forked from the
    master (0 where a fork server started it)."""
    global _worker_engine
    die_with(master_pid)
    # Ctrl-C in the master's terminal reaches the whole process group: the master stops its
    # pool; a worker's own traceback would only be noise.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker_engine = _engine.make_engine(url)
    tune_gc()  # as in the master: full collections of the imported modules took 100+ ms
    os.nice(READ_WORKER_NICE)


def _warm() -> None:
    """Nothing: submitted once per worker by ``start`` so that the pool starts them now."""


def _as_is(value: Any) -> Any:
    return value


def _in_worker(fn: ReadFn, args: tuple[Any, ...], finish: Callable[[Any], Any]) -> Any:
    assert _worker_engine is not None, "not a read worker"
    with _worker_engine.connect() as conn:
        return finish(fn(conn, *args))


class ReadWorkers:
    """Answers read functions in ``processes`` worker processes (0: in this process)."""

    def __init__(self, store: Store, processes: int) -> None:
        self._store = store
        self._processes = processes
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> None:
        """Start the workers now, in the background (a worker imports the master's modules,
        about a second): the first reads then need not wait for them."""
        pool = self._get_pool()
        if pool is not None:
            for _ in range(self._processes):
                pool.submit(_warm)

    async def answer(self, fn: ReadFn, *args: Any) -> Response:
        """``fn(conn, *args)`` as a JSON response. Errors ``fn`` raises (NotFound, ...) are
        raised here, as they would be in-process."""
        return Response(await self.body(fn, *args), media_type="application/json")

    async def body(self, fn: ReadFn, *args: Any) -> bytes:
        """``fn(conn, *args)`` as JSON bytes (see ``encode``)."""
        return await self._run(fn, args, encode)

    async def call(self, fn: ReadFn, *args: Any) -> Any:
        """``fn(conn, *args)``'s value itself (pickled back from the worker), for the master's
        own use of a read."""
        return await self._run(fn, args, _as_is)

    def call_blocking(self, fn: ReadFn, *args: Any, timeout: float | None = None) -> Any:
        """:meth:`call` for a thread of the master's own (not the event loop): waits there for
        the worker's answer, so the master's process spends no CPU on the read itself.

        Raises:
            TimeoutError: no answer within ``timeout`` seconds (None: no limit).
        """
        pool = self._get_pool()
        if pool is not None:
            try:
                return pool.submit(_in_worker, fn, args, _as_is).result(timeout)
            except concurrent.futures.process.BrokenProcessPool:
                self._restart(pool)
        return self._in_process(fn, args, _as_is)

    async def _run(self, fn: ReadFn, args: tuple[Any, ...], finish: Callable[[Any], Any]) -> Any:
        # Awaited on the event loop: the caller's route needs no thread of the pool to wait in.
        pool = self._get_pool()
        if pool is not None:
            try:
                return await asyncio.wrap_future(pool.submit(_in_worker, fn, args, finish))
            except concurrent.futures.process.BrokenProcessPool:
                self._restart(pool)
        return await run_in_threadpool(self._in_process, fn, args, finish)

    def _restart(self, pool: concurrent.futures.ProcessPoolExecutor) -> None:
        """A worker of ``pool`` died: start the workers anew (the read is answered here)."""
        logger.error("a read worker died: starting the read workers again")
        self._drop_pool(pool)
        self.start()

    def _in_process(self, fn: ReadFn, args: tuple[Any, ...], finish: Callable[[Any], Any]) -> Any:
        with self._store.read() as conn:
            return finish(fn(conn, *args))

    def _get_pool(self) -> concurrent.futures.ProcessPoolExecutor | None:
        if self._processes <= 0:
            return None
        with self._lock:
            if self._pool is None and not self._closed:
                context = start_context()
                forked = context.get_start_method() == "fork"
                logger.info(
                    f"read workers: {self._processes} processes ({context.get_start_method()})"
                )
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    self._processes,
                    mp_context=context,
                    initializer=_start_worker,
                    initargs=(self._store.url, os.getpid() if forked else 0),
                )
            return self._pool

    def _drop_pool(self, pool: concurrent.futures.ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
