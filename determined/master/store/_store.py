"""``Store``: the master's one database handle."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import sqlalchemy as sa

from determined.master.store import _engine, _projects, _token_cache, _users
from determined.master.store._group_commit import (
    Combine,
    CommitStats,
    Done,
    GroupCommit,
    Offload,
)
from determined.master.store._schema import cluster_info

T = TypeVar("T")


class Store:
    """The master's database: opened, migrated and seeded on construction.

    Args:
        url: any SQLAlchemy URL; ``sqlite:///<file>`` (the default, see ``sqlite_url``) or
            ``postgresql://...`` (a driver such as psycopg must be installed).

    Writes go through :meth:`tx`, one at a time within this process (the master is the only
    writer; serializing here keeps SQLite from answering "database is locked"), and
    ``transactions`` counts them. Reads use :meth:`read` and never wait for writes (WAL).

    ``tokens`` caches live tokens for the master's auth (see ``_token_cache``): :meth:`tx` drops
    the ones its transaction revoked or deleted once it has ended.

    Raises:
        ValueError: the URL cannot be used.
        sqlalchemy.exc.OperationalError: the database cannot be reached.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = _engine.make_engine(url)
        self._write_lock = threading.RLock()
        # Write transactions this process has ended (committed or not): the write worker's
        # kept rows are stale once it moves (see _write_worker.kept).
        self.transactions = 0
        self._group = GroupCommit(self.tx, exclusive=lambda: self._write_lock)
        self.tokens: _token_cache.TokenCache[Any] = _token_cache.TokenCache()
        _engine.migrate(self.engine)
        with self.tx() as conn:
            self.cluster_id = self._ensure_cluster_id(conn)
            _users.ensure_default_users(conn)
            _projects.ensure_defaults(conn)

    @contextlib.contextmanager
    def tx(self) -> Iterator[sa.Connection]:
        """A write transaction: committed when the block ends, rolled back if it raises."""
        pending = _token_cache.Pending()
        try:
            with self._write_lock:
                try:
                    with self.engine.begin() as conn:
                        conn.info[_token_cache.PENDING] = pending
                        try:
                            yield conn
                        finally:
                            del conn.info[_token_cache.PENDING]
                finally:
                    self.transactions += 1
        finally:
            # After the commit: a token read before it cannot be cached after this (see
            # _token_cache). After a rollback too: dropping a live token only costs a read.
            self.tokens.forget(pending)

    def write(
        self,
        fn: Callable[[sa.Connection], T],
        combine: Combine | None = None,
        offload: Offload | None = None,
    ) -> T:
        """``fn(conn)`` committed, sharing its commit with concurrent ``write`` calls (group
        commit, see ``_group_commit``): for hot small writes such as metric reports. ``fn`` may
        run twice and must touch nothing but ``conn``. ``combine`` runs many such writes at
        once; ``offload`` commits them in another process (see ``_group_commit``)."""
        return self._group.run(fn, combine, offload)

    async def write_async(
        self,
        fn: Callable[[sa.Connection], T],
        combine: Combine | None = None,
        offload: Offload | None = None,
    ) -> T:
        """:meth:`write` for a coroutine: awaits the commit without blocking the event loop or
        holding a worker thread."""
        return await self._group.run_async(fn, combine, offload)

    def write_soon(
        self,
        fn: Callable[[sa.Connection], Any],
        done: Done,
        combine: Combine | None = None,
        offload: Offload | None = None,
    ) -> None:
        """:meth:`write_async` with a callback (from the event loop): ``done(value, error)``
        runs on the loop once ``fn`` has committed or failed (see ``GroupCommit.run_soon``)."""
        self._group.run_soon(fn, done, combine, offload)

    @contextlib.contextmanager
    def read(self) -> Iterator[sa.Connection]:
        """A connection for reads (no commit)."""
        with self.engine.connect() as conn:
            yield conn

    @property
    def commit_stats(self) -> CommitStats:
        """What the group commit's recent writes waited (see ``_group_commit.CommitStats``)."""
        return self._group.stats

    def close(self) -> None:
        self._group.close()
        self.engine.dispose()

    @staticmethod
    def _ensure_cluster_id(conn: sa.Connection) -> str:
        row = conn.execute(
            sa.select(cluster_info.c.value).where(cluster_info.c.key == "cluster_id")
        ).first()
        if row is not None:
            return str(row[0])
        value = str(uuid.uuid4())
        conn.execute(cluster_info.insert().values(key="cluster_id", value=value))
        return value
