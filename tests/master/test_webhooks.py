"""Webhooks (issue #20 item 5): 0.37's routes and shapes, events on experiment state changes,
task-log patterns and ``core.Context.alert()``, delivered signed and retried to a real HTTP
receiver on 127.0.0.1."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import pathlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from _kit.master import MasterProcess
from _kit.trial_cluster import Cluster, config

pytestmark = pytest.mark.e2e

KEY = "test-signing-key"


class Receiver:
    """An HTTP server that records every POST; ``fail_first`` answers 503 that many times
    first, ``status`` is the answer after that."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.fail_first = 0
        self.status = 200
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.posts.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body.decode()}
                )
                failing = receiver.fail_first > 0
                receiver.fail_first -= 1
                self.send_response(503 if failing else receiver.status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, path: str, count: int = 1, timeout: float = 30) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            got = [p for p in self.posts if p["path"] == path]
            if len(got) >= count:
                return got
            assert time.monotonic() < deadline, f"{len(got)} posts to {path}: {self.posts}"
            time.sleep(0.05)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    conf = tmp_path / "master.yaml"
    conf.write_text(f"webhooks:\n  signing_key: {KEY}\n  base_url: http://ui.example\n")
    with MasterProcess(tmp_path / "master", cpu_slots=1, config_file=conf) as m:
        yield Cluster(m)


def _create(cluster: Cluster, body: dict[str, Any]) -> requests.Response:
    return cluster.s.post(cluster.url + "/api/v1/webhooks", json=body)


def _hook(url: str, name: str, *triggers: tuple[str, dict[str, Any]], **extra: Any) -> dict:
    return {
        "url": url,
        "name": name,
        "webhookType": extra.get("webhookType", "WEBHOOK_TYPE_DEFAULT"),
        "mode": extra.get("mode", "WEBHOOK_MODE_WORKSPACE"),
        "triggers": [{"triggerType": t, "condition": c} for t, c in triggers],
    }


def _signed_ok(post: dict[str, Any]) -> bool:
    timestamp = post["headers"]["X-Determined-AI-Signature-Timestamp"]
    expected = hmac.new(
        KEY.encode(), f"{timestamp},{post['body']}".encode(), hashlib.sha256
    ).hexdigest()
    return bool(post["headers"]["X-Determined-AI-Signature"] == expected)


def test_routes_shapes_and_validation(cluster: Cluster, receiver: Receiver) -> None:
    body = _hook(
        receiver.url + "/a",
        "on-done",
        ("TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", {"state": "COMPLETED"}),
        ("TRIGGER_TYPE_TASK_LOG", {"regex": "OOM"}),
    )
    r = _create(cluster, body)
    assert r.status_code == 200, r.text
    hook = r.json()["webhook"]
    assert hook["url"] == receiver.url + "/a" and hook["name"] == "on-done"
    assert hook["webhookType"] == "WEBHOOK_TYPE_DEFAULT"
    assert hook["mode"] == "WEBHOOK_MODE_WORKSPACE" and hook["workspaceId"] == 0
    assert [(t["triggerType"], t["condition"], t["webhookId"]) for t in hook["triggers"]] == [
        ("TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", {"state": "COMPLETED"}, hook["id"]),
        ("TRIGGER_TYPE_TASK_LOG", {"regex": "OOM"}, hook["id"]),
    ]
    assert cluster.get("/api/v1/webhooks")["webhooks"] == [hook]

    bad = {
        "no trigger": {**body, "triggers": []},
        "bad url": {**body, "name": "x", "url": "ftp://nowhere"},
        "bad regex": _hook(receiver.url, "r", ("TRIGGER_TYPE_TASK_LOG", {"regex": "("})),
        "two keys": _hook(receiver.url, "k", ("TRIGGER_TYPE_TASK_LOG", {"regex": "a", "b": 1})),
        "bad state": _hook(
            receiver.url, "s", ("TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", {"state": "DONE"})
        ),
        "custom not specific": _hook(receiver.url, "c", ("TRIGGER_TYPE_CUSTOM", {})),
        "bad type": {**body, "name": "t", "webhookType": "WEBHOOK_TYPE_EMAIL"},
    }
    for why, req in bad.items():
        r = _create(cluster, req)
        assert r.status_code == 400, (why, r.text)
        assert r.json()["message"], why

    r = cluster.s.patch(cluster.url + f"/api/v1/webhooks/{hook['id']}", json={"url": "nope"})
    assert r.status_code == 400
    new_url = receiver.url + "/b"
    r = cluster.s.patch(cluster.url + f"/api/v1/webhooks/{hook['id']}", json={"url": new_url})
    assert r.status_code == 200
    assert cluster.get("/api/v1/webhooks")["webhooks"][0]["url"] == new_url

    tested = cluster.s.post(cluster.url + f"/api/v1/webhooks/{hook['id']}/test", json={})
    assert tested.json() == {"completed": True}
    [sent] = receiver.wait("/b")
    assert json.loads(sent["body"])["event_data"] == {"data": "test"} and _signed_ok(sent)

    user = requests.post(
        cluster.url + "/api/v1/auth/login", json={"username": "determined", "password": ""}
    ).json()["token"]
    as_user = {"Authorization": f"Bearer {user}"}
    r = requests.post(cluster.url + "/api/v1/webhooks", json=body, headers=as_user, timeout=10)
    # 0.37's open-source master answers a plain error here, not 403 (its e2e suite pins it).
    assert r.status_code == 400 and "non admin users can't edit" in r.text
    r = requests.get(cluster.url + "/api/v1/webhooks", headers=as_user, timeout=10)
    assert r.status_code == 200

    assert cluster.s.delete(cluster.url + f"/api/v1/webhooks/{hook['id']}").status_code == 200
    assert cluster.get("/api/v1/webhooks")["webhooks"] == []
    assert cluster.s.delete(cluster.url + f"/api/v1/webhooks/{hook['id']}").status_code == 404

    # As 0.37: a name is unique within a workspace; cluster-wide webhooks may share one, and the
    # empty name that 0.37's own client sends is accepted.
    for name in ("shared", "shared", "", ""):
        r = _create(cluster, {**body, "name": name})
        assert r.status_code == 200 and r.json()["webhook"]["name"] == name, r.text
    in_workspace = {**body, "name": "shared", "workspaceId": 1}
    assert _create(cluster, in_workspace).status_code == 200
    again = _create(cluster, in_workspace)
    assert again.status_code == 400 and "exists already" in again.json()["message"]

    # As 0.37: the creator of a workspace manages its webhooks and sees them; nobody else
    # (admins aside) does; cluster-wide ones stay the admins'.
    def user_session(name: str) -> requests.Session:
        r = cluster.s.post(
            cluster.url + "/api/v1/users",
            json={"user": {"username": name, "active": True}, "password": ""},
        )
        assert r.status_code == 200, r.text
        token = requests.post(
            cluster.url + "/api/v1/auth/login", json={"username": name, "password": ""}
        ).json()["token"]
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {token}"
        return s

    carol, dave = user_session("carol"), user_session("dave")
    r = carol.post(cluster.url + "/api/v1/workspaces", json={"name": "carols"})
    assert r.status_code == 200, r.text
    ws = r.json()["workspace"]["id"]
    mine = carol.post(cluster.url + "/api/v1/webhooks", json={**body, "workspaceId": ws})
    assert mine.status_code == 200, mine.text
    hook_id = mine.json()["webhook"]["id"]
    assert (
        dave.post(cluster.url + "/api/v1/webhooks", json={**body, "workspaceId": ws}).status_code
        == 400
    )
    assert carol.post(cluster.url + "/api/v1/webhooks", json=body).status_code == 400
    seen = {w["id"]: w for w in carol.get(cluster.url + "/api/v1/webhooks").json()["webhooks"]}
    assert seen[hook_id]["url"] == body["url"]
    assert hook_id not in [
        w["id"] for w in dave.get(cluster.url + "/api/v1/webhooks").json()["webhooks"]
    ]
    assert dave.delete(cluster.url + f"/api/v1/webhooks/{hook_id}").status_code == 400
    assert carol.delete(cluster.url + f"/api/v1/webhooks/{hook_id}").status_code == 200


def test_state_change_task_log_and_custom_events(
    cluster: Cluster, receiver: Receiver, tmp_path: pathlib.Path
) -> None:
    done = ("TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", {"state": "COMPLETED"})
    assert _create(cluster, _hook(receiver.url + "/json", "json", done)).ok
    slack = _hook(receiver.url + "/slack", "slack", done, webhookType="WEBHOOK_TYPE_SLACK")
    assert _create(cluster, slack).ok
    logs = _hook(receiver.url + "/logs", "logs", ("TRIGGER_TYPE_TASK_LOG", {"regex": "hello"}))
    assert _create(cluster, logs).ok
    # A fragment found only in the trial's echo of its config ("New trial runner ...: {...}"),
    # which 0.37 never matches (its e2e test_log_pattern_send_webhook[False] pins it).
    echo = ("TRIGGER_TYPE_TASK_LOG", {"regex": '"entrypoint": "python3 train.py"'})
    assert _create(cluster, _hook(receiver.url + "/echo", "echo", echo)).ok
    custom = _hook(
        receiver.url + "/custom",
        "alerts",
        ("TRIGGER_TYPE_CUSTOM", {}),
        mode="WEBHOOK_MODE_SPECIFIC",
    )
    assert _create(cluster, custom).ok

    cfg = config(tmp_path / "out", max_length=2)
    cfg["name"] = "hooked"
    cfg["integrations"] = {"webhooks": {"webhook_name": ["alerts"]}}
    exp_id = cluster.create(cfg)
    cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=60)

    [sent] = receiver.wait("/json")
    assert _signed_ok(sent)
    assert sent["headers"]["Content-Type"] == "application/json; charset=UTF-8"
    event = json.loads(sent["body"])
    assert event["event_type"] == "EXPERIMENT_STATE_CHANGE"
    assert event["condition"] == {"state": "COMPLETED"}
    experiment = event["event_data"]["experiment"]
    assert experiment["id"] == exp_id and experiment["state"] == "COMPLETED"
    assert experiment["name"] == "hooked" and experiment["slots_per_trial"] == 1
    assert experiment["workspace"] == "Uncategorized" and experiment["project"] == "Uncategorized"
    assert isinstance(event["timestamp"], int) and len(event["event_id"]) == 36

    [message] = receiver.wait("/slack")
    blocks = json.loads(message["body"])
    assert blocks["blocks"][0]["text"]["text"] == "Your experiment completed successfully 🎉"
    attachment = blocks["attachments"][0]
    assert attachment["color"] == "#13B670"
    assert (
        f"<http://ui.example/experiments/{exp_id} | hooked (#{exp_id})>"
        in (attachment["blocks"][0]["text"]["text"])
    )

    # "hello from trial ..." is printed by every run: one event per task all the same.
    [line] = receiver.wait("/logs")
    task_log = json.loads(line["body"])["event_data"]["task_log"]
    assert task_log["triggering_log"].startswith("hello from trial")
    [trial] = cluster.trials(exp_id)
    assert task_log["task_id"] == trial["taskId"]

    # core.Context.alert() of this experiment's trial reaches its SPECIFIC webhook.
    r = cluster.s.post(
        cluster.url + "/api/v1/webhooks/custom",
        json={
            "data": {"title": "t", "description": "d", "level": "LOG_LEVEL_WARNING"},
            "experimentId": exp_id,
            "trialId": trial["id"],
        },
    )
    assert r.status_code == 200, r.text
    [alert] = receiver.wait("/custom")
    data = json.loads(alert["body"])["event_data"]
    assert data["custom_data"] == {"title": "t", "description": "d", "level": "LOG_LEVEL_WARNING"}
    assert data["experiment"]["trial_id"] == trial["id"]
    time.sleep(1.5)
    assert len(receiver.wait("/logs")) == 1 and len(receiver.wait("/json")) == 1
    got = cluster.s.get(cluster.url + f"/api/v1/tasks/{trial['taskId']}/logs").json()["logs"]
    lines = "".join(line["log"] for line in got)
    assert '"entrypoint": "python3 train.py"' in lines and "New trial runner" in lines
    assert not [p for p in receiver.posts if p["path"] == "/echo"]


def test_failures_are_retried_then_given_up_and_4xx_is_final(
    cluster: Cluster, receiver: Receiver, tmp_path: pathlib.Path
) -> None:
    paused = ("TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", {"state": "PAUSED"})
    assert _create(cluster, _hook(receiver.url + "/flaky", "flaky", paused)).ok
    slow = config(tmp_path / "out", max_length=1000, sleep=0.5)  # still running when paused
    exp_id = cluster.create(slow, activate=False)
    receiver.fail_first = 2  # 503, 503, then 200: the third try delivers
    assert cluster.post(f"/api/v1/experiments/{exp_id}/activate").ok
    assert cluster.post(f"/api/v1/experiments/{exp_id}/pause").ok
    attempts = receiver.wait("/flaky", count=3, timeout=30)
    assert len({p["body"] for p in attempts}) == 1  # the same event each time
    time.sleep(4)
    assert len(receiver.wait("/flaky")) == 3  # delivered: not sent again

    receiver.status = 404  # final: not retried
    assert cluster.post(f"/api/v1/experiments/{exp_id}/activate").ok
    assert cluster.post(f"/api/v1/experiments/{exp_id}/pause").ok
    receiver.wait("/flaky", count=4)
    time.sleep(4)
    assert len(receiver.wait("/flaky")) == 4


def test_metric_threshold_fires_once_per_trial(
    cluster: Cluster, receiver: Receiver, tmp_path: pathlib.Path
) -> None:
    """METRIC_THRESHOLD_EXCEEDED (0.37 stores it and never fires it): a reported metric above
    ``metricValue`` queues one event per trial and trigger; one never above, none."""
    above = ("TRIGGER_TYPE_METRIC_THRESHOLD_EXCEEDED", {"metricName": "loss", "metricValue": 0.7})
    never = ("TRIGGER_TYPE_METRIC_THRESHOLD_EXCEEDED", {"metricName": "loss", "metricValue": 5})
    assert _create(cluster, _hook(receiver.url + "/above", "above", above)).ok
    assert _create(cluster, _hook(receiver.url + "/never", "never", never)).ok
    bad = _hook(receiver.url, "bad", ("TRIGGER_TYPE_METRIC_THRESHOLD_EXCEEDED", {"name": "x"}))
    r = _create(cluster, bad)
    assert r.status_code == 400 and "metricName" in r.text

    exp_id = cluster.create(config(tmp_path / "out", max_length=3))  # loss 1, 1/2, 1/3
    cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=60)
    [sent] = receiver.wait("/above")
    assert _signed_ok(sent)
    event = json.loads(sent["body"])
    assert event["event_type"] == "METRIC_THRESHOLD_EXCEEDED"
    assert event["condition"] == {"metricName": "loss", "metricValue": 0.7}
    assert event["event_data"]["metric"] == {"group": "training", "name": "loss", "value": 1.0}
    [trial] = cluster.trials(exp_id)
    assert event["event_data"]["experiment"]["trial_id"] == trial["id"]
    time.sleep(1.0)  # nothing more arrives: once per trial, and never for the other
    assert len([p for p in receiver.posts if p["path"] == "/above"]) == 1
    assert not [p for p in receiver.posts if p["path"] == "/never"]
