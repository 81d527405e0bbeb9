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
