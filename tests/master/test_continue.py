"""``det e continue`` / ``POST /api/v1/experiments/continue`` (the web UI's "Continue Trial")
with a real master and real trial processes: the trial of an ended single-trial experiment
trains on from its latest checkpoint to a new ``max_length`` and the experiment completes
again; what a continue may not change is refused with a 400 that says so (multi-trial searches
and changed hyperparameters: test_continue_searches.py). Also warm starts
(``searcher.source_trial_id`` / ``source_checkpoint_uuid``, docs/reference/master.md §6 item 33)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import yaml
from _kit.master import REPO, MasterProcess
from _kit.trial_cluster import Cluster, config, env_of, wait_file

from determined.master.store import _metrics, make_engine, sqlite_url

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    m = MasterProcess(tmp_path_factory.mktemp("continue") / "master", cpu_slots=1)
    m.start()
    yield Cluster(m)
    m.stop()


def _continue(cluster: Cluster, exp_id: int, override: Any = None) -> requests.Response:
    text = override if isinstance(override, str) else yaml.safe_dump(override or {})
    body = {"id": exp_id, "overrideConfig": text}
    return cluster.s.post(cluster.url + "/api/v1/experiments/continue", json=body)


def _rows(cluster: Cluster, trial_id: int, *, archived: bool = False) -> list[tuple[int, int]]:
    """(steps, run id) of the trial's training rows, live ones (or all)."""
    engine = make_engine(sqlite_url(cluster.master.data_dir))
    try:
        with engine.connect() as conn:
            rows = _metrics.list_rows(conn, trial_id, "training", archived=archived)
    finally:
        engine.dispose()
    return [(int(r["steps_completed"]), int(r["trial_run_id"])) for r in rows]


def _ckpt(cluster: Cluster, trial_id: int, steps: int) -> str:
    ckpts = cluster.get(f"/api/v1/trials/{trial_id}/checkpoints")["checkpoints"]
    [uuid] = [c["uuid"] for c in ckpts if c["metadata"]["steps_completed"] == steps]
    return str(uuid)


def test_continue_trains_on_from_the_latest_checkpoint(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    exp_id = cluster.create(config(out, max_length=3))
    first = cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    [trial] = cluster.trials(exp_id)
    tid = trial["id"]
    ckpt3 = _ckpt(cluster, tid, 3)

    r = _continue(cluster, exp_id, {"searcher": {"max_length": 6}, "description": "longer"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["experiment"]["id"] == exp_id and body["warnings"] == []
    assert body["experiment"]["state"] in ("STATE_QUEUED", "STATE_RUNNING")  # ACTIVE, derived
    assert body["experiment"]["progress"] == pytest.approx(0.5)  # 3 of 6 trained

    done = cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    env = env_of(out, tid, 2)  # the same trial, its next run
    assert (env["DET_LATEST_CHECKPOINT"], env["DET_STEPS_COMPLETED"]) == (ckpt3, "3")
    assert wait_file(out / f"{tid}.2.resumed") == "3"
    [trial] = cluster.trials(exp_id)
    assert (trial["id"], trial["state"], trial["totalBatchesProcessed"]) == (
        tid,
        "STATE_COMPLETED",
        6,
    )
    assert [s for s, _ in _rows(cluster, tid)] == [1, 2, 3, 4, 5, 6]  # each step once
    assert _rows(cluster, tid)[3:] == [(4, 2), (5, 2), (6, 2)]
    assert done["progress"] == 1.0 and done["endTime"] > first["endTime"]
    assert done["config"]["searcher"]["max_length"] == 6
    assert done["description"] == "longer"
    assert done["startTime"] == first["startTime"]
    assert "longer" not in done["originalConfig"]  # as created, as the reference keeps it
    _ckpt(cluster, tid, 6)  # the new run checkpointed at its new end
    # §6 items 29-30 from a real trial: validations at 3 and 6 (loss 1/steps).
    assert trial["latestValidation"]["totalBatches"] == 6
    best = cluster.get(f"/api/v1/experiments/{exp_id}/searcher/best_searcher_validation_metric")
    assert best == {"metric": pytest.approx(1 / 6)}

    # Again, further: a continue can follow a continue.
    assert _continue(cluster, exp_id, "searcher: {max_length: 8}").status_code == 200
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    assert wait_file(out / f"{tid}.3.resumed") == "6"
    assert [s for s, _ in _rows(cluster, tid)] == list(range(1, 9))


def test_each_continue_is_a_new_task_and_a_trained_length_completes_at_once(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    exp_id = cluster.create(config(out, max_length=2))
    first = cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    [trial] = cluster.trials(exp_id)
    tid, t0 = trial["id"], trial["taskId"]
    assert trial["taskIds"] == [t0]
    # The same length, then a shorter one: accepted (0.37), each done at once from the
    # checkpoint at 2, each under a new task named as 0.37 names it.
    assert _continue(cluster, exp_id).status_code == 200
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    assert _continue(cluster, exp_id, {"searcher": {"max_length": 1}}).status_code == 200
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    [trial] = cluster.trials(exp_id)
    assert trial["taskIds"] == [t0, f"{t0}-1", f"{t0}-1-2"]
    assert (trial["taskId"], trial["totalBatchesProcessed"]) == (f"{t0}-1-2", 2)
    assert wait_file(out / f"{tid}.3.resumed") == "2"
    # The trial's logs span its tasks; each task has its own runs and times.
    lines = cluster.s.get(cluster.url + f"/api/v1/trials/{tid}/logs").text
    for run in (1, 2, 3):
        assert f"hello from trial {tid} run {run}" in lines
    second = cluster.get(f"/api/v1/tasks/{t0}-1")["task"]
    assert [a["allocationId"] for a in second["allocations"]] == [f"{t0}-1.2"]
    assert first["endTime"] < second["startTime"] <= second["endTime"]
    assert cluster.get(f"/api/v1/tasks/{t0}")["task"]["startTime"] == trial["startTime"]


def _refused(r: requests.Response, status: int, *words: str) -> None:
    assert r.status_code == status, r.text
    message = r.json()["message"]
    for word in words:
        assert word in message, message


def test_bad_continues_are_refused_and_change_nothing(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    exp_id = cluster.create(config(out, max_length=2))
    before = cluster.wait_experiment(exp_id, "STATE_COMPLETED")

    assert cluster.post(f"/api/v1/experiments/{exp_id}/archive").status_code == 200
    _refused(_continue(cluster, exp_id, {"searcher": {"max_length": 5}}), 400, "unarchive it")
    assert cluster.post(f"/api/v1/experiments/{exp_id}/unarchive").status_code == 200
    _refused(
        _continue(cluster, exp_id, {"searcher": {"max_length": 5}, "project": "p"}),
        400,
        "det experiment move",
    )
    random = {"name": "random", "max_trials": 2, "max_length": 5}
    _refused(_continue(cluster, exp_id, {"searcher": random}), 400, "must have single searcher")
    _refused(
        _continue(cluster, exp_id, {"searcher": {"max_length": {"epochs": 9}}}),
        400,
        "stay in max_length",
    )
    _refused(_continue(cluster, exp_id, "searcher: [unclosed"), 400, "not valid YAML")
    _refused(_continue(cluster, exp_id, "[1, 2]"), 400, "YAML mapping")
    _refused(_continue(cluster, exp_id, {"bogus_key": 1}), 400, "bogus_key")
    _refused(_continue(cluster, 999999, {"searcher": {"max_length": 5}}), 404, "999999")
    after = cluster.experiment(exp_id)
    assert (after["state"], after["config"], after["endTime"]) == (
        "STATE_COMPLETED",
        before["config"],
        before["endTime"],
    )
    assert len(list(out.glob("*.pid"))) == 1  # no second run was started

    # Not ended yet: a paused experiment whose trial never ran.
    paused = cluster.create(config(tmp_path / "p", max_length=2), activate=False)
    _refused(_continue(cluster, paused, {"searcher": {"max_length": 5}}), 400, "non terminal")
    assert cluster.post(f"/api/v1/experiments/{paused}/kill").status_code == 200
    # Searchers other than single, grid and random: refused even once ended (as 0.37).
    cfg = config(tmp_path / "r", max_length=2)
    cfg["searcher"] = {"name": "adaptive_asha", "metric": "loss", "max_length": 2}
    cfg["searcher"]["max_trials"] = 2
    other = cluster.create(cfg, activate=False)
    assert cluster.post(f"/api/v1/experiments/{other}/kill").status_code == 200
    cluster.wait_experiment(other, "STATE_CANCELED")
    _refused(_continue(cluster, other), 400, "Unsupported searcher type", "'adaptive_asha'")


def test_continue_retries_an_errored_trial_with_fresh_restarts(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    exp_id = cluster.create(config(out, max_length=3, fail_runs=2))  # max_restarts 1
    cluster.wait_experiment(exp_id, "STATE_ERROR")
    [trial] = cluster.trials(exp_id)
    assert trial["restarts"] == 1  # 2 stored; 0.37 shows LEAST(restarts, max_restarts)
    # Nothing was trained, so the same max_length is a valid retry.
    assert _continue(cluster, exp_id).status_code == 200
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    [trial] = cluster.trials(exp_id)
    assert (trial["state"], trial["restarts"], trial["totalBatchesProcessed"]) == (
        "STATE_COMPLETED",
        0,
        3,
    )


def test_det_e_continue(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    exp_id = cluster.create(config(out, max_length=2))
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env.update(DET_HOME=str(tmp_path / "home"), DET_MASTER=cluster.url, PYTHONPATH=str(REPO))
    env.update(DET_USER="determined", DET_PASS="")

    def det(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "determined.cli", *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)

    assert det("user", "login", "admin").returncode == 0
    # At or below what was trained: accepted as 0.37 does, and done at once.
    short = det("e", "continue", str(exp_id), "--config", "searcher.max_length=1")
    assert short.returncode == 0, short.stderr
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    (tmp_path / "over.yaml").write_text("searcher:\n  max_length: 3\nmax_restarts: 0\n")
    args = ["--config-file", str(tmp_path / "over.yaml"), "--config", "searcher.max_length=4"]
    ok = det("e", "continue", str(exp_id), *args, "-f")
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.splitlines()
    assert lines[0] == f"Continued experiment {exp_id}"
    assert f"Following first trial with ID {cluster.trials(exp_id)[0]['id']}" in lines
    assert lines[-1].startswith("Trial log stream ended.")
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    assert exp["config"]["searcher"]["max_length"] == 4  # --config wins over the file
    assert exp["config"]["max_restarts"] == 0
    assert cluster.trials(exp_id)[0]["totalBatchesProcessed"] == 4
    # §6 item 46: `det trial logs -f` of an ended trial prints its logs and ends by itself.
    tid = cluster.trials(exp_id)[0]["id"]
    logs = det("trial", "logs", "-f", str(tid))
    assert logs.returncode == 0, logs.stderr
    assert f"hello from trial {tid} run 3" in logs.stdout


REF_DET = REPO / ".refvenv" / "bin" / "det"


@pytest.mark.skipif(not REF_DET.exists(), reason="no .refvenv: run scripts/setup.sh --tests")
def test_reference_det_e_continue(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    """Determined 0.37's own ``det e continue`` (POST /api/v1/experiments/continue)."""
    out = tmp_path / "out"
    exp_id = cluster.create(config(out, max_length=2))
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "PYTHON"))}
    # The cluster's admin owns the experiment: only its owner or an admin may continue it.
    env.update(HOME=str(tmp_path), DET_USER="admin", DET_PASS="")
    cmd = [str(REF_DET), "-m", cluster.url, "e", "continue", str(exp_id)]
    cmd += ["--config", "searcher.max_length=5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Continued experiment {exp_id}" in proc.stdout.splitlines()
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    assert cluster.trials(exp_id)[0]["totalBatchesProcessed"] == 5
    # The same length again (at what was trained) is accepted, as in 0.37's e2e tests.
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    assert cluster.trials(exp_id)[0]["totalBatchesProcessed"] == 5


WARM_PY = r"""
import json, os, pathlib
import determined as det
from determined import core

info = det.get_cluster_info()
out = pathlib.Path(info.trial.hparams["out"])
env = {k: v for k, v in os.environ.items() if k.startswith("DET_")}
(out / f"{info.trial.trial_id}.{os.environ['DET_TRIAL_RUN_ID']}.env.json").write_text(
    json.dumps(env)
)
with core.init() as ctx:
    start = 0
    if info.latest_checkpoint:
        with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
            start = json.loads((path / "state.json").read_text())["weights"]
    (out / f"{info.trial.trial_id}.start").write_text(str(start))
    for op in ctx.searcher.operations():
        ctx.train.report_validation_metrics(op.length, {"loss": 1.0})
        with ctx.checkpoint.store_path({"steps_completed": op.length}) as (path, _):
            (path / "state.json").write_text(json.dumps({"weights": start + op.length}))
        op.report_completed(1.0)
"""


def test_warm_start_from_a_trial_or_a_checkpoint(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    """§6 item 33: new trials get the source checkpoint as DET_LATEST_CHECKPOINT with
    DET_STEPS_COMPLETED 0, and it is kept by checkpoint GC."""
    out = tmp_path / "out"
    out.mkdir()
    files = {"train.py": WARM_PY}
    src = cluster.create(config(out, max_length=4), files)
    cluster.wait_experiment(src, "STATE_COMPLETED")
    src_trial = cluster.trials(src)[0]["id"]
    src_ckpt = _ckpt(cluster, src_trial, 4)
    for key, value in (("source_trial_id", src_trial), ("source_checkpoint_uuid", src_ckpt)):
        cfg = config(out, max_length=2)
        cfg["searcher"][key] = value
        exp_id = cluster.create(cfg, files)
        cluster.wait_experiment(exp_id, "STATE_COMPLETED")
        tid = cluster.trials(exp_id)[0]["id"]
        env = json.loads((out / f"{tid}.1.env.json").read_text())
        assert (env["DET_LATEST_CHECKPOINT"], env["DET_STEPS_COMPLETED"]) == (src_ckpt, "0")
        assert (out / f"{tid}.start").read_text() == "4"  # the source's weights
        assert [
            c["state"] for c in cluster.get(f"/api/v1/trials/{tid}/checkpoints")["checkpoints"]
        ] == ["STATE_COMPLETED"]
    # Once it has its own checkpoint, a new run of it starts from that, with its steps.
    r = _continue(cluster, exp_id, {"searcher": {"max_length": 3}})
    assert r.status_code == 200, r.text
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    env = json.loads((out / f"{tid}.2.env.json").read_text())
    own = _ckpt(cluster, tid, 2)
    assert (env["DET_LATEST_CHECKPOINT"], env["DET_STEPS_COMPLETED"]) == (own, "2")
    assert (out / f"{tid}.start").read_text() == "6"  # 4 from the source + its own 2
    states = {
        c["uuid"]: c["state"]
        for c in cluster.get(f"/api/v1/trials/{src_trial}/checkpoints")["checkpoints"]
    }
    assert states[src_ckpt] == "STATE_COMPLETED"
    bad = config(out, max_length=2)
    bad["searcher"]["source_trial_id"] = 999999
    r = cluster.s.post(
        cluster.url + "/api/v1/experiments",
        json={"config": yaml.safe_dump(bad), "modelDefinition": [], "activate": False},
    )
    assert r.status_code in (400, 404) and "999999" in r.json()["message"], r.text
    assert re.search(r"\d", r.json()["message"])


def test_continue_into_storage_of_another_type(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    """Issue 38 item 6: a ``checkpoint_storage`` of another type replaces the section (the old
    type's keys, ``host_path``, were merged into it and refused as unknown keys); the trial
    resumes from its checkpoint and writes the next one into the new storage."""
    out = tmp_path / "out"
    old_dir = tmp_path / "old"
    cfg = config(out, max_length=2)
    cfg["checkpoint_storage"] = {"type": "shared_fs", "host_path": str(old_dir)}
    exp_id = cluster.create(cfg)
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    new_dir = tmp_path / "new"
    moved = {"type": "directory", "container_path": str(new_dir)}
    r = _continue(cluster, exp_id, {"searcher": {"max_length": 4}, "checkpoint_storage": moved})
    assert r.status_code == 200, r.text
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    storage = exp["config"]["checkpoint_storage"]
    assert storage["type"] == "directory" and "host_path" not in storage
    assert cluster.trials(exp_id)[0]["totalBatchesProcessed"] == 4
    uuid = _ckpt(cluster, cluster.trials(exp_id)[0]["id"], 4)
    assert (new_dir / uuid).is_dir()
    # The same type still merges key by key: a GC field alone keeps the directory.
    r = _continue(
        cluster,
        exp_id,
        {"searcher": {"max_length": 5}, "checkpoint_storage": {"save_trial_latest": 2}},
    )
    assert r.status_code == 200, r.text
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    assert exp["config"]["checkpoint_storage"]["container_path"] == str(new_dir)
