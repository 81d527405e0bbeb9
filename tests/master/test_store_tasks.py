"""determined/master/store/_tasks.py on SQLite and PostgreSQL: a task's states. A task killed
while its resource manager was starting it stays ended when the start is recorded (the
manager then kills its run), and a kill of a running one only asks for it."""

from __future__ import annotations

import pathlib

import pytest

from determined.master.store import Store
from determined.master.store import _tasks as task_rows

pytestmark = pytest.mark.both_stores


def _store(db_url: str | None, tmp_path: pathlib.Path) -> Store:
    return Store(db_url or f"sqlite:///{tmp_path / 'm.db'}")


def _new(store: Store) -> str:
    with store.tx() as conn:
        row = task_rows.create(
            conn, type="COMMAND", owner_id=1, description="c", config={}, slots=1
        )
    return str(row["id"])


def test_a_task_killed_before_its_start_is_recorded_stays_ended(
    tmp_path: pathlib.Path, db_url: str | None
) -> None:
    store = _store(db_url, tmp_path)
    task_id = _new(store)
    with store.tx() as conn:
        task_rows.request_kill(conn, task_id)  # QUEUED: ended at once
        task_rows.set_running(conn, task_id, f"{task_id}.1", {"web": 1234})
    with store.read() as conn:
        row = task_rows.require(conn, task_id)
        assert (row["state"], row["exit_status"]) == ("TERMINATED", "killed before it started")
        assert task_rows.live(conn) == []
    store.close()


def test_a_running_task_is_only_asked_to_stop(tmp_path: pathlib.Path, db_url: str | None) -> None:
    store = _store(db_url, tmp_path)
    task_id = _new(store)
    with store.tx() as conn:
        task_rows.set_running(conn, task_id, f"{task_id}.1", {})
        task_rows.request_kill(conn, task_id)
    with store.read() as conn:
        row = task_rows.require(conn, task_id)
        assert (row["state"], row["kill_requested"]) == ("RUNNING", True)
        assert row["allocation_id"] == f"{task_id}.1"
    store.close()
