"""``det user login|whoami|logout`` and the per-master token cache."""

from __future__ import annotations

import json
import stat

import pytest
import requests
from _kit.cli import Det
from _kit.master import MasterProcess

pytestmark = pytest.mark.e2e


def _store(det: Det, master: MasterProcess) -> dict:
    return json.loads((det.home / "auth.json").read_text())["masters"][master.url]


def test_login_whoami_logout(det: Det, master: MasterProcess) -> None:
    assert "Logged in as user 'admin'" in det.ok("user", "login", "admin", input="\n")
    assert det.ok("user", "whoami").strip() == "You are logged in as user 'admin'"
    entry = _store(det, master)
    assert entry["active_user"] == "admin"
    token = entry["tokens"]["admin"]
    assert stat.S_IMODE((det.home / "auth.json").stat().st_mode) == 0o600
    me = requests.get(master.url + "/api/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert me.json()["user"]["username"] == "admin"

    assert "Logged out user 'admin'" in det.ok("user", "logout")
    assert "admin" not in _store(det, master)["tokens"]
    revoked = requests.get(master.url + "/api/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert revoked.status_code == 401
    # Back to the default user, who has an empty password.
    assert det.ok("user", "whoami").strip() == "You are logged in as user 'determined'"


def test_cached_token_is_reused(det: Det, master: MasterProcess) -> None:
    det.ok("user", "whoami")
    first = _store(det, master)["tokens"]["determined"]
    det.ok("user", "whoami")
    assert _store(det, master)["tokens"]["determined"] == first


def test_wrong_password_is_a_clear_error(det: Det) -> None:
    r = det("user", "login", "admin", input="not-the-password\n")
    assert r.returncode == 1
    assert "login as 'admin' failed: wrong username or password" in r.stderr
    assert "Traceback" not in r.stderr
    unknown = det("user", "login", "ghost", input="\n")
    assert unknown.returncode == 1
    assert "wrong username or password" in unknown.stderr


def test_create_list_change_password_deactivate(det: Det, master: MasterProcess) -> None:
    det.ok("user", "login", "admin", input="\n")
    weak = det("user", "create", "carol", "--password", "short")
    assert weak.returncode == 1 and "password is too weak" in weak.stderr
    det.ok("user", "create", "carol", "--password", "Carol-pw1")
    det.ok("user", "create", "dave", "--admin", input="Dave-pw22\nDave-pw22\n")
    listed = det.ok("user", "list")
    cells = [[c.strip() for c in line.split("|")] for line in listed.splitlines()]
    assert cells[0][:6] == ["User Id", "Username", "Display Name", "Admin", "Active", "Remote"]
    rows = {row[1]: row for row in cells[2:]}
    assert rows["carol"][3:5] == ["False", "True"] and rows["dave"][3] == "True"
    dup = det("user", "create", "carol", "--password", "Carol-pw1")
    assert dup.returncode == 1 and "already exists" in dup.stderr
    # carol changes her own password; her new session works, the old password does not.
    det.ok("user", "login", "carol", input="Carol-pw1\n")
    det.ok("user", "change-password", input="Carol-pw2\nCarol-pw2\n")
    assert "carol" in det.ok("user", "whoami")
    with pytest.raises(requests.HTTPError):
        requests.post(
            master.url + "/api/v1/auth/login", json={"username": "carol", "password": "Carol-pw1"}
        ).raise_for_status()
    # Not an admin: she cannot deactivate anyone.
    refused = det("user", "deactivate", "dave")
    assert refused.returncode == 1 and "admin" in refused.stderr
    det.ok("user", "login", "admin", input="\n")
    det.ok("user", "deactivate", "carol")
    assert "carol" not in det.ok("user", "list") and "carol" in det.ok("user", "list", "--all")
    locked = det("user", "login", "carol", input="Carol-pw2\n")
    # The right password of a deactivated user: 0.37's 403 "user is not active".
    assert locked.returncode == 1 and "user is not active" in locked.stderr, locked.stderr
    det.ok("user", "activate", "carol")
    det.ok("user", "login", "carol", input="Carol-pw2\n")
