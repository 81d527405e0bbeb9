"""determined/master/store/_group_commit.py through ``Store.write`` (threads) and
``Store.write_async`` (tasks on an event loop) on a real SQLite file."""

from __future__ import annotations

import asyncio
import pathlib
import threading
import time
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from determined.master.store import Store, _group_commit, sqlite_url
from determined.master.store._schema import cluster_info


def _count(store: Store, prefix: str) -> int:
    with store.read() as conn:
        q = sa.select(sa.func.count()).where(cluster_info.c.key.like(prefix + "%"))
        return int(conn.execute(q).scalar_one())


def _hammer(store: Store, n: int, bad: int | None) -> dict[int, BaseException]:
    """``n`` threads each writing one row ``k<i>`` at once; write ``bad`` raises."""
    errors: dict[int, BaseException] = {}
    go = threading.Barrier(n)

    def writer(i: int) -> None:
        def fn(conn: sa.Connection) -> int:
            conn.execute(cluster_info.insert().values(key=f"k{i}", value=str(i)))
            if i == bad:
                raise ValueError(f"write {i} is bad")
            return i

        go.wait()
        try:
            assert store.write(fn) == i
        except ValueError as e:
            errors[i] = e

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def test_concurrent_writes_share_commits(tmp_path: pathlib.Path) -> None:
    store = Store(sqlite_url(tmp_path))
    commits = []
    sa.event.listen(store.engine, "commit", lambda conn: commits.append(1))
    assert _hammer(store, 64, None) == {}
    assert _count(store, "k") == 64
    assert len(commits) < 64  # writes shared commits
    store.close()


def test_a_bad_write_in_a_batch_fails_alone(tmp_path: pathlib.Path) -> None:
    store = Store(sqlite_url(tmp_path))
    n = 64
    errors = _hammer(store, n, 7)
    assert list(errors) == [7] and "write 7 is bad" in str(errors[7])
    assert _count(store, "k") == n - 1  # everything but the bad write, each exactly once
    with store.read() as conn:
        assert (
            conn.execute(sa.select(cluster_info.c.value).where(cluster_info.c.key == "k7")).first()
            is None
        )
    store.close()


def test_a_single_failing_write_raises_and_leaves_nothing(tmp_path: pathlib.Path) -> None:
    store = Store(sqlite_url(tmp_path))

    def fn(conn: sa.Connection) -> None:
        conn.execute(cluster_info.insert().values(key="solo", value="x"))
        raise RuntimeError("nope")

    with pytest.raises(RuntimeError, match="nope"):
        store.write(fn)
    assert _count(store, "solo") == 0
    assert store.write(lambda conn: 5) == 5
    store.close()


def test_writes_past_the_batch_limit_still_commit(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_group_commit, "MAX_BATCH", 2)  # most writers wait past the first batch
    store = Store(sqlite_url(tmp_path))
    assert _hammer(store, 32, None) == {}  # each writer got its own value back
    assert _count(store, "k") == 32
    store.close()


def _insert(i: int, bad: int | None = None) -> Callable[[sa.Connection], int]:
    def fn(conn: sa.Connection) -> int:
        conn.execute(cluster_info.insert().values(key=f"k{i}", value=str(i)))
        if i == bad:
            raise ValueError(f"write {i} is bad")
        return i

    return fn


def test_async_writes_share_commits_and_a_bad_one_fails_alone(tmp_path: pathlib.Path) -> None:
    store = Store(sqlite_url(tmp_path))
    commits = []
    sa.event.listen(store.engine, "commit", lambda conn: commits.append(1))
    n = 64

    async def main() -> list[int | BaseException]:
        writes = [store.write_async(_insert(i, bad=7)) for i in range(n)]
        return await asyncio.gather(*writes, return_exceptions=True)

    results = asyncio.run(main())
    assert [r for i, r in enumerate(results) if i != 7] == [i for i in range(n) if i != 7]
    assert isinstance(results[7], ValueError) and "write 7 is bad" in str(results[7])
    assert _count(store, "k") == n - 1  # everything but the bad write, each exactly once
    assert len(commits) < n
    store.close()


def test_threads_and_tasks_write_together(tmp_path: pathlib.Path) -> None:
    store = Store(sqlite_url(tmp_path))

    async def tasks() -> list[int]:
        return list(await asyncio.gather(*(store.write_async(_insert(i)) for i in range(100, 150))))

    threads = [threading.Thread(target=lambda i=i: store.write(_insert(i))) for i in range(50)]
    for t in threads:
        t.start()
    assert asyncio.run(tasks()) == list(range(100, 150))
    for t in threads:
        t.join(30)
    assert _count(store, "k") == 100
    store.close()


def test_a_cancelled_writer_does_not_stop_the_others(tmp_path: pathlib.Path) -> None:
    store = Store(sqlite_url(tmp_path))
    started = threading.Event()

    def slow(conn: sa.Connection) -> int:
        started.set()
        time.sleep(0.2)
        conn.execute(cluster_info.insert().values(key="k-slow", value="x"))
        return 0

    async def main() -> int:
        task = asyncio.ensure_future(store.write_async(slow))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()  # e.g. the client hung up: the write is committed all the same
        return await store.write_async(_insert(1))

    assert asyncio.run(main()) == 1
    assert _count(store, "k") == 2
    store.close()


def test_close_stops_the_writer_and_refuses_later_writes(tmp_path: pathlib.Path) -> None:
    store = Store(sqlite_url(tmp_path))
    assert store.write(_insert(1)) == 1
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.write(_insert(2))
    assert _count(store, "k") == 1  # the engine still reads after close (it reconnects)
    store.engine.dispose()


def test_commit_stats_count_every_write_and_commit(tmp_path: pathlib.Path) -> None:
    """Each write's wait (submitted -> its commit ended) and each commit's wall time, writer
    CPU and size; a failed write counts too; reset forgets them."""
    store = Store(sqlite_url(tmp_path))
    stats = store.commit_stats
    stats.reset()
    errors = _hammer(store, 40, bad=7)
    assert set(errors) == {7}
    summary = stats.summary()
    assert summary["writes"] == 40
    assert 1 <= summary["commits"] <= 40
    waits, walls = summary["waitMs"], summary["commitWallMs"]
    for p in (waits, walls, summary["commitCpuMs"], summary["batchSize"]):
        assert 0 <= p["p50"] <= p["p90"] <= p["p99"] <= p["max"]
    assert waits["max"] >= walls["max"] * 0.999  # a write waits at least for its commit
    assert summary["batchSize"]["max"] <= _group_commit.MAX_BATCH
    stats.reset()
    assert stats.summary() == {
        "writes": 0,
        "commits": 0,
        "waitMs": {},
        "commitWallMs": {},
        "commitCpuMs": {},
        "batchSize": {},
        "offloaded": 0,
        "offloadRolledBack": 0,
        "offloadFailed": 0,
    }
    store.close()


def test_an_offloaded_run_commits_between_the_writes_around_it(tmp_path: pathlib.Path) -> None:
    """A batch [offloaded, offloaded, here]: the offload gets its run (holding the store's
    write lock, after the writes before it committed), then the write after it commits."""
    store = Store(sqlite_url(tmp_path))
    order: list[str] = []

    def insert(key: str) -> Callable[[sa.Connection], str]:
        def fn(conn: sa.Connection) -> str:
            order.append(key)
            conn.execute(cluster_info.insert().values(key=key, value=key))
            return key

        return fn

    def offload(fns: list[Callable[[sa.Connection], object]]) -> list[object]:
        assert store._write_lock._is_owned()  # type: ignore[attr-defined]
        order.append("offload")
        with store.engine.begin() as conn:  # a transaction of its own, as another process's
            return [fn(conn) for fn in fns]

    results: dict[str, object] = {}

    def write(key: str, offloaded: bool) -> None:
        results[key] = store.write(insert(key), offload=offload if offloaded else None)

    threads = []
    with store._write_lock:  # the writer takes the first write, then waits for the lock
        for key, offloaded in [("k1", False), ("k2", True), ("k3", True), ("k4", False)]:
            pending = len(store._group._pending)
            threads.append(threading.Thread(target=write, args=(key, offloaded)))
            threads[-1].start()
            deadline = time.monotonic() + 10
            while key != "k1" and len(store._group._pending) == pending:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            if key == "k1":
                while not store._group._writer or store._group._pending:
                    time.sleep(0.01)
    for t in threads:
        t.join(30)
    assert results == {"k1": "k1", "k2": "k2", "k3": "k3", "k4": "k4"}
    assert order == ["k1", "offload", "k2", "k3", "k4"]
    assert _count(store, "k") == 4
    assert store.commit_stats.summary()["offloaded"] == 2
    store.close()


def test_commit_stats_keep_only_the_newest() -> None:
    stats = _group_commit.CommitStats(max_writes=3, max_commits=2)
    for i in range(5):
        w = _group_commit._Write(lambda conn: None)
        w.submitted -= i  # waited i seconds more
        stats.record([w], time.monotonic(), 0.001)
    summary = stats.summary()
    assert (summary["writes"], summary["commits"]) == (3, 2)
    assert summary["waitMs"]["max"] >= 4000  # the newest three: 2, 3 and 4 s
    assert summary["waitMs"]["p50"] >= 2000
