"""determined/master/api/_auth.py and api/_login.py: info, login, tokens, allocation scoping."""

from __future__ import annotations

import hashlib

import pytest
import requests
from _kit.master import MasterProcess, Run

pytestmark = pytest.mark.e2e


def test_info_answers_version_and_cluster_ids(shared_master: MasterProcess) -> None:
    info = requests.get(shared_master.url + "/info").json()
    assert info["version"] and info["clusterId"] and info["masterId"]
    assert info["cluster_id"] == info["clusterId"]
    master = requests.get(shared_master.url + "/api/v1/master").json()
    assert master["clusterId"] == info["clusterId"]


def test_default_users_log_in_with_empty_password(shared_master: MasterProcess) -> None:
    for name, admin in (("determined", False), ("admin", True)):
        r = requests.post(
            shared_master.url + "/api/v1/auth/login", json={"username": name, "password": ""}
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["user"]["username"] == name and body["user"]["admin"] is admin
        me = requests.get(
            shared_master.url + "/api/v1/me",
            headers={"Authorization": f"Bearer {body['token']}"},
        ).json()
        assert me["user"]["username"] == name


def test_login_with_a_client_hashed_password(shared_master: MasterProcess) -> None:
    # The reference CLI sends sha512(salt + password), and the empty password as "".
    r = requests.post(
        shared_master.url + "/api/v1/auth/login",
        json={"username": "determined", "password": "", "isHashed": True},
    )
    assert r.status_code == 200
    wrong = hashlib.sha512(b"GubPEmmotfiK9TMD6Zdwnope").hexdigest()
    r = requests.post(
        shared_master.url + "/api/v1/auth/login",
        json={"username": "determined", "password": wrong, "isHashed": True},
    )
    assert r.status_code == 401
    assert "invalid credentials" in r.json()["message"]


def test_bad_logins_and_tokens_are_401(shared_master: MasterProcess) -> None:
    url = shared_master.url
    r = requests.post(url + "/api/v1/auth/login", json={"username": "nobody", "password": ""})
    assert r.status_code == 401
    assert requests.get(url + "/api/v1/me").status_code == 401
    r = requests.get(url + "/api/v1/me", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and r.json()["message"]
    r = requests.post(url + "/api/v1/auth/login", json={"password": ""})
    assert r.status_code == 400 and "username" in r.json()["message"]


def test_logout_revokes_the_token(shared_master: MasterProcess) -> None:
    s = shared_master.session()
    assert s.get(shared_master.url + "/api/v1/me").status_code == 200
    assert s.post(shared_master.url + "/api/v1/auth/logout").status_code == 200
    assert s.get(shared_master.url + "/api/v1/me").status_code == 401


def test_allocation_token_reaches_only_its_own_trial(shared_master: MasterProcess) -> None:
    mine, other = Run(shared_master), Run(shared_master)
    url = shared_master.url
    assert mine.trial.get(url + f"/api/v1/trials/{mine.trial_id}").status_code == 200
    r = mine.trial.get(url + f"/api/v1/trials/{other.trial_id}")
    assert r.status_code == 403 and str(mine.trial_id) in r.json()["message"]
    r = mine.trial.get(url + f"/api/v1/allocations/{other.allocation_id}/signals/preemption")
    assert r.status_code == 403
    r = mine.trial.get(
        url + f"/api/v1/experiments/{other.experiment_id}/searcher/best_searcher_validation_metric"
    )
    assert r.status_code == 403
    assert mine.trial.post(url + "/api/v1/experiments", json={"config": "x: 1"}).status_code == 403
    # The reference's trials send their token as Authorization; it is scoped the same way.
    plain = requests.Session()
    plain.headers["Authorization"] = f"Bearer {mine.token}"
    assert plain.get(url + f"/api/v1/trials/{mine.trial_id}").status_code == 200
    assert plain.get(url + f"/api/v1/trials/{other.trial_id}").status_code == 403


def test_trial_endpoints_without_a_token_are_401(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    r = requests.get(shared_master.url + f"/api/v1/trials/{run.trial_id}/searcher/operation")
    assert r.status_code == 401


def test_allocation_token_dies_with_its_allocation(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    run.exit(1)  # failed: restarts, the old token must not report any more
    r = run.trial.get(shared_master.url + f"/api/v1/trials/{run.trial_id}")
    assert r.status_code == 401
