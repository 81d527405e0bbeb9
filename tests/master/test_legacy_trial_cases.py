"""The port of 0.37's no-op legacy trial (tests/fixtures/legacy_noop) in 0.37's other no-op
fixture cases on a real master: NaN validations with checkpoint GC, and a trial class without
a controller (issue 14)."""

from __future__ import annotations

import pathlib
import time

import pytest
from _kit.legacy_noop import noop_config, noop_files, trial_logs
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e


def test_a_legacy_trial_without_a_controller_is_refused_with_the_fix(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    source = (
        "import determined as det\n\n\n"
        "class Bare(det.LegacyTrial):\n"
        "    def __init__(self, context):\n"
        "        pass\n"
    )
    config = noop_config(tmp_path / "ckpts", entrypoint="model_def:Bare")
    exp_id = cluster.create(config, {"model_def.py": source})
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=120)
    [trial] = cluster.trials(exp_id)
    assert exp["state"] == "STATE_ERROR"
    assert "model_def:Bare has no trial_controller_class" in trial_logs(cluster, trial)


def test_nan_validations_and_checkpoint_gc(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    """0.37's single-nan-validations and gc_checkpoints fixtures in one run: NaN searcher
    metrics do not stop the experiment, and after it ends checkpoint GC keeps the latest
    checkpoint and the best one only."""
    storage = tmp_path / "ckpts"
    config = noop_config(storage, checkpoint_policy="all")
    config["hyperparameters"]["nan_probability_validate"] = 0.5
    config["reproducibility"] = {"experiment_seed": 999}
    config["searcher"]["max_length"] = {"batches": 40}
    config["min_validation_period"] = {"batches": 10}
    config["checkpoint_storage"].update(
        {"save_experiment_best": 1, "save_trial_best": 0, "save_trial_latest": 1}
    )
    exp_id = cluster.create(config, noop_files())
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=120)
    [trial] = cluster.trials(exp_id)
    assert exp["state"] == "STATE_COMPLETED", trial_logs(cluster, trial)[-3000:]
    workloads = cluster.get(f"/api/v1/trials/{trial['id']}/workloads")["workloads"]
    vals = [w["validation"]["metrics"]["avgMetrics"]["validation_error"] for w in workloads
            if "validation" in w]  # fmt: skip
    assert len(vals) == 4
    deadline = time.monotonic() + 60
    while True:
        ckpts = cluster.get(f"/api/v1/trials/{trial['id']}/checkpoints")["checkpoints"]
        kept = sorted(
            int(c["metadata"]["steps_completed"]) for c in ckpts if c["state"] == "STATE_COMPLETED"
        )
        if len(kept) <= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert 40 in kept and 1 <= len(kept) <= 2, (kept, vals)
    checkpoint_dirs = {p.name for p in storage.iterdir() if (p / "metadata.json").exists()}
    assert checkpoint_dirs == {c["uuid"] for c in ckpts if c["state"] == "STATE_COMPLETED"}
    # The trial's metric writer's event files were synced by upload_tb_files().
    synced = list(storage.glob(f"*/tensorboard/experiment/{exp_id}/trial/{trial['id']}/**/*"))
    assert any("tfevents" in p.name for p in synced), synced
