"""The master's unmanaged-experiment routes over REST, as 0.37's core_v2 calls them: creation
with null fields, trials by external id (idempotent), runs, state reports, the experiment's
end, kills, and the 4xx answers for requests that cannot work. The resource manager must
never allocate an unmanaged trial."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import sqlalchemy as sa
from _kit.master import MasterProcess, login

pytestmark = pytest.mark.e2e

# What 0.37's core_v2 sends: every field it knows, null where unset, no entrypoint.
CONFIG_037 = """\
name: api-unmanaged
data: null
description: null
labels: null
searcher: {name: single, metric: unmanaged, max_length: 100000000}
workspace: null
project: null
checkpoint_storage: {type: shared_fs, host_path: /tmp/core-v2-api}
"""


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def master(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MasterProcess]:
    """One master per store backend (tests/conftest.py), with a slot its RM could use."""
    db_url = None
    if request.param == "postgres":
        db_url = request.getfixturevalue("postgres_server").new_database()
    data = tmp_path_factory.mktemp("unmanaged-api") / "data"
    with MasterProcess(data, cpu_slots=1, db_url=db_url) as m:
        yield m


@pytest.fixture(scope="module")
def admin(master: MasterProcess) -> requests.Session:
    return master.session()


def _call(
    s: requests.Session, master: MasterProcess, method: str, path: str, body: Any = None
) -> requests.Response:
    return s.request(method, master.url + "/api/v1" + path, json=body, timeout=30)


def _ok(
    s: requests.Session, master: MasterProcess, method: str, path: str, body: Any = None
) -> Any:
    r = _call(s, master, method, path, body)
    assert r.status_code == 200, f"{method} {path}: {r.status_code} {r.text}"
    return r.json()


def _new_trial(s: requests.Session, master: MasterProcess) -> tuple[int, int]:
    exp = _ok(s, master, "POST", "/experiments", {"config": CONFIG_037, "unmanaged": True})
    exp_id = exp["experiment"]["id"]
    body = {"experimentId": exp_id, "hparams": {"lr": 0.5}, "unmanaged": True}
    trial = _ok(s, master, "POST", "/trials", body)["trial"]
    return exp_id, trial["id"]


def test_a_trial_runs_and_ends_its_experiment_without_being_scheduled(
    master: MasterProcess, admin: requests.Session
) -> None:
    exp = _ok(admin, master, "POST", "/experiments", {"config": CONFIG_037, "unmanaged": True})
    assert exp["experiment"]["unmanaged"] is True and exp["warnings"] == []
    exp_id = exp["experiment"]["id"]
    assert exp["experiment"]["state"] == "STATE_QUEUED"  # ACTIVE, nothing runs yet
    body = {"experimentId": exp_id, "hparams": {"lr": 0.5}, "unmanaged": True}
    trial = _ok(admin, master, "POST", "/trials", body)["trial"]
    trial_id = trial["id"]
    assert trial["hparams"] == {"lr": 0.5} and trial["taskId"]

    start = _ok(admin, master, "POST", f"/trials/{trial_id}/start", {"trialId": trial_id})
    assert start == {"trialRunId": 1, "stepsCompleted": 0, "latestCheckpoint": None}
    patch = {"trialId": trial_id, "state": "STATE_RUNNING"}
    assert _ok(admin, master, "PATCH", f"/trials/{trial_id}", patch)["trial"]["state"] == (
        "STATE_RUNNING"
    )
    got = _ok(admin, master, "GET", f"/experiments/{exp_id}")["experiment"]
    assert got["state"] == "STATE_RUNNING"
    _ok(admin, master, "PATCH", f"/trials/{trial_id}", {"trialId": trial_id})  # heartbeat

    # The resource manager ticks every 0.5 s and has a free slot: it must leave it alone.
    time.sleep(1.5)
    engine = sa.create_engine(master.store_url)
    with engine.connect() as conn:
        allocs = conn.execute(
            sa.text("SELECT count(*) FROM allocations WHERE trial_id = :t"), {"t": trial_id}
        ).scalar_one()
    engine.dispose()
    assert allocs == 0

    done = {"trialId": trial_id, "state": "STATE_COMPLETED"}
    assert _ok(admin, master, "PATCH", f"/trials/{trial_id}", done)["trial"]["state"] == (
        "STATE_COMPLETED"
    )
    got = _ok(admin, master, "GET", f"/experiments/{exp_id}")["experiment"]
    assert got["state"] == "STATE_COMPLETED" and got["endTime"] is not None

    # A new run reopens both, with the run id one up.
    again = _ok(admin, master, "POST", f"/trials/{trial_id}/start", {"trialId": trial_id})
    assert again["trialRunId"] == 2
    got = _ok(admin, master, "GET", f"/experiments/{exp_id}")["experiment"]
    assert got["state"] == "STATE_RUNNING" and got["endTime"] is None


def test_external_ids_find_the_same_experiment_and_trial(
    master: MasterProcess, admin: requests.Session
) -> None:
    body = {"config": CONFIG_037, "unmanaged": True}
    first = _ok(admin, master, "PUT", "/experiments/by-external-id/ext-1", body)
    second = _ok(admin, master, "PUT", "/experiments/by-external-id/ext-1", body)
    exp_id = first["experiment"]["id"]
    assert second["experiment"]["id"] == exp_id
    assert first["experiment"]["externalExperimentId"] == "ext-1"
    create = {"experimentId": exp_id, "hparams": {}, "unmanaged": True}
    put = {"createTrialRequest": create, "externalTrialId": "t-1"}
    t1 = _ok(admin, master, "PUT", "/trials", put)["trial"]["id"]
    assert _ok(admin, master, "PUT", "/trials", put)["trial"]["id"] == t1
    other = {"createTrialRequest": create, "externalTrialId": "t-2"}
    t2 = _ok(admin, master, "PUT", "/trials", other)["trial"]["id"]
    assert t2 != t1
    got = _ok(admin, master, "GET", f"/experiments/{exp_id}")["experiment"]
    assert got["numTrials"] == 2

    # The experiment ends once its last trial does: ERROR if one errored.
    for tid, state in ((t1, "STATE_COMPLETED"), (t2, "STATE_ERROR")):
        _ok(admin, master, "POST", f"/trials/{tid}/start", {"trialId": tid})
        _ok(admin, master, "PATCH", f"/trials/{tid}", {"trialId": tid, "state": state})
        if tid == t1:
            got = _ok(admin, master, "GET", f"/experiments/{exp_id}")["experiment"]
            assert got["state"] == "STATE_QUEUED"  # ACTIVE: t2 has not started yet
    got = _ok(admin, master, "GET", f"/experiments/{exp_id}")["experiment"]
    assert got["state"] == "STATE_ERROR"

    # Deleted, its external ids are free again: the same PUT makes a new experiment.
    _ok(admin, master, "DELETE", f"/experiments/{exp_id}")
    fresh = _ok(admin, master, "PUT", "/experiments/by-external-id/ext-1", body)
    assert fresh["experiment"]["id"] != exp_id
    create = {"experimentId": fresh["experiment"]["id"], "hparams": {}, "unmanaged": True}
    put = {"createTrialRequest": create, "externalTrialId": "t-1"}
    assert _ok(admin, master, "PUT", "/trials", put)["trial"]["id"] not in (t1, t2)


def test_another_users_external_id_is_refused(
    master: MasterProcess, admin: requests.Session
) -> None:
    body = {"config": CONFIG_037, "unmanaged": True}
    _ok(admin, master, "PUT", "/experiments/by-external-id/taken", body)
    user = {"user": {"username": "bob", "active": True}, "password": "bob-pw"}
    _ok(admin, master, "POST", "/users", user)
    bob = master.session(login(master.url, "bob", "bob-pw"))
    r = _call(bob, master, "PUT", "/experiments/by-external-id/taken", body)
    assert r.status_code == 403 and "another user" in r.text
    # Nor may bob add trials to, start or report for the admin's experiment.
    exp_id, trial_id = _new_trial(admin, master)
    create = {"experimentId": exp_id, "unmanaged": True}
    assert _call(bob, master, "POST", "/trials", create).status_code == 403
    assert _call(bob, master, "POST", f"/trials/{trial_id}/start", {}).status_code == 403
    patch = {"state": "STATE_COMPLETED"}
    assert _call(bob, master, "PATCH", f"/trials/{trial_id}", patch).status_code == 403


def test_requests_that_cannot_work_are_4xx(master: MasterProcess, admin: requests.Session) -> None:
    exp_id, trial_id = _new_trial(admin, master)
    r = _call(admin, master, "POST", "/trials", {"experimentId": exp_id, "hparams": {}})
    assert r.status_code == 400 and "unmanaged: true" in r.text
    r = _call(admin, master, "PATCH", f"/trials/{trial_id}", {"state": "STATE_PAUSED"})
    assert r.status_code == 400 and "STATE_COMPLETED" in r.text
    r = _call(admin, master, "PATCH", f"/trials/{trial_id}", {"trialId": 999, "state": ""})
    assert r.status_code == 400
    r = _call(admin, master, "PUT", "/experiments/by-external-id/x", {"config": CONFIG_037})
    assert r.status_code == 400 and "unmanaged: true" in r.text
    # `det e continue` cannot run a script the master does not have.
    _ok(admin, master, "PATCH", f"/trials/{trial_id}", {"state": "STATE_COMPLETED"})
    r = _call(admin, master, "POST", "/experiments/continue", {"id": exp_id})
    assert r.status_code == 400 and "same external ids" in r.text
    # Validations with a 0.38-style searcher and early exits do not feed its search.
    exp_id2, trial2 = _new_trial(admin, master)
    _ok(
        admin,
        master,
        "POST",
        f"/trials/{trial2}/early_exit",
        {"reason": "EXITED_REASON_INVALID_HP"},
    )
    got = _ok(admin, master, "GET", f"/experiments/{exp_id2}")["experiment"]
    assert got["state"] == "STATE_QUEUED"
    # A managed experiment's trials come from its searcher.
    managed = CONFIG_037.replace("name: api-unmanaged", "name: managed\nentrypoint: x:Y")
    body = {"config": managed, "activate": False}
    managed_id = _ok(admin, master, "POST", "/experiments", body)["experiment"]["id"]
    r = _call(admin, master, "POST", "/trials", {"experimentId": managed_id, "unmanaged": True})
    assert 400 <= r.status_code < 500 and "not unmanaged" in r.text


def test_a_killed_unmanaged_experiment_stays_killed(
    master: MasterProcess, admin: requests.Session
) -> None:
    exp_id, trial_id = _new_trial(admin, master)
    _ok(admin, master, "POST", f"/trials/{trial_id}/start", {"trialId": trial_id})
    _ok(admin, master, "POST", f"/experiments/{exp_id}/kill")
    got = _ok(admin, master, "GET", f"/experiments/{exp_id}")["experiment"]
    assert got["state"] == "STATE_CANCELED"
    # The user's process ends later and says COMPLETED: the kill stands.
    done = {"trialId": trial_id, "state": "STATE_COMPLETED"}
    assert _ok(admin, master, "PATCH", f"/trials/{trial_id}", done)["trial"]["state"] == (
        "STATE_CANCELED"
    )
