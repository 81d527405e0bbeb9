"""Crash safety of determined/master/store: kill -9 of the master between reports, and in the
middle of a stream of concurrent reports (the hot lane, the group commit and the write worker
all busy), restart, and every acknowledged metric is there exactly once; the search continues
where it was."""

from __future__ import annotations

import threading
import time

import pytest
import requests
from _kit.master import MasterProcess, Run

from determined.master.store import _metrics, make_engine

pytestmark = [pytest.mark.e2e, pytest.mark.both_stores]  # SQLite and PostgreSQL


def test_kill_9_loses_no_acknowledged_metric(master: MasterProcess) -> None:
    run = Run(master)
    acked = []
    for step in range(1, 41):
        if step == 21:
            master.kill()  # between two acknowledged reports
            master.start()
        r = run.metrics("training", step, {"loss": 1.0 / step})
        assert r.status_code == 200, r.text
        acked.append(step)
    # A retried report of an acknowledged step (the client never saw the answer) is harmless.
    assert run.metrics("training", 40, {"loss": 1.0 / 40}).status_code == 200
    master.kill()
    master.start()
    engine = make_engine(master.store_url)
    with engine.connect() as conn:
        rows = _metrics.list_rows(conn, run.trial_id, "training")
    engine.dispose()
    assert [int(r["steps_completed"]) for r in rows] == acked  # each exactly once
    trial = run.get(f"/api/v1/trials/{run.trial_id}")["trial"]
    assert trial["summaryMetrics"]["avg_metrics"]["loss"]["count"] == 40
    assert trial["totalBatchesProcessed"] == 40


def test_kill_9_under_load_loses_no_acknowledged_report(master: MasterProcess) -> None:
    runs = [Run(master) for _ in range(8)]
    acked: dict[int, list[int]] = {run.trial_id: [] for run in runs}
    for _ in range(2):  # twice: each kill lands at a moment of its own
        _load_then_kill(runs, acked, 300)
        master.start()
    engine = make_engine(master.store_url)
    with engine.connect() as conn:
        stored = {t: _metrics.list_rows(conn, t, "training") for t in acked}
    engine.dispose()
    for run in runs:
        steps = [int(r["steps_completed"]) for r in stored[run.trial_id]]
        done = acked[run.trial_id]
        # Every acknowledged report once, and at most the one in flight beyond them.
        assert steps in (done, [*done, len(done) + 1]), (run.trial_id, steps[-3:], done[-3:])
        trial = run.get(f"/api/v1/trials/{run.trial_id}")["trial"]
        assert trial["summaryMetrics"]["avg_metrics"]["loss"]["count"] == len(steps)
        assert trial["totalBatchesProcessed"] == len(steps)


def _load_then_kill(runs: list[Run], acked: dict[int, list[int]], reports: int) -> None:
    """Each run's trial reports its next steps, one after the other as a trial does, until
    ``reports`` more were acknowledged in all; then the master is killed (reports in flight at
    every stage: the hot lane, the group commit, the write worker)."""
    failures: list[str] = []
    stop = threading.Event()

    def report(run: Run) -> None:
        # From the step after the last acknowledged one: a report whose answer was lost is
        # sent again, as the trial's client does.
        step = len(acked[run.trial_id])
        while not stop.is_set():
            step += 1
            body = _report(run, step)
            try:
                r = run.post(f"/api/v1/trials/{run.trial_id}/metrics", json=body, timeout=30)
            except requests.RequestException:
                return  # the master is gone: whether this one was stored is unknown
            if r.status_code != 200:
                failures.append(f"{run.trial_id} step {step}: {r.status_code} {r.text}")
                return
            acked[run.trial_id].append(step)

    target = sum(map(len, acked.values())) + reports
    threads = [threading.Thread(target=report, args=(run,)) for run in runs]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while sum(map(len, acked.values())) < target and time.monotonic() < deadline:
        time.sleep(0.02)
    runs[0].master.kill()
    stop.set()
    for t in threads:
        t.join(30)
    assert not failures, failures
    assert sum(map(len, acked.values())) >= target


def _report(run: Run, step: int) -> dict[str, object]:
    metrics = {"avgMetrics": {"loss": 1.0 / step}}
    return {
        "group": "training",
        "metrics": {
            "trialId": run.trial_id,
            "trialRunId": run.run_id,
            "stepsCompleted": step,
            "metrics": metrics,
        },
    }


def test_search_state_survives_a_restart(master: MasterProcess) -> None:
    config = """
entrypoint: python3 train.py
searcher: {name: random, metric: loss, max_length: 10, max_trials: 2, max_concurrent_trials: 1}
hyperparameters: {lr: {type: double, minval: 0.0, maxval: 1.0}}
"""
    run = Run(master, config)
    master.kill()
    master.start()
    body = {"op": {"length": 10}, "searcherMetric": 0.1}
    r = run.post(f"/api/v1/trials/{run.trial_id}/searcher/completed_operation", json=body)
    assert r.status_code == 200, r.text
    assert run.exit(0) == "STATE_COMPLETED"
    trials = run.get(f"/api/v1/experiments/{run.experiment_id}/trials")["trials"]
    assert len(trials) == 2 and trials[1]["state"] == "STATE_QUEUED"
    run.trial_id = int(trials[1]["id"])
    run.allocate()
    master.kill()
    master.start()
    r = run.post(f"/api/v1/trials/{run.trial_id}/searcher/completed_operation", json=body)
    assert r.status_code == 200, r.text
    assert run.exit(0) == "STATE_COMPLETED"
    exp = run.get(f"/api/v1/experiments/{run.experiment_id}")["experiment"]
    assert exp["state"] == "STATE_COMPLETED"
    assert len(run.get(f"/api/v1/experiments/{run.experiment_id}/trials")["trials"]) == 2
