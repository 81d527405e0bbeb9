"""Faults of issue #16 that stopped the cluster or lost data, each against a real master and
real trial processes: launch errors (determined/master/resources/_local.py), relative
checkpoint storage (determined/master/experiment/_config.py), GC and leftovers after a crash
(determined/master/resources/_gc.py), a master that cannot write, and the trial client's
retries (determined/common/api/_session.py)."""

from __future__ import annotations

import os
import pathlib
import resource
import signal
import time
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from _kit.master import MasterProcess
from _kit.trial_cluster import GC_PY, Cluster, config, model_definition, wait_dead, wait_file

from determined.master.store import _schema, make_engine, sqlite_url

pytestmark = pytest.mark.e2e


def _edit_config(data_dir: pathlib.Path, exp_id: int, edit: Any) -> None:
    """Change an experiment's stored config while its master is down, as if an older master
    (without today's create-time checks) had stored it."""
    engine = make_engine(sqlite_url(data_dir))
    with engine.begin() as conn:
        table = _schema.experiments
        cfg = conn.execute(sa.select(table.c.config).where(table.c.id == exp_id)).scalar_one()
        edit(cfg)
        conn.execute(table.update().where(table.c.id == exp_id).values(config=cfg))
    engine.dispose()


def _create(cluster: Cluster, cfg: dict[str, Any], files: list[dict[str, Any]]) -> Any:
    body = {"config": yaml.safe_dump(cfg), "modelDefinition": files}
    return cluster.s.post(cluster.url + "/api/v1/experiments", json=body)


def test_bad_launch_input_is_refused_at_create(shared_cluster: Cluster, tmp_path: Any) -> None:
    cfg = config(tmp_path / "out", max_length=1)
    good = model_definition({"train.py": "print('hi')"})
    nul = {**cfg, "environment": {"environment_variables": ["BAD=a\0b"]}}
    r = _create(shared_cluster, nul, good)
    assert r.status_code == 400 and "environment_variables" in r.json()["message"], r.text
    no_key = {**cfg, "environment": {"environment_variables": ["=value"]}}
    r = _create(shared_cluster, no_key, good)
    assert r.status_code == 400 and "environment_variables" in r.json()["message"], r.text
    for bad_entry, word in [
        ({"mtime": 10**20}, "mtime"),
        ({"mtime": -1}, "mtime"),
        ({"mtime": "soon"}, "mtime"),
        ({"mode": "rwx"}, "mode"),
        ({"mode": 0o200000}, "mode"),
        ({"content": "not base64!"}, "base64"),
        ({"content": 12}, "content"),
        ({"path": None}, "path"),
    ]:
        files = [{**good[0], **bad_entry}]
        r = _create(shared_cluster, cfg, files)
        assert r.status_code == 400, (bad_entry, r.text)
        assert word in r.json()["message"], (bad_entry, r.text)
    r = _create(shared_cluster, cfg, [{"path": "a.py", "content": 5}, "not an entry"])
    assert r.status_code == 400, r.text


def test_a_launch_error_frees_the_slots_and_fails_the_trial(tmp_path: pathlib.Path) -> None:
    master = MasterProcess(tmp_path / "master", cpu_slots=1)
    with master:
        cluster = Cluster(master)
        paused = cluster.create(
            {**config(tmp_path / "b", max_length=1), "max_restarts": 1}, activate=False
        )

    def add_nul(cfg: dict[str, Any]) -> None:
        cfg["environment"]["environment_variables"]["cpu"] = ["BAD=a\0b"]

    _edit_config(master.data_dir, paused, add_nul)
    with master:
        cluster = Cluster(master)
        cluster.post(f"/api/v1/experiments/{paused}/activate").raise_for_status()
        cluster.wait_experiment(paused, "STATE_ERROR")
        [trial] = cluster.trials(paused)
        # Two launches failed; 0.37 shows restarts capped at max_restarts (1).
        assert trial["state"] == "STATE_ERROR" and trial["restarts"] == 1
        lines = cluster.wait_log(trial["taskId"], "crashed:")
        assert any("NUL byte" in line for line in lines), lines
        # The slot came back: the next experiment runs on it at once.
        good = cluster.create(config(tmp_path / "c", max_length=1))
        cluster.wait_experiment(good, "STATE_COMPLETED")


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with MasterProcess(tmp_path_factory.mktemp("faults") / "master", cpu_slots=1) as m:
        yield Cluster(m)


def test_relative_checkpoint_storage_is_refused(shared_cluster: Cluster, tmp_path: Any) -> None:
    base = config(tmp_path / "out", max_length=1)
    good = model_definition({"train.py": "print('hi')"})
    for storage, word in [
        ({"type": "directory", "container_path": "ckpts"}, "container_path 'ckpts' is relative"),
        ({"type": "directory", "container_path": "./a/../b"}, "is relative"),
        ({"type": "shared_fs", "host_path": "ckpts"}, "absolute"),
    ]:
        r = _create(shared_cluster, {**base, "checkpoint_storage": storage}, good)
        assert r.status_code == 400 and word in r.json()["message"], (storage, r.text)
    # An absolute one runs; continuing it cannot bring a relative one in.
    absolute = {"type": "directory", "container_path": str(tmp_path / "ckpts")}
    exp_id = shared_cluster.create({**base, "checkpoint_storage": absolute})
    shared_cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    override = {"checkpoint_storage": {"container_path": "ckpts"}}
    body = {"id": exp_id, "overrideConfig": yaml.safe_dump(override)}
    r = shared_cluster.s.post(shared_cluster.url + "/api/v1/experiments/continue", json=body)
    assert r.status_code == 400 and "is relative" in r.json()["message"], r.text


def _on_disk(storage: pathlib.Path) -> set[str]:
    return {p.name for p in storage.iterdir() if (p / "metadata.json").exists()}


def test_gc_and_leftovers_are_finished_after_a_crash(tmp_path: pathlib.Path) -> None:
    storage = tmp_path / "ckpts"
    keep_all = {"type": "shared_fs", "host_path": str(storage), "save_trial_latest": 100}
    master = MasterProcess(tmp_path / "master", cpu_slots=1)
    with master:
        cluster = Cluster(master)
        cfg = {**config(tmp_path / "out"), "checkpoint_storage": keep_all}
        cfg["hyperparameters"]["losses"] = [5.0, 4.0, 3.0, 2.0, 1.0, 0.5]
        cfg["entrypoint"] = "python3 gc.py"
        exp_id = cluster.create(cfg, {"gc.py": GC_PY})
        cluster.wait_experiment(exp_id, "STATE_COMPLETED")
        rows = cluster.get(f"/api/v1/experiments/{exp_id}/checkpoints")["checkpoints"]
        by_steps = {c["metadata"]["steps_completed"]: c["uuid"] for c in rows}
        assert _on_disk(storage) == set(by_steps.values())
        master.kill()
    # What a crash in the middle of GC leaves: the policy (now 0/0/1) not applied yet, one
    # checkpoint renamed for deletion and half deleted; a checkpoint still staged by a killed
    # trial; the work directory of a run that was going.
    _edit_config(
        master.data_dir,
        exp_id,
        lambda c: c["checkpoint_storage"].update(
            save_trial_latest=1, save_trial_best=0, save_experiment_best=0
        ),
    )
    half = by_steps[3]
    (storage / half).rename(storage / f".{half}.deleting")
    (storage / f".{half}.deleting" / "metadata.json").unlink()
    (storage / ".0a1b2c3d-staged.tmp").mkdir()
    (storage / ".0a1b2c3d-staged.tmp" / "weights").write_text("partial")
    stale_work = master.data_dir / "work" / "1.dead-allocation.1"
    stale_work.mkdir(parents=True)
    (stale_work / "train.py").write_text("")
    with master:
        cluster = Cluster(master)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            rows = cluster.get(f"/api/v1/experiments/{exp_id}/checkpoints")["checkpoints"]
            states = {c["metadata"]["steps_completed"]: c["state"] for c in rows}
            if list(states.values()).count("STATE_DELETED") == 5:
                break
            time.sleep(0.1)
        assert states == {**dict.fromkeys(range(1, 6), "STATE_DELETED"), 6: "STATE_COMPLETED"}
        assert _on_disk(storage) == {by_steps[6]}
        assert not [p.name for p in storage.iterdir() if p.name.startswith(".")]
        assert not stale_work.exists()


def _disk_full(pid: int, full: bool) -> None:
    """Make every write of process ``pid`` past its file's first byte fail (EFBIG, which SQLite
    reports as a full disk), or lift that again. Python ignores SIGXFSZ, so the master lives."""
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (1 if full else hard, hard))


def test_an_exit_seen_while_the_disk_is_full_is_recorded_later(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    with MasterProcess(tmp_path / "master", cpu_slots=1) as master:
        assert master.proc is not None
        cluster = Cluster(master)
        cfg = config(out, max_length=100000, sleep=0.05, ignore_preempt=True)
        exp_id = cluster.create({**cfg, "max_restarts": 0})
        trial = cluster.wait_trial(exp_id, "STATE_RUNNING")
        pid = int(wait_file(out / f"{trial['id']}.1.pid"))
        # A cancel asks the trial to stop; this one does not listen: STOPPING_CANCELED.
        cluster.post(f"/api/v1/experiments/{exp_id}/cancel").raise_for_status()
        cluster.wait_trial(exp_id, "STATE_STOPPING_CANCELED")
        _disk_full(master.proc.pid, True)
        try:
            os.kill(pid, signal.SIGKILL)
            wait_dead(pid)
            time.sleep(2)  # several ticks: the exit is seen and cannot be written
            r = cluster.s.post(cluster.url + f"/api/v1/experiments/{exp_id}/kill")
            assert r.status_code == 503, r.text  # nothing can be written now: try later
            assert "nothing was stored" in r.json()["message"]
        finally:
            _disk_full(master.proc.pid, False)
        # The exit is recorded once the disk has room: the trial ends, no longer STOPPING
        # (which of the two depends on how far the run got before the disk filled).
        ended = ("STATE_ERROR", "STATE_CANCELED")
        cluster.wait_experiment(exp_id, *ended, timeout=15)
        assert cluster.trials(exp_id)[0]["state"] in ended
        # And the cluster goes on: the slot runs the next experiment.
        nxt = cluster.create(config(tmp_path / "next", max_length=1))
        cluster.wait_experiment(nxt, "STATE_COMPLETED")
