"""0.37's runs routes (``POST /api/v1/runs`` and ``/runs/{kill,archive,unarchive,pause,resume,
delete,move}``) on a master without a resource manager (the dev endpoints run the trials),
read and driven through 0.37's own bindings where its SDK has them."""

from __future__ import annotations

import json
import pathlib

import pytest
from _kit.master import MasterProcess, Run
from _kit.reference import Ref

pytestmark = [pytest.mark.e2e, pytest.mark.both_stores]

GRID = """
name: gamma
entrypoint: python3 train.py
searcher: {name: grid, metric: loss, max_length: 10}
hyperparameters:
  lr: {type: categorical, vals: [0.5, 0.7]}
"""

REF_SEARCH = """
import json, sys
from determined.common.api import authentication, bindings

url = sys.argv[1]
sess = authentication.login(url, "admin", "")
flt = json.dumps({"filterGroup": {"kind": "group", "conjunction": "and", "children": [
    {"kind": "field", "columnName": "experimentName", "operator": "contains",
     "location": "LOCATION_TYPE_RUN", "type": "COLUMN_TYPE_TEXT", "value": "a"}]},
    "showArchived": False})
resp = bindings.post_SearchRuns(sess, body=bindings.v1SearchRunsRequest(
    filter=flt, sort="validation.loss.last=asc", limit=10))
killed = bindings.post_KillRuns(sess, body=bindings.v1KillRunsRequest(
    runIds=[int(sys.argv[2]), 999], projectId=1))
archived = bindings.post_ArchiveRuns(sess, body=bindings.v1ArchiveRunsRequest(
    runIds=[int(sys.argv[3])], projectId=1))
print(json.dumps({
    "runs": [[r.id, r.experiment.name, r.state.value, r.archived, r.hyperparameters,
              r.experiment.isMultitrial] for r in resp.runs],
    "total": resp.pagination.total,
    "killed": sorted([[x.id, x.error] for x in killed.results]),
    "archived": [[x.id, x.error] for x in archived.results],
}))
"""


def test_runs(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    alpha = Run(master, "name: alpha\nsearcher: {name: single, metric: loss, max_length: 10}"
                "\nentrypoint: x\nhyperparameters: {lr: 0.1}")  # fmt: skip
    assert alpha.metrics("validation", 5, {"loss": 0.5}).ok
    assert alpha.exit(0) == "STATE_COMPLETED"
    beta = Run(master, "name: beta\nsearcher: {name: single, metric: loss, max_length: 10}"
               "\nentrypoint: x\nhyperparameters: {lr: 0.01}")  # fmt: skip
    assert beta.metrics("validation", 5, {"loss": 0.2}).ok
    admin = master.session()
    r = admin.post(master.url + "/api/v1/experiments", json={"config": GRID})
    assert r.ok, r.text
    grid_exp = r.json()["experiment"]["id"]

    def post(path: str, body: dict) -> dict:
        r = admin.post(master.url + "/api/v1/runs" + path, json=body)
        assert r.status_code == 200, r.text
        return dict(r.json())

    # Search: every run, sorted, paged; the names containing "a" by a filter.
    everything = post("", {"sort": "id=desc"})
    assert [r["id"] for r in everything["runs"]] == [4, 3, 2, 1]
    assert everything["pagination"]["total"] == 4
    page = post("", {"offset": 1, "limit": 2})
    assert [r["id"] for r in page["runs"]] == [2, 3]
    assert page["pagination"]["total"] == 4
    (grid_run, *_) = [r for r in everything["runs"] if r["experiment"]["id"] == grid_exp]
    # A live run is ACTIVE, queued or running, as 0.37's runs API says (the trial API tells).
    assert grid_run["experiment"]["isMultitrial"] and grid_run["state"] == "STATE_ACTIVE"

    # 0.37's bindings: search, kill (an unknown id is reported), archive (an ended run).
    got = Ref(master, tmp_path / "ref").python(REF_SEARCH, str(beta.trial_id), str(alpha.trial_id))
    assert [r[:3] for r in got["runs"][:2]] == [
        [beta.trial_id, "beta", "STATE_ACTIVE"],
        [alpha.trial_id, "alpha", "STATE_COMPLETED"],
    ]
    assert got["runs"][1][4] == {"lr": 0.1} and not got["runs"][1][5]
    assert got["total"] == 4  # gamma's two runs match "a" too
    assert got["killed"] == [[beta.trial_id, ""], [999, "Run with id '999' not found in "
                             "project with id '1'"]]  # fmt: skip
    assert got["archived"] == [[alpha.trial_id, ""]]
    trial = admin.get(master.url + f"/api/v1/trials/{beta.trial_id}").json()["trial"]
    assert trial["state"] == "STATE_STOPPING_KILLED"
    assert beta.exit(0) == "STATE_CANCELED"  # the resource manager's kill ends its process

    # Archived runs show only with showArchived.
    flt = {"filterGroup": {"kind": "group", "conjunction": "and", "children": []}}
    assert alpha.trial_id not in [r["id"] for r in post("", {"filter": json.dumps(flt)})["runs"]]
    shown = post("", {"filter": json.dumps({**flt, "showArchived": True})})["runs"]
    assert [r["archived"] for r in shown if r["id"] == alpha.trial_id] == [True]
    # Archiving a live run is refused per run; unarchiving works.
    res = post("/archive", {"runIds": [grid_run["id"]]})["results"]
    assert res == [{"error": "Run is not in terminal state.", "id": grid_run["id"]}]
    assert post("/unarchive", {"runIds": [alpha.trial_id]})["results"] == [
        {"error": "", "id": alpha.trial_id}
    ]

    # Pause/resume: the experiment of a single-trial run; not a multi-trial one's run.
    gamma_ids = [r["id"] for r in everything["runs"] if r["experiment"]["id"] == grid_exp]
    by_filter = json.dumps(
        {"filterGroup": {"kind": "group", "conjunction": "and", "children": [
            {"kind": "field", "columnName": "experimentId", "operator": "=",
             "value": grid_exp}]}}
    )  # fmt: skip
    res = post("/pause", {"filter": by_filter})["results"]
    assert sorted(r["id"] for r in res) == sorted(gamma_ids)
    assert all("part of multi-trial" in r["error"] for r in res)
    delta = Run(master, "name: delta\nsearcher: {name: single, metric: loss, max_length: 1}"
                "\nentrypoint: x\nhyperparameters: {}")  # fmt: skip
    assert post("/pause", {"runIds": [delta.trial_id]})["results"] == [
        {"error": "", "id": delta.trial_id}
    ]
    exp = admin.get(master.url + f"/api/v1/experiments/{delta.experiment_id}").json()
    assert exp["experiment"]["state"] == "STATE_PAUSED"
    assert post("/resume", {"runIds": [delta.trial_id]})["results"][0]["error"] == ""

    # Delete: an ended single-trial run goes with its experiment; live ones are refused.
    res = post("/delete", {"runIds": [alpha.trial_id, delta.trial_id]})["results"]
    assert res == [
        {"error": "", "id": alpha.trial_id},
        {"error": "Run is not in a terminal state.", "id": delta.trial_id},
    ]
    assert admin.get(master.url + f"/api/v1/experiments/{alpha.experiment_id}").status_code == 404
    assert alpha.trial_id not in [r["id"] for r in post("", {})["runs"]]

    # Move: a single-trial run moves with its experiment; a multi-trial one's run cannot.
    # (in a workspace of its own: the default one takes no new projects, as 0.37)
    ws = admin.post(master.url + "/api/v1/workspaces", json={"name": "runs-ws"}).json()
    made = admin.post(
        master.url + f"/api/v1/workspaces/{ws['workspace']['id']}/projects",
        json={"name": "runs-dest"},
    )
    assert made.status_code == 200, made.text
    dest = int(made.json()["project"]["id"])
    move = {"runIds": [delta.trial_id], "sourceProjectId": 1, "destinationProjectId": dest}
    assert post("/move", move) == {"results": [{"error": "", "id": delta.trial_id}]}
    moved = [r for r in post("", {})["runs"] if r["id"] == delta.trial_id]
    assert moved[0]["projectId"] == dest and moved[0]["projectName"] == "runs-dest"
    res = post("/move", {"runIds": gamma_ids[:1], "sourceProjectId": 1,
                         "destinationProjectId": dest})["results"]  # fmt: skip
    assert "part of multi-trial" in res[0]["error"]
    skipped = {"runIds": gamma_ids[:1], "sourceProjectId": 1, "destinationProjectId": dest,
               "skipMultitrial": True}  # fmt: skip
    assert post("/move", skipped) == {"results": []}
    nowhere = {**move, "destinationProjectId": 999}
    assert admin.post(master.url + "/api/v1/runs/move", json=nowhere).status_code == 404

    # Bad requests say what to fix.
    r = admin.post(master.url + "/api/v1/runs/kill", json={"runIds": [1], "filter": "{}"})
    assert r.status_code == 400 and "run id list must be empty" in r.text
    r = admin.post(master.url + "/api/v1/runs", json={"filter": "{nope"})
    assert r.status_code == 400 and "not valid JSON" in r.text
    r = admin.post(master.url + "/api/v1/runs", json={"sort": "color=asc"})
    assert r.status_code == 400 and "invalid sort col" in r.text
