"""Live tokens in memory, by token digest: a trial's process sends its token several times a
second, and reading the token, its user, allocation and trial from the database on every request
was most of what a metric report cost the master.

Correctness does not rest on the time limit. Every write that ends tokens (``_users.revoke_*``,
deleting an experiment) calls :func:`forget_after_commit`, and ``Store.tx`` drops those entries
right after its transaction ends. Dropping after the commit, not before, matters: a request that
read a token from the database just before the revoke committed must not put it in the cache
after the drop. So a caller takes :meth:`TokenCache.generation` before its database read and
:meth:`TokenCache.put` refuses the entry if anything was dropped since.

The time limit (``ttl_s``; ``allocation_ttl_s`` for allocations' tokens) only bounds what a
change made behind the master's back (another process editing its database, say deactivating a
user) can cost: such a change is seen within that time. A future write in the master that
deactivates a user or changes a token's owner must call :func:`forget_after_commit`
(``everything=True`` when in doubt). An allocation's token lives only as long as its allocation,
which the master itself ends (dropping its tokens), and every trial re-sends it several times a
second: it gets the longer limit, so that 200 trials do not make the master read 70 tokens a
second from its database.

A token still in use is read again before its time is up, in the background (``refresh``, a
hook the master's auth sets): an entry that is asked for after a random point between
REFRESH_FROM and REFRESH_TO of its time hands itself to the hook once, and the read's ``put``
replaces it. Without that, entries put together (800 trials starting together, or coming back
to a restarted master) expired together, and their requests all took the slow way at once: a
stall of 0.3 s every 30 s at 8,000 reports a second (``benchmarks/master_metrics.py``'s
windows).
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

import sqlalchemy as sa

V = TypeVar("V")

# conn.info key of the Pending of the Store.tx transaction the connection is in.
PENDING = "det_token_cache_pending"
MAX_ENTRIES = 10_000
TTL_S = 3.0
ALLOCATION_TTL_S = 30.0
# The share of an entry's time after which asking for it starts its refresh: a point drawn
# between these for each entry, so entries put together are not refreshed together.
REFRESH_FROM = 0.5
REFRESH_TO = 0.8


@dataclasses.dataclass
class Pending:
    """What to drop from the cache once the transaction has ended."""

    digests: set[str] = dataclasses.field(default_factory=set)
    allocation_ids: set[str] = dataclasses.field(default_factory=set)
    everything: bool = False

    def __bool__(self) -> bool:
        return self.everything or bool(self.digests or self.allocation_ids)


def forget_after_commit(
    conn: sa.Connection,
    *,
    digests: Iterable[str] = (),
    allocation_ids: Iterable[str] = (),
    everything: bool = False,
) -> None:
    """Drop these tokens (by digest, or all of these allocations') from the master's cache when
    the ``Store.tx`` transaction of ``conn`` ends. Outside ``Store.tx`` there is no cache to
    drop from: the master writes only through it."""
    pending: Pending | None = conn.info.get(PENDING)
    if pending is None:
        return
    pending.digests.update(digests)
    pending.allocation_ids.update(allocation_ids)
    pending.everything = pending.everything or everything


@dataclasses.dataclass
class _Entry(Generic[V]):
    value: V
    expires: float
    allocation_id: str | None
    refresh_at: float
    refreshing: bool = False


class TokenCache(Generic[V]):
    """``digest -> value`` of live tokens, at most ``max_entries`` (the oldest go first), each
    for ``ttl_s`` at most (``allocation_ttl_s`` for an allocation's).

    Safe from any thread; no method waits for anything but a short lock, so the event loop may
    call :meth:`get`. ``refresh(digest, value)``, when set, is called (by :meth:`get`, outside
    the lock) at most once per entry once its refresh is due (see module doc): it must not
    block, and should ``put`` a value read again (or ``forget`` the digest).
    """

    def __init__(
        self,
        *,
        max_entries: int = MAX_ENTRIES,
        ttl_s: float = TTL_S,
        allocation_ttl_s: float = ALLOCATION_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max = max_entries
        self._ttl = ttl_s
        self._allocation_ttl = allocation_ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        # In insertion order: when full, the oldest entry goes first.
        self._entries: dict[str, _Entry[V]] = {}
        self._by_allocation: dict[str, set[str]] = {}
        self._generation = 0
        self.refresh: Callable[[str, V], None] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def generation(self) -> int:
        """Take before reading a token from the database; hand to :meth:`put`."""
        return self._generation

    def get(self, digest: str) -> V | None:
        refresh = None
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                return None
            now = self._clock()
            if entry.expires <= now:
                self._drop(digest)
                return None
            if now >= entry.refresh_at and not entry.refreshing and self.refresh is not None:
                entry.refreshing = True
                refresh = self.refresh
        if refresh is not None:
            refresh(digest, entry.value)
        return entry.value

    def put(self, digest: str, value: V, *, generation: int, allocation_id: str | None) -> bool:
        """Cache ``value``, read from the database after :meth:`generation` gave
        ``generation``; refused (False) if anything was forgotten since, as the read may predate
        that."""
        with self._lock:
            if generation != self._generation:
                return False
            self._drop(digest)
            while len(self._entries) >= self._max:
                self._drop(next(iter(self._entries)))
            ttl = self._ttl if allocation_id is None else self._allocation_ttl
            now = self._clock()
            refresh_at = now + ttl * random.uniform(REFRESH_FROM, REFRESH_TO)
            self._entries[digest] = _Entry(value, now + ttl, allocation_id, refresh_at)
            if allocation_id is not None:
                self._by_allocation.setdefault(allocation_id, set()).add(digest)
            return True

    def forget(self, pending: Pending) -> None:
        if not pending:
            return
        with self._lock:
            self._generation += 1
            if pending.everything:
                self._entries.clear()
                self._by_allocation.clear()
                return
            for digest in pending.digests:
                self._drop(digest)
            for allocation_id in pending.allocation_ids:
                for digest in list(self._by_allocation.get(allocation_id, ())):
                    self._drop(digest)

    def _drop(self, digest: str) -> None:
        entry = self._entries.pop(digest, None)
        if entry is None or entry.allocation_id is None:
            return
        digests = self._by_allocation.get(entry.allocation_id)
        if digests is not None:
            digests.discard(digest)
            if not digests:
                del self._by_allocation[entry.allocation_id]
