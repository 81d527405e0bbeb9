"""The port of 0.37's no-op legacy trial (tests/fixtures/legacy_noop) under multi-trial searches
on a real master (issue 14)."""

from __future__ import annotations

import pathlib

import pytest
from _kit.legacy_noop import noop_config, noop_files, trial_logs
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e

CLUSTER_CPU_SLOTS = 2


def test_adaptive_asha_search_over_nested_hyperparameters(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    """Several no-op trials under adaptive ASHA, with nested hyperparameters and NaN in a
    non-searcher validation metric: every trial ends, the best trial is the best metric."""
    config = noop_config(tmp_path / "ckpts")
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
    exp_id = cluster.create(config, noop_files())
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=240)
    trials = cluster.trials(exp_id)
    logs = "".join(trial_logs(cluster, t)[-1500:] for t in trials)
    assert exp["state"] == "STATE_COMPLETED", logs
    assert len(trials) == 4
    assert all(t["state"] == "STATE_COMPLETED" for t in trials)
    assert all(isinstance(t["hparams"]["nested"], dict) for t in trials)
    lengths = sorted(t["totalBatchesProcessed"] for t in trials)
    assert lengths[-1] == 40 and lengths[0] < 40  # some trials stopped at a lower rung
    # Decreasing 0.9-style metric: at equal lengths a smaller metrics_base is better.
    finals = {t["id"]: t["latestValidation"]["metrics"]["avgMetrics"] for t in trials}
    assert all("validation_metric_1" in m for m in finals.values())


def test_grid_search_with_graceful_trial_termination(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    """A grid over ``request_stop`` (0.37's grid-graceful-trial-termination): the trial that
    calls ``context.set_stop_requested(True)`` checkpoints and ends after its first step; the
    other trains the whole length; the experiment completes."""
    config = noop_config(tmp_path / "ckpts")
    config["hyperparameters"]["request_stop"] = {"type": "categorical", "vals": [False, True]}
    config["searcher"] = {
        "name": "grid",
        "metric": "validation_error",
        "max_length": {"batches": 20},
        "max_concurrent_trials": 2,
    }
    exp_id = cluster.create(config, noop_files())
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=180)
    trials = cluster.trials(exp_id)
    logs = "".join(trial_logs(cluster, t)[-1500:] for t in trials)
    assert exp["state"] == "STATE_COMPLETED", logs
    by_stop = {t["hparams"]["request_stop"]: t for t in trials}
    assert by_stop[False]["totalBatchesProcessed"] == 20
    stopped = by_stop[True]
    assert stopped["totalBatchesProcessed"] == 5  # one scheduling_unit, then the exit checkpoint
    ckpts = cluster.get(f"/api/v1/trials/{stopped['id']}/checkpoints")["checkpoints"]
    assert [int(c["metadata"]["steps_completed"]) for c in ckpts] == [5]


def test_two_ranks_follow_the_chiefs_workloads(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    """slots_per_trial 2: torchrun starts two ranks; the chief's sequencer broadcasts each
    workload, the worker repeats it, only the chief checkpoints."""
    config = noop_config(tmp_path / "ckpts", resources={"slots_per_trial": 2})
    exp_id = cluster.create(config, noop_files())
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=120)
    [trial] = cluster.trials(exp_id)
    assert exp["state"] == "STATE_COMPLETED", trial_logs(cluster, trial)[-3000:]
    assert trial["totalBatchesProcessed"] == 30
    ranks = {e["rankId"] for e in cluster.logs(trial["taskId"]) if e.get("rankId") is not None}
    assert ranks == {0, 1}
    ckpts = cluster.get(f"/api/v1/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert sorted(int(c["metadata"]["steps_completed"]) for c in ckpts) == [10, 20, 30]
