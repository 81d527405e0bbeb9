"""determined/master/api/_metrics.py: a trial's workloads and the metric streams the reference
SDK reads, over HTTP against a real master (trials driven through the dev endpoints)."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
import requests
from _kit.master import MasterProcess, Run

pytestmark = pytest.mark.e2e


def _checkpoint(run: Run, steps: int) -> str:
    body = {
        "uuid": str(uuid.uuid4()),
        "taskId": run.task_id,
        "allocationId": run.allocation_id,
        "resources": {"w.pt": "10"},
        "metadata": {"steps_completed": steps},
    }
    assert run.post("/api/v1/checkpoints", json=body).status_code == 200
    return str(body["uuid"])


def _reported(run: Run) -> str:
    """Training at 1, 2 (with batch metrics), validation and a checkpoint at 2."""
    assert run.metrics("training", 1, {"loss": 1.0}).status_code == 200
    r = run.metrics("training", 2, {"loss": 0.5}, batchMetrics=[{"loss": 0.6}, {"loss": 0.4}])
    assert r.status_code == 200
    assert run.metrics("validation", 2, {"loss": 0.7}).status_code == 200
    return _checkpoint(run, 2)


def _workloads(run: Run, **params: object) -> dict:
    return dict(run.get(f"/api/v1/trials/{run.trial_id}/workloads", params=params))


def test_workloads_order_kinds_and_shapes(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    ckpt = _reported(run)
    body = _workloads(run)
    kinds = [(next(iter(w)), next(iter(w.values()))["totalBatches"]) for w in body["workloads"]]
    assert kinds == [("training", 1), ("training", 2), ("validation", 2), ("checkpoint", 2)]
    assert body["pagination"] == {
        "offset": 0,
        "limit": 0,
        "startIndex": 0,
        "endIndex": 4,
        "total": 4,
    }
    training = body["workloads"][1]["training"]
    assert training["metrics"] == {"avgMetrics": {"loss": 0.5}}  # no batch metrics unless asked
    assert training["numInputs"] == 0 and training["endTime"].endswith("Z")
    assert body["workloads"][2]["validation"]["metrics"]["avgMetrics"] == {"loss": 0.7}
    checkpoint = body["workloads"][3]["checkpoint"]
    assert checkpoint["uuid"] == ckpt and checkpoint["state"] == "STATE_COMPLETED"
    assert checkpoint["resources"] == {"w.pt": "10"}
    batch = _workloads(run, includeBatchMetrics="true")["workloads"][1]["training"]
    assert batch["metrics"]["batchMetrics"] == [{"loss": 0.6}, {"loss": 0.4}]


def test_workloads_paging_filters_and_errors(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    _reported(run)
    # read as the reference's read_paginated does: the next offset is the last endIndex
    seen, offset = [], 0
    while True:
        page = _workloads(run, offset=offset, limit=3)
        seen += page["workloads"]
        if page["pagination"]["endIndex"] >= page["pagination"]["total"]:
            break
        offset = page["pagination"]["endIndex"]
    assert len(seen) == 4 and seen == _workloads(run)["workloads"]
    newest = _workloads(run, orderBy="ORDER_BY_DESC", limit=1)["workloads"]
    assert list(newest[0]) == ["checkpoint"]
    only = _workloads(run, filter="FILTER_OPTION_VALIDATION")["workloads"]
    assert [list(w) for w in only] == [["validation"]]
    both = _workloads(run, filter="FILTER_OPTION_CHECKPOINT_OR_VALIDATION")["workloads"]
    assert [list(w) for w in both] == [["validation"], ["checkpoint"]]
    url = shared_master.url + f"/api/v1/trials/{run.trial_id}/workloads"
    r = run.admin.get(url, params={"filter": "FILTER_OPTION_NOPE"})
    assert r.status_code == 400 and "FILTER_OPTION_VALIDATION" in r.json()["message"]
    assert run.admin.get(shared_master.url + "/api/v1/trials/999999/workloads").status_code == 404
    other = Run(shared_master)
    assert other.trial.get(url).status_code == 403  # another trial's token


def _stream(session: requests.Session, url: str, **params: object) -> list[dict]:
    r = session.get(url, params=params, stream=True, timeout=30)
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.iter_lines() if line]


def test_metric_streams_of_a_finished_trial(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    _reported(run)
    assert run.metrics("inference", 2, {"acc": 0.9}).status_code == 200
    run.exit(0)  # no ack: the trial ends COMPLETED, so the streams end too
    base = shared_master.url + "/api/v1/trials/metrics/"
    lines = _stream(run.admin, base + "trial_metrics", trialIds=run.trial_id, group="training")
    reports = [m for line in lines for m in line["result"]["metrics"]]
    assert [(m["totalBatches"], m["group"], m["trialRunId"]) for m in reports] == [
        (1, "training", run.run_id),
        (2, "training", run.run_id),
    ]
    assert reports[1]["metrics"] == {
        "avg_metrics": {"loss": 0.5},
        "batch_metrics": [{"loss": 0.6}, {"loss": 0.4}],
    }
    assert reports[0]["trialId"] == run.trial_id and reports[0]["archived"] is False
    lines = _stream(run.admin, base + "validation_metrics", trialIds=run.trial_id)
    [val] = [m for line in lines for m in line["result"]["metrics"]]
    assert val["metrics"] == {"validation_metrics": {"loss": 0.7}} and val["group"] == "validation"
    lines = _stream(run.admin, base + "trial_metrics", trialIds=run.trial_id, group="inference")
    assert [m["metrics"] for line in lines for m in line["result"]["metrics"]] == [
        {"avg_metrics": {"acc": 0.9}}
    ]
    r = run.admin.get(base + "trial_metrics", params={"group": "training"})
    assert r.status_code == 400 and "trialIds" in r.json()["message"]
    r = run.admin.get(base + "trial_metrics", params={"trialIds": 999999, "group": "training"})
    assert r.status_code == 404


def test_metric_stream_follows_a_live_trial_until_it_ends(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    assert run.metrics("training", 1, {"loss": 1.0}).status_code == 200
    got: list[dict] = []
    url = shared_master.url + "/api/v1/trials/metrics/trial_metrics"
    reader = threading.Thread(
        target=lambda: got.extend(_stream(run.admin, url, trialIds=run.trial_id, group="training"))
    )
    reader.start()
    time.sleep(0.8)
    assert reader.is_alive()  # the trial still runs: the stream waits for more
    assert run.metrics("training", 2, {"loss": 0.5}).status_code == 200
    run.exit(0)
    reader.join(15)
    assert not reader.is_alive()
    steps = [m["totalBatches"] for line in got for m in line["result"]["metrics"]]
    assert steps == [1, 2]
