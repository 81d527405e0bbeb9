"""``GET /api/v1/experiments`` built from bulk reads (api/_wire.py ``ExperimentFacts``): every
listed experiment equals its own ``GET /api/v1/experiments/{id}``, the derived fields (state,
trials, checkpoints, best trial) are right, and paging, sorting and filtering on the heads
give what sorting the whole experiments gives. On SQLite and PostgreSQL."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from _kit.master import MasterProcess, Run, login

pytestmark = [pytest.mark.e2e, pytest.mark.both_stores]

NAMED = """
name: {name}
entrypoint: python3 train.py
searcher: {{name: single, metric: loss, max_length: 100}}
hyperparameters: {{lr: 0.1}}
labels: [{label}]
"""


def _list(master: MasterProcess, **params: Any) -> dict[str, Any]:
    r = master.session().get(master.url + "/api/v1/experiments", params=params)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _without_duration(e: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in e.items() if k != "duration"}  # it grows between two reads


def test_the_list_equals_each_experiment_and_pages_as_sorted(master: MasterProcess) -> None:
    runs = [Run(master, NAMED.format(name=f"exp-{c}", label=c)) for c in "cab"]
    waiting = master.session().post(
        master.url + "/api/v1/experiments", json={"config": NAMED.format(name="exp-d", label="d")}
    )
    assert waiting.status_code == 200  # never allocated: QUEUED
    best, other, _ = runs
    assert best.metrics("validation", 10, {"loss": 0.25}).status_code == 200
    assert other.metrics("validation", 10, {"loss": 0.75}).status_code == 200
    ckpt = {
        "uuid": str(uuid.uuid4()),
        "taskId": best.task_id,
        "allocationId": best.allocation_id,
        "reportTime": "2024-05-06T07:08:09Z",
        "resources": {"model.pt": "100", "opt/state.pt": "23"},
        "metadata": {"steps_completed": 10},
    }
    assert best.post("/api/v1/checkpoints", json=ckpt).status_code == 200

    listed = _list(master)["experiments"]
    assert [e["name"] for e in listed] == ["exp-c", "exp-a", "exp-b", "exp-d"]
    for e in listed:
        alone = master.session().get(master.url + f"/api/v1/experiments/{e['id']}").json()
        assert _without_duration(e) == _without_duration(alone["experiment"])
    by_name = {e["name"]: e for e in listed}
    assert by_name["exp-c"]["state"] == "STATE_RUNNING"
    assert by_name["exp-d"]["state"] == "STATE_QUEUED"
    assert (by_name["exp-c"]["checkpointCount"], by_name["exp-c"]["checkpointSize"]) == (1, "123")
    assert by_name["exp-c"]["bestTrialId"] == best.trial_id
    assert by_name["exp-c"]["bestTrialSearcherMetric"] == 0.25
    assert by_name["exp-a"]["bestTrialSearcherMetric"] == 0.75
    assert by_name["exp-b"]["bestTrialId"] is None
    assert all(e["numTrials"] == 1 and e["username"] == "admin" for e in listed)

    # Sorted on a head field (pages built last) and on a whole-experiment field.
    for sort_by, key in (("SORT_BY_NAME", "name"), ("SORT_BY_CHECKPOINT_COUNT", "checkpointCount")):
        whole = sorted(listed, key=lambda e: (e[key], e["id"]), reverse=True)
        pages = [
            _list(master, sortBy=sort_by, orderBy="ORDER_BY_DESC", limit=1, offset=i)
            for i in range(len(listed))
        ]
        assert [p["experiments"][0]["id"] for p in pages] == [e["id"] for e in whole], sort_by
        assert pages[0]["pagination"]["total"] == len(listed)
        assert _without_duration(pages[0]["experiments"][0]) == _without_duration(
            next(e for e in listed if e["id"] == whole[0]["id"])
        )
    only = _list(master, labels="a")["experiments"]
    assert [e["name"] for e in only] == ["exp-a"]
    assert _list(master, states="STATE_QUEUED")["experiments"][0]["name"] == "exp-d"


def test_listings_the_database_pages_equal_those_matched_experiment_by_experiment(
    master: MasterProcess,
) -> None:
    """A listing by id filtered on the experiments' own columns (archived, users, project,
    archived parents, id bounds) is filtered, counted and paged by the database; a name filter
    that every experiment passes makes the master match each ``v1Experiment`` instead. Both
    give the same page and pagination, also after a rename and a restart."""
    api, s = master.url + "/api/v1", master.session()

    def ok(r: Any) -> Any:
        assert r.status_code == 200, r.text
        return r.json()

    ok(s.post(api + "/users", json={"user": {"username": "other"}, "password": ""}))
    other = master.session(login(master.url, "other"))
    kept_ws = ok(s.post(api + "/workspaces", json={"name": "kept"}))["workspace"]["id"]
    gone_ws = ok(s.post(api + "/workspaces", json={"name": "gone"}))["workspace"]["id"]
    kept = ok(s.post(api + f"/workspaces/{kept_ws}/projects", json={"name": "k"}))["project"]
    shelved = ok(s.post(api + f"/workspaces/{kept_ws}/projects", json={"name": "a"}))["project"]
    in_gone = ok(s.post(api + f"/workspaces/{gone_ws}/projects", json={"name": "g"}))["project"]

    def create(session: Any, project: int = 1) -> int:
        body = {"config": NAMED.format(name="exp-x", label="x"), "projectId": project}
        return int(ok(session.post(api + "/experiments", json=body))["experiment"]["id"])

    ids = [create(s), create(s), create(other), create(other), create(s, kept["id"])]
    ids += [create(other, kept["id"]), create(s, shelved["id"]), create(s, in_gone["id"])]
    Run(master, NAMED.format(name="exp-run", label="r"))  # one with a running trial
    for exp_id, session in ((ids[0], s), (ids[2], other)):  # ended, then archived
        ok(session.post(api + f"/experiments/{exp_id}/kill"))
        deadline = time.monotonic() + 30
        while not ok(s.get(api + f"/experiments/{exp_id}"))["experiment"]["endTime"]:
            assert time.monotonic() < deadline, f"experiment {exp_id} did not end"
            time.sleep(0.1)
        ok(session.post(api + f"/experiments/{exp_id}/archive"))
    ok(s.post(api + f"/projects/{shelved['id']}/archive"))
    ok(s.post(api + f"/workspaces/{gone_ws}/archive"))
    other_id = ok(other.get(api + "/me"))["user"]["id"]

    wanted: list[dict[str, Any]] = [
        {},
        {"archived": "false"},
        {"archived": "true"},
        {"users": "other"},
        {"users": ["admin", "other"], "archived": "false"},
        {"userIds": other_id},
        {"projectId": kept["id"]},
        {"projectId": shelved["id"], "archived": "false"},
        {"experimentIdFilter.gt": ids[1], "experimentIdFilter.lte": ids[6]},
        {"experimentIdFilter.incl": ids[:5], "experimentIdFilter.notIn": ids[3]},
        {"experimentIdFilter.lt": ids[4], "experimentIdFilter.gte": ids[1]},
        {"sortBy": "SORT_BY_ID", "orderBy": "ORDER_BY_DESC", "limit": 3, "offset": 2},
        {"orderBy": "ORDER_BY_ASC", "limit": 4, "offset": 1, "archived": "false"},
        {"limit": 2, "offset": 50},
        {"offset": 3},
    ]

    def same_both_ways() -> list[int]:
        shown = []
        for params in wanted:
            fast = _list(master, **params)
            slow = _list(master, **params, name="exp-")
            assert fast["pagination"] == slow["pagination"], params
            assert [_without_duration(e) for e in fast["experiments"]] == [
                _without_duration(e) for e in slow["experiments"]
            ], params
            shown.append(fast["pagination"]["total"])
        return shown

    totals = same_both_ways()
    assert totals[:4] == [9, 5, 2, 3], totals  # archived parents' experiments hide
    renamed = {"id": ids[4], "name": "exp-renamed"}
    ok(s.patch(api + f"/experiments/{ids[4]}", json=renamed))
    listed = _list(master, projectId=kept["id"])["experiments"]
    assert [e["name"] for e in listed] == ["exp-renamed", "exp-x"]
    assert same_both_ways() == totals
    master.stop()
    master.start()
    assert same_both_ways() == totals
    listed = _list(master, projectId=kept["id"])["experiments"]
    assert [e["name"] for e in listed] == ["exp-renamed", "exp-x"]
