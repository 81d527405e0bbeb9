"""The write worker (``determined/master/ingest/_write_worker.py``): metric reports committed in a
process of their own, and what happens when that process dies or hangs: nothing is lost,
nothing is stored twice by the master, and the worker comes back. Real processes, real SQLite
files, a real master for the end-to-end case."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import threading
import time
from collections.abc import Iterator

import pytest
import requests
import sqlalchemy as sa
from _kit.master import MasterProcess, Run
from _kit.reports import example_trials, training_report

from determined.master.ingest import (
    OutcomeUnknown,
    ReportOffload,
    WriteWorker,
    write_plain_reports,
    write_reports,
)
from determined.master.store import Store, sqlite_url
from determined.master.store._group_commit import RolledBack
from determined.master.store._schema import metrics, trials


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Store]:
    s = Store(sqlite_url(tmp_path))
    yield s
    s.close()


def _rows(store: Store, trial_id: int) -> list[int]:
    with store.read() as conn:
        q = sa.select(metrics.c.steps_completed).where(metrics.c.trial_id == trial_id)
        return sorted(int(n) for (n,) in conn.execute(q))


def _plain(trial_id: int, steps: int) -> tuple[list[tuple[object, ...]], list[object], str]:
    return ([tuple(training_report(trial_id, steps, {"loss": 1.0}).report)], [], "")


def _wait_for(check: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _state(pid: int) -> str:
    """The process's state letter (T: stopped, Z: a zombie); Z once it is gone."""
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):  # reaped while /proc was being read
        return "Z"


def _started(store: Store) -> tuple[WriteWorker, int, int]:
    """A write worker that has committed a first report (steps 1) of a new trial: the
    worker, its pid and the trial's id."""
    trial = example_trials(store)[0]
    worker = WriteWorker(store.url, restart_interval_s=0.2)
    worker.start()
    assert worker.wait_ready(30)
    pid = worker.pid
    assert pid is not None and pid != os.getpid()
    assert worker.run(write_plain_reports, _plain(trial, 1)) == [None]
    return worker, pid, trial


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)
    _wait_for(lambda: _state(pid) == "T")


def test_the_worker_commits_and_a_refused_write_commits_nothing(store: Store) -> None:
    worker, _, trial = _started(store)
    assert _rows(store, trial) == [1]  # committed: this process's engine sees it
    # A stale run id is refused: the worker's transaction (both reports) is rolled back.
    good = tuple(training_report(trial, 2, {"loss": 0.5}).report)
    stale = (trial, "training", 7, 3, {"loss": 0.1}, None, None)
    with pytest.raises(RolledBack, match="invalid run id 7"):
        worker.run(write_plain_reports, ([good, stale], [], ""))
    assert _rows(store, trial) == [1]
    worker.close()
    assert worker.pid is None


def test_a_dead_worker_rolls_back_and_comes_back(store: Store) -> None:
    worker, first, trial = _started(store)
    os.kill(first, signal.SIGKILL)
    _wait_for(lambda: _state(first) == "Z")
    # Seen dead before the send, or when the send finds the pipe broken (its exit status can
    # come a moment after the kill): either way nothing was written and it is started again.
    with pytest.raises(RolledBack, match="not running|could not hand the writes"):
        worker.run(write_plain_reports, _plain(trial, 2))
    assert _rows(store, trial) == [1]
    _wait_for(lambda: worker.pid not in (None, first))  # started again in the background
    assert worker.run(write_plain_reports, _plain(trial, 2)) == [None]
    assert _rows(store, trial) == [1, 2]
    worker.close()


def test_a_worker_that_dies_while_writing_leaves_the_outcome_unknown(store: Store) -> None:
    worker, pid, trial = _started(store)
    _stop(pid)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run(write_plain_reports, _plain(trial, 2))
        except BaseException as e:  # noqa: BLE001 - looked at below
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.3)  # the request is in the pipe, the worker stopped before reading it
    os.kill(pid, signal.SIGKILL)
    thread.join(30)
    assert len(errors) == 1 and isinstance(errors[0], OutcomeUnknown), errors
    assert errors[0].status == 503  # the trial's client sends it again
    assert _rows(store, trial) == [1]
    _wait_for(lambda: worker.pid not in (None, pid))
    worker.close()


def test_a_hung_worker_is_killed_after_the_answer_timeout(store: Store) -> None:
    worker, pid, trial = _started(store)
    worker.answer_timeout_s = 1.0
    _stop(pid)
    started = time.monotonic()
    with pytest.raises(OutcomeUnknown, match="no answer in 1 s"):
        worker.run(write_plain_reports, _plain(trial, 2))
    assert 0.9 < time.monotonic() - started < 10
    _wait_for(lambda: _state(pid) == "Z")  # killed, not left stopped
    _wait_for(lambda: worker.pid not in (None, pid))
    worker.answer_timeout_s = 60  # a new worker's first write compiles its statements
    assert worker.run(write_plain_reports, _plain(trial, 3)) == [None]
    assert _rows(store, trial) == [1, 3]
    worker.close()


def _loss_count(store: Store, trial_id: int) -> int:
    with store.read() as conn:
        summary = conn.execute(
            sa.select(trials.c.summary_metrics).where(trials.c.id == trial_id)
        ).scalar_one()
    return int(summary["avg_metrics"]["loss"]["count"])


def _forget_summary_behind_the_masters_back(store: Store, trial_id: int) -> None:
    """A write on a connection of its own, not through ``Store.tx``: the master's count of
    its transactions does not move (no write of this master's does that)."""
    with store.engine.begin() as conn:
        conn.execute(
            trials.update()
            .where(trials.c.id == trial_id)
            .values(summary_metrics={}, total_batches=0)
        )


def _worker(store: Store, **kwargs: object) -> WriteWorker:
    worker = WriteWorker(store.url, **kwargs)  # type: ignore[arg-type]
    worker.start()
    assert worker.wait_ready(30)
    return worker


def test_the_worker_keeps_the_trial_rows_it_wrote_until_the_master_writes(store: Store) -> None:
    """The worker reads a trial's row once and keeps it (``kept``): a change the master did
    not make is not seen, which shows the row came from the worker's memory. A transaction of
    the master's own (``Store.tx``) makes the worker read the row again."""
    trial = example_trials(store)[0]
    worker = _worker(store, transactions=lambda: store.transactions)
    worker.run(write_plain_reports, _plain(trial, 1))
    assert _loss_count(store, trial) == 1
    _forget_summary_behind_the_masters_back(store, trial)
    worker.run(write_plain_reports, _plain(trial, 2))
    assert _loss_count(store, trial) == 2  # from the kept row (1), not the database's {}
    with store.tx() as conn:  # the master's own write: what the worker kept may be stale
        conn.execute(trials.update().where(trials.c.id == trial).values(summary_metrics={}))
    worker.run(write_plain_reports, _plain(trial, 3))
    assert _loss_count(store, trial) == 1  # read again: {} and this report
    worker.close()


def test_a_worker_without_the_masters_count_keeps_nothing(store: Store) -> None:
    trial = example_trials(store)[0]
    worker = _worker(store)
    worker.run(write_plain_reports, _plain(trial, 1))
    _forget_summary_behind_the_masters_back(store, trial)
    worker.run(write_plain_reports, _plain(trial, 2))
    assert _loss_count(store, trial) == 1
    worker.close()


def test_a_rolled_back_run_leaves_nothing_kept(store: Store) -> None:
    """The batch changes the kept rows as it writes; when its transaction rolls back (a
    refused report after a good one), the worker drops them: the good report, sent again,
    counts once."""
    trial = example_trials(store)[0]
    worker = _worker(store, transactions=lambda: store.transactions)
    worker.run(write_plain_reports, _plain(trial, 1))
    good = tuple(training_report(trial, 2, {"loss": 0.5}).report)
    stale = (trial, "training", 7, 3, {"loss": 0.1}, None, None)
    with pytest.raises(RolledBack):
        worker.run(write_plain_reports, ([good, stale], [], ""))
    worker.run(write_plain_reports, ([good], [], ""))
    assert _rows(store, trial) == [1, 2]
    assert _loss_count(store, trial) == 2
    worker.close()


def test_group_commit_fails_writes_of_unknown_outcome_and_runs_rolled_back_ones_here(
    store: Store,
) -> None:
    """Through ``Store.write_async`` as the report routes call it: a stopped worker's writes
    fail with 503 (never written a second time by the master); a missing worker's writes are
    committed by the master itself."""
    trial = example_trials(store)[0]
    worker = WriteWorker(store.url)
    worker.start()
    assert worker.wait_ready(30)
    offload = ReportOffload(worker, store, None)

    async def report(steps: list[int]) -> list[BaseException | None]:
        async def one(n: int) -> BaseException | None:
            try:
                await store.write_async(
                    training_report(trial, n, {"loss": 1.0}), write_reports, offload=offload
                )
            except BaseException as e:  # noqa: BLE001 - returned
                return e
            return None

        return list(await asyncio.gather(*(one(n) for n in steps)))

    assert asyncio.run(report([1, 2])) == [None, None]
    assert store.commit_stats.summary()["offloaded"] == 2
    pid = worker.pid
    assert pid is not None
    worker.answer_timeout_s = 1.0
    _stop(pid)
    outcomes = asyncio.run(report([3, 4]))
    # The batch the stopped worker got fails; a later batch (if 4 came apart) finds the
    # worker gone and is committed here.
    unknown = [n for n, e in zip([3, 4], outcomes, strict=True) if isinstance(e, OutcomeUnknown)]
    here = [n for n, e in zip([3, 4], outcomes, strict=True) if e is None]
    assert unknown and sorted(unknown + here) == [3, 4], outcomes
    assert _rows(store, trial) == [1, 2, *here]
    worker.close()  # no worker: writes are committed here
    assert asyncio.run(report([5])) == [None]
    stats = store.commit_stats.summary()
    assert stats["offloadFailed"] == len(unknown)
    assert stats["offloaded"] + stats["offloadRolledBack"] == 2 + len(here) + 1
    assert stats["offloadRolledBack"] >= 1  # 5, after the worker was closed
    assert _rows(store, trial) == [1, 2, *here, 5]


@pytest.mark.e2e
@pytest.mark.both_stores
def test_a_master_whose_write_worker_is_killed_loses_no_report(master: MasterProcess) -> None:
    """A real master (SQLite and PostgreSQL), its write worker killed (-9) while a trial
    reports: each report is answered 200 (stored once) or 503 (sent again, as the trial's
    client does); the worker comes back and the reports go through it again."""
    run = Run(master)
    stats_url = "/api/v1/dev/group-commit"
    _wait_for(lambda: run.get(stats_url)["writeWorkerPid"] is not None)  # null until ready
    first = run.get(stats_url)["writeWorkerPid"]
    assert isinstance(first, int)
    steps, resent, killed = 0, 0, False
    while steps < 60:
        if steps == 20 and not killed:
            assert run.get(stats_url)["offloaded"] == 20  # all through the worker so far
            os.kill(first, signal.SIGKILL)
            killed = True
        answer = run.metrics("training", steps + 1, {"loss": 1.0})
        if answer.status_code == 503:
            resent += 1
            continue
        assert answer.status_code == 200, answer.text
        steps += 1
    _wait_for(lambda: run.get(stats_url)["writeWorkerPid"] not in (None, first))
    before = run.get(stats_url)["offloaded"]
    for step in range(61, 66):
        assert run.metrics("training", step, {"loss": 1.0}).status_code == 200
    assert run.get(stats_url)["offloaded"] >= before + 5
    trial = run.get(f"/api/v1/trials/{run.trial_id}")["trial"]
    assert trial["totalBatchesProcessed"] == 65
    loss = trial["summaryMetrics"]["avg_metrics"]["loss"]
    assert loss["count"] == 65, (loss, resent)
    assert isinstance(requests.get(master.url + "/info", timeout=10).json(), dict)
