"""Workspaces and the tasks launched in them, as 0.37 (issue #34 item 9): an archived workspace
is not edited and takes no launches (404), an empty checkpoint storage config clears the
workspace's (null), a command needs no config, and deleting a workspace kills what runs in it."""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests
from _kit.master import login
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e
CLUSTER_CPU_SLOTS = 2


def _ok(r: Any) -> Any:
    assert r.status_code == 200, r.text
    return r.json()


def _wait_state(cluster: Cluster, task_id: str, *states: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        command = cluster.get(f"/api/v1/commands/{task_id}")["command"]
        if command["state"] in states:
            return command
        assert time.monotonic() < deadline, f"command {task_id} is {command['state']}"
        time.sleep(0.2)


def test_archived_workspace_storage_reset_and_command_without_config(cluster: Cluster) -> None:
    s, api = cluster.s, cluster.url + "/api/v1"
    ws = _ok(s.post(api + "/workspaces", json={"name": "lab"}))["workspace"]
    assert ws["checkpointStorageConfig"] is None
    storage = {"type": "shared_fs", "host_path": "/tmp"}
    body = {"checkpointStorageConfig": storage}
    patched = _ok(s.patch(api + f"/workspaces/{ws['id']}", json=body))
    assert patched["workspace"]["checkpointStorageConfig"]["host_path"] == "/tmp"
    cleared = _ok(s.patch(api + f"/workspaces/{ws['id']}", json={"checkpointStorageConfig": {}}))
    assert cleared["workspace"]["checkpointStorageConfig"] is None

    # A command launched with no config at all runs (nothing) and exits 0, in its workspace.
    bare = _ok(s.post(api + "/commands", json={"workspaceId": ws["id"]}))["command"]
    assert bare["workspaceId"] == ws["id"]
    ended = _wait_state(cluster, bare["id"], "STATE_TERMINATED")
    assert ended["exitStatus"] and "0" in ended["exitStatus"], ended

    _ok(s.post(api + f"/workspaces/{ws['id']}/archive"))
    r = s.patch(api + f"/workspaces/{ws['id']}", json={"name": "lab2"})
    assert r.status_code == 400 and "archived" in r.json()["message"], r.text
    for kind in ("commands", "notebooks"):
        r = s.post(api + f"/{kind}", json={"workspaceId": ws["id"]})
        assert r.status_code == 404 and "archived" in r.json()["message"], r.text
    _ok(s.post(api + f"/workspaces/{ws['id']}/unarchive"))
    assert (
        _ok(s.patch(api + f"/workspaces/{ws['id']}", json={"name": "lab2"}))["workspace"]["name"]
        == "lab2"
    )

    # The default workspace and project: 403 for a user (as 0.37 checks permission first),
    # 400 for an admin (they cannot change).
    _ok(s.post(api + "/users", json={"user": {"username": "plain"}, "password": ""}))
    plain = requests.Session()
    plain.headers["Authorization"] = "Bearer " + login(cluster.url, "plain")
    for path in ("/workspaces/1/archive", "/projects/1/archive"):
        assert plain.post(api + path).status_code == 403, path
        assert s.post(api + path).status_code == 400, path
    assert plain.delete(api + "/workspaces/1").status_code == 403
    assert plain.patch(api + "/workspaces/1", json={"name": "x"}).status_code == 400
    assert plain.patch(api + "/projects/1", json={"name": "x"}).status_code == 400


def test_deleting_a_workspace_kills_its_tasks_only(cluster: Cluster) -> None:
    s, api = cluster.s, cluster.url + "/api/v1"
    doomed = _ok(s.post(api + "/workspaces", json={"name": "doomed"}))["workspace"]["id"]
    kept = _ok(s.post(api + "/workspaces", json={"name": "kept"}))["workspace"]["id"]
    sleep = {"entrypoint": ["sleep", "300"]}
    inside = _ok(s.post(api + "/commands", json={"workspaceId": doomed, "config": sleep}))
    outside = _ok(s.post(api + "/commands", json={"workspaceId": kept, "config": sleep}))
    inside_id, outside_id = inside["command"]["id"], outside["command"]["id"]
    _wait_state(cluster, inside_id, "STATE_RUNNING")
    _wait_state(cluster, outside_id, "STATE_RUNNING")

    assert _ok(s.delete(api + f"/workspaces/{doomed}")) == {"completed": True}
    _wait_state(cluster, inside_id, "STATE_TERMINATED", timeout=15)
    assert cluster.get(f"/api/v1/commands/{outside_id}")["command"]["state"] == "STATE_RUNNING"
    # Gone with its workspace from the lists (0.37); that workspace's list is a 404.
    listed = [c["id"] for c in cluster.get("/api/v1/commands")["commands"]]
    assert outside_id in listed and inside_id not in listed
    assert s.get(api + "/commands", params={"workspaceId": doomed}).status_code == 404
    _ok(s.post(api + f"/commands/{outside_id}/kill"))
