"""Fixtures for on-cluster Trainer tests: trial 3 of experiment 7 on a RecordingMaster."""

from __future__ import annotations

import pathlib

import pytest
from _kit.pytorch_cluster import Cluster, trial_env
from _kit.recording_master import RecordingMaster


@pytest.fixture
def cluster(
    recording_master: RecordingMaster, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> Cluster:
    storage = tmp_path / "storage"
    env = trial_env(recording_master.url, storage)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    m = recording_master
    m.route("POST", r"/api/v1/runs/start", {"storageId": 1})
    m.route("GET", r"/api/v1/allocations/[^/]+/signals/preemption", {"preempt": False})
    m.route("POST", r"/api/v1/allocations/[^/]+/signals/ack_preemption", {})
    m.route("POST", r"/api/v1/trials/\d+/metrics", {})
    m.route("POST", r"/api/v1/trials/\d+/(runner/metadata|progress|early_exit)", {})
    m.route("POST", r"/api/v1/checkpoints", {})
    m.route("GET", r"/api/v1/experiments/7/searcher/best_searcher_validation_metric", (404, {}))
    return Cluster(m, storage)


def pytest_configure(config: pytest.Config) -> None:
    # The test Recorder overrides the deprecated on_checkpoint_end on purpose (hook order).
    config.addinivalue_line(
        "filterwarnings", "ignore:callback 'rec' overrides on_checkpoint_end:FutureWarning"
    )
