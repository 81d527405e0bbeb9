"""The custom searcher's routes (0.37's ``GET /api/v1/experiments/{id}/searcher_events`` and
``POST /api/v1/experiments/{id}/searcher_operations``): wire shapes, event ids and acks, the
errors a runner can cause, and the reference's own ``LocalSearchRunner`` (0.37) driving a
search on our master (docs/reference/custom_searchers.md)."""

from __future__ import annotations

import json
import pathlib
import uuid
from typing import Any

import pytest
import requests
from _kit.custom_search import TRAIN_PY
from _kit.master import MasterProcess
from _kit.reference import REF, Ref

pytestmark = pytest.mark.e2e

CUSTOM = """
entrypoint: python3 train.py
searcher: {name: custom, metric: loss, smaller_is_better: true, unit: batches}
"""


class Api:
    def __init__(self, master: MasterProcess) -> None:
        self.url = master.url
        self.admin = master.session()

    def create(self, config: str = CUSTOM, activate: bool = True) -> int:
        r = self.admin.post(
            self.url + "/api/v1/experiments", json={"config": config, "activate": activate}
        )
        assert r.status_code == 200, r.text
        return int(r.json()["experiment"]["id"])

    def events(self, exp_id: int) -> list[dict[str, Any]]:
        r = self.admin.get(self.url + f"/api/v1/experiments/{exp_id}/searcher_events")
        assert r.status_code == 200, r.text
        return list(r.json()["searcherEvents"])

    def post(self, exp_id: int, ops: list[dict[str, Any]], event_id: int) -> requests.Response:
        body = {
            "experimentId": exp_id,
            "searcherOperations": ops,
            "triggeredByEvent": {"id": event_id},
        }
        return self.admin.post(
            self.url + f"/api/v1/experiments/{exp_id}/searcher_operations", json=body
        )

    def get(self, path: str) -> Any:
        r = self.admin.get(self.url + path)
        assert r.status_code == 200, r.text
        return r.json()

    def dev(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.admin.post(self.url + "/api/v1/dev" + path, json=body)
        assert r.status_code == 200, r.text
        return dict(r.json())


@pytest.mark.both_stores  # the queue lives in the search snapshot: SQLite and PostgreSQL
def test_events_acks_and_operations(master: MasterProcess) -> None:
    api = Api(master)
    exp = api.create()
    assert api.events(exp) == [{"id": 1, "initialOperations": {}}]
    rid = str(uuid.uuid4())
    create = {"createTrial": {"requestId": rid, "hyperparams": json.dumps({"lr": 0.5})}}

    # refused: an event that is not pending, a malformed operation; nothing changes
    r = api.post(exp, [create], 9)
    assert r.status_code == 400 and "not pending" in r.text
    r = api.post(exp, [{"createTrial": {"requestId": "x", "hyperparams": "{}"}}], 1)
    assert r.status_code == 400 and "UUID" in r.text
    assert api.events(exp) == [{"id": 1, "initialOperations": {}}]
    assert api.get(f"/api/v1/experiments/{exp}/trials")["trials"] == []

    progress = {"setSearcherProgress": {"progress": 0.25}}
    assert api.post(exp, [create, progress], 1).status_code == 200
    assert api.events(exp) == [{"id": 2, "trialCreated": {"requestId": rid}}]
    r = api.post(exp, [], 1)  # acknowledged already
    assert r.status_code == 400 and "not pending" in r.text
    assert api.get(f"/api/v1/experiments/{exp}")["experiment"]["progress"] == 0.25
    (trial,) = api.get(f"/api/v1/experiments/{exp}/trials")["trials"]
    assert trial["hparams"] == {"lr": 0.5}

    validate = {"trialOperation": {"validateAfter": {"requestId": rid, "length": "5"}}}
    assert api.post(exp, [validate], 2).status_code == 200
    alloc = api.dev(f"/trials/{trial['id']}/allocate", {})
    run = master.session(alloc["token"], allocation=True)
    op = run.get(master.url + f"/api/v1/trials/{trial['id']}/searcher/operation").json()
    assert op == {"op": {"validateAfter": {"length": "5"}}, "completed": False}
    body = {"op": {"length": 5}, "searcherMetric": 0.125}
    r = run.post(
        master.url + f"/api/v1/trials/{trial['id']}/searcher/completed_operation",
        json=body,
    )
    assert r.status_code == 200, r.text
    events = api.events(exp)
    assert events == [
        {
            "id": 3,
            "validationCompleted": {
                "requestId": rid,
                "metric": 0.125,
                "validateAfterLength": "5",
            },
        }
    ]

    assert api.post(exp, [{"closeTrial": {"requestId": rid}}], 3).status_code == 200
    assert api.dev(f"/allocations/{alloc['allocationId']}/exit", {"exitCode": 0})["trialState"] == (
        "STATE_COMPLETED"
    )
    assert api.events(exp) == [{"id": 4, "trialClosed": {"requestId": rid}}]

    # Shutdown(failure): the experiment ends ERROR; the runner then sees it inactive
    assert api.post(exp, [{"shutDown": {"failure": True}}], 4).status_code == 200
    assert api.get(f"/api/v1/experiments/{exp}")["experiment"]["state"] == "STATE_ERROR"
    assert api.events(exp) == [{"id": -1, "experimentInactive": {"experimentState": "STATE_ERROR"}}]
    r = api.post(exp, [], 4)
    assert r.status_code == 400 and "STATE_ERROR" in r.text
    r = api.admin.post(api.url + f"/api/v1/experiments/{exp}/continue", json={})
    assert r.status_code == 400 and "custom search" in r.text


def test_paused_and_not_custom(shared_master: MasterProcess) -> None:
    api = Api(shared_master)
    paused = api.create(activate=False)
    assert api.events(paused) == [
        {"id": -1, "experimentInactive": {"experimentState": "STATE_PAUSED"}}
    ]
    # Shutdown(cancel): CANCELED
    assert api.post(paused, [{"shutDown": {"cancel": True}}], 1).status_code == 200
    assert api.get(f"/api/v1/experiments/{paused}")["experiment"]["state"] == "STATE_CANCELED"
    single = api.create(
        "entrypoint: python3 train.py\nsearcher: {name: single, metric: loss, max_length: 1}\n"
    )
    r = api.admin.get(api.url + f"/api/v1/experiments/{single}/searcher_events")
    assert r.status_code == 400 and "custom" in r.text
    assert api.post(single, [], 1).status_code == 400
    searcher = {"name": "custom", "metric": "loss"}
    r = api.admin.post(api.url + "/searcher/preview", json={"searcher": searcher})
    assert r.status_code == 400 and "cannot be previewed" in r.text


# The reference's (0.37) LocalSearchRunner, in its own venv, with a two-trial search.
REF_RUNNER = r"""
import json, logging, pathlib, sys, uuid, warnings
from determined import searcher
from determined.experimental import client

warnings.simplefilter("ignore", FutureWarning)
url, model_dir, out = sys.argv[1:4]
client.login(master=url, user="determined", password="")

class TwoTrials(searcher.SearchMethod):
    def initial_operations(self, state):
        return [searcher.Create(uuid.uuid4(), {"x": x, "out": out}, None) for x in (0.1, 0.2)]
    def on_trial_created(self, state, request_id):
        return [searcher.ValidateAfter(request_id, 2)]
    def on_validation_completed(self, state, request_id, metric, train_length):
        return [searcher.Close(request_id)]
    def on_trial_closed(self, state, request_id):
        return [searcher.Shutdown()] if len(state.trials_closed) == 2 else []
    def on_trial_exited_early(self, state, request_id, exited_reason):
        return [searcher.Shutdown(failure=True)]
    def progress(self, state):
        return len(state.trials_closed) / 2

config = {
    "name": "ref-runner",
    "entrypoint": "python3 train.py",
    "max_restarts": 0,
    "searcher": {"name": "custom", "metric": "loss", "smaller_is_better": True},
}
runner = searcher.LocalSearchRunner(TwoTrials(), searcher_dir=pathlib.Path("sdir"))
exp_id = runner.run(config, model_dir=model_dir)
print(json.dumps({"id": exp_id, "completed": runner.state.experiment_completed}))
"""


@pytest.mark.skipif(not (REF / "bin" / "python").exists(), reason="no .refvenv")
def test_reference_local_search_runner(tmp_path: pathlib.Path) -> None:
    with MasterProcess(tmp_path / "master", cpu_slots=2) as master:
        model = tmp_path / "model"
        out = tmp_path / "out"
        model.mkdir()
        out.mkdir()
        (model / "train.py").write_text(TRAIN_PY)
        found = Ref(master, tmp_path / "ref").python(REF_RUNNER, str(model), str(out))
        assert found["completed"] is True
        api = Api(master)
        exp = api.get(f"/api/v1/experiments/{found['id']}")["experiment"]
        trials = api.get(f"/api/v1/experiments/{found['id']}/trials")["trials"]
    assert exp["state"] == "STATE_COMPLETED" and exp["progress"] == 1.0
    assert sorted(t["hparams"]["x"] for t in trials) == [0.1, 0.2]
    assert all(t["state"] == "STATE_COMPLETED" for t in trials)
