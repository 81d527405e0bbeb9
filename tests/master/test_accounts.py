"""Issue #16 items 6 and 7: user accounts (api/_users.py, store/_users.py) and who may act on
an experiment, a trial or a checkpoint (api/_auth.py ``check_owner``, ``check_reporter``)."""

from __future__ import annotations

import hashlib
import itertools
import sqlite3
import uuid
from typing import Any

import pytest
import requests
from _kit.master import SINGLE_CONFIG, MasterProcess, login

pytestmark = pytest.mark.e2e

_names = itertools.count()


def _hashed(password: str) -> str:
    return hashlib.sha512(("GubPEmmotfiK9TMD6Zdw" + password).encode()).hexdigest()


def _user(master: MasterProcess, *, admin: bool = False, password: str = "Secret-pw1") -> tuple:
    """A new user: (id, name, a logged-in session)."""
    name = f"user{next(_names)}-{uuid.uuid4().hex[:6]}"
    r = master.session().post(
        master.url + "/api/v1/users",
        json={
            "user": {"username": name, "admin": admin, "active": True},
            "password": _hashed(password),
            "isHashed": True,
        },
    )
    assert r.status_code == 200, r.text
    return int(r.json()["user"]["id"]), name, master.session(login(master.url, name, password))


def _experiment(master: MasterProcess, session: requests.Session) -> tuple[int, int]:
    r = session.post(master.url + "/api/v1/experiments", json={"config": SINGLE_CONFIG})
    assert r.status_code == 200, r.text
    exp_id = int(r.json()["experiment"]["id"])
    trials = session.get(master.url + f"/api/v1/experiments/{exp_id}/trials").json()["trials"]
    return exp_id, int(trials[0]["id"])


def test_users_wire_shapes_filters_and_paging(shared_master: MasterProcess) -> None:
    url = shared_master.url
    admin = shared_master.session()
    uid, name, alice = _user(shared_master)
    body = alice.get(url + f"/api/v1/users/{uid}").json()["user"]
    assert body["username"] == name and body["admin"] is False and body["active"] is True
    assert set(body) >= {"id", "displayName", "modifiedAt", "remote", "agentUserGroup"}
    assert alice.get(url + f"/api/v1/users/{name}/by-username").json()["user"]["id"] == uid
    assert alice.get(url + "/api/v1/users/nobody-here/by-username").status_code == 404
    assert alice.get(url + "/api/v1/users/99999").status_code == 404

    everyone = admin.get(url + "/api/v1/users").json()
    names = [u["username"] for u in everyone["users"]]
    assert {"admin", "determined", name} <= set(names)
    assert everyone["pagination"]["total"] == len(names)
    admins = admin.get(url + "/api/v1/users", params={"admin": "true"}).json()["users"]
    assert all(u["admin"] for u in admins) and "admin" in [u["username"] for u in admins]
    found = admin.get(url + "/api/v1/users", params={"name": name.upper()}).json()["users"]
    assert [u["username"] for u in found] == [name]
    paged = admin.get(
        url + "/api/v1/users",
        params={"sortBy": "SORT_BY_USER_NAME", "orderBy": "ORDER_BY_DESC", "limit": 2},
    ).json()
    assert [u["username"] for u in paged["users"]] == sorted(names, reverse=True)[:2]
    assert paged["pagination"]["limit"] == 2 and paged["pagination"]["endIndex"] == 2
    r = admin.get(url + "/api/v1/users", params={"sortBy": "SORT_BY_SHOE_SIZE"})
    assert r.status_code == 400 and "sortBy" in r.json()["message"]
    assert alice.get(url + "/api/v1/users/setting").json() == {"settings": []}


def test_only_admins_create_and_edit_others(shared_master: MasterProcess) -> None:
    url = shared_master.url
    uid, name, alice = _user(shared_master)
    bob_id, _, _ = _user(shared_master)
    r = alice.post(url + "/api/v1/users", json={"user": {"username": "mallory"}, "password": ""})
    assert r.status_code == 403 and "admin" in r.json()["message"]
    r = alice.patch(url + f"/api/v1/users/{bob_id}", json={"displayName": "x"})
    assert r.status_code == 403 and "another user" in r.json()["message"]
    r = alice.patch(url + f"/api/v1/users/{uid}", json={"admin": True})
    assert r.status_code == 403 and "admin" in r.json()["message"]
    # Rights before values: a link with a name that would not pass is still a 403 (0.37).
    link = {"agentUid": 1, "agentGid": 1, "agentUser": "9-not-a-name", "agentGroup": "g"}
    for target in (uid, bob_id):
        r = alice.patch(url + f"/api/v1/users/{target}", json={"agentUserGroup": link})
        assert r.status_code == 403, r.text
    r = alice.patch(url + f"/api/v1/users/{uid}", json={"displayName": "Alice A."})
    assert r.status_code == 200 and r.json()["user"]["displayName"] == "Alice A."
    admin = shared_master.session()
    r = admin.post(url + "/api/v1/users", json={"user": {"username": name}, "password": ""})
    assert r.status_code == 409 and "already exists" in r.json()["message"]
    r = admin.post(url + "/api/v1/users", json={"user": {"username": "a b"}, "password": ""})
    assert r.status_code == 400 and "username" in r.json()["message"]
    # Created already linked to an agent user (0.37's PostUser keeps agentUserGroup).
    link = {"agentUid": 1000, "agentGid": 1001, "agentUser": "u1", "agentGroup": "g1"}
    r = admin.post(
        url + "/api/v1/users",
        json={"user": {"username": "linked", "agentUserGroup": link}, "password": ""},
    )
    assert r.status_code == 200 and r.json()["user"]["agentUserGroup"] == link, r.text
    bad = {"user": {"username": "badlink", "agentUserGroup": {**link, "agentUid": -1}}}
    assert admin.post(url + "/api/v1/users", json=bad).status_code == 400
    assert admin.get(url + "/api/v1/users", params={"name": "badlink"}).json()["users"] == []
    r = admin.patch(url + f"/api/v1/users/{bob_id}", json={"active": "no"})
    assert r.status_code == 400


def test_display_name_rules_as_0_37(shared_master: MasterProcess) -> None:
    url = shared_master.url
    uid, name, alice = _user(shared_master)
    _, bob_name, _ = _user(shared_master)
    for refused, words in (
        ("Admin", "'admin'"),  # only an admin may be called admin
        (" determined ", "'determined'"),
        ("Zo\u00eb", "non-ASCII"),
        (bob_name.upper(), "similar username"),
    ):
        r = alice.patch(url + f"/api/v1/users/{uid}", json={"displayName": refused})
        assert r.status_code == 400 and words in r.json()["message"], (refused, r.text)
    r = alice.patch(url + f"/api/v1/users/{uid}", json={"displayName": "  Alice B.  "})
    assert r.status_code == 200 and r.json()["user"]["displayName"] == "Alice B."
    r = alice.patch(url + f"/api/v1/users/{uid}", json={"displayName": ""})  # cleared
    assert r.status_code == 200 and r.json()["user"]["displayName"] == ""
    r = shared_master.session().post(
        url + "/api/v1/users",
        json={"user": {"username": f"{name}-2", "displayName": "admin"}, "password": ""},
    )
    assert r.status_code == 400 and "'admin'" in r.json()["message"]


def test_password_change_deactivation_and_argon2_storage(shared_master: MasterProcess) -> None:
    url = shared_master.url
    uid, name, alice = _user(shared_master, password="First-pw1")
    other_session = shared_master.session(login(url, name, "First-pw1"))
    # A user changes their own password (clear text, as SetUserPassword takes it): the
    # other sessions end, this one stays, and only the new password logs in.
    r = alice.post(url + f"/api/v1/users/{uid}/password", json="Second-pw2")
    assert r.status_code == 200, r.text
    assert other_session.get(url + "/api/v1/me").status_code == 401
    assert alice.get(url + "/api/v1/me").status_code == 200
    with pytest.raises(requests.HTTPError):
        login(url, name, "First-pw1")
    login(url, name, "Second-pw2")
    # PATCH with a client-hashed password, as the reference SDK's change_password sends it.
    r = alice.patch(
        url + f"/api/v1/users/{uid}", json={"password": _hashed("Third-pw3"), "isHashed": True}
    )
    assert r.status_code == 200
    login(url, name, "Third-pw3")
    # Stored as argon2id (salted: two users with one password get different hashes).
    db = sqlite3.connect(shared_master.data_dir / "master.db")
    (stored,) = db.execute("SELECT password_hash FROM users WHERE id = ?", (uid,)).fetchone()
    db.close()
    assert stored.startswith("$argon2id$") and _hashed("Third-pw3") not in stored
    # An admin deactivates the user: no login, and the live token stops working.
    admin = shared_master.session()
    r = admin.patch(url + f"/api/v1/users/{uid}", json={"active": False})
    assert r.status_code == 200 and r.json()["user"]["active"] is False
    assert alice.get(url + "/api/v1/me").status_code == 401
    # 0.37: the right password of an inactive user is 403 "user is not active"; a wrong one
    # stays 401, so the answer tells nothing to someone without the password.
    r = requests.post(url + "/api/v1/auth/login", json={"username": name, "password": "Third-pw3"})
    assert r.status_code == 403 and r.json()["message"] == "user is not active", r.text
    r = requests.post(url + "/api/v1/auth/login", json={"username": name, "password": "Wrong-pw9"})
    assert r.status_code == 401
    admin.patch(url + f"/api/v1/users/{uid}", json={"active": True})
    login(url, name, "Third-pw3")
    # An admin cannot lock themselves out.
    me = admin.get(url + "/api/v1/me").json()["user"]["id"]
    r = admin.patch(url + f"/api/v1/users/{me}", json={"active": False})
    assert r.status_code == 400


def _forbidden(r: requests.Response, *words: str) -> None:
    assert r.status_code == 403, r.text
    message = r.json()["message"]
    assert all(w in message for w in words), message


def test_only_owner_or_admin_changes_an_experiment(shared_master: MasterProcess) -> None:
    url = shared_master.url
    _, _, alice = _user(shared_master)
    _, _, bob = _user(shared_master)
    exp_id, trial_id = _experiment(shared_master, alice)
    base = url + f"/api/v1/experiments/{exp_id}"
    for method, path, body in (
        ("post", "/pause", None),
        ("post", "/activate", None),
        ("post", "/cancel", None),
        ("post", "/kill", None),
        ("post", "/archive", None),
        ("patch", "", {"name": "stolen"}),
        ("put", "/labels/x", None),
        ("delete", "", None),
    ):
        _forbidden(getattr(bob, method)(base + path, json=body), "not yours", "owner")
    _forbidden(bob.post(url + f"/api/v1/trials/{trial_id}/kill"), "not yours")
    # The owner may, and so may an admin.
    assert alice.patch(base, json={"name": "mine"}).status_code == 200
    assert alice.post(base + "/pause").status_code == 200
    assert shared_master.session().post(base + "/activate").status_code == 200
    assert alice.post(base + "/kill").status_code == 200
    assert bob.get(base).json()["experiment"]["name"] == "mine"  # reading is for everyone


def _allocate(master: MasterProcess, trial_id: int) -> dict[str, Any]:
    r = master.session().post(master.url + f"/api/v1/dev/trials/{trial_id}/allocate", json={})
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_only_the_trial_or_its_owner_reports(shared_master: MasterProcess) -> None:
    url = shared_master.url
    _, _, alice = _user(shared_master)
    _, _, bob = _user(shared_master)
    exp_id, trial_id = _experiment(shared_master, alice)
    alloc = _allocate(shared_master, trial_id)
    trial = shared_master.session(alloc["token"], allocation=True)
    admin = shared_master.session()

    def metrics(s: requests.Session, loss: float, steps: int = 1) -> requests.Response:
        body = {
            "group": "training",
            "metrics": {
                "trialId": trial_id,
                "trialRunId": alloc["runId"],
                "stepsCompleted": steps,
                "metrics": {"avgMetrics": {"loss": loss}},
            },
        }
        return s.post(url + f"/api/v1/trials/{trial_id}/metrics", json=body)

    _forbidden(metrics(bob, 0.0), "another user")
    _forbidden(metrics(admin, 0.0), "another user")  # admins do not forge results either
    _forbidden(bob.post(url + f"/api/v1/trials/{trial_id}/progress", json={"progress": 0.5}))
    ckpt = {
        "uuid": str(uuid.uuid4()),
        "taskId": alloc["taskId"],
        "allocationId": alloc["allocationId"],
        "reportTime": "2026-01-01T00:00:00Z",
        "resources": {"a": "1"},
        "metadata": {"steps_completed": 1},
        "state": "STATE_COMPLETED",
    }
    _forbidden(bob.post(url + "/api/v1/checkpoints", json=ckpt), "another user")
    assert metrics(trial, 1.0).status_code == 200
    assert metrics(alice, 0.5, 2).status_code == 200  # unmanaged use: the owner's own token
    assert trial.post(url + "/api/v1/checkpoints", json=ckpt).status_code == 200
    # Deleting a checkpoint: owner or admin only, and nothing is deleted on a refusal.
    r = bob.delete(url + "/api/v1/checkpoints", json={"checkpointUuids": [ckpt["uuid"]]})
    _forbidden(r, "another user", "nothing was changed")
    got = alice.get(url + f"/api/v1/checkpoints/{ckpt['uuid']}").json()["checkpoint"]
    assert got["state"] == "STATE_COMPLETED"
    assert exp_id


def test_old_pbkdf2_hashes_check_and_become_argon2id(tmp_path: Any) -> None:
    import sqlalchemy as sa

    from determined.master.store import Store, _users
    from determined.master.store._schema import users

    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    salt = "00ff"
    old = hashlib.pbkdf2_hmac("sha256", _hashed("Old-pw1").encode(), salt.encode(), 1000)
    with store.tx() as conn:
        uid = _users.create_user(conn, "legacy", "")
        conn.execute(
            users.update()
            .where(users.c.id == uid)
            .values(password_hash=f"pbkdf2_sha256$1000${salt}${old.hex()}")
        )
    with store.tx() as conn:
        assert _users.check_password(conn, "legacy", "wrong", is_hashed=False) is None
        assert _users.check_password(conn, "legacy", "Old-pw1", is_hashed=False) is not None
    with store.read() as conn:
        stored = conn.execute(sa.select(users.c.password_hash).where(users.c.id == uid)).scalar()
        assert stored.startswith("$argon2id$")
        assert _users.check_password(conn, "legacy", _hashed("Old-pw1"), is_hashed=True)
