"""Helpers of the non-trial task tests (commands, notebooks, TensorBoards, shells)."""

from __future__ import annotations

import time
from typing import Any

import requests

from _kit.trial_cluster import Cluster


def wait_state(cluster: Cluster, kind: str, task_id: str, state: str, timeout: float = 30) -> Any:
    """The task (``v1Command``, ``v1Notebook``, ...) once it is in ``state``."""
    deadline = time.monotonic() + timeout
    while True:
        task = cluster.get(f"/api/v1/{kind}s/{task_id}")[kind]
        if task["state"] == state:
            return task
        logs = cluster.get(f"/api/v1/tasks/{task_id}/logs")["logs"]
        assert time.monotonic() < deadline, f"{task['state']}: {[x['log'] for x in logs]}"
        time.sleep(0.2)


def proxied(cluster: Cluster, path: str, timeout: float = 60) -> requests.Response:
    """GET a proxied path until the task's service answers 200."""
    deadline = time.monotonic() + timeout
    while True:
        r = cluster.s.get(cluster.url + path, timeout=10)
        if r.status_code == 200:
            return r
        if time.monotonic() >= deadline:
            task_id = path.split("/")[2].partition(":")[0]
            logs = [x["log"] for x in cluster.logs(task_id)]
            raise AssertionError(f"{path}: {r.status_code} {r.text[:300]}; task log: {logs}")
        time.sleep(0.5)
