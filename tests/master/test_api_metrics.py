"""determined/master/api/_trials.py metrics + store/_metrics.py over HTTP
(docs/reference/master.md §6 items 25–30)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from _kit.master import MasterProcess, Run

from determined.master.store import _metrics, make_engine, sqlite_url

pytestmark = pytest.mark.e2e


def _rows(run: Run, group: str) -> list[tuple[int, dict]]:
    trial = run.get(f"/api/v1/trials/{run.trial_id}")["trial"]
    assert trial["id"] == run.trial_id
    engine = make_engine(sqlite_url(run.master.data_dir))  # what the master committed
    with engine.connect() as conn:
        rows = _metrics.list_rows(conn, run.trial_id, group)
    engine.dispose()
    return [(int(r["steps_completed"]), r["metrics"]) for r in rows]


def test_stale_run_id_is_400(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    r = run.metrics("training", 1, {"loss": 1.0}, run_id=run.run_id + 7)
    assert r.status_code == 400 and "invalid run id" in r.json()["message"]


def test_bad_groups_are_400(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    for group in ("", "a.b"):
        r = run.metrics(group, 1, {"loss": 1.0})
        assert r.status_code == 400, group
        assert "group" in r.json()["message"]
    r = run.metrics("training", 1, {"epoch": "one"})
    assert r.status_code == 400 and "epoch" in r.json()["message"]


def test_same_step_merges_and_conflicts_are_400(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    assert run.metrics("training", 5, {"loss": 1.0}).status_code == 200
    assert run.metrics("training", 5, {"acc": 0.5}).status_code == 200
    assert run.metrics("training", 5, {"loss": 1.0}).status_code == 200  # a retry: no change
    r = run.metrics("training", 5, {"loss": 2.0})
    assert r.status_code == 400 and "already reported" in r.json()["message"]
    assert run.metrics("training", 5, {}, batchMetrics=[{"loss": 1}]).status_code == 200
    r = run.metrics("training", 5, {}, batchMetrics=[{"loss": 9}])
    assert r.status_code == 400 and "batchMetrics" in r.json()["message"]
    assert _rows(run, "training") == [(5, {"loss": 1.0, "acc": 0.5})]
    summary = run.get(f"/api/v1/trials/{run.trial_id}")["trial"]["summaryMetrics"]
    assert summary["avg_metrics"]["loss"]["count"] == 1
    assert summary["avg_metrics"]["acc"]["last"] == 0.5


def test_generic_groups_and_aliases(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    assert run.metrics("inference", 3, {"x": 1}).status_code == 200
    body = {
        "trainingMetrics": {
            "trialId": run.trial_id,
            "trialRunId": run.run_id,
            "stepsCompleted": "7",  # the gateway's int64-as-string
            "metrics": {"avgMetrics": {"loss": "NaN"}},
        }
    }
    assert run.post(f"/api/v1/trials/{run.trial_id}/training_metrics", json=body).status_code == 200
    trial = run.get(f"/api/v1/trials/{run.trial_id}")["trial"]
    assert trial["totalBatchesProcessed"] == 7
    assert trial["summaryMetrics"]["inference"]["x"]["last"] == 1


def test_non_finite_and_nested_values_are_stored_json_safe(shared_master: MasterProcess) -> None:
    run = Run(shared_master)

    def report(steps: int, avg: dict[str, Any]) -> int:
        body = {
            "group": "training",
            "metrics": {"trialId": run.trial_id, "trialRunId": run.run_id, "stepsCompleted": steps,
                        "metrics": {"avgMetrics": avg}},
        }  # fmt: skip
        # Bare NaN / Infinity in the body, as Python's json writes them (requests refuses to).
        headers = {"Content-Type": "application/json"}
        path = f"{shared_master.url}/api/v1/trials/{run.trial_id}/metrics"
        return run.trial.post(path, data=json.dumps(body), headers=headers).status_code

    assert report(1, {"loss": 1.0, "name": "a", "ok": True}) == 200  # (the hot lane takes these)
    assert report(2, {"loss": math.nan, "x": None}) == 200
    assert report(3, {"loss": -math.inf, "d": {"v": math.inf}}) == 200
    assert report(4, {"l": [1.5, math.nan]}) == 200
    assert _rows(run, "training") == [
        (1, {"loss": 1.0, "name": "a", "ok": True}),
        (2, {"loss": "NaN", "x": None}),
        (3, {"loss": "-Infinity", "d": {"v": "Infinity"}}),
        (4, {"l": [1.5, "NaN"]}),
    ]


def test_rollback_archives_old_runs_past_the_resume_point(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    for steps in (10, 20, 30):
        assert run.metrics("training", steps, {"loss": float(steps)}).status_code == 200
    assert run.metrics("validation", 20, {"loss": 2.0}).status_code == 200
    assert run.metrics("validation", 30, {"loss": 3.0}).status_code == 200
    run.exit(1)  # crashed after step 30; resumes from a checkpoint at step 20
    run.allocate()
    assert run.run_id == 2
    assert run.metrics("training", 20, {"loss": 200.0}).status_code == 200
    # Same partition: old rows at >= 20 archived; other partitions: only > 20.
    assert _rows(run, "training") == [(10, {"loss": 10.0}), (20, {"loss": 200.0})]
    assert _rows(run, "validation") == [(20, {"loss": 2.0})]
    trial = run.get(f"/api/v1/trials/{run.trial_id}")["trial"]
    assert trial["totalBatchesProcessed"] == 20
    assert trial["latestValidation"]["totalBatches"] == 20
    assert trial["summaryMetrics"]["avg_metrics"]["loss"]["count"] == 2
    assert trial["summaryMetrics"]["avg_metrics"]["loss"]["max"] == 200.0
    assert run.metrics("training", 30, {"loss": 300.0}).status_code == 200
    assert _rows(run, "training")[-1] == (30, {"loss": 300.0})


def test_latest_and_best_validation(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    path = f"/api/v1/experiments/{run.experiment_id}/searcher/best_searcher_validation_metric"
    r = run.trial.get(shared_master.url + path)
    assert r.status_code == 404
    assert run.metrics("validation", 10, {"acc": 0.1}).status_code == 200  # no searcher metric
    assert run.get(f"/api/v1/trials/{run.trial_id}")["trial"]["latestValidation"] is None
    assert run.metrics("validation", 20, {"loss": 0.7}).status_code == 200
    assert run.metrics("validation", 30, {"loss": 0.9}).status_code == 200
    trial = run.get(f"/api/v1/trials/{run.trial_id}")["trial"]
    assert trial["latestValidation"]["totalBatches"] == 30
    assert trial["bestValidation"]["totalBatches"] == 20
    assert run.trial.get(shared_master.url + path).json() == {"metric": 0.7}


def test_the_dev_endpoint_gives_the_group_commits_figures(shared_master: MasterProcess) -> None:
    """``GET /api/v1/dev/group-commit`` (admins, ``--dev-endpoints``): what the reports'
    writes waited inside the master; ``POST .../reset`` starts afresh."""
    run = Run(shared_master)
    url = shared_master.url + "/api/v1/dev/group-commit"
    assert run.admin.post(url + "/reset").status_code == 200
    for step in range(1, 6):
        assert run.metrics("training", step, {"loss": 1.0 / step}).status_code == 200
    figures = run.get("/api/v1/dev/group-commit")
    assert figures["writes"] >= 5 and figures["commits"] >= 1
    assert figures["waitMs"]["max"] >= figures["waitMs"]["p50"] > 0
    assert run.trial.get(url).status_code in (401, 403)  # an allocation's token is no admin
    assert run.trial.post(url + "/reset").status_code in (401, 403)
    assert run.admin.post(url + "/reset").status_code == 200
    assert run.get("/api/v1/dev/group-commit")["writes"] == 0
