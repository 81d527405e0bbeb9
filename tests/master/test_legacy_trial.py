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
from _kit.master import REPO
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e

FIXTURE = pathlib.Path(__file__).parents[1] / "fixtures" / "legacy_noop" / "model_def.py"
CLUSTER_CPU_SLOTS = 2


def _config(storage: pathlib.Path, **changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": "legacy-noop",
        "entrypoint": "model_def:NoOpTrial",
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)},
        "hyperparameters": {
            "global_batch_size": 32,
            "metrics_progression": "decreasing",
            "metrics_base": 0.9,
        },
        "searcher": {
            "name": "single",
            "metric": "validation_error",
            "smaller_is_better": True,
            "max_length": {"batches": 30},
        },
        "scheduling_unit": 5,
        "min_validation_period": {"batches": 10},
        "min_checkpoint_period": {"batches": 20},
        "max_restarts": 0,
    }
    config.update(changes)
    return config


def _files() -> dict[str, str]:
    return {"model_def.py": FIXTURE.read_text()}


def _logs(cluster: Cluster, trial: dict[str, Any]) -> str:
    return "".join(e["log"] for e in cluster.logs(trial["taskId"]))


def _checkpoints(cluster: Cluster, trial_id: int) -> list[dict[str, Any]]:
    return list(cluster.get(f"/api/v1/trials/{trial_id}/checkpoints")["checkpoints"])


def test_noop_trial_trains_validates_and_checkpoints(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    storage = tmp_path / "ckpts"
    exp_id = cluster.create(_config(storage), _files())
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=120)
    [trial] = cluster.trials(exp_id)
    logs = _logs(cluster, trial)
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
    config = _config(storage)
    config["hyperparameters"]["training_batch_seconds"] = 0.1
    config["searcher"]["max_length"] = {"batches": 60}
    config["min_checkpoint_period"] = {"batches": 1000}  # only the pause checkpoints
    config["checkpoint_policy"] = "none"
    exp_id = cluster.create(config, _files())
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
    assert len(ckpts) == 1, (ckpts, _logs(cluster, trial)[-4000:])
    [ckpt] = ckpts  # the exit checkpoint of the pause
    assert int(ckpt["metadata"]["steps_completed"]) == paused_at

    assert cluster.post(f"/api/v1/experiments/{exp_id}/activate").status_code == 200
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=120)
    [trial] = cluster.trials(exp_id)
    logs = _logs(cluster, trial)
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
    ours = Det(tmp_path / "home")(
        "e", "create", "--local", "--test", str(config), str(FIXTURE.parent)
    )
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


def test_adaptive_asha_search_over_nested_hyperparameters(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    """Several no-op trials under adaptive ASHA, with nested hyperparameters and NaN in a
    non-searcher validation metric: every trial ends, the best trial is the best metric."""
    config = _config(tmp_path / "ckpts")
    config["hyperparameters"] = {
        "global_batch_size": 32,
        "metrics_base": {"type": "double", "minval": 0.5, "maxval": 0.95},
        "num_validation_metrics": 2,
        "nested": {"depth": {"type": "int", "minval": 1, "maxval": 3}, "name": "x"},
    }
    config["searcher"] = {
        "name": "adaptive_asha",
        "metric": "validation_error",
        "smaller_is_better": True,
        "max_length": {"batches": 40},
        "max_trials": 4,
        "max_rungs": 2,
        "divisor": 2,
        "max_concurrent_trials": 2,
    }
    config["min_validation_period"] = {"batches": 10}
    exp_id = cluster.create(config, _files())
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=240)
    trials = cluster.trials(exp_id)
    logs = "".join(_logs(cluster, t)[-1500:] for t in trials)
    assert exp["state"] == "STATE_COMPLETED", logs
    assert len(trials) == 4
    assert all(t["state"] == "STATE_COMPLETED" for t in trials)
    assert all(isinstance(t["hparams"]["nested"], dict) for t in trials)
    lengths = sorted(t["totalBatchesProcessed"] for t in trials)
    assert lengths[-1] == 40 and lengths[0] < 40  # some trials stopped at a lower rung
    # Decreasing 0.9-style metric: at equal lengths a smaller metrics_base is better.
    finals = {t["id"]: t["latestValidation"]["metrics"]["avgMetrics"] for t in trials}
    assert all("validation_metric_1" in m for m in finals.values())
