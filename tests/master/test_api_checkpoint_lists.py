"""determined/master/api/_checkpoint_lists.py: checkpoint listings sorted, filtered and paged as
Determined 0.37's SDK asks (``list_checkpoints(sort_by, order_by, max_results)``)."""

from __future__ import annotations

import uuid

import pytest
from _kit.master import MasterProcess, Run

pytestmark = pytest.mark.e2e


def _trial_with_checkpoints(master: MasterProcess) -> tuple[Run, dict[int, str]]:
    """Validations (loss, acc) at steps 1..4 with a checkpoint each; step 5 has a checkpoint
    but no validation."""
    run = Run(master)
    uuids = {}
    for steps, loss in [(1, 0.5), (2, 0.2), (3, 0.9), (4, 0.4), (5, None)]:
        if loss is not None:
            r = run.metrics("validation", steps, {"loss": loss, "acc": 1 - loss})
            assert r.status_code == 200
        body = {
            "uuid": str(uuid.uuid4()),
            "taskId": run.task_id,
            "allocationId": run.allocation_id,
            "resources": {"w": "1"},
            "metadata": {"steps_completed": steps},
        }
        assert run.post("/api/v1/checkpoints", json=body).status_code == 200
        uuids[steps] = str(body["uuid"])
    return run, uuids


def _steps(run: Run, path: str, **params: object) -> list[int]:
    body = run.get(path, params=params)
    return [c["metadata"]["steps_completed"] for c in body["checkpoints"]]


def test_sorting_orders_and_limits(shared_master: MasterProcess) -> None:
    run, uuids = _trial_with_checkpoints(shared_master)
    for path in (
        f"/api/v1/trials/{run.trial_id}/checkpoints",
        f"/api/v1/experiments/{run.experiment_id}/checkpoints",
    ):
        assert _steps(run, path) == [1, 2, 3, 4, 5]  # unsorted: by steps
        # the SDK's default: searcher metric, best first (smaller is better); none last
        best = _steps(run, path, sortByAttr="SORT_BY_SEARCHER_METRIC")
        assert best == [2, 4, 1, 3, 5]
        worst = _steps(run, path, sortByAttr="SORT_BY_SEARCHER_METRIC", orderBy="ORDER_BY_DESC")
        assert worst == [3, 1, 4, 2, 5]
        assert _steps(run, path, sortByMetric="acc", orderBy="ORDER_BY_DESC", limit=2) == [2, 4]
        assert _steps(run, path, sortByAttr="SORT_BY_BATCH_NUMBER", orderBy="ORDER_BY_DESC") == [
            5,
            4,
            3,
            2,
            1,
        ]
        top = run.get(path, params={"sortByAttr": "SORT_BY_SEARCHER_METRIC", "limit": 1})
        assert [c["uuid"] for c in top["checkpoints"]] == [uuids[2]]
        assert top["pagination"] == {
            "offset": 0,
            "limit": 1,
            "startIndex": 0,
            "endIndex": 1,
            "total": 5,
        }
        assert _steps(run, path, offset=3) == [4, 5]


def test_state_filter_and_bad_sort(shared_master: MasterProcess) -> None:
    run, uuids = _trial_with_checkpoints(shared_master)
    patch = {"checkpoints": [{"uuid": uuids[3], "resources": {"resources": {}}}]}
    assert run.trial.patch(shared_master.url + "/api/v1/checkpoints", json=patch).ok
    path = f"/api/v1/trials/{run.trial_id}/checkpoints"
    assert _steps(run, path, states="STATE_COMPLETED") == [1, 2, 4, 5]
    assert _steps(run, path, states="STATE_DELETED") == [3]
    r = run.admin.get(shared_master.url + path, params={"sortByAttr": "SORT_BY_NOPE"})
    assert r.status_code == 400 and "SORT_BY_SEARCHER_METRIC" in r.json()["message"]
