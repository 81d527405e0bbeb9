"""RemoteSearchRunner end to end (docs/reference/custom_searchers.md): the search runs as the
trial of a single-trial experiment on a real master and keeps its state in that trial's
checkpoints, so a runner trial that dies mid-search resumes without creating a trial twice."""

from __future__ import annotations

import pathlib
import time
from typing import Any

import pytest
from _kit.custom_search import TRAIN_PY
from _kit.master import REPO, MasterProcess
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e
TERMINAL = ("STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR")


def _get(master: MasterProcess, path: str) -> Any:
    r = master.session().get(master.url + path)
    assert r.status_code == 200, r.text
    return r.json()


# RemoteSearchRunner inside a trial of a single-trial experiment; its first run dies (exit 3)
# when the first validation of the search arrives, before saving: the restarted run resumes
# from its latest checkpoint and handles that event again.
REMOTE_PY = r"""
import os, pathlib
import determined as det
from determined import core, searcher
from custom_search import RandomSearch, config

out = det.get_cluster_info().trial.hparams["out"]

class DiesOnce(RandomSearch):
    def on_validation_completed(self, searcher_state, request_id, metric, train_length):
        if os.environ["DET_TRIAL_RUN_ID"] == "1":
            os._exit(3)
        return super().on_validation_completed(searcher_state, request_id, metric, train_length)

with core.init() as ctx:
    method = DiesOnce(max_trials=3, length=2, concurrent=2, seed=5, out=out)
    runner = searcher.RemoteSearchRunner(method, context=ctx)
    exp_id = runner.run(config("remote-searched"), model_dir="searched")
    print(f"searched experiment {exp_id} done", flush=True)
"""


def test_remote_search_runner_resumes_from_its_checkpoint(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    files = {
        "runner.py": REMOTE_PY,
        "custom_search.py": (REPO / "tests" / "_kit" / "custom_search.py").read_text(),
        "searched/train.py": TRAIN_PY,
    }
    meta = {
        "name": "remote-runner",
        "entrypoint": "python3 runner.py",
        "max_restarts": 1,
        "searcher": {"name": "single", "metric": "loss", "max_length": 1},
        "hyperparameters": {"out": str(out)},
    }
    with MasterProcess(tmp_path / "master", cpu_slots=3) as master:
        cluster = Cluster(master)
        meta_id = cluster.create(meta, files)
        deadline = time.monotonic() + 150
        while cluster.experiment(meta_id)["state"] not in TERMINAL:
            assert time.monotonic() < deadline, master.log_tail()
            time.sleep(0.5)
        (meta_trial,) = cluster.trials(meta_id)
        assert cluster.experiment(meta_id)["state"] == "STATE_COMPLETED"
        assert meta_trial["restarts"] == 1  # the first run died; the second resumed
        exps = _get(master, "/api/v1/experiments")["experiments"]
        (searched,) = [e for e in exps if e["name"] == "remote-searched"]
        trials = cluster.trials(searched["id"])
        checkpoints = _get(master, f"/api/v1/trials/{meta_trial['id']}/checkpoints")
    assert searched["state"] == "STATE_COMPLETED"
    assert len(trials) == 3  # nothing created twice by the resumed runner
    assert all(t["state"] == "STATE_COMPLETED" for t in trials)
    assert len(checkpoints["checkpoints"]) > 3  # the runner's state after each event
