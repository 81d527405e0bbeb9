"""Issue #16 items 6, 8 and 9 at the master's edge (_app.py ``_Guards``;
__main__.py): DNS rebinding, CSRF with the ``auth`` cookie, a master that will not serve
beyond loopback with blank default passwords, and a private data dir."""

from __future__ import annotations

import asyncio
import hashlib
import os
import pathlib
import stat
import subprocess
import sys
from typing import Any

import pytest
import requests
from _kit.master import MasterProcess, clean_env, free_port, login

pytestmark = pytest.mark.e2e

REF_DET = pathlib.Path(__file__).resolve().parents[2] / ".refvenv" / "bin" / "det"


def test_foreign_host_names_are_refused(shared_master: MasterProcess) -> None:
    url = shared_master.url
    r = requests.get(url + "/info", headers={"Host": "evil.example"})
    assert r.status_code == 421 and "allowed_hosts" in r.json()["message"]
    r = requests.get(url + "/info", headers={"Host": f"rebind.evil.example:{shared_master.port}"})
    assert r.status_code == 421
    for host in (f"localhost:{shared_master.port}", "127.0.0.1", "[::1]:80", "10.1.2.3:8080"):
        assert requests.get(url + "/info", headers={"Host": host}).status_code == 200, host


def test_the_host_check_remembers_only_allowed_hosts_and_only_so_many() -> None:
    """The check keeps the Host headers it allowed (it parses each header once), never a
    refused one, and at most MAX_KNOWN of them: past that it checks every time, still right."""
    from determined.master._app import _Guards

    served: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        served.append(dict(scope["headers"])[b"host"])

    statuses: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    check = _Guards(app, frozenset({"det.test"}))

    def ask(host: bytes) -> bool:
        before = len(served)
        scope = {"type": "http", "method": "GET", "path": "/info", "headers": [(b"host", host)]}
        asyncio.run(check(scope, receive, send))
        return len(served) > before

    for _ in range(2):  # the second round is answered from what the first one learnt
        assert ask(b"det.test:8080") and ask(b"127.0.0.1:1")
        assert not ask(b"evil.example") and not ask(b"evil.example:8080")
    assert b"evil.example" not in check._known
    for port in range(2 * _Guards.MAX_KNOWN):
        assert ask(b"10.0.0.1:%d" % port)
    assert len(check._known) == _Guards.MAX_KNOWN
    assert ask(b"[::1]:9") and not ask(b"other.example")
    assert statuses == [421] * 5


def test_an_allowed_host_name_is_served(tmp_path: pathlib.Path) -> None:
    with MasterProcess(tmp_path / "m", args=["--allowed-hosts", "det.corp.test,other"]) as m:
        assert requests.get(m.url + "/info", headers={"Host": "det.corp.test"}).ok
        assert requests.get(m.url + "/info", headers={"Host": "OTHER:9"}).ok
        assert requests.get(m.url + "/info", headers={"Host": "third"}).status_code == 421


def test_allowed_hosts_from_the_master_config(tmp_path: pathlib.Path) -> None:
    cfg = tmp_path / "master.yaml"
    cfg.write_text(f"port: {free_port()}\nallowed_hosts: [det.lab.test, Build-Box]\n")
    with MasterProcess(tmp_path / "m", config_file=cfg) as m:
        assert requests.get(m.url + "/info", headers={"Host": "build-box"}).ok
        assert requests.get(m.url + "/info", headers={"Host": "det.lab.test."}).ok
        assert requests.get(m.url + "/info", headers={"Host": "lab.test"}).status_code == 421


def test_cookie_writes_need_the_csrf_token(shared_master: MasterProcess) -> None:
    url = shared_master.url
    body = requests.post(url + "/api/v1/auth/login", json={"username": "admin"}).json()
    token, csrf = body["token"], body["csrfToken"]
    assert csrf == hashlib.sha256(b"csrf:" + token.encode()).hexdigest()
    jar = {"auth": token}
    r = requests.post(url + "/api/v1/auth/login", json={"username": "admin"}, cookies=jar)
    assert r.status_code == 200  # a stale cookie never blocks logging in
    assert requests.get(url + "/api/v1/me", cookies=jar).status_code == 200  # reads are fine
    r = requests.post(url + "/api/v1/users/1/password", json="Pw-123456", cookies=jar)
    assert r.status_code == 403 and "X-CSRF-Token" in r.json()["message"]
    r = requests.post(url + "/api/v1/auth/logout", cookies=jar, headers={"X-CSRF-Token": "0" * 64})
    assert r.status_code == 403
    r = requests.post(url + "/api/v1/auth/logout", cookies=jar, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 200
    # A bearer token needs no CSRF token, even with a stray cookie.
    other = login(url, "admin")
    r = requests.post(
        url + "/api/v1/auth/logout",
        cookies={"auth": "whatever"},
        headers={"Authorization": f"Bearer {other}"},
    )
    assert r.status_code == 200


@pytest.mark.skipif(not REF_DET.exists(), reason="the reference CLI is not installed")
def test_the_reference_cli_is_unaffected(
    shared_master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "PYTHON"))}
    env.update(HOME=str(tmp_path), DET_USER="admin", DET_PASS="")
    for master in (shared_master.url, f"http://localhost:{shared_master.port}"):
        out = subprocess.run(
            [str(REF_DET), "-m", master, "user", "list"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert "admin" in out.stdout and "determined" in out.stdout

    def ref(*args: str) -> str:
        proc = subprocess.run(
            [str(REF_DET), "-m", shared_master.url, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    # 0.37's own user commands against these routes: create, deactivate, list, change password.
    ref("user", "create", "refuser", "--password", "Ref-pw123")
    ref("user", "deactivate", "refuser")
    assert "refuser" not in ref("user", "list")
    row = next(line for line in ref("user", "list", "--all").splitlines() if "refuser" in line)
    assert [c.strip() for c in row.split("|")][3:5] == ["False", "False"]
    ref("user", "activate", "refuser")
    login(shared_master.url, "refuser", "Ref-pw123")


def _master_cmd(data_dir: pathlib.Path, port: int, host: str) -> list[str]:
    return [sys.executable, "-m", "determined.master", "--data-dir", str(data_dir)] + [
        "--port",
        str(port),
        "--host",
        host,
        "--resource-manager",
        "none",
    ]


def test_no_blank_passwords_beyond_loopback_and_private_files(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "data"
    env = {**clean_env(tmp_path / "home"), "PYTHONPATH": os.getcwd()}
    port = free_port()
    refused = subprocess.run(
        _master_cmd(data, port, "0.0.0.0"), env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2
    assert "blank password" in refused.stderr and "det user change-password admin" in refused.stderr
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE((data / "master.db").stat().st_mode) == 0o600
    # Set passwords on loopback; then the master serves on every address.
    with MasterProcess(data) as m:
        admin = m.session()
        users = {u["username"]: u["id"] for u in admin.get(m.url + "/api/v1/users").json()["users"]}
        r = admin.post(m.url + f"/api/v1/users/{users['admin']}/password", json="Admin-pw1")
        assert r.ok
        assert admin.patch(
            m.url + f"/api/v1/users/{users['determined']}", json={"active": False}
        ).ok
    with MasterProcess(data, args=["--host", "0.0.0.0"]) as m:
        assert requests.get(m.url + "/info").ok
