"""In-memory rendezvous points between request handlers: preemption wake-ups, rendezvous and
all-gather barriers. The durable facts (preempted, acked, ready) live in the store; these only
wake long polls, so a master restart loses nothing but waiting connections (which retry)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

# Notified after any change a ``/stream`` subscriber may see (experiment events, ...).
STREAM_KEY = "stream"
# Notified after metric reports, which change what ``/stream`` sends of trials (their
# summaries) and of metrics only: a subscriber then re-reads those kinds alone.
STREAM_METRICS_KEY = "stream:metrics"


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # called from a thread without a loop
        return None


class Signals:
    """Created with the app; every method is safe to call from any thread.

    Long polls register an ``asyncio.Event`` with :meth:`watch`; :meth:`notify` (called by the
    thread that committed a change) wakes every watcher of that key on its own loop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watchers: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._barriers: dict[tuple[str, str], _Barrier] = {}
        # Set by wake_all: open-ended waits (the /stream websocket) end instead of waiting on.
        self.stopping = False

    def watch(self, key: str) -> asyncio.Event:
        """An event set by the next :meth:`notify` of ``key``; call from the event loop and
        :meth:`unwatch` when done."""
        event = asyncio.Event()
        with self._lock:
            self._watchers.setdefault(key, set()).add((asyncio.get_running_loop(), event))
        return event

    def unwatch(self, key: str, event: asyncio.Event) -> None:
        with self._lock:
            entries = self._watchers.get(key, set())
            for entry in [e for e in entries if e[1] is event]:
                entries.discard(entry)
            if not entries:
                self._watchers.pop(key, None)

    def notify(self, key: str) -> None:
        if key not in self._watchers:  # nobody waits (each metric report notifies)
            return
        with self._lock:
            entries = list(self._watchers.get(key, ()))
        here = _running_loop()
        for loop, event in entries:
            if loop is here:
                # On its own loop (the hot lane's reports are): set now. Through
                # call_soon_threadsafe each report cost a wake-up write per watcher.
                event.set()
            else:
                loop.call_soon_threadsafe(event.set)

    def wake_all(self) -> None:
        """Wake every long poll (the master is stopping: answer them now, not at their
        timeout, so that the shutdown does not wait for them)."""
        self.stopping = True
        with self._lock:
            entries = [e for watchers in self._watchers.values() for e in watchers]
        for loop, event in entries:
            loop.call_soon_threadsafe(event.set)

    def barrier(self, scope: str, name: str, size: int) -> _Barrier:
        """The barrier ``name`` within ``scope`` (an allocation), created on first use."""
        with self._lock:
            key = (scope, name)
            found = self._barriers.get(key)
            if found is None or found.size != size:
                found = self._barriers[key] = _Barrier(size)
            return found

    def drop_barriers(self, scope: str) -> None:
        """Forget every barrier of ``scope`` (its allocation ended: nobody else will arrive);
        their waiters wake and find them ``dropped``."""
        with self._lock:
            keys = [k for k in self._barriers if k[0] == scope]
            dropped = [self._barriers.pop(k) for k in keys]
        for barrier in dropped:
            barrier.drop()


class _Barrier:
    """Collects one value per participant; done when ``size`` have arrived."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.values: dict[str, Any] = {}
        self.done = asyncio.Event()
        self.dropped = False
        self._loop = asyncio.get_running_loop()  # created by a handler, on the event loop

    def drop(self) -> None:
        """Wake the waiters (from any thread); they find ``dropped`` set."""
        self.dropped = True
        self._loop.call_soon_threadsafe(self.done.set)

    def arrive(self, participant: str, value: Any) -> None:
        self.values[participant] = value
        if len(self.values) >= self.size:
            self.done.set()
