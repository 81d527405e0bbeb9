"""determined/master/experiment/ through the trial's searcher endpoints
(docs/reference/master.md §4.5, §6)."""

from __future__ import annotations

import pytest
from _kit.master import MasterProcess, Run

pytestmark = pytest.mark.e2e

RANDOM = """
entrypoint: python3 train.py
searcher: {name: random, metric: loss, max_length: 50, max_trials: 3, max_concurrent_trials: 1}
hyperparameters: {lr: {type: double, minval: 0.001, maxval: 0.1}}
"""


def _op(run: Run) -> dict:
    r = run.trial.get(run.master.url + f"/api/v1/trials/{run.trial_id}/searcher/operation")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _complete(run: Run, length: int, metric: object = 0.5) -> int:
    body = {"op": {"length": length}, "searcherMetric": metric}
    return run.post(
        f"/api/v1/trials/{run.trial_id}/searcher/completed_operation", json=body
    ).status_code


def test_single_trial_lifecycle(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    assert _op(run) == {"op": {"validateAfter": {"length": "100"}}, "completed": False}
    assert _complete(run, 99) == 400  # not the pending length: nothing changes
    assert _op(run)["completed"] is False
    assert _complete(run, 100) == 200
    # Again (a retry whose answer was lost): acknowledged, and nothing changes.
    assert _complete(run, 100) == 200
    assert _complete(run, 99) == 400  # never an operation of this trial
    assert _op(run)["completed"] is True
    trial = run.get(f"/api/v1/trials/{run.trial_id}")["trial"]
    assert trial["state"] == "STATE_STOPPING_COMPLETED"
    preempt = run.trial.get(
        shared_master.url + f"/api/v1/allocations/{run.allocation_id}/signals/preemption",
        params={"timeout_seconds": 0},
    )
    assert preempt.json() == {"preempt": True}
    assert run.post(f"/api/v1/allocations/{run.allocation_id}/signals/ack_preemption").ok
    assert run.exit(0) == "STATE_COMPLETED"
    exp = run.get(f"/api/v1/experiments/{run.experiment_id}")["experiment"]
    assert exp["state"] == "STATE_COMPLETED" and exp["progress"] == 1.0
    r = run.admin.get(shared_master.url + f"/api/v1/trials/{run.trial_id}/searcher/operation")
    assert r.status_code == 404  # the experiment is over


def test_random_creates_the_next_trial_when_one_closes(shared_master: MasterProcess) -> None:
    run = Run(shared_master, RANDOM)
    trials = run.get(f"/api/v1/experiments/{run.experiment_id}/trials")["trials"]
    assert len(trials) == 1  # max_concurrent_trials 1
    assert _complete(run, 50) == 200
    run.exit(0)
    trials = run.get(f"/api/v1/experiments/{run.experiment_id}/trials")["trials"]
    assert [t["state"] for t in trials] == ["STATE_COMPLETED", "STATE_QUEUED"]
    assert trials[0]["hparams"] != trials[1]["hparams"]
    progress = run.get(f"/api/v1/experiments/{run.experiment_id}")["experiment"]["progress"]
    assert 0.3 < progress < 0.4


def test_progress_forms(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    path = f"/api/v1/trials/{run.trial_id}/progress"
    assert run.post(path, json={"progress": 0.25, "is_raw": True}).status_code == 200
    exp = run.get(f"/api/v1/experiments/{run.experiment_id}")["experiment"]
    assert exp["progress"] == 0.25
    assert run.post(path, json=50).status_code == 200  # 0.37 op progress: units, bare number
    exp = run.get(f"/api/v1/experiments/{run.experiment_id}")["experiment"]
    assert exp["progress"] == 0.5  # 50 of max_length 100 drives the searcher's progress
    assert run.post(path, json={"progress": 2.0, "isRaw": True}).status_code == 400
    assert run.post(path, json={"progress": -1}).status_code == 400
    assert run.post(path, json={"nope": 1}).status_code == 400


def test_early_exit(shared_master: MasterProcess) -> None:
    run = Run(shared_master, RANDOM.replace("max_trials: 3", "max_trials: 1"))
    path = f"/api/v1/trials/{run.trial_id}/early_exit"
    r = run.post(path, json={"reason": "EXITED_REASON_BORED"})
    assert r.status_code == 400 and "EXITED_REASON_INVALID_HP" in r.json()["message"]
    assert run.post(path, json={"reason": "EXITED_REASON_INVALID_HP"}).status_code == 200
    assert run.post(path, json={"reason": "EXITED_REASON_INVALID_HP"}).status_code == 400
    assert run.exit(0) == "STATE_COMPLETED"  # exit 0 without ack
    # Forwarded to the search (a deliberate fix of 0.37): the InvalidHP trial is replaced.
    trials = run.get(f"/api/v1/experiments/{run.experiment_id}/trials")["trials"]
    assert [t["state"] for t in trials] == ["STATE_COMPLETED", "STATE_QUEUED"]


def test_runner_metadata(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    path = f"/api/v1/trials/{run.trial_id}/runner/metadata"
    assert run.post(path, json={"state": "validating"}).status_code == 200
    assert run.get(f"/api/v1/trials/{run.trial_id}")["trial"]["runnerState"] == "validating"
    assert run.post("/api/v1/trials/999999/runner/metadata", json={"state": "x"}).status_code == 403
    assert (
        run.admin.post(
            shared_master.url + "/api/v1/trials/999999/runner/metadata", json={"state": "x"}
        ).status_code
        == 404
    )


def test_failures_restart_until_max_restarts(shared_master: MasterProcess) -> None:
    run = Run(
        shared_master,
        "entrypoint: x\nmax_restarts: 1\nsearcher: {name: single, metric: loss, max_length: 5}\n",
    )
    assert run.exit(1) == "STATE_ACTIVE"  # restart 1 of 1
    run.allocate()
    assert run.exit(1) == "STATE_ERROR"
    assert (
        run.get(f"/api/v1/experiments/{run.experiment_id}")["experiment"]["state"] == "STATE_ERROR"
    )


def test_exit_without_ack_completes_and_with_ack_reschedules(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    assert run.post(f"/api/v1/allocations/{run.allocation_id}/signals/ack_preemption").ok
    assert run.exit(0) == "STATE_ACTIVE"  # preempted with work left: runs again
    run.allocate()
    assert run.run_id == 2
    assert run.exit(0) == "STATE_COMPLETED"  # the user's code chose to stop
