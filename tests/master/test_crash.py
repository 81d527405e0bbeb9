"""Crash safety of determined/master/store: kill -9 of the master between reports, restart,
and every acknowledged metric is there exactly once; the search continues where it was."""

from __future__ import annotations

import pytest
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
