"""The Slurm resource manager (docs/deploy/slurm.md) against a real two-node Slurm started
under tmp_path (tests/_kit/slurm_cluster.py): each trial allocation is one Slurm job."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest
import yaml
from _kit.cli import Det
from _kit.master import MasterProcess
from _kit.slurm_cluster import SlurmCluster, missing
from _kit.tasks import proxied, wait_state
from _kit.trial_cluster import TRAIN_PY, Cluster, config, env_of, wait_file

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        bool(missing()),
        reason=f"Slurm binaries missing ({', '.join(missing())}): "
        "apt-get install -y slurm-wlm munge (scripts/setup.sh --tests)",
    ),
]


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    # Not under pytest's own directory: a pytest session starting meanwhile makes that 0700,
    # and a job submitted for another OS user could no longer reach munge's socket.
    root = pathlib.Path(tempfile.mkdtemp(prefix="det-slurm-"))
    cluster = SlurmCluster(root / "slurm")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def _master(tmp: pathlib.Path, slurm: SlurmCluster, **rm: object) -> MasterProcess:
    conf = tmp / "master.yaml"
    conf.write_text(yaml.safe_dump({"resource_manager": {"type": "slurm", **rm}}))
    env = {"SLURM_CONF": slurm.env["SLURM_CONF"]}
    return MasterProcess(tmp / "master", config_file=conf, env=env)  # not started yet


def _jobs_of(cluster: Cluster, task_id: str) -> list[str]:
    lines = [e["log"] for e in cluster.logs(task_id)]
    return [x.split("Slurm job ")[1].split()[0] for x in lines if "submitted as Slurm job" in x]


def _job_of(cluster: Cluster, task_id: str) -> str:
    lines = cluster.wait_log(task_id, "submitted as Slurm job")
    line = next(x for x in lines if "submitted as Slurm job" in x)
    return line.split("Slurm job ")[1].split()[0]


def test_core_api_trial_runs_as_a_slurm_job(tmp_path: pathlib.Path, slurm: SlurmCluster) -> None:
    with _master(tmp_path, slurm, default_compute_resource_pool="debug") as m:
        cluster = Cluster(m)
        out = tmp_path / "out"
        exp_id = cluster.create(config(out, max_length=2))
        exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=60)
        [trial] = cluster.trials(exp_id)
        env = env_of(out, trial["id"], 1)
        assert env["DET_RESOURCES_TYPE"] == "slurm-job"
        assert env["DET_MASTER"].startswith("http://127.0.0.1:")
        task = trial["taskId"]
        job = _job_of(cluster, task)
        lines = cluster.wait_log(task, f"hello from trial {trial['id']} run 1")
        assert "a warning line" in "\n".join(lines)  # stderr too
        shown = slurm.run("scontrol", "-o", "show", "job", job)
        assert "JobState=COMPLETED" in shown and "ExitCode=0:0" in shown, shown
        assert "JobName=det-" in shown and "Partition=debug" in shown, shown
        assert exp["state"] == "STATE_COMPLETED"


def _checkpoint_steps(cluster: Cluster, trial_id: int) -> list[int]:
    got = cluster.get(f"/api/v1/trials/{trial_id}/checkpoints")["checkpoints"]
    return sorted(int(c["metadata"]["steps_completed"]) for c in got)


def test_kill_checkpoints_then_cancels_the_job(tmp_path: pathlib.Path, slurm: SlurmCluster) -> None:
    with _master(tmp_path, slurm) as m:
        cluster = Cluster(m)
        out = tmp_path / "out"
        exp_id = cluster.create(config(out, max_length=10000, sleep=0.05))
        trial = cluster.wait_trial(exp_id, "STATE_RUNNING", "RUNNING", timeout=30)
        wait_file(out / f"{trial['id']}.1.pid")
        job = _job_of(cluster, trial["taskId"])
        time.sleep(0.5)  # some steps trained
        assert cluster.post(f"/api/v1/experiments/{exp_id}/kill").status_code == 200
        cluster.wait_experiment(exp_id, "STATE_CANCELED", timeout=30)
        steps = _checkpoint_steps(cluster, trial["id"])
        assert steps and steps[-1] > 0, steps  # the kill reached its preemption path
        # The job is gone from the queue; it ended on its own (the trial exited 0).
        assert job not in slurm.run("squeue", "-h", "-o", "%i").split()
        shown = slurm.run("scontrol", "-o", "show", "job", job)
        assert "ExitCode=0:0" in shown, shown
        lines = [e["log"] for e in cluster.logs(trial["taskId"])]
        assert any("forcibly killing" in x for x in lines), lines


def test_master_kill9_restart_adopts_the_running_job(
    tmp_path: pathlib.Path, slurm: SlurmCluster
) -> None:
    m = _master(tmp_path, slurm)
    m.start()
    try:
        cluster = Cluster(m)
        out = tmp_path / "out"
        exp_id = cluster.create(config(out, max_length=40, sleep=0.1))
        trial = cluster.wait_trial(exp_id, "STATE_RUNNING", "RUNNING", timeout=30)
        wait_file(out / f"{trial['id']}.1.pid")
        job = _job_of(cluster, trial["taskId"])
        m.kill()  # SIGKILL: the Slurm job goes on without its master
        time.sleep(0.5)
        assert job in slurm.run("squeue", "-h", "-o", "%i").split()
        m.start()
        cluster = Cluster(m)
        exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=60)
        assert exp["state"] == "STATE_COMPLETED"
        [trial] = cluster.trials(exp_id)
        assert trial["state"] == "STATE_COMPLETED"
        assert trial["restarts"] == 0  # not lost, not started twice
        assert not (out / f"{trial['id']}.2.pid").exists()
        lines = [e["log"] for e in cluster.logs(trial["taskId"])]
        assert any(f"adopted Slurm job {job}" in x for x in lines), lines
    finally:
        m.stop()


def test_two_slot_pytorch_trial_spans_n1_and_n2(
    tmp_path: pathlib.Path, slurm: SlurmCluster
) -> None:
    """slots_per_trial 2 with slurm.slots_per_node 1: one job on both nodes, one srun task
    each; torch_distributed meets at the rendezvous on the first and trains 2 ranks (gloo)."""
    from _kit.pytorch_model_def import MODEL_DEF

    cfg = {
        "name": "slurm-ddp",
        "entrypoint": "model_def:RegressionTrial",
        "max_restarts": 0,
        "resources": {"slots_per_trial": 2},
        "slurm": {"slots_per_node": 1},
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 4}},
        "min_validation_period": {"batches": 4},
        "hyperparameters": {"lr": 0.05, "global_batch_size": 8},
    }
    with _master(tmp_path, slurm) as m:
        cluster = Cluster(m)
        exp_id = cluster.create(cfg, {"model_def.py": MODEL_DEF})
        exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=90)
        [trial] = cluster.trials(exp_id)
        logs = cluster.logs(trial["taskId"])
        text = "".join(e["log"] for e in logs)
        assert exp["state"] == "STATE_COMPLETED", text[-3000:]
        assert trial["totalBatchesProcessed"] == 4
        assert {e["rankId"] for e in logs if e.get("rankId") is not None} == {0, 1}
        job = _job_of(cluster, trial["taskId"])
        shown = slurm.run("scontrol", "-o", "show", "job", job)
        assert "NodeList=n[1-2]" in shown and "NumNodes=2" in shown, shown


def test_asha_search_pauses_and_resumes(tmp_path: pathlib.Path, slurm: SlurmCluster) -> None:
    cfg = config(tmp_path / "out", sleep=0.1, ckpt_every=2)
    cfg["searcher"] = {
        "name": "adaptive_asha",
        "metric": "loss",
        "max_length": 8,
        "max_trials": 2,
        "max_rungs": 2,
        "divisor": 2,
        "max_concurrent_trials": 2,
    }
    cfg["hyperparameters"]["metric"] = {"type": "double", "minval": 0.1, "maxval": 1.0}
    with _master(tmp_path, slurm) as m:
        cluster = Cluster(m)
        exp_id = cluster.create(cfg)
        deadline = time.monotonic() + 30
        while not any(t.get("totalBatchesProcessed", 0) >= 2 for t in cluster.trials(exp_id)):
            assert time.monotonic() < deadline, cluster.trials(exp_id)
            time.sleep(0.1)
        assert cluster.post(f"/api/v1/experiments/{exp_id}/pause").status_code == 200
        cluster.wait_experiment(exp_id, "STATE_PAUSED", timeout=30)
        deadline = time.monotonic() + 30
        while slurm.run("squeue", "-h", "-o", "%i").strip():  # every job ended
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert cluster.post(f"/api/v1/experiments/{exp_id}/activate").status_code == 200
        exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=60)
        assert exp["state"] == "STATE_COMPLETED"
        trials = cluster.trials(exp_id)
        assert len(trials) == 2 and all(t["state"] == "STATE_COMPLETED" for t in trials)
        assert max(t["totalBatchesProcessed"] for t in trials) == 8
        assert all(t["restarts"] == 0 for t in trials)  # a pause is no failure


def test_a_failed_job_is_restarted_per_max_restarts(
    tmp_path: pathlib.Path, slurm: SlurmCluster
) -> None:
    out = tmp_path / "out"
    with _master(tmp_path, slurm) as m:
        cluster = Cluster(m)
        exp_id = cluster.create(config(out, max_length=2, fail_runs=1))  # max_restarts 1
        exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=60)
        [trial] = cluster.trials(exp_id)
        assert exp["state"] == "STATE_COMPLETED"
        assert trial["restarts"] == 1
        first, second = _jobs_of(cluster, trial["taskId"])  # one job per run
        assert first != second
        assert "ExitCode=3:0" in slurm.run("scontrol", "-o", "show", "job", first)
        lines = [e["log"] for e in cluster.logs(trial["taskId"])]
        wording = "container failed with non-zero exit code: 3 (exit code 3)"
        assert any(wording in x for x in lines), lines


def test_nodes_are_agents_and_disabling_one_moves_the_job(
    tmp_path: pathlib.Path, slurm: SlurmCluster
) -> None:
    """``det agent list`` shows Slurm's nodes; a disabled node gets no job, and a job on a
    node disabled without draining is killed and submitted again to an enabled one."""
    with _master(tmp_path, slurm) as m:
        det = Det(tmp_path / "home", m.url)
        det.ok("user", "login", "admin", input="\n")
        agents = json.loads(det.ok("agent", "list", "--json"))
        assert [(a["id"], a["num_slots"]) for a in agents] == [("n1", 2), ("n2", 2)]
        det.ok("agent", "disable", "n1", "--drain")
        cluster = Cluster(m)
        out = tmp_path / "out"
        exp_id = cluster.create(config(out, max_length=100000, sleep=0.05))
        trial = cluster.wait_trial(exp_id, "STATE_RUNNING", "RUNNING", timeout=30)
        cluster.wait_log(trial["taskId"], "is running on n2", timeout=30)
        slots = json.loads(det.ok("slot", "list", "--json"))
        assert [s["agent_id"] for s in slots if s["allocation_id"] != "FREE"] == ["n2"]

        # n2 off without draining: the job goes; with no node left the trial waits.
        det.ok("agent", "disable", "n2")
        cluster.wait_log(trial["taskId"], "reason: its agent or slot was disabled", timeout=30)
        deadline = time.monotonic() + 30
        while cluster.trials(exp_id)[0]["state"] != "STATE_QUEUED":
            assert time.monotonic() < deadline, cluster.trials(exp_id)
            time.sleep(0.2)
        det.ok("agent", "enable", "n1")
        cluster.wait_log(trial["taskId"], "is running on n1", timeout=30)
        [trial] = cluster.trials(exp_id)
        assert trial["restarts"] == 0
        assert cluster.post(f"/api/v1/experiments/{exp_id}/kill").status_code == 200
        cluster.wait_experiment(exp_id, "STATE_CANCELED", timeout=40)


def test_a_job_slurm_queues_shows_queued_until_it_starts(
    tmp_path: pathlib.Path, slurm: SlurmCluster
) -> None:
    """While Slurm keeps the job PENDING the trial and experiment are QUEUED (not RUNNING)
    and the trial's log says why; once Slurm starts it, RUNNING, then it completes."""
    blocker = slurm.run(
        "sbatch", "--parsable", "-J", "blocker", "-N", "2", "--ntasks-per-node", "2",
        f"--output={tmp_path / 'blocker.out'}", "--wrap", "sleep 120",
    ).strip()  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while "RUNNING" not in slurm.run("squeue", "-h", "-j", blocker, "-o", "%T"):
            assert time.monotonic() < deadline, "the blocker job never started"
            time.sleep(0.2)
        with _master(tmp_path, slurm) as m:
            cluster = Cluster(m)
            exp_id = cluster.create(config(tmp_path / "out", max_length=1))
            [trial] = cluster.trials(exp_id)
            cluster.wait_log(trial["taskId"], "is queued (reason:")
            deadline = time.monotonic() + 10
            while cluster.experiment(exp_id)["state"] != "STATE_QUEUED":
                assert time.monotonic() < deadline, cluster.experiment(exp_id)["state"]
                time.sleep(0.2)
            assert cluster.trials(exp_id)[0]["state"] == "STATE_QUEUED"
            jobs = cluster.get("/api/v1/job-queues")["jobs"]
            assert [j["summary"]["state"] for j in jobs] == ["STATE_QUEUED"]
            slurm.run("scancel", blocker)
            cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=60)
            lines = [e["log"] for e in cluster.logs(trial["taskId"])]
            assert any("is running on" in x for x in lines)
    finally:
        subprocess.run(["scancel", blocker], env=slurm.env, capture_output=True)


def test_slurms_sigterm_checkpoints_and_the_trial_resumes_in_a_new_job(
    tmp_path: pathlib.Path, slurm: SlurmCluster
) -> None:
    """Slurm's own SIGTERM (``scancel --signal=TERM``, as at a time limit or under Slurm's
    preemption) reaches the trial's preemption path: it checkpoints, acknowledges and exits 0;
    the master runs it again as a new job, which resumes from that checkpoint."""
    with _master(tmp_path, slurm) as m:
        cluster = Cluster(m)
        out = tmp_path / "out"
        exp_id = cluster.create(config(out, max_length=150, sleep=0.05))
        trial = cluster.wait_trial(exp_id, "STATE_RUNNING", "RUNNING", timeout=30)
        wait_file(out / f"{trial['id']}.1.pid")
        first = _job_of(cluster, trial["taskId"])
        time.sleep(1.0)  # some steps trained
        slurm.run("scancel", "--signal=TERM", first)
        cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=90)
        jobs = _jobs_of(cluster, trial["taskId"])
        assert len(jobs) == 2 and jobs[0] == first, jobs
        resumed = int((out / f"{trial['id']}.2.resumed").read_text())
        assert 0 < resumed < 150, resumed  # the second job started from the first's checkpoint
        lines = "\n".join(e["log"] for e in cluster.logs(trial["taskId"]))
        assert "received SIGTERM" in lines and "preemption requested" in lines
        shown = slurm.run("scontrol", "-o", "show", "job", first)
        assert "JobState=COMPLETED" in shown, [
            f for f in shown.split() if "Exit" in f or "State" in f
        ]


def _launch_command(cluster: Cluster, entrypoint: str) -> str:
    r = cluster.s.post(
        cluster.url + "/api/v1/commands", json={"config": {"entrypoint": entrypoint}}
    )
    assert r.status_code == 200, r.text
    return str(r.json()["command"]["id"])


def test_commands_are_slurm_jobs_tensorboards_run_beside_the_master_notebooks_refused(
    tmp_path: pathlib.Path, slurm: SlurmCluster
) -> None:
    with _master(tmp_path, slurm, default_compute_resource_pool="debug") as m:
        cluster = Cluster(m)
        task_id = _launch_command(
            cluster, "echo hello from $DET_RESOURCES_TYPE in $SLURM_JOB_ID; exit 3"
        )
        ended = wait_state(cluster, "command", task_id, "STATE_TERMINATED", timeout=60)
        assert ended["exitStatus"] == "exited with code 3"
        job = _job_of(cluster, task_id)
        cluster.wait_log(task_id, f"hello from slurm-job in {job}")
        shown = slurm.run("scontrol", "-o", "show", "job", job)
        assert f"JobName=det-{task_id}.1" in shown and "Partition=debug" in shown, shown
        assert "ExitCode=3:0" in shown, shown
        # Its work dir goes with it (just after the task is recorded as ended).
        deadline = time.monotonic() + 10
        while (m.data_dir / "work" / f"{task_id}.1").exists():
            assert time.monotonic() < deadline, "the command's work dir stayed"
            time.sleep(0.2)

        r = cluster.s.post(cluster.url + "/api/v1/notebooks", json={"config": {}})
        assert r.status_code == 400, r.text
        assert "do not run on the Slurm resource manager" in r.json()["message"], r.text

        # A TensorBoard needs no slot and reads only synced files: it runs on the master's host.
        exp_id = cluster.create(config(tmp_path / "out", max_length=1))
        cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=60)
        r = cluster.s.post(cluster.url + "/api/v1/tensorboards", json={"experimentIds": [exp_id]})
        assert r.status_code == 200, r.text
        tb = r.json()["tensorboard"]["id"]
        wait_state(cluster, "tensorboard", tb, "STATE_RUNNING")
        assert isinstance(proxied(cluster, f"/proxy/{tb}/data/runs").json(), list)
        lines = [e["log"] for e in cluster.logs(tb)]
        assert any("have started" in x for x in lines), lines
        assert not any("Slurm job" in x for x in lines), lines
        # Stopping the master stops it (Slurm jobs live on; a process of the master's does not).
        m.stop()
        m.start()
        cluster = Cluster(m)
        ended = wait_state(cluster, "tensorboard", tb, "STATE_TERMINATED")
        assert ended["exitStatus"] == "the master stopped", ended


def test_command_jobs_are_queued_killed_and_adopted_by_a_restarted_master(
    tmp_path: pathlib.Path, slurm: SlurmCluster
) -> None:
    blocker = slurm.run(
        "sbatch", "--parsable", "-J", "blocker", "-N", "2", "--ntasks-per-node", "2",
        f"--output={tmp_path / 'blocker.out'}", "--wrap", "sleep 120",
    ).strip()  # fmt: skip
    m = _master(tmp_path, slurm)
    try:
        m.start()
        cluster = Cluster(m)
        # While Slurm queues the job the command is QUEUED; a kill then cancels the job.
        queued = _launch_command(cluster, "sleep 300")
        cluster.wait_log(queued, "is queued (reason:", timeout=30)
        queued_job = _job_of(cluster, queued)
        assert wait_state(cluster, "command", queued, "STATE_QUEUED")
        assert cluster.post(f"/api/v1/commands/{queued}/kill").status_code == 200
        assert wait_state(cluster, "command", queued, "STATE_TERMINATED")["exitStatus"] == (
            "killed before it started"
        )
        deadline = time.monotonic() + 20
        while queued_job in slurm.run("squeue", "-h", "-o", "%i").split():
            assert time.monotonic() < deadline, "the queued command's job was not canceled"
            time.sleep(0.2)
        slurm.run("scancel", blocker)

        # A running command's job outlives a killed master and is adopted by the next one.
        running = _launch_command(cluster, "echo started; sleep 300")
        wait_state(cluster, "command", running, "STATE_RUNNING", timeout=60)
        cluster.wait_log(running, "started", timeout=30)
        job = _job_of(cluster, running)
        m.kill()
        assert job in slurm.run("squeue", "-h", "-o", "%i").split()
        m.start()
        cluster = Cluster(m)
        cluster.wait_log(running, f"adopted Slurm job {job}", timeout=30)
        assert wait_state(cluster, "command", running, "STATE_RUNNING")
        assert cluster.post(f"/api/v1/commands/{running}/kill").status_code == 200
        ended = wait_state(cluster, "command", running, "STATE_TERMINATED", timeout=60)
        assert ended["exitStatus"] == "killed"
        assert job not in slurm.run("squeue", "-h", "-o", "%i").split()
    finally:
        subprocess.run(["scancel", blocker], env=slurm.env, capture_output=True)
        m.stop()


def test_slurm_jobs_run_in_the_sandbox(tmp_path: pathlib.Path, slurm: SlurmCluster) -> None:
    """Issue #35: a Slurm job's process (a trial's, a command's) runs in bubblewrap as a local
    one does: another user's command reads neither the master's database nor the first
    user's work dir, and a trial trains and checkpoints inside it (its output dir a bind
    mount of its config)."""
    import requests
    from _kit.master import login

    from determined.master.resources import _sandbox

    bwrap = shutil.which("bwrap")
    if bwrap is None or _sandbox._probe(bwrap) is not None:
        pytest.skip("needs a working bubblewrap (scripts/setup.sh --tests installs it)")
    conf = tmp_path / "master.yaml"
    conf.write_text(
        yaml.safe_dump({"resource_manager": {"type": "slurm"}, "task_isolation": "bubblewrap"})
    )
    env = {"SLURM_CONF": slurm.env["SLURM_CONF"]}
    with MasterProcess(tmp_path / "master", config_file=conf, env=env) as m:
        cluster = Cluster(m)
        assert requests.get(m.url + "/api/v1/master").json()["taskIsolation"]["mode"] == (
            "bubblewrap"
        )
        for name in ("alice", "bob"):
            cluster.s.post(m.url + "/api/v1/users", json={"user": {"username": name}})
        alice = m.session(login(m.url, "alice"))
        bob = m.session(login(m.url, "bob"))

        def command(s: requests.Session, entrypoint: str) -> str:
            r = s.post(m.url + "/api/v1/commands", json={"config": {"entrypoint": entrypoint}})
            assert r.status_code == 200, r.text
            return str(r.json()["command"]["id"])

        mine = command(alice, "echo alice-secret > secret.txt; echo ready; sleep 60")
        cluster.wait_log(mine, "ready", timeout=60)
        [secret] = list((tmp_path / "master" / "work").glob("*/0/secret.txt"))
        data = tmp_path / "master"
        probe = command(
            bob,
            f"cat {data}/master.db > /dev/null && echo DB-READ; cat {secret} && echo OTHER-READ; "
            f"ls {data}/work | wc -l | sed 's/^/works:/'; echo done",
        )
        log = "\n".join(cluster.wait_log(probe, "done", timeout=60))
        assert "DB-READ" not in log and "OTHER-READ" not in log and "alice-secret" not in log
        assert "works:1" in log, log
        alice.post(m.url + f"/api/v1/commands/{mine}/kill")

        if os.geteuid() == 0:  # a linked user's job runs as them (resources/_identity.py)
            link = {"agentUid": 200, "agentGid": 300, "agentUser": "someuser"}
            link["agentGroup"] = "somegroup"
            users = cluster.s.get(m.url + "/api/v1/users").json()["users"]
            bob_id = next(u["id"] for u in users if u["username"] == "bob")
            r = cluster.s.patch(m.url + f"/api/v1/users/{bob_id}", json={"agentUserGroup": link})
            assert r.status_code == 200, r.text
            who = command(bob, "echo $(id -u -n):$(id -u):$(id -g -n):$(id -g) in $(pwd)")
            lines = cluster.wait_log(who, "someuser:200:somegroup:300", timeout=60)
            assert any(x.rstrip().endswith("/0") for x in lines if "someuser:200" in x), lines

        out = tmp_path / "out"
        cfg = config(out, max_length=2)
        cfg["bind_mounts"] = [{"host_path": str(out), "container_path": str(out)}]
        exp_id = cluster.create(cfg)
        cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=90)
        [trial] = cluster.trials(exp_id)
        assert env_of(out, trial["id"], 1)["DET_RESOURCES_TYPE"] == "slurm-job"
        assert _checkpoint_steps(cluster, trial["id"]) == [2]


@pytest.fixture
def slurm_account(slurm: SlurmCluster) -> Iterator[tuple[str, int, int]]:
    """A real OS account (useradd, with its own group), removed afterwards (its jobs first)."""
    import pwd

    name, uid = "slurmu35", 64035
    subprocess.run(["userdel", name], capture_output=True)
    subprocess.run(["useradd", "-u", str(uid), "-U", "-M", name], check=True)
    try:
        yield name, uid, pwd.getpwnam(name).pw_gid
    finally:
        subprocess.run(["scancel", f"--user={name}"], env=slurm.env, capture_output=True)
        deadline = time.monotonic() + 15
        while slurm.run("squeue", "-h", "-u", name).strip() and time.monotonic() < deadline:
            time.sleep(0.2)
        subprocess.run(["userdel", name], check=False)


def test_a_root_master_submits_each_job_for_the_tasks_os_user(
    slurm: SlurmCluster, slurm_account: tuple[str, int, int]
) -> None:
    """Issue #35: a root master submits a linked user's trial for that user (``sbatch
    --uid``): squeue and sacct name them, the trial's ``id`` is theirs, and it trains and
    checkpoints in its sandbox (bubblewrap started by that user); an unlinked user's (an
    admin's) is the default task account's (resources/_identity.py)."""

    from determined.master.resources import _sandbox

    if os.geteuid() != 0:
        pytest.skip("a master submits jobs for other OS users only when it runs as root")
    bwrap = shutil.which("bwrap")
    if bwrap is None or _sandbox._probe(bwrap) is not None:
        pytest.skip("needs a working bubblewrap (scripts/setup.sh --tests installs it)")
    name, uid, gid = slurm_account
    # Not under pytest's directory, which a pytest session starting meanwhile makes 0700 again:
    # that would undo the master's search permission for the job's user (docs/security.md).
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="det-ids35-"))
    try:
        _submits_for_the_os_user(tmp_path, slurm, name, uid, gid)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _submits_for_the_os_user(
    tmp_path: pathlib.Path, slurm: SlurmCluster, name: str, uid: int, gid: int
) -> None:
    import pwd

    from _kit.master import login

    from determined.master.resources import _identity

    conf = tmp_path / "master.yaml"
    conf.write_text(
        yaml.safe_dump({"resource_manager": {"type": "slurm"}, "task_isolation": "bubblewrap"})
    )
    env = {"SLURM_CONF": slurm.env["SLURM_CONF"]}
    train = "import subprocess\nsubprocess.run(['id'], check=True)\n" + TRAIN_PY
    with MasterProcess(tmp_path / "master", config_file=conf, env=env) as m:
        admin = Cluster(m)
        r = admin.s.post(m.url + "/api/v1/users", json={"user": {"username": "carol"}})
        assert r.status_code == 200, r.text
        link = {"agentUid": uid, "agentGid": gid, "agentUser": name, "agentGroup": name}
        carol_id = r.json()["user"]["id"]
        r = admin.s.patch(m.url + f"/api/v1/users/{carol_id}", json={"agentUserGroup": link})
        assert r.status_code == 200, r.text
        carol = Cluster(m)
        carol.s = m.session(login(m.url, "carol"))
        # The master made the default account on this host (or found its uid taken).
        nobody = pwd.getpwuid(_identity.DEFAULT_TASK.uid).pw_name
        runs = {}
        for who, c in ((name, carol), (nobody, admin)):
            out = tmp_path / f"out-{who}"
            exp_id = c.create(config(out, max_length=3, sleep=1.0), {"train.py": train})
            runs[who] = (c, exp_id)
        seen: dict[str, set[str]] = {}
        deadline = time.monotonic() + 120
        while not all(
            c.experiment(e)["state"] in ("STATE_COMPLETED", "STATE_ERROR") for c, e in runs.values()
        ):
            assert time.monotonic() < deadline, [c.describe(e) for c, e in runs.values()]
            for line in slurm.run("squeue", "-h", "-o", "%i|%u").split():
                job, user = line.split("|")
                seen.setdefault(job, set()).add(user)
            time.sleep(0.2)
        done = slurm.run("sacct", "-c", "-P", "-n", "-o", "JobID,User")
        for who, (c, exp_id) in runs.items():
            assert c.experiment(exp_id)["state"] == "STATE_COMPLETED", c.describe(exp_id)
            [trial] = c.trials(exp_id)
            job = _job_of(c, trial["taskId"])
            assert seen.get(job) == {who}, (who, seen)
            assert f"{job}|{who}(" in done, done
            expect = f"uid={uid}({name}) gid={gid}({name})" if who == name else "uid=65533("
            c.wait_log(trial["taskId"], expect)
            assert _checkpoint_steps(c, trial["id"]) == [3]
