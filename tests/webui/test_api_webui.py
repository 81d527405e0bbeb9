"""The web UI's HTTP side against a real master (no browser): pages and static files, the
``/api/v1/webui`` data endpoints, ASHA rungs from a real search, checkpoint download."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
import requests
from _kit.webui import Cluster, expected_training, expected_validation

pytestmark = pytest.mark.e2e


def test_pages_and_vendored_chart_library_are_served(cluster: Cluster) -> None:
    for path, marker in [
        ("/", 'data-page="experiments"'),
        (f"/experiments/{cluster.done}", 'data-page="experiment"'),
        ("/trials/1", 'data-page="trial"'),
        ("/login", 'data-page="login"'),
        # any id gets its page, which then says "not found" itself (not a bare JSON 404/422)
        ("/experiments/abc", 'data-page="experiment"'),
        ("/trials/987654", 'data-page="trial"'),
    ]:
        r = requests.get(cluster.url + path)  # the shells need no token; their data does
        assert r.status_code == 200 and marker in r.text, path
        assert r.headers["content-type"].startswith("text/html")
    js = requests.get(cluster.url + "/webui/static/vendor/uplot/uPlot.iife.min.js")
    assert js.status_code == 200 and "uPlot" in js.text
    charts = requests.get(cluster.url + "/webui/static/charts.js")
    assert charts.status_code == 200 and "function drawChart" in charts.text
    lic = requests.get(cluster.url + "/webui/static/vendor/uplot/LICENSE")
    assert "MIT License" in lic.text


def test_static_files_cannot_leave_their_directory(cluster: Cluster) -> None:
    for path in ["../_api_webui.py", "..%2F_api_webui.py", "vendor/../../_app.py", "nope.js"]:
        r = requests.get(cluster.url + "/webui/static/" + path)
        assert r.status_code == 404, path
        assert "def " not in r.text


def test_data_endpoints_need_a_user_token(cluster: Cluster) -> None:
    r = requests.get(cluster.url + "/api/v1/webui/trials/1/metrics")
    assert r.status_code == 401
    assert "log in" in r.json()["message"]


def test_trial_metrics_are_the_reported_rows_in_step_order(cluster: Cluster) -> None:
    trial = cluster.trials(cluster.done)[0]
    lr = trial["hparams"]["lr"]
    body = cluster.get(f"/api/v1/webui/trials/{trial['id']}/metrics?group=training")
    got = [[m["stepsCompleted"], m["metrics"]["loss"]] for m in body["metrics"]]
    assert got == expected_training(lr, 6)
    assert {m["group"] for m in body["metrics"]} == {"training"}
    both = cluster.get(f"/api/v1/webui/trials/{trial['id']}/metrics")["metrics"]
    assert len(both) == 6 + 3
    assert cluster.s.get(cluster.url + "/api/v1/webui/trials/999999/metrics").status_code == 404


def test_experiment_metrics_are_every_trials_searcher_metric(cluster: Cluster) -> None:
    body = cluster.get(f"/api/v1/webui/experiments/{cluster.done}/metrics")
    assert body["metric"] == "loss" and body["smallerIsBetter"] is True
    trials = {t["id"]: t for t in cluster.trials(cluster.done)}
    assert {t["trialId"] for t in body["trials"]} == set(trials)
    for t in body["trials"]:
        assert t["points"] == expected_validation(trials[t["trialId"]]["hparams"]["lr"], 6)
    acc = cluster.get(
        f"/api/v1/webui/experiments/{cluster.done}/metrics?group=training&metric=accuracy"
    )
    assert acc["trials"][0]["points"][-1] == [6, 0.06]


def test_original_config_is_the_submitted_yaml(cluster: Cluster) -> None:
    text = cluster.get(f"/api/v1/webui/experiments/{cluster.done}/original_config")
    assert "webui-done" in text["originalConfig"]
    assert "checkpoint_storage" not in text["originalConfig"]  # no defaults filled in


def test_checkpoint_download_is_a_tarball_of_its_files(cluster: Cluster) -> None:
    trial = cluster.trials(cluster.done)[0]
    ckpts = cluster.get(f"/api/v1/trials/{trial['id']}/checkpoints")["checkpoints"]
    live = [c for c in ckpts if c["state"] == "STATE_COMPLETED"]
    assert live
    uuid = live[-1]["uuid"]
    r = cluster.s.get(cluster.url + f"/api/v1/webui/checkpoints/{uuid}/download")
    assert r.status_code == 200, r.text
    assert uuid in r.headers["content-disposition"]
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
        member = tar.extractfile(f"{uuid}/state.json")
        assert member is not None
        assert json.loads(member.read()) == {"steps": live[-1]["metadata"]["steps_completed"]}
    missing = cluster.s.get(cluster.url + "/api/v1/webui/checkpoints/no-such-uuid/download")
    assert missing.status_code == 404


def test_asha_rungs_show_lengths_metrics_and_promotions(cluster: Cluster) -> None:
    exp_id = cluster.finished_asha()
    body = cluster.get(f"/api/v1/webui/experiments/{exp_id}/rungs")
    assert body["searcher"] == "async_halving"
    [bracket] = body["brackets"]
    rung0, rung1 = bracket["rungs"]
    assert (rung0["length"], rung1["length"]) == (2, 4)
    trials = {t["id"]: t for t in cluster.trials(exp_id)}
    assert {t["trialId"] for t in rung0["trials"]} == set(trials)
    for t in rung0["trials"]:
        assert t["metric"] == trials[t["trialId"]]["hparams"]["lr"] / 2
    promoted = {t["trialId"] for t in rung0["trials"] if t["promoted"]}
    assert promoted == {t["trialId"] for t in rung1["trials"]}
    assert 0 < len(promoted) < len(trials)  # how many depends on the order results arrive
    # the promoted ones trained on to 4 batches, the others stopped at 2
    for tid, t in trials.items():
        assert t["totalBatchesProcessed"] == (4 if tid in promoted else 2)
    random_rungs = cluster.get(f"/api/v1/webui/experiments/{cluster.done}/rungs")
    assert random_rungs == {"searcher": "random", "brackets": []}
