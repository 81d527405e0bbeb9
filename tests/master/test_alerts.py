"""core.Context.alert(), TrainContext.set_metadata()/get_metadata() and
get_experiment_best_validation() from a real trial on a real master, and the endpoints behind
them (determined/master/api/_alerts.py; docs/reference/master.md §3.2)."""

from __future__ import annotations

import json
import pathlib

import pytest
from _kit.cli import Det
from _kit.master import MasterProcess, Run
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e

TRAIN_PY = r"""
import json, pathlib
import determined as det
from determined import core

info = det.get_cluster_info()
out = pathlib.Path(info.trial.hparams["out"])
with core.init() as ctx:
    seen = {"best_before": ctx.train.get_experiment_best_validation()}
    seen["metadata_before"] = ctx.train.get_metadata()
    seen["set"] = ctx.train.set_metadata({"stage": "warmup", "nested": {"a": [1, 2]}})
    seen["replaced"] = ctx.train.set_metadata({"stage": "done"})
    seen["metadata_after"] = ctx.train.get_metadata()
    for op in ctx.searcher.operations():
        ctx.train.report_validation_metrics(op.length, {"loss": 0.25})
        op.report_completed(0.25)
    seen["best_after"] = ctx.train.get_experiment_best_validation()
    ctx.alert(title="loss spiked", description="loss went\nfrom 0.1 to 9", level="warn")
    ctx.alert(title="plain")  # level defaults to info
    ctx.alert(description="odd level", level="critical")  # 0.37 sends INFO for this
    (out / "seen.json").write_text(json.dumps(seen))
"""


def _config(out: pathlib.Path) -> dict:
    return {
        "name": "alerts",
        "entrypoint": "python3 train.py",
        "max_restarts": 0,
        "searcher": {"name": "single", "metric": "loss", "max_length": 2},
        "hyperparameters": {"out": str(out)},
        "bind_mounts": [{"host_path": str(out), "container_path": str(out)}],  # the sandbox's
    }


def test_a_trials_alerts_metadata_and_best_validation(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    exp_id = cluster.create(_config(tmp_path), {"train.py": TRAIN_PY})
    cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=60)
    [trial] = cluster.trials(exp_id)
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {
        "best_before": None,
        "metadata_before": {},
        "set": {"stage": "warmup", "nested": {"a": [1, 2]}},
        "replaced": {"stage": "done"},
        "metadata_after": {"stage": "done"},  # replaced, not merged (as in 0.37)
        "best_after": 0.25,
    }
    alerts = cluster.get(f"/api/v1/experiments/{exp_id}/alerts")["alerts"]
    assert [(a["title"], a["description"], a["level"], a["trialId"]) for a in alerts] == [
        ("loss spiked", "loss went\nfrom 0.1 to 9", "LOG_LEVEL_WARNING", trial["id"]),
        ("plain", "", "LOG_LEVEL_INFO", trial["id"]),
        ("", "odd level", "LOG_LEVEL_INFO", trial["id"]),
    ]
    assert all(a["experimentId"] == exp_id and a["createdAt"].endswith("Z") for a in alerts)

    described = Det(tmp_path / "home", cluster.url).ok("e", "describe", str(exp_id))
    section = described.split("\nAlerts:\n")[1]
    rows = [[c.strip() for c in line.split("|")] for line in section.splitlines()[2:]]
    assert [(r[0], r[1], r[3], r[4]) for r in rows if r[0]] == [
        (str(exp_id), str(trial["id"]), "WARNING", "loss spiked"),
        (str(exp_id), str(trial["id"]), "INFO", "plain"),
        (str(exp_id), str(trial["id"]), "INFO", ""),
    ]
    csv = Det(tmp_path / "home", cluster.url).ok("e", "describe", str(exp_id), "--csv")
    assert "Experiment ID,Trial ID,Time,Level,Title,Description" in csv


def test_alert_and_metadata_endpoints_check_their_input(shared_master: MasterProcess) -> None:
    run, other = Run(shared_master), Run(shared_master)
    body = {"data": {"title": "t", "level": "LOG_LEVEL_ERROR"}, "experimentId": run.experiment_id}
    assert run.post("/api/v1/webhooks/custom", json={**body, "trialId": run.trial_id}).ok
    assert run.post("/api/v1/webhooks/custom", json=body).ok  # no trial: the experiment's
    r = run.post("/api/v1/webhooks/custom", json={**body, "data": {"level": "LOUD"}})
    assert r.status_code == 400 and "LOG_LEVEL_WARNING" in r.json()["message"]
    # a trial's token reaches only its own experiment and trial
    wrong = {**body, "experimentId": other.experiment_id}
    assert run.post("/api/v1/webhooks/custom", json=wrong).status_code == 403
    admin = shared_master.session()
    r = admin.post(
        shared_master.url + "/api/v1/webhooks/custom", json={**wrong, "trialId": run.trial_id}
    )
    assert r.status_code == 400 and "belongs to experiment" in r.json()["message"]
    r = admin.post(
        shared_master.url + "/api/v1/webhooks/custom", json={**body, "experimentId": 9999}
    )
    assert r.status_code == 404
    listed = run.get(f"/api/v1/experiments/{run.experiment_id}/alerts")["alerts"]
    assert [(a["level"], a["trialId"]) for a in listed] == [
        ("LOG_LEVEL_ERROR", run.trial_id),
        ("LOG_LEVEL_ERROR", None),
    ]
    only = run.get(f"/api/v1/experiments/{run.experiment_id}/alerts?trialId={run.trial_id}")
    assert len(only["alerts"]) == 1

    path = f"/api/v1/runs/{run.trial_id}/metadata"
    assert run.get(path) == {"metadata": {}}
    assert run.post(path, json={"metadata": {"k": 1}, "runId": run.trial_id}).json() == {
        "metadata": {"k": 1}
    }
    assert run.get(path) == {"metadata": {"k": 1}}
    assert run.post(path, json={"metadata": [1]}).status_code == 400
    assert run.post(path, json={"metadata": {}, "runId": run.trial_id + 1}).status_code == 400
    assert (
        run.post(f"/api/v1/runs/{other.trial_id}/metadata", json={"metadata": {}}).status_code
        == 403
    )

    # deleting the experiment deletes its alerts and run metadata with it
    run.exit(0)
    r = admin.delete(shared_master.url + f"/api/v1/experiments/{run.experiment_id}")
    assert r.status_code == 200, r.text
    r = admin.get(shared_master.url + f"/api/v1/experiments/{run.experiment_id}/alerts")
    assert r.status_code == 404
