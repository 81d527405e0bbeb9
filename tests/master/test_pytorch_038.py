"""Determined 0.38-style experiments with the Trainer on a real master: no searcher.max_length,
``fit(max_length=...)`` decides the length (docs/reference/harness.md §17, §19 item 78)."""

from __future__ import annotations

import pytest
from _kit.pytorch_model_def import MODEL_DEF, SLOW_MODEL_DEF
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e

TRAIN_PY = """
import determined as det
from determined import pytorch
from model_def import RegressionTrial

info = det.get_cluster_info()
hp = info.trial.hparams
with pytorch.init(hparams=hp) as context:
    trial = RegressionTrial(context)
    pytorch.Trainer(trial, context).fit(
        max_length=pytorch.Batch(hp["batches"]),
        validation_period=pytorch.Batch(hp["validate_every"]),
        latest_checkpoint=info.latest_checkpoint,
    )
"""

FILES = {"model_def.py": MODEL_DEF, "train.py": TRAIN_PY}


def _config(searcher: dict, **hparams: object) -> dict:
    return {
        "name": "pytorch-0.38",
        "entrypoint": "python3 train.py",
        "max_restarts": 0,
        "reproducibility": {"experiment_seed": 7},
        "searcher": {"metric": "validation_loss", **searcher},
        "hyperparameters": {
            "lr": 0.05,
            "global_batch_size": 8,
            "batches": 8,
            "validate_every": 4,
            "sleep": 0.0,
            **hparams,
        },
    }


def test_a_single_search_without_max_length_trains_fits_length(cluster: Cluster) -> None:
    exp_id = cluster.create(_config({"name": "single"}), FILES)
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=120)
    [trial] = cluster.trials(exp_id)
    logs = "".join(e["log"] for e in cluster.logs(trial["taskId"]))
    assert exp["state"] == "STATE_COMPLETED", logs[-3000:]
    assert trial["state"] == "STATE_COMPLETED"
    assert trial["totalBatchesProcessed"] == 8
    metrics = trial["latestValidation"]["metrics"]["avgMetrics"]
    assert metrics["batches"] == 8 and metrics["epochs"] == 1  # 64 records, 8 per batch
    assert cluster.experiment(exp_id)["progress"] == pytest.approx(1.0)


def test_a_time_metric_search_ranks_trainer_trials_by_the_batches_key(cluster: Cluster) -> None:
    """0.38 ASHA: rungs at 2, 4 and 8 of the "batches" metric the Trainer adds to validation
    metrics; the worse learning rates are stopped (a preemption) before 8 batches."""
    searcher = {
        "name": "async_halving",
        "num_rungs": 3,
        "divisor": 2,
        "time_metric": "batches",
        "max_time": 8,
        "max_trials": 3,
        "max_concurrent_trials": 1,
    }
    # Slow batches: the stop (a preemption signal) must arrive before the trial's 8th batch.
    hparams = {
        "lr": {"type": "categorical", "vals": [0.2, 0.001, 0.0001]},
        "validate_every": 2,
        "sleep": 0.25,
    }
    files = {**FILES, "model_def.py": SLOW_MODEL_DEF}
    exp_id = cluster.create(_config(searcher, **hparams), files)
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=240)
    trials = cluster.trials(exp_id)
    logs = "".join(e["log"] for t in trials for e in cluster.logs(t["taskId"]))
    assert exp["state"] == "STATE_COMPLETED", logs[-3000:]
    assert [t["state"] for t in trials] == ["STATE_COMPLETED"] * 3
    lengths = sorted(t["totalBatchesProcessed"] for t in trials)
    assert lengths[-1] == 8 and lengths[0] < 8, lengths  # at least one was stopped early
    for t in trials:  # every validation carried the time metric the search ranks by
        assert (
            t["latestValidation"]["metrics"]["avgMetrics"]["batches"] == t["totalBatchesProcessed"]
        )
