"""Fixtures for Core API tests: the environment a master gives a trial, pointed at a
RecordingMaster with the routes every trial touches (ids and config: ``_kit.core_env``)."""

from __future__ import annotations

import pathlib

import pytest
from _kit.core_env import trial_env
from _kit.recording_master import RecordingMaster


@pytest.fixture
def cluster_trial(
    recording_master: RecordingMaster, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> RecordingMaster:
    """Makes ``det.get_cluster_info()`` describe trial 3 of experiment 7, talking to the
    recording master; checkpoints go to ``tmp_path / "storage"``."""
    for k, v in trial_env(recording_master.url, tmp_path / "storage").items():
        monkeypatch.setenv(k, v)
    m = recording_master
    m.route("POST", r"/api/v1/runs/start", {"storageId": 1})
    m.route("GET", r"/api/v1/allocations/[^/]+/signals/preemption", {"preempt": False})
    m.route("POST", r"/api/v1/allocations/[^/]+/signals/ack_preemption", {})
    m.route("POST", r"/api/v1/trials/\d+/metrics", {})
    m.route("POST", r"/api/v1/trials/\d+/(runner/metadata|progress|early_exit)", {})
    m.route("POST", r"/api/v1/checkpoints", {})
    return m
