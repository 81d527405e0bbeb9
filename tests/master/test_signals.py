"""determined/master/_signals.py: a notify wakes the key's watchers whether it is called on
their event loop (the hot lane's metric reports) or from another thread (the group-commit
writer, the thread pool), and only the watchers of that key."""

from __future__ import annotations

import asyncio
import threading

from determined.master._signals import Signals


def test_notify_wakes_watchers_from_their_loop_and_from_other_threads() -> None:
    signals = Signals()

    async def main() -> list[bool]:
        woken = []
        for notify_from_thread in (False, True):
            event = signals.watch("k")
            other = signals.watch("other")
            if notify_from_thread:
                thread = threading.Thread(target=signals.notify, args=("k",))
                thread.start()
                thread.join()
            else:
                signals.notify("k")
            await asyncio.wait_for(event.wait(), 5)
            woken.append(event.is_set() and not other.is_set())
            signals.unwatch("k", event)
            signals.unwatch("other", other)
        return woken

    assert asyncio.run(main()) == [True, True]
    signals.notify("k")  # nobody watches any more: nothing to do, no error
