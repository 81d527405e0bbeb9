"""determined/master/api/_experiments.py reads: an experiment's trials sorted, filtered and
paged as Determined 0.37's SDK asks (``list_trials(sort_by, order_by)``, ``iter_trials``)."""

from __future__ import annotations

import base64

import pytest
from _kit.master import MasterProcess, Run

pytestmark = pytest.mark.e2e

RANDOM = """
name: three
entrypoint: python3 train.py
searcher:
  name: random
  metric: loss
  max_length: 10
  max_trials: 3
  max_concurrent_trials: 3
hyperparameters:
  lr: {type: double, minval: 0.1, maxval: 1.0}
"""


def test_trials_sorted_filtered_and_paged(shared_master: MasterProcess) -> None:
    run = Run(shared_master, RANDOM)
    path = f"/api/v1/experiments/{run.experiment_id}/trials"
    ids = [t["id"] for t in run.get(path)["trials"]]
    assert len(ids) == 3 and ids == sorted(ids)
    # trial i validates loss at steps 10 * (i + 1); the last trial reports nothing
    assert run.trial_id == ids[0]  # Run allocated the first one
    for i, (trial_id, loss) in enumerate(zip(ids[:2], [0.7, 0.3], strict=True)):
        if trial_id != run.trial_id:
            run.trial_id = trial_id
            run.allocate()
        assert run.metrics("training", 10 * (i + 1), {"loss": loss}).status_code == 200
        assert run.metrics("validation", 10 * (i + 1), {"loss": loss}).status_code == 200

    def order(**params: object) -> list[int]:
        return [t["id"] for t in run.get(path, params=params)["trials"]]

    assert order(sortBy="SORT_BY_ID", orderBy="ORDER_BY_DESC") == ids[::-1]
    best = order(sortBy="SORT_BY_BEST_VALIDATION_METRIC", orderBy="ORDER_BY_ASC")
    assert best == [ids[1], ids[0], ids[2]]  # no validation: last
    batches = order(sortBy="SORT_BY_BATCHES_PROCESSED", orderBy="ORDER_BY_DESC")
    assert batches == [ids[1], ids[0], ids[2]]
    assert order(states="STATE_RUNNING") == ids[:2]  # the others show RUNNING only when live
    # paged as read_paginated pages: the next offset is the last endIndex
    seen, offset = [], 0
    while True:
        body = run.get(path, params={"offset": offset, "limit": 2, "sortBy": "SORT_BY_ID"})
        seen += [t["id"] for t in body["trials"]]
        if body["pagination"]["endIndex"] >= body["pagination"]["total"]:
            break
        offset = body["pagination"]["endIndex"]
    assert seen == ids
    r = run.admin.get(shared_master.url + path, params={"sortBy": "SORT_BY_NOPE"})
    assert r.status_code == 400 and "SORT_BY_RESTARTS" in r.json()["message"]


def test_unknown_routes_answer_in_the_gateways_error_shape(shared_master: MasterProcess) -> None:
    admin = shared_master.session()
    r = admin.get(shared_master.url + "/api/v1/no/such/thing")
    assert r.status_code == 404 and r.json() == {"code": 5, "message": "Not Found", "details": []}
    r = admin.put(shared_master.url + "/api/v1/experiments")
    assert r.status_code == 405 and r.json()["code"] == 12
    assert r.json()["message"] == "Method Not Allowed"


def test_an_experiment_shows_its_model_definitions_size(shared_master: MasterProcess) -> None:
    """``GET /experiments/{id}`` reads the model definition's length, not its bytes: the size
    is the stored tar.gz's (``model_def``), as the experiment list shows it."""
    s = shared_master.session()
    content = base64.b64encode(b"print('train')\n" * 500).decode()
    body = {
        "config": RANDOM,
        "modelDefinition": [{"path": "train.py", "type": "0", "content": content}],
        "activate": False,
    }
    r = s.post(shared_master.url + "/api/v1/experiments", json=body)
    assert r.status_code == 200, r.text
    exp_id = r.json()["experiment"]["id"]
    tgz = s.get(shared_master.url + f"/api/v1/experiments/{exp_id}/model_def").json()["b64Tgz"]
    size = len(base64.b64decode(tgz))
    assert size > 100
    shown = s.get(shared_master.url + f"/api/v1/experiments/{exp_id}").json()
    assert shown["experiment"]["modelDefinitionSize"] == size
    assert shown["config"] == shown["experiment"]["config"] and shown["config"]["name"] == "three"
    listed = s.get(
        shared_master.url + "/api/v1/experiments", params={"experimentIdFilter.incl": exp_id}
    ).json()["experiments"]
    assert [e["modelDefinitionSize"] for e in listed] == [size]
    missing = s.get(shared_master.url + "/api/v1/experiments/999999")
    assert missing.status_code == 404 and "experiment 999999 not found" in missing.text
