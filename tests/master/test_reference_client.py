"""Determined 0.37's own SDK and ``det`` CLI against a real master of ours
(docs/reference/master.md §5).

The reference client lives in ``.refvenv`` (``scripts/setup.sh --tests`` creates it with
``determined==0.37.0``); it is never imported here: every call runs in a subprocess of that
venv, in a scratch directory so that this repository's ``determined`` is not on its path.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
import requests
from _kit.master import MasterProcess
from _kit.reference import REF, Ref
from _kit.trial_cluster import Cluster

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (REF / "bin" / "det").exists(),
        reason="no .refvenv with determined==0.37.0: run scripts/setup.sh --tests to create it",
    ),
]

TRAIN_PY = """
import json
from determined import core

with core.init() as ctx:
    steps = 0
    for op in ctx.searcher.operations():
        while steps < op.length:
            steps += 1
            ctx.train.report_training_metrics(steps, {"loss": 1.0 / steps})
        ctx.train.report_validation_metrics(steps, {"loss": 0.5 / steps})
        with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, _):
            (path / "state.json").write_text(json.dumps({"steps": steps}))
        op.report_completed(0.5 / steps)
print("done training", flush=True)
"""

CONFIG = """
name: refclient
entrypoint: python3 train.py
searcher:
  name: single
  metric: loss
  max_length: 3
checkpoint_storage:
  type: shared_fs
  host_path: {storage}
hyperparameters:
  lr: 0.1
"""

ASHA = """
name: asha
entrypoint: python3 train.py
searcher:
  name: adaptive_asha
  metric: loss
  max_length: {batches: 1000}
  max_trials: 16
  mode: aggressive
hyperparameters:
  lr: {type: double, minval: 0.001, maxval: 0.1}
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Ref, Cluster, dict]]:
    """A master running one experiment that the reference CLI created, COMPLETED."""
    root = tmp_path_factory.mktemp("refclient")
    master = MasterProcess(root / "master", cpu_slots=1)
    master.start()
    ref = Ref(master, root / "home")
    model = ref.home / "model"
    model.mkdir()
    (model / "train.py").write_text(TRAIN_PY)
    (ref.home / "cfg.yaml").write_text(CONFIG.format(storage=root / "ckpts"))
    created = ref.det("e", "create", "cfg.yaml", "model")
    cluster = Cluster(master)
    exp_id = int(re.findall(r"Created experiment (\d+)", created)[0])
    cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=60)
    yield ref, cluster, {"created": created, "exp_id": exp_id, "storage": root / "ckpts"}
    master.stop()


SDK_READS = """
import json, pathlib, sys, tempfile
from determined.experimental import client

url, exp_id = sys.argv[1], int(sys.argv[2])
client.login(master=url, user="determined", password="")
exp = client.get_experiment(exp_id)
state = exp.wait(interval=0.2)
[trial] = exp.list_trials()
metrics = {
    g: [[m.steps_completed, m.metrics, m.group, m.trial_run_id] for m in trial.iter_metrics(g)]
    for g in ("training", "validation")
}
ckpts = trial.list_checkpoints()
path = ckpts[0].download(tempfile.mkdtemp() + "/ckpt")
print(json.dumps({
    "state": state.value,
    "name": exp.name,
    "trial": [trial.id, trial.hparams],
    "metrics": metrics,
    "checkpoints": [[c.uuid, c.state.value, c.metadata["steps_completed"]] for c in ckpts],
    "experiment_checkpoints": [c.uuid for c in exp.list_checkpoints()],
    "downloaded": json.loads((pathlib.Path(path) / "state.json").read_text()),
}))
"""


def test_sdk_reads_a_completed_experiment(env: tuple[Ref, Cluster, dict]) -> None:
    ref, cluster, info = env
    got = ref.python(SDK_READS, str(info["exp_id"]))
    [trial] = cluster.trials(info["exp_id"])
    assert got["state"] == "STATE_COMPLETED" and got["name"] == "refclient"
    assert got["trial"] == [trial["id"], {"lr": 0.1}]
    assert got["metrics"]["training"] == [
        [1, {"loss": 1.0}, "training", 1],
        [2, {"loss": 0.5}, "training", 1],
        [3, {"loss": 1.0 / 3}, "training", 1],
    ]
    assert got["metrics"]["validation"] == [[3, {"loss": 0.5 / 3}, "validation", 1]]
    [(uuid, state, steps)] = got["checkpoints"]
    assert state == "STATE_COMPLETED" and steps == 3
    assert got["experiment_checkpoints"] == [uuid]
    assert got["downloaded"] == {"steps": 3}


def test_cli_create_list_describe(env: tuple[Ref, Cluster, dict]) -> None:
    ref, cluster, info = env
    assert f"Created experiment {info['exp_id']}" in info["created"]
    listed = ref.det("e", "list")
    row = next(line for line in listed.splitlines() if line.strip().startswith(str(info["exp_id"])))
    assert re.search(r"\| determined \| refclient \|.*\| COMPLETED \| 100.0% ", row), listed
    described = ref.det("e", "describe", str(info["exp_id"]))
    assert "Workloads:" in described and "| COMPLETED " in described
    # one condensed row per step: steps 1, 2 train only; step 3 also checkpoints and validates
    rows = [
        [cell.strip() for cell in line.split("|")]
        for line in described.split("Workloads:")[1].splitlines()
        if re.match(r"^\s+\d+ \|", line)
    ]
    assert [(r[1], r[4], r[6]) for r in rows] == [
        ("1", "", ""),
        ("2", "", ""),
        ("3", "COMPLETED", "COMPLETED"),
    ], described


def test_cli_trial_logs(env: tuple[Ref, Cluster, dict]) -> None:
    ref, cluster, info = env
    [trial] = cluster.trials(info["exp_id"])
    logs = ref.det("t", "logs", str(trial["id"]))
    assert re.search(r"^\[\S+Z\] \S+ +\|\| INFO: done training$", logs, re.M), logs
    tail = ref.det("t", "logs", str(trial["id"]), "--tail", "1")
    assert "done training" not in tail and "exited with code 0" in tail


def test_cli_preview_search(env: tuple[Ref, Cluster, dict]) -> None:
    ref, _, _ = env
    (ref.home / "asha.yaml").write_text(ASHA)
    out = ref.det("preview-search", "asha.yaml")
    assert "This search will create a total of 16 trial(s)." in out
    # Rows are (count, breakdown); two rungs may hold the same count, so keep them all.
    rows = re.findall(r"^\s+(\d+) \| (.+?)\s*$", out, re.M)
    assert sum(int(n) for n, _ in rows) == 16, out
    assert "1 x train for 62, 1 x train for 250, 1 x train for 1000" in [b for _, b in rows]


def test_cli_master_info_and_experiment_settings(env: tuple[Ref, Cluster, dict]) -> None:
    ref, cluster, info = env
    master_info = ref.det("master", "info")
    assert re.search(r"^clusterId: \S+", master_info, re.M)
    # The master serves 0.37's API and says so, so the 0.37 CLI warns about no version skew;
    # our own version is reported beside it.
    assert re.search(r"^version: 0\.37\.0$", master_info, re.M)
    assert requests.get(ref.url + "/info", timeout=10).json()["redeterminedVersion"]
    assert "is less than" not in ref.det("e", "list")  # no "Master version ... CLI version"
    exp = str(info["exp_id"])
    policy = ["--save-experiment-best", "3", "--save-trial-best", "1", "--save-trial-latest", "1"]
    assert "Set GC policy of experiment" in ref.det("e", "set", "gc-policy", exp, *policy, "--yes")
    assert "Set `max_slots` of experiment" in ref.det("e", "set", "max-slots", exp, "2")
    config = cluster.experiment(info["exp_id"])["config"]
    assert config["checkpoint_storage"]["save_experiment_best"] == 3
    assert config["resources"]["max_slots"] == 2


SDK_EDITS = """
import json, sys
from determined.experimental import client

url, exp_id = sys.argv[1], int(sys.argv[2])
client.login(master=url, user="determined", password="")
exp = client.get_experiment(exp_id)
exp.archive()
archived = client.get_experiment(exp_id).archived
exp.unarchive()
exp.set_name("renamed")
exp.set_description("about it")
exp.set_notes("# notes")
exp.add_label("a")
exp.add_label("b")
exp.remove_label("a")
[ckpt] = exp.list_checkpoints()
ckpt.delete()
after = client.get_experiment(exp_id)
print(json.dumps({
    "archived": archived,
    "now": [after.archived, after.name, after.description, after.notes, sorted(after.labels)],
    "deleted": [ckpt.uuid, client.get_checkpoint(ckpt.uuid).state.value],
}))
"""


def test_sdk_and_cli_edit_and_delete(env: tuple[Ref, Cluster, dict]) -> None:
    ref, cluster, info = env
    running = cluster.create(
        {
            "name": "still running",
            "entrypoint": "sleep 30",
            "searcher": {"name": "single", "metric": "loss", "max_length": 1},
        },
        {"noop.py": ""},
    )
    try:
        # Another user's experiment (the cluster's admin created it): a clear 403.
        out = ref.det("e", "archive", str(running), ok=False)
        assert "Forbidden" in out and f"experiment {running} is not yours" in out
        ref.env["DET_USER"] = "admin"
        try:
            out = ref.det("e", "archive", str(running), ok=False)
            assert "Experiment is not in terminal state" in out
            out = ref.det("e", "delete", str(running), "--yes", ok=False)
            assert f"cannot delete experiment {running}" in out
        finally:
            ref.env["DET_USER"] = "determined"
    finally:
        cluster.post(f"/api/v1/experiments/{running}/kill")
    got = ref.python(SDK_EDITS, str(info["exp_id"]))
    assert got["archived"] is True
    assert got["now"] == [False, "renamed", "about it", "# notes", ["b"]]
    uuid, state = got["deleted"]
    assert state == "STATE_DELETED" and not (info["storage"] / uuid).exists()
    cluster_id = cluster.get("/info")["clusterId"]
    tb = info["storage"] / cluster_id / "tensorboard" / "experiment" / str(info["exp_id"])
    assert tb.is_dir()
    ref.det("e", "delete-tb-files", str(info["exp_id"]))
    assert not tb.exists()
    assert "Deletion of experiment" in ref.det("e", "delete", str(info["exp_id"]), "--yes")
    r = cluster.s.get(cluster.url + f"/api/v1/experiments/{info['exp_id']}")
    assert r.status_code == 404
    deadline = time.monotonic() + 30
    while cluster.experiment(running)["state"] != "STATE_CANCELED":
        assert time.monotonic() < deadline, "the running experiment did not end after a kill"
        time.sleep(0.1)
