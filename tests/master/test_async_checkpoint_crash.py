"""Asynchronous checkpoints on a real master (issue #19 item 1): a trial killed with SIGKILL
while a checkpoint is written in the background leaves nothing registered for it, and the
restart resumes from the previous registered checkpoint."""

from __future__ import annotations

import os
import pathlib
import signal

import pytest
from _kit.pytorch_model_def import MODEL_DEF
from _kit.trial_cluster import Cluster, wait_file

pytestmark = pytest.mark.e2e

HANG = '''

import os, pathlib, time


class HangOnSecondWrite(pytorch.PyTorchCallback):
    """First run only: the second checkpoint's files are written (on the writer thread), not
    yet committed or reported; say so and hang there until killed."""

    def __init__(self, marker):
        self.marker, self.writes = pathlib.Path(marker), 0

    def on_checkpoint_write_end(self, checkpoint_dir):
        self.writes += 1
        if self.writes == 2 and not self.marker.exists():
            self.marker.write_text(f"{os.getpid()} {checkpoint_dir}")
            time.sleep(600)


def _callbacks(self):
    return {"hang": HangOnSecondWrite(self.context.get_hparam("marker"))}


RegressionTrial.build_callbacks = _callbacks
'''


def test_kill_9_during_a_background_write_resumes_from_the_previous_one(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    marker = tmp_path / "writing"
    cfg = {
        "name": "async-ckpt-kill",
        "entrypoint": "model_def:RegressionTrial",
        "max_restarts": 1,
        "optimizations": {"async_checkpoints": True},
        "min_checkpoint_period": {"batches": 2},
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 6}},
        "hyperparameters": {"lr": 0.05, "global_batch_size": 8, "marker": str(marker)},
    }
    exp_id = cluster.create(cfg, {"model_def.py": MODEL_DEF + HANG})
    pid, staging = wait_file(marker, timeout=120).split(" ", 1)
    os.kill(int(pid), signal.SIGKILL)
    killed_id = pathlib.Path(staging).name.strip(".").removesuffix(".tmp")
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=180)
    [trial] = cluster.trials(exp_id)
    logs = "".join(e["log"] for e in cluster.logs(trial["taskId"]))
    assert exp["state"] == "STATE_COMPLETED", logs[-3000:]
    assert trial["restarts"] == 1
    r = cluster.s.get(cluster.url + f"/api/v1/checkpoints/{killed_id}")
    assert r.status_code == 404, r.text  # never registered
    ckpts = cluster.get(f"/api/v1/trials/{trial['id']}/checkpoints")["checkpoints"]
    steps = sorted(c["metadata"]["steps_completed"] for c in ckpts)
    assert steps == [2, 4, 6]  # 2 from the killed run; 4 and 6 from the restart
    first = next(c["uuid"] for c in ckpts if c["metadata"]["steps_completed"] == 2)
    assert f"restored {first} at batch 2" in logs
