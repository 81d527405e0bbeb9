"""A legacy ``det.LegacyTrial`` + ``det.TrialController`` pair (our port of 0.37's e2e no-op
trial, tests/fixtures/legacy_noop) run by a real master from ``entrypoint: model_def:NoOpTrial``:
exec.launch -> torch_distributed -> harness -> determined.exec._legacy -> the trial's own
controller fed by determined.layers' workload sequencer (issue 14)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time
from typing import Any

import pytest
import yaml
from _kit.cli import Det
from _kit.legacy_noop import FIXTURE, noop_config, noop_files, trial_logs
from _kit.master import REPO
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e


def _checkpoints(cluster: Cluster, trial_id: int) -> list[dict[str, Any]]:
    return list(cluster.get(f"/api/v1/trials/{trial_id}/checkpoints")["checkpoints"])


def test_noop_trial_trains_validates_and_checkpoints(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    storage = tmp_path / "ckpts"
    exp_id = cluster.create(noop_config(storage), noop_files())
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=120)
    [trial] = cluster.trials(exp_id)
    logs = trial_logs(cluster, trial)
    assert exp["state"] == "STATE_COMPLETED", logs[-3000:]
    assert "Creating NoOpTrialController with NoOpTrial" in logs
    assert trial["totalBatchesProcessed"] == 30
    # The sequencer's plan (scheduling_unit 5, validation every 10, checkpoint every 20,
    # checkpoint_policy best with a decreasing metric: every validation is the best so far).
    workloads = cluster.get(f"/api/v1/trials/{trial['id']}/workloads")["workloads"]
    seen = [(kind, w[kind]["totalBatches"]) for w in workloads for kind in w]
    train, val, ckpt = "training", "validation", "checkpoint"
    assert seen == [
        (train, 5), (train, 10), (val, 10), (ckpt, 10),
        (train, 15), (train, 20), (val, 20), (ckpt, 20),
        (train, 25), (train, 30), (val, 30), (ckpt, 30),
    ]  # fmt: skip
    latest = trial["latestValidation"]
    assert latest["metrics"]["avgMetrics"]["validation_error"] == pytest.approx(0.9**6)
    ckpts = _checkpoints(cluster, trial["id"])
    # Each checkpoint holds the trial's own file and the sequencer's state.
    last = max(ckpts, key=lambda c: int(c["metadata"]["steps_completed"]))
    files = storage / last["uuid"]
    assert sum(json.loads((files / "no_op_checkpoint").read_text()).values()) == 6
    assert (files / "workload_sequencer.pkl").exists()


def test_noop_trial_pauses_and_resumes_from_its_checkpoint(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    storage = tmp_path / "ckpts"
    config = noop_config(storage)
    config["hyperparameters"]["training_batch_seconds"] = 0.1
    config["searcher"]["max_length"] = {"batches": 60}
    config["min_checkpoint_period"] = {"batches": 1000}  # only the pause checkpoints
    config["checkpoint_policy"] = "none"
    exp_id = cluster.create(config, noop_files())
    deadline = time.monotonic() + 60
    while cluster.trials(exp_id)[0].get("totalBatchesProcessed", 0) < 10:
        assert time.monotonic() < deadline, cluster.trials(exp_id)
        time.sleep(0.2)
    assert cluster.post(f"/api/v1/experiments/{exp_id}/pause").status_code == 200
    cluster.wait_experiment(exp_id, "STATE_PAUSED", timeout=60)
    cluster.wait_trial(exp_id, "STATE_PAUSED", timeout=60)
    [trial] = cluster.trials(exp_id)
    # The trial reads PAUSED once preempted; its process checkpoints and exits after that.
    cluster.wait_log(trial["taskId"], "exited with code 0", timeout=60)
    [trial] = cluster.trials(exp_id)
    paused_at = trial["totalBatchesProcessed"]
    assert 10 <= paused_at < 60
    ckpts = _checkpoints(cluster, trial["id"])
    assert len(ckpts) == 1, (ckpts, trial_logs(cluster, trial)[-4000:])
    [ckpt] = ckpts  # the exit checkpoint of the pause
    assert int(ckpt["metadata"]["steps_completed"]) == paused_at

    assert cluster.post(f"/api/v1/experiments/{exp_id}/activate").status_code == 200
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=120)
    [trial] = cluster.trials(exp_id)
    logs = trial_logs(cluster, trial)
    assert exp["state"] == "STATE_COMPLETED", logs[-3000:]
    assert f"steps_trained {paused_at // 5}" in logs  # "Loaded checkpoint ..., steps_trained n"
    assert "Loaded checkpoint" in logs
    assert trial["totalBatchesProcessed"] == 60
    # The restored counter continued: the metric is 0.9 ** (all steps), not of this run only.
    latest = trial["latestValidation"]["metrics"]["avgMetrics"]["validation_error"]
    assert latest == pytest.approx(0.9 ** (60 // 5))


REF_WRAPPER = """
import model_def


class _DropScalars:
    def on_train_step_end(self, *args, **kwargs):
        pass


class Controller(model_def.NoOpTrialController):
    def create_metric_writer(self):
        return _DropScalars()

    @staticmethod
    def from_trial(trial_inst, *args, **kwargs):
        return Controller(*args, **kwargs)


class NoOpTrial(model_def.NoOpTrial):
    trial_controller_class = Controller
"""


def _local_config(tmp_path: pathlib.Path) -> pathlib.Path:
    config = tmp_path / "noop.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "entrypoint": "model_def:NoOpTrial",
                "hyperparameters": {"global_batch_size": 8, "metrics_base": 0.5},
                "searcher": {
                    "name": "single",
                    "metric": "validation_error",
                    "max_length": {"batches": 100},
                },
            }
        )
    )
    return config


def test_local_test_mode_runs_the_trial_in_process_like_the_reference(
    tmp_path: pathlib.Path,
) -> None:
    """``det e create --local --test``: no master; one batch, a validation, a checkpoint. The
    reference's det runs the same model directory the same way (our port is faithful)."""
    config = _local_config(tmp_path)
    det = Det(tmp_path / "home")
    ours = det("e", "create", "--local", "--test", str(config), str(FIXTURE.parent))
    out = ours.stdout + ours.stderr
    assert ours.returncode == 0, out
    assert "Saving checkpoint" in out and "steps_trained 1" in out
    assert "validation metrics: {'validation_error': 0.5}" in out
    assert "The test experiment passed." in out
    ref_det = REPO / ".refvenv" / "bin" / "det"
    if ref_det.exists():
        # .refvenv has neither tensorflow nor tensorboard, which the reference's metric writer
        # needs: the same trial with a writer that drops the scalars.
        model = tmp_path / "ref_model"
        model.mkdir()
        (model / "model_def.py").write_text(FIXTURE.read_text())
        (model / "ref_model_def.py").write_text(REF_WRAPPER)
        ref_config = tmp_path / "ref.yaml"
        ref_config.write_text(config.read_text().replace("model_def:", "ref_model_def:"))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "PYTHON"))}
        env["HOME"] = str(tmp_path / "refhome")
        ref = subprocess.run(
            [str(ref_det), "e", "create", "--local", "--test", str(ref_config), str(model)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )
        ref_out = ref.stdout + ref.stderr
        assert ref.returncode == 0, ref_out
        assert "Saving checkpoint" in ref_out and "steps_trained 1" in ref_out
    # Without --test, or with a script entrypoint, it says what to do instead.
    refused = det("e", "create", "--local", str(config), str(FIXTURE.parent))
    assert refused.returncode != 0 and "add --test" in refused.stderr
