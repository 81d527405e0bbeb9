"""determined/master/resources/ (_local.py, _launcher.py): a real master runs real Core API trial
processes (launch environment, entrypoint forms, startup hook, bind mounts, logs, slots,
shutdown)."""

from __future__ import annotations

import json
import pathlib
import time

import pytest
from _kit.master import MasterProcess
from _kit.trial_cluster import (
    TRAIN_PY,
    Cluster,
    alive,
    config,
    env_of,
    sleepers,
    wait_dead,
    wait_file,
)

from determined.master.store import _time

pytestmark = pytest.mark.e2e


def test_experiment_runs_to_completion(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    exp_id = cluster.create(config(out, max_length=4))
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    assert exp["progress"] == 1.0
    [trial] = cluster.trials(exp_id)
    assert trial["state"] == "STATE_COMPLETED"
    assert trial["totalBatchesProcessed"] == 4
    assert trial["latestValidation"]["totalBatches"] == 4
    assert trial["checkpointCount"] >= 1
    assert trial["restarts"] == 0
    env = env_of(out, trial["id"], 1)
    # The launch environment of docs/reference/master.md §3.1.
    assert env["DET_TASK_TYPE"] == "TRIAL"
    assert env["DET_TRIAL_ID"] == str(trial["id"])
    assert env["DET_EXPERIMENT_ID"] == str(exp_id)
    assert env["DET_TASK_ID"] == trial["taskId"]
    assert env["DET_ALLOCATION_ID"] == f"{trial['taskId']}.1"
    assert env["DET_TRIAL_RUN_ID"] == "1"
    assert env["DET_STEPS_COMPLETED"] == "0"
    assert "DET_LATEST_CHECKPOINT" not in env
    assert env["DET_MASTER"] == cluster.url
    assert json.loads(env["DET_SLOT_IDS"]) == [0]
    assert json.loads(env["DET_HPARAMS"]) == trial["hparams"]
    assert json.loads(env["DET_EXPERIMENT_CONFIG"])["max_restarts"] == 1
    assert env["cwd"] in env["PYTHONPATH"].split(":")
    # The work dir is gone after the run.
    assert not pathlib.Path(env["cwd"]).exists()


def test_logs_are_captured(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    exp_id = cluster.create(config(tmp_path / "out", max_length=1))
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    [trial] = cluster.trials(exp_id)
    logs = cluster.logs(trial["taskId"])
    texts = [entry["log"] for entry in logs]
    assert f"hello from trial {trial['id']} run 1\n" in texts
    warning = next(e for e in logs if e["log"] == "a warning line\n")
    assert (warning["stdtype"], warning["rankId"], warning["level"]) == (
        "stderr",
        0,
        "LOG_LEVEL_WARNING",
    )
    assert any("have started" in t for t in texts)
    assert all(e["taskId"] == trial["taskId"] for e in logs)


def test_entrypoint_forms_hook_env_and_bind_mounts(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("from the host")
    cfg = config(out, max_length=1)
    cfg["entrypoint"] = ["python3", "train.py"]  # a list runs as is
    cfg["environment"] = {"environment_variables": ["MY_VAR=42"]}
    cfg["bind_mounts"] = [{"host_path": str(shared), "container_path": "mnt/shared"}]
    hook = "export HOOK_VAR=hooked\ncat mnt/shared/data.txt > hook_saw.txt\ncp hook_saw.txt ..\n"
    exp_id = cluster.create(cfg, {"train.py": TRAIN_PY, "startup-hook.sh": hook})
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    [trial] = cluster.trials(exp_id)
    env = env_of(out, trial["id"], 1)
    assert env["MY_VAR"] == "42"
    assert env["HOOK_VAR"] == "hooked"  # the hook ran first, sourced
    work_root = pathlib.Path(env["cwd"]).parent
    assert (work_root / "hook_saw.txt").read_text() == "from the host"


def test_absolute_bind_mount_elsewhere_is_refused(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    cfg = config(tmp_path / "out")
    cfg["bind_mounts"] = [{"host_path": str(tmp_path), "container_path": "/data"}]
    r = cluster.s.post(
        cluster.url + "/api/v1/experiments", json={"config": json.dumps(cfg), "activate": True}
    )
    assert r.status_code == 400
    assert "container_path '/data' is absolute" in r.json()["message"]
    assert "without the task sandbox" in r.json()["message"]


def test_a_trial_larger_than_the_cluster_is_queued_with_a_warning(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    """One slot in all: a 2-slot trial is created and waits in the queue, as in 0.37, with
    0.37's launch warning; it does not hold up a trial that fits."""
    big = {**config(tmp_path / "big"), "resources": {"slots_per_trial": 2}}
    for validate_only in (True, False):
        r = cluster.s.post(
            cluster.url + "/api/v1/experiments",
            json={"config": json.dumps(big), "activate": True, "validateOnly": validate_only},
        )
        assert r.status_code == 200, r.text
        assert r.json()["warnings"] == ["LAUNCH_WARNING_CURRENT_SLOTS_EXCEEDED"]
    big_id = r.json()["experiment"]["id"]
    small_id = cluster.create(config(tmp_path / "small", max_length=1))
    cluster.wait_experiment(small_id, "STATE_COMPLETED", timeout=60)
    exp = cluster.get(f"/api/v1/experiments/{big_id}")["experiment"]
    assert exp["state"] in ("STATE_ACTIVE", "STATE_QUEUED")
    assert [t["state"] for t in cluster.trials(big_id)] in ([], ["STATE_QUEUED"])
    assert not (tmp_path / "big").exists()


def test_one_slot_runs_trials_one_after_the_other(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    outs = [tmp_path / "a", tmp_path / "b"]
    exps = [cluster.create(config(out, max_length=3, sleep=0.3)) for out in outs]
    for exp_id in exps:
        cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=60)
    first, second = (cluster.trials(exp_id)[0] for exp_id in exps)
    # The second trial's process started only after the first trial had ended.
    second_start = (outs[1] / f"{second['id']}.1.pid").stat().st_mtime
    first_end = _time.parse(first["endTime"])
    assert first_end is not None
    assert second_start >= first_end.timestamp() - 0.5


def test_stopping_the_master_leaves_no_trial_process(tmp_path: pathlib.Path) -> None:
    m = MasterProcess(tmp_path / "master", cpu_slots=2)
    m.start()
    try:
        cluster = Cluster(m)
        out = tmp_path / "out"
        cfg = config(out, max_length=1000, sleep=0.2, ignore_preempt=True)
        cfg["entrypoint"] = "sleep 300 & python3 train.py"  # a second process in the group
        exp_id = cluster.create(cfg)
        trial_id = cluster.wait_trial(exp_id, "STATE_RUNNING")["id"]
        pid = int(wait_file(out / f"{trial_id}.1.pid"))
        assert alive(pid)
        started = time.monotonic()
        m.stop()
        assert m.proc is not None and m.proc.returncode is not None
        assert time.monotonic() - started < 10
        wait_dead(pid, timeout=5)
        assert not sleepers(str(tmp_path))
    finally:
        m.kill()


def test_trial_logs_stream_and_follow_ends_after_the_trial(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    exp_id = cluster.create(config(tmp_path / "out", max_length=5, sleep=0.1))
    trial_id = cluster.wait_trial(exp_id, "STATE_RUNNING", "STATE_QUEUED")["id"]
    url = f"{cluster.url}/api/v1/trials/{trial_id}/logs"
    with cluster.s.get(url, params={"follow": "true"}, stream=True, timeout=30) as r:
        assert r.status_code == 200
        followed = [json.loads(line)["result"] for line in r.iter_lines() if line]
    # The stream ended on its own, after the trial was over.
    assert cluster.trials(exp_id)[0]["state"] == "STATE_COMPLETED"
    hello = next(e for e in followed if e["log"].startswith("hello from trial"))
    assert hello["trialId"] == trial_id
    assert hello["message"].endswith(f"|| INFO: hello from trial {trial_id} run 1\n")
    warning = next(e for e in followed if e["log"] == "a warning line\n")
    assert "[rank=0] || WARNING: a warning line" in warning["message"]
    assert any("exited with code 0" in e["log"] for e in followed)
    r = cluster.s.get(url, params={"tail": 1})
    assert [json.loads(line)["result"]["id"] for line in r.iter_lines() if line] == [
        followed[-1]["id"]
    ]


def test_experiment_list_and_reference_log_paging(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    exps = [cluster.create(config(tmp_path / "out", max_length=1)) for _ in range(2)]
    for exp_id in exps:
        cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    body = cluster.get("/api/v1/experiments?limit=1&offset=1&users=admin&archived=false")
    assert [e["id"] for e in body["experiments"]] == [exps[1]]
    assert body["pagination"]["total"] == 2
    listed = body["experiments"][0]
    assert listed["username"] == "admin"
    assert (listed["state"], listed["numTrials"]) == ("STATE_COMPLETED", 1)
    assert cluster.get("/api/v1/experiments?users=nobody")["experiments"] == []
    trial_id = cluster.trials(exps[0])[0]["id"]
    url = f"{cluster.url}/api/v1/trials/{trial_id}/logs"
    every = [json.loads(x)["result"]["id"] for x in cluster.s.get(url).iter_lines() if x]
    r = cluster.s.get(url, params={"limit": 2, "orderBy": "ORDER_BY_DESC"})
    assert [json.loads(x)["result"]["id"] for x in r.iter_lines() if x] == every[::-1][:2]
    r = cluster.s.get(url, params={"limit": 2})
    assert [json.loads(x)["result"]["id"] for x in r.iter_lines() if x] == every[:2]
