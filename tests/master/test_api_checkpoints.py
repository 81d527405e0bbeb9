"""determined/master/api/_checkpoints.py: runs/start and checkpoint records
(docs/reference/master.md §6 item 31)."""

from __future__ import annotations

import uuid

import pytest
from _kit.master import MasterProcess, Run

pytestmark = pytest.mark.e2e


def _ckpt(run: Run, steps: int = 10, **extra: object) -> dict:
    return {
        "uuid": str(uuid.uuid4()),
        "taskId": run.task_id,
        "allocationId": run.allocation_id,
        "reportTime": "2024-05-06T07:08:09.123456789Z",
        "resources": {"model.pt": "100", "opt/state.pt": "23"},
        "metadata": {"steps_completed": steps, "framework": "torch"},
        **extra,
    }


def test_runs_start_registers_storage_once(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    body = {"runId": run.trial_id, "checkpointStorage": {"type": "shared_fs", "host_path": "/x"}}
    first = run.post("/api/v1/runs/start", json=body).json()["storageId"]
    again = run.post("/api/v1/runs/start", json=body).json()["storageId"]
    assert first == again and isinstance(first, int)
    other = {"runId": run.trial_id, "checkpointStorage": {"type": "shared_fs", "host_path": "/y"}}
    assert run.post("/api/v1/runs/start", json=other).json()["storageId"] != first
    assert run.post("/api/v1/runs/start", json={"runId": 999999}).status_code == 403


def test_checkpoint_report_get_patch(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    assert run.metrics("validation", 10, {"loss": 0.25}).status_code == 200
    body = _ckpt(run)
    assert run.post("/api/v1/checkpoints", json=body).status_code == 200
    assert run.post("/api/v1/checkpoints", json=body).status_code == 200  # a retry
    got = run.trial.get(shared_master.url + f"/api/v1/checkpoints/{body['uuid']}").json()
    ckpt = got["checkpoint"]
    assert ckpt["state"] == "STATE_COMPLETED"
    assert ckpt["resources"] == {"model.pt": "100", "opt/state.pt": "23"}
    assert ckpt["training"]["trialId"] == run.trial_id
    assert ckpt["training"]["experimentId"] == run.experiment_id
    assert ckpt["training"]["searcherMetric"] == 0.25
    assert ckpt["training"]["validationMetrics"]["avgMetrics"] == {"loss": 0.25}
    assert ckpt["reportTime"].startswith("2024-05-06T07:08:09.123456")
    trial = run.get(f"/api/v1/trials/{run.trial_id}")["trial"]
    assert trial["checkpointCount"] == 1 and trial["totalCheckpointSize"] == "123"
    patch = {
        "checkpoints": [{"uuid": body["uuid"], "resources": {"resources": {"model.pt": "100"}}}]
    }
    assert run.trial.patch(shared_master.url + "/api/v1/checkpoints", json=patch).ok
    patch = {"checkpoints": [{"uuid": body["uuid"], "resources": {"resources": {}}}]}
    assert run.trial.patch(shared_master.url + "/api/v1/checkpoints", json=patch).ok
    ckpt = run.get(f"/api/v1/checkpoints/{body['uuid']}")["checkpoint"]
    assert ckpt["state"] == "STATE_DELETED" and ckpt["resources"] == {}


def test_checkpoint_errors(shared_master: MasterProcess) -> None:
    run, other = Run(shared_master), Run(shared_master)
    r = run.post("/api/v1/checkpoints", json=_ckpt(run, state="STATE_ERROR"))
    assert r.status_code == 400 and "STATE_COMPLETED" in r.json()["message"]
    bad = _ckpt(run)
    bad["metadata"] = {}
    r = run.post("/api/v1/checkpoints", json=bad)
    assert r.status_code == 400 and "steps_completed" in r.json()["message"]
    assert run.post("/api/v1/checkpoints", json=_ckpt(other)).status_code == 403
    conflict = _ckpt(run)
    assert run.post("/api/v1/checkpoints", json=conflict).status_code == 200
    conflict["resources"] = {"other": "1"}
    assert run.post("/api/v1/checkpoints", json=conflict).status_code == 409
    assert run.admin.get(shared_master.url + "/api/v1/checkpoints/nope").status_code == 404
    theirs = _ckpt(other)
    assert other.post("/api/v1/checkpoints", json=theirs).status_code == 200
    r = run.trial.get(shared_master.url + f"/api/v1/checkpoints/{theirs['uuid']}")
    assert r.status_code == 403
