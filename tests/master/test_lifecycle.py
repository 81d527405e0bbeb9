"""The trial lifecycle of docs/reference/master.md §4.2–§4.5 driven by real process exits: restarts,
kill -9, kill, cancel, pause/activate, the preemption timeout, exits with and without an ack."""

from __future__ import annotations

import os
import pathlib
import signal
import time

import pytest
from _kit.master import MasterProcess
from _kit.trial_cluster import Cluster, alive, config, env_of, sleepers, wait_dead, wait_file

from determined.master.store import _metrics, make_engine

pytestmark = pytest.mark.e2e


def _checkpoints(cluster: Cluster, trial_id: int) -> list[dict]:
    return list(cluster.get(f"/api/v1/trials/{trial_id}/checkpoints")["checkpoints"])


def _training_rows(
    m: MasterProcess, trial_id: int, *, archived: bool = False
) -> list[tuple[int, int]]:
    """(steps, run id) of a trial's training rows in the master's database (live, or all)."""
    engine = make_engine(m.store_url)
    try:
        with engine.connect() as conn:
            rows = _metrics.list_rows(conn, trial_id, "training", archived=archived)
    finally:
        engine.dispose()
    return [(int(r["steps_completed"]), int(r["trial_run_id"])) for r in rows]


def _wait_steps(cluster: Cluster, exp_id: int, steps: int, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        trial = cluster.trials(exp_id)[0]
        if trial["totalBatchesProcessed"] >= steps:
            return trial
        time.sleep(0.05)
    raise AssertionError(f"trial of experiment {exp_id} did not reach {steps} steps")


@pytest.mark.both_stores  # SQLite and PostgreSQL
def test_failures_restart_up_to_max_restarts_then_error(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    exp_id = cluster.create(config(out, fail_runs=99))  # max_restarts 1: two runs
    exp = cluster.wait_experiment(exp_id, "STATE_ERROR")
    [trial] = cluster.trials(exp_id)
    assert trial["state"] == "STATE_ERROR"
    assert trial["restarts"] == 1  # 2 stored; 0.37 shows LEAST(restarts, max_restarts)
    assert sorted(p.name for p in out.glob("*.pid")) == [
        f"{trial['id']}.1.pid",
        f"{trial['id']}.2.pid",
    ]
    assert exp["endTime"] is not None


def test_a_failure_within_max_restarts_recovers(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    exp_id = cluster.create(config(out, fail_runs=1))
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    [trial] = cluster.trials(exp_id)
    assert (trial["state"], trial["restarts"]) == ("STATE_COMPLETED", 1)
    assert env_of(out, trial["id"], 2)["DET_TRIAL_RUN_ID"] == "2"


@pytest.mark.both_stores  # SQLite and PostgreSQL
def test_kill_9_restarts_from_the_latest_checkpoint(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    exp_id = cluster.create(config(out, max_length=40, sleep=0.05, ckpt_every=4))
    trial_id = cluster.wait_trial(exp_id, "STATE_RUNNING")["id"]
    pid = int(wait_file(out / f"{trial_id}.1.pid"))
    deadline = time.monotonic() + 30
    while not _checkpoints(cluster, trial_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    env = env_of(out, trial_id, 2)
    run1 = [c for c in _checkpoints(cluster, trial_id) if c["allocationId"].endswith(".1")]
    newest = max(run1, key=lambda c: c["metadata"]["steps_completed"])
    assert env["DET_LATEST_CHECKPOINT"] == newest["uuid"]
    assert env["DET_STEPS_COMPLETED"] == str(newest["metadata"]["steps_completed"])
    assert wait_file(out / f"{trial_id}.2.resumed") == env["DET_STEPS_COMPLETED"]
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    trial = cluster.trials(exp_id)[0]
    assert (trial["restarts"], trial["totalBatchesProcessed"]) == (1, 40)


def test_kill_experiment_kills_the_process_group(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    cfg = config(out, max_length=10000, sleep=0.1, ignore_preempt=True)
    cfg["entrypoint"] = "sleep 300 & python3 train.py"
    exp_id = cluster.create(cfg)
    trial_id = cluster.wait_trial(exp_id, "STATE_RUNNING")["id"]
    pid = int(wait_file(out / f"{trial_id}.1.pid"))
    assert sleepers(str(tmp_path))
    r = cluster.post(f"/api/v1/experiments/{exp_id}/kill")
    assert r.status_code == 200, r.text
    cluster.wait_experiment(exp_id, "STATE_CANCELED", timeout=10)
    assert cluster.trials(exp_id)[0]["state"] == "STATE_CANCELED"
    wait_dead(pid, timeout=5)
    assert not sleepers(str(tmp_path))
    assert cluster.trials(exp_id)[0]["restarts"] == 0  # a kill is no failure
    # Kill of a finished experiment is a no-op; pause of it is refused.
    assert cluster.post(f"/api/v1/experiments/{exp_id}/kill").status_code == 200
    r = cluster.post(f"/api/v1/experiments/{exp_id}/pause")
    assert r.status_code == 400 and "terminal" in r.json()["message"]
    r = cluster.post(f"/api/v1/experiments/{exp_id}/activate")
    assert r.status_code == 400 and "terminal" in r.json()["message"]
    assert cluster.experiment(exp_id)["state"] == "STATE_CANCELED"


def test_cancel_preempts_gracefully(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    exp_id = cluster.create(config(out, max_length=10000, sleep=0.05))
    _wait_steps(cluster, exp_id, 2)
    assert cluster.post(f"/api/v1/experiments/{exp_id}/cancel").status_code == 200
    cluster.wait_experiment(exp_id, "STATE_CANCELED", timeout=15)
    [trial] = cluster.trials(exp_id)
    assert trial["state"] == "STATE_CANCELED"
    assert trial["checkpointCount"] == 1  # it saved on the preemption signal
    lines = cluster.wait_log(trial["taskId"], "exited with code 0")
    assert not any("forcibly killing" in line for line in lines)
    # 0.37's last line of a run that ended by itself (its e2e tests grep for it).
    assert any("resources exited successfully with a zero exit code" in line for line in lines)


def test_kill_trial_is_not_replaced(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    cfg = config(out, max_length=10000, sleep=0.1)
    cfg["searcher"] = {
        "name": "random",
        "metric": "loss",
        "max_length": 10000,
        "max_trials": 2,
        "max_concurrent_trials": 1,
    }
    exp_id = cluster.create(cfg)
    first = cluster.wait_trial(exp_id, "STATE_RUNNING")
    pid = int(wait_file(out / f"{first['id']}.1.pid"))
    r = cluster.post(f"/api/v1/trials/{first['id']}/kill")
    assert r.status_code == 200, r.text
    wait_dead(pid, timeout=10)
    deadline = time.monotonic() + 20
    while len(cluster.trials(exp_id)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    trials = cluster.trials(exp_id)
    assert trials[0]["state"] == "STATE_CANCELED"
    assert len(trials) == 2  # the kill counted toward max_trials 2
    assert cluster.post(f"/api/v1/experiments/{exp_id}/kill").status_code == 200
    cluster.wait_experiment(exp_id, "STATE_CANCELED", timeout=10)
    assert len(cluster.trials(exp_id)) == 2


@pytest.mark.both_stores  # SQLite and PostgreSQL
def test_pause_then_activate_resumes_from_the_checkpoint(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    exp_id = cluster.create(config(out, max_length=50, sleep=0.05))
    trial = _wait_steps(cluster, exp_id, 3)
    assert cluster.post(f"/api/v1/experiments/{exp_id}/pause").status_code == 200
    pid = int(wait_file(out / f"{trial['id']}.1.pid"))
    wait_dead(pid, timeout=10)
    assert cluster.experiment(exp_id)["state"] == "STATE_PAUSED"
    time.sleep(1.0)  # several scheduler ticks: a paused trial gets no new run
    assert not (out / f"{trial['id']}.2.pid").exists()
    paused = cluster.trials(exp_id)[0]
    assert (paused["state"], paused["restarts"]) == ("STATE_PAUSED", 0)
    [ckpt] = _checkpoints(cluster, trial["id"])
    assert cluster.post(f"/api/v1/experiments/{exp_id}/pause").status_code == 200  # no-op
    assert cluster.post(f"/api/v1/experiments/{exp_id}/activate").status_code == 200
    env = env_of(out, trial["id"], 2)
    assert env["DET_LATEST_CHECKPOINT"] == ckpt["uuid"]
    assert wait_file(out / f"{trial['id']}.2.resumed") == str(ckpt["metadata"]["steps_completed"])
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    assert cluster.trials(exp_id)[0]["totalBatchesProcessed"] == 50


def test_preemption_timeout_kills_a_trial_that_ignores_it(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    cfg = config(out, max_length=10000, sleep=0.1, ignore_preempt=True)
    cfg["preemption_timeout"] = 1
    exp_id = cluster.create(cfg)
    trial_id = cluster.wait_trial(exp_id, "STATE_RUNNING")["id"]
    pid = int(wait_file(out / f"{trial_id}.1.pid"))
    paused_at = time.monotonic()
    assert cluster.post(f"/api/v1/experiments/{exp_id}/pause").status_code == 200
    time.sleep(0.5)
    assert alive(pid)  # it gets its timeout first
    wait_dead(pid, timeout=10)
    assert time.monotonic() - paused_at >= 1.0
    trial = cluster.wait_trial(exp_id, "STATE_PAUSED")
    assert trial["restarts"] == 0
    lines = cluster.wait_log(trial["taskId"], "exited with code")
    assert any("reason: preemption timeout" in line for line in lines)


def test_exit_zero_without_ack_completes_the_trial(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    cfg = config(tmp_path / "out", max_length=100)
    cfg["entrypoint"] = "echo done"
    exp_id = cluster.create(cfg, {})
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    [trial] = cluster.trials(exp_id)
    assert (trial["state"], trial["restarts"], trial["totalBatchesProcessed"]) == (
        "STATE_COMPLETED",
        0,
        0,
    )


def test_exit_zero_after_ack_with_work_left_runs_again(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    exp_id = cluster.create(config(out, ack_exit_runs=1))
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    [trial] = cluster.trials(exp_id)
    assert env_of(out, trial["id"], 2)["DET_TRIAL_RUN_ID"] == "2"
    assert (trial["restarts"], trial["totalBatchesProcessed"]) == (0, 3)


@pytest.mark.both_stores  # SQLite and PostgreSQL
def test_a_restarted_master_runs_the_trial_again_from_its_checkpoint(
    tmp_path: pathlib.Path, db_url: str | None
) -> None:
    m = MasterProcess(tmp_path / "master", cpu_slots=1, db_url=db_url)
    m.start()
    try:
        cluster = Cluster(m)
        out = tmp_path / "out"
        exp_id = cluster.create(config(out, max_length=60, sleep=0.05, ckpt_every=2))
        trial_id = cluster.wait_trial(exp_id, "STATE_RUNNING")["id"]
        deadline = time.monotonic() + 30
        while not _checkpoints(cluster, trial_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(wait_file(out / f"{trial_id}.1.pid"))
        m.stop()
        wait_dead(pid, timeout=5)
        m.start()
        cluster = Cluster(m)
        env = env_of(out, trial_id, 2)
        assert env["DET_LATEST_CHECKPOINT"]  # it resumes where the first run got to
        cluster.wait_experiment(exp_id, "STATE_COMPLETED")
        trial = cluster.trials(exp_id)[0]
        assert (trial["restarts"], trial["totalBatchesProcessed"]) == (0, 60)
    finally:
        m.stop()


def test_created_paused_runs_nothing_until_activated(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    exp_id = cluster.create(config(out), activate=False)
    time.sleep(1.0)  # several scheduler ticks
    [trial] = cluster.trials(exp_id)
    assert (cluster.experiment(exp_id)["state"], trial["state"]) == ("STATE_PAUSED", "STATE_PAUSED")
    assert not out.exists()
    assert cluster.post(f"/api/v1/experiments/{exp_id}/activate").status_code == 200
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")


def test_some_trials_erroring_still_completes_the_experiment(tmp_path: pathlib.Path) -> None:
    m = MasterProcess(tmp_path / "master", cpu_slots=2)
    m.start()
    try:
        cluster = Cluster(m)
        out = tmp_path / "out"
        cfg = config(out)
        cfg["max_restarts"] = 0
        cfg["searcher"] = {"name": "grid", "metric": "loss", "max_length": 3}
        cfg["hyperparameters"]["fail_runs"] = {"type": "categorical", "vals": [0, 99]}
        exp_id = cluster.create(cfg)
        cluster.wait_experiment(exp_id, "STATE_COMPLETED")
        states = sorted(t["state"] for t in cluster.trials(exp_id))
        assert states == ["STATE_COMPLETED", "STATE_ERROR"]
    finally:
        m.stop()


@pytest.mark.both_stores  # SQLite and PostgreSQL
def test_a_master_restarted_after_kill_9_kills_the_old_run_and_resumes(
    tmp_path: pathlib.Path, db_url: str | None
) -> None:
    m = MasterProcess(tmp_path / "master", cpu_slots=1, db_url=db_url)
    m.start()
    try:
        cluster = Cluster(m)
        out = tmp_path / "out"
        cfg = config(out, max_length=60, sleep=0.05, ckpt_every=2)
        cfg["entrypoint"] = "sleep 300 & python3 train.py"
        exp_id = cluster.create(cfg)
        trial_id = cluster.wait_trial(exp_id, "STATE_RUNNING")["id"]
        deadline = time.monotonic() + 30
        while not _checkpoints(cluster, trial_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(wait_file(out / f"{trial_id}.1.pid"))
        m.kill()
        assert alive(pid)  # orphaned until a master comes back
        m.start()
        wait_dead(pid, timeout=10)
        cluster = Cluster(m)
        env = env_of(out, trial_id, 2)
        assert env["DET_LATEST_CHECKPOINT"]
        resumed = int(env["DET_STEPS_COMPLETED"])
        cluster.wait_experiment(exp_id, "STATE_COMPLETED")
        trial = cluster.trials(exp_id)[0]
        assert (trial["restarts"], trial["totalBatchesProcessed"]) == (0, 60)
        assert not sleepers(str(tmp_path))
        # Every metric exactly once (§6 item 27): run 1's reports up to the checkpoint run 2
        # resumed from stay, its reports past it are archived, run 2's replace them.
        live = _training_rows(m, trial_id)
        assert [s for s, _ in live] == list(range(1, 61))
        assert live == [(s, 1 if s <= resumed else 2) for s in range(1, 61)]
        archived = set(_training_rows(m, trial_id, archived=True)) - set(live)
        assert all(run == 1 and s > resumed for s, run in archived)  # may be none: timing
        assert trial["summaryMetrics"]["avg_metrics"]["loss"]["count"] == 60
    finally:
        m.stop()


def test_a_restarted_master_kills_only_its_own_leftovers(tmp_path: pathlib.Path) -> None:
    """Allocation ids repeat across masters (``<exp id>.<request id>.<run>``, the request id
    drawn from ``experiment_seed``, which defaults to the current second): a master that comes
    back after kill -9 must not kill another master's run that has the same id. (Two test
    masters whose experiment 1 started in the same second did that: a run died of SIGKILL.)"""
    a = MasterProcess(tmp_path / "a", cpu_slots=1)
    with MasterProcess(tmp_path / "b", cpu_slots=1) as b:
        a.start()
        try:
            pids = {}
            task_ids = set()
            for m, name in ((a, "a"), (b, "b")):
                cluster = Cluster(m)
                cfg = config(tmp_path / name, max_length=100000, sleep=0.05)
                cfg["reproducibility"] = {"experiment_seed": 1234}  # the same ids in both
                exp_id = cluster.create(cfg)
                trial = cluster.wait_trial(exp_id, "STATE_RUNNING")
                task_ids.add(trial["taskId"])
                pids[name] = int(wait_file(tmp_path / name / f"{trial['id']}.1.pid"))
            assert len(task_ids) == 1  # one allocation id, on two masters
            a.kill()
            assert alive(pids["a"])  # orphaned until its master comes back
            a.start()
            wait_dead(pids["a"], timeout=10)  # its own leftover: killed
            time.sleep(0.5)
            assert alive(pids["b"]), "master a killed master b's run"
            assert Cluster(b).trials(1)[0]["state"] == "STATE_RUNNING"
        finally:
            a.stop()
