"""determined/master/_store/_group_commit.py through ``Store.write`` on a real SQLite file."""

from __future__ import annotations

import pathlib
import threading

import pytest
import sqlalchemy as sa

from determined.master._store import Store, _group_commit, sqlite_url
from determined.master._store._schema import cluster_info


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
