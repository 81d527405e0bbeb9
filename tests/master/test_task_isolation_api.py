"""Issue #35, the API-level findings: what one user's tasks and configs show another user
(shell keys, secrets in task configs, templates and webhooks, YAML anchors), ownership across
generic task trees, authentication before a request body is read, and the ``/stream``
cookie from another site. Two real API users on a real master (docs/security.md)."""

from __future__ import annotations

import http.client
import json
import pathlib
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import yaml
from _kit.master import MasterProcess, login

pytestmark = pytest.mark.e2e

SECRET = "TOPSECRET-35"


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A master with a resource manager, its admin, and two plain users alice and bob."""
    with MasterProcess(tmp_path_factory.mktemp("iso") / "master", cpu_slots=1) as m:
        admin = m.session()
        for name in ("alice", "bob"):
            r = admin.post(m.url + "/api/v1/users", json={"user": {"username": name}})
            assert r.status_code == 200, r.text
        yield {
            "m": m,
            "url": m.url,
            "admin": admin,
            "alice": m.session(login(m.url, "alice")),
            "bob": m.session(login(m.url, "bob")),
        }


def _ok(r: requests.Response) -> Any:
    assert r.status_code == 200, r.text
    return r.json()


def _generic(s: requests.Session, url: str, **more: Any) -> str:
    body = {"config": "entrypoint: sleep 300\nresources: {slots: 0}\n", **more}
    return str(_ok(s.post(url + "/api/v1/generic-tasks", json=body))["taskId"])


def test_a_shell_key_goes_to_its_owner_only(users: dict[str, Any]) -> None:
    if not shutil.which("ssh-keygen"):
        pytest.skip("needs ssh-keygen (OpenSSH)")
    url = users["url"]
    # Queued is enough: the key is made at launch (a 0-slot shell could start at once).
    shell = _ok(users["alice"].post(url + "/api/v1/shells", json={"config": {}}))["shell"]
    assert shell["privateKey"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    for who in ("bob", "admin"):
        listed = _ok(users[who].get(url + "/api/v1/shells"))["shells"]
        assert [s["privateKey"] for s in listed if s["id"] == shell["id"]] == [None], who
        one = _ok(users[who].get(url + f"/api/v1/shells/{shell['id']}"))["shell"]
        assert one["privateKey"] is None and one["publicKey"] == shell["publicKey"]
    mine = _ok(users["alice"].get(url + f"/api/v1/shells/{shell['id']}"))["shell"]
    assert mine["privateKey"] == shell["privateKey"]
    _ok(users["alice"].post(url + f"/api/v1/shells/{shell['id']}/kill"))


def test_task_trees_stay_with_their_owner(users: dict[str, Any]) -> None:
    url, alice, bob, admin = users["url"], users["alice"], users["bob"], users["admin"]
    root = _generic(alice, url)
    # Nobody hangs a task under another's, nor forks another's (it runs their config).
    for more in ({"parentId": root}, {"forkedFrom": root}):
        r = bob.post(url + "/api/v1/generic-tasks", json={"config": "entrypoint: true\n", **more})
        assert r.status_code == 403 and "not yours" in r.json()["message"], r.text
    # An admin may; the tree then holds a task that is not alice's.
    admins = _generic(admin, url, parentId=root)
    for action, body in (("kill", {}), ("pause", None)):
        r = alice.post(url + f"/api/v1/tasks/{root}/{action}", json=body)
        assert r.status_code == 403 and admins in r.json()["message"], (action, r.text)
    r = alice.post(url + f"/api/v1/tasks/{admins}/kill", json={"killFromRoot": True})
    assert r.status_code == 403
    state = _ok(admin.get(url + f"/api/v1/tasks/{admins}"))["task"]["taskState"]
    assert state == "GENERIC_TASK_STATE_ACTIVE"
    _ok(admin.post(url + f"/api/v1/tasks/{root}/kill", json={"killFromRoot": True}))


def test_secrets_in_task_configs_templates_and_webhooks_are_hidden(
    users: dict[str, Any],
) -> None:
    url, alice, bob, admin = users["url"], users["alice"], users["bob"], users["admin"]
    config = {
        "entrypoint": "true",
        "resources": {"slots": 0},
        "environment": {"environment_variables": [f"TOKEN={SECRET}"]},
    }
    launched = alice.post(url + "/api/v1/commands", json={"config": config})
    assert f"TOKEN={SECRET}" in _ok(launched).__repr__()  # her own
    cmd_id = launched.json()["command"]["id"]
    task_id = _generic(alice, url, config=yaml.safe_dump(config))
    # Whole for those who may change the task (its owner, an admin: 0.37 shows them what was
    # written), redacted for any other user.
    for who, whole in ((alice, True), (admin, True), (bob, False)):
        for path in (
            f"/api/v1/commands/{cmd_id}",
            f"/api/v1/tasks/{cmd_id}/config",
            f"/api/v1/tasks/{task_id}",
            f"/api/v1/tasks/{task_id}/config",
        ):
            text = who.get(url + path).text
            assert (SECRET in text) == whole and "TOKEN=" in text, path

    # Templates: redacted for a user who may not change them; sent back redacted, the stored
    # secret stays.
    template = {
        "checkpoint_storage": {"type": "s3", "bucket": "b", "secret_key": SECRET},
        "description": "keeps a secret",
    }
    _ok(alice.post(url + "/api/v1/templates/t35", json={"name": "t35", "config": template}))
    for path in ("/api/v1/templates", "/api/v1/templates/t35"):
        assert SECRET not in _ok(bob.get(url + path)).__repr__()
        assert SECRET in _ok(alice.get(url + path)).__repr__()
    shown = _ok(bob.get(url + "/api/v1/templates/t35"))["template"]["config"]
    shown["description"] = "changed"
    _ok(alice.put(url + "/api/v1/templates/t35", json={"name": "t35", "config": shown}))
    from determined.master.store import Store, _templates

    store = Store(users["m"].store_url)
    try:
        with store.read() as conn:
            row = _templates.get(conn, "t35")
    finally:
        store.close()
    assert row is not None and row["config"]["checkpoint_storage"]["secret_key"] == SECRET
    assert row["config"]["description"] == "changed"
    r = alice.post(url + "/api/v1/templates/t36", json={"name": "t36", "config": shown})
    assert r.status_code == 400 and "placeholder" in r.text

    # Webhook URLs (tokens in them) are for admins.
    hook = {
        "name": "h35",
        "url": f"https://hooks.example.com/services/{SECRET}",
        "webhookType": "WEBHOOK_TYPE_DEFAULT",
        "triggers": [
            {"triggerType": "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", "condition": {"state": "ERROR"}}
        ],
    }
    _ok(admin.post(url + "/api/v1/webhooks", json=hook))
    assert SECRET in admin.get(url + "/api/v1/webhooks").text
    listed = _ok(bob.get(url + "/api/v1/webhooks"))["webhooks"]
    assert listed and SECRET not in json.dumps(listed)
    assert listed[0]["url"].startswith("https://hooks.example.com/")


ANCHORED = f"""
name: anchored
entrypoint: python3 train.py
searcher: {{name: single, metric: loss, max_length: 1}}
hyperparameters: {{}}
data: &storage
  type: s3
  bucket: b
  secret_key: {SECRET}
checkpoint_storage: *storage
"""


def test_an_anchored_secret_is_hidden_where_the_anchor_is_defined(
    users: dict[str, Any],
) -> None:
    url, admin = users["url"], users["admin"]
    r = admin.post(url + "/api/v1/experiments", json={"config": ANCHORED, "activate": False})
    assert r.status_code == 200, r.text
    assert SECRET not in r.text
    exp_id = r.json()["experiment"]["id"]
    for path in (
        f"/api/v1/experiments/{exp_id}",
        f"/api/v1/webui/experiments/{exp_id}/original_config",
        "/api/v1/experiments",
    ):
        text = admin.get(url + path).text
        assert SECRET not in text, path


def test_an_unauthenticated_body_is_refused_before_it_is_read(users: dict[str, Any]) -> None:
    """The answer comes while the (chunked, endless) body is still being sent: 401 at once,
    never the 400 of a parsed body."""
    port = int(users["url"].rsplit(":", 1)[1])
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.putrequest("POST", "/api/v1/experiments")
        conn.putheader("Transfer-Encoding", "chunked")
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders()
        chunk = b"x" * 65536
        conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))  # and never the end
        answer = conn.getresponse()
        assert answer.status == 401, answer.read()
        assert "token" in json.loads(answer.read())["message"]
        conn.close()
    # Logging in needs no token, and a valid one passes.
    assert users["alice"].post(users["url"] + "/api/v1/experiments", json={}).status_code == 400


def test_the_stream_takes_the_cookie_from_this_master_only(users: dict[str, Any]) -> None:
    url = users["url"]
    token = login(url, "bob")
    handshake = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Cookie": f"auth={token}",
    }
    foreign = requests.get(
        url + "/stream", headers={**handshake, "Origin": "https://evil.example"}, timeout=10
    )
    assert foreign.status_code == 403
    own = requests.get(url + "/stream", headers={**handshake, "Origin": url}, timeout=10)
    assert own.status_code == 101, own.text


def test_a_master_keeps_its_data_dir_private(tmp_path: pathlib.Path) -> None:
    """What ``python -m determined.master`` writes in its data dir (database, logs, work dirs,
    environments) is 0700 / 0600 whatever the umask (the data dir itself: test_master.py)."""
    import os
    import stat

    data = tmp_path / "data"
    old = os.umask(0o022)
    try:
        with MasterProcess(data, cpu_slots=1) as m:
            s = m.session()
            config = {"entrypoint": "echo hi > out.txt", "resources": {"slots": 0}}
            cmd = _ok(s.post(m.url + "/api/v1/commands", json={"config": config}))["command"]
            deadline = time.monotonic() + 30
            while s.get(m.url + f"/api/v1/commands/{cmd['id']}").json()["command"]["state"] != (
                "STATE_TERMINATED"
            ):
                assert time.monotonic() < deadline
                time.sleep(0.2)
    finally:
        os.umask(old)
    for path in data.rglob("*"):
        if path.is_symlink() or path.name == "master.log":  # the test harness opens the log
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
