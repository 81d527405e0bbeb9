"""Fixtures for Core API tests: the environment a master gives a trial, pointed at a
RecordingMaster with the routes every trial touches."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from recording_master import RecordingMaster

ALLOCATION_ID = "7.abc.1"
TRIAL_ID = 3
EXPERIMENT_ID = 7


def trial_config(storage_dir: pathlib.Path, **searcher: Any) -> dict[str, Any]:
    return {
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage_dir)},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}, **searcher},
        "hyperparameters": {"lr": 0.1},
        "data": {"url": "file:///data"},
    }


@pytest.fixture
def cluster_trial(
    recording_master: RecordingMaster, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> RecordingMaster:
    """Makes ``det.get_cluster_info()`` describe trial 3 of experiment 7, talking to the
    recording master; checkpoints go to ``tmp_path / "storage"``."""
    storage = tmp_path / "storage"
    env = {
        "DET_MASTER": recording_master.url,
        "DET_CLUSTER_ID": "cluster-1",
        "DET_AGENT_ID": "agent-1",
        "DET_SLOT_IDS": "[0]",
        "DET_TASK_ID": "7.abc",
        "DET_ALLOCATION_ID": ALLOCATION_ID,
        "DET_SESSION_TOKEN": "alloc-token",
        "DET_TASK_TYPE": "TRIAL",
        "DET_TRIAL_ID": str(TRIAL_ID),
        "DET_EXPERIMENT_ID": str(EXPERIMENT_ID),
        "DET_TRIAL_SEED": "42",
        "DET_HPARAMS": json.dumps({"lr": 0.1}),
        "DET_EXPERIMENT_CONFIG": json.dumps(trial_config(storage)),
        "DET_STEPS_COMPLETED": "0",
        "DET_TRIAL_RUN_ID": "1",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    m = recording_master
    m.route("POST", r"/api/v1/runs/start", {"storageId": 1})
    m.route("GET", r"/api/v1/allocations/[^/]+/signals/preemption", {"preempt": False})
    m.route("POST", r"/api/v1/allocations/[^/]+/signals/ack_preemption", {})
    m.route("POST", r"/api/v1/trials/\d+/metrics", {})
    m.route("POST", r"/api/v1/trials/\d+/(runner/metadata|progress|early_exit)", {})
    m.route("POST", r"/api/v1/checkpoints", {})
    return m
