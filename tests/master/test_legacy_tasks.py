"""0.37's legacy ``GET /tasks`` (issue #20 item 6): every live allocation by id, with the Go
structs' snake_case field names, the same allocations ``GET /api/v1/tasks`` lists."""

from __future__ import annotations

import pathlib

import pytest
import requests
from _kit.trial_cluster import Cluster, config, wait_file

pytestmark = pytest.mark.e2e


def test_legacy_tasks_lists_live_allocations(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    exp_id = cluster.create(config(out, max_length=10000, sleep=0.05))
    trial = cluster.wait_trial(exp_id, "STATE_RUNNING", "RUNNING", timeout=30)
    wait_file(out / f"{trial['id']}.1.pid")
    legacy = cluster.s.get(cluster.url + "/tasks")
    assert legacy.status_code == 200 and legacy.headers["content-type"] == "application/json"
    [(allocation_id, summary)] = legacy.json().items()
    assert summary["task_id"] == trial["taskId"] and summary["allocation_id"] == allocation_id
    assert summary["slots_needed"] == 1 and summary["resource_pool"] == "default"
    assert {"resources_id", "allocation_id", "agent_devices"} <= set(summary["resources"][0])
    v1 = cluster.get("/api/v1/tasks")["allocationIdToSummary"]
    assert set(v1) == {allocation_id}
    assert requests.get(cluster.url + "/tasks", timeout=10).status_code == 401
    assert cluster.post(f"/api/v1/experiments/{exp_id}/kill").status_code == 200
    cluster.wait_experiment(exp_id, "STATE_CANCELED", timeout=30)
    assert cluster.s.get(cluster.url + "/tasks").json() == {}
