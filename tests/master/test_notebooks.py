"""Notebooks as tasks (issue #21 item 2): a real JupyterLab answers ``/api/status`` through the
master's proxy for its owner's login only, and ends when killed."""

from __future__ import annotations

import pytest
import requests
from _kit.tasks import proxied, wait_state
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e


def test_jupyterlab_through_the_proxy(cluster: Cluster) -> None:
    pytest.importorskip("jupyterlab")
    r = cluster.s.post(cluster.url + "/api/v1/notebooks", json={"config": {"idle_timeout": "30m"}})
    assert r.status_code == 200, r.text
    nb = r.json()["notebook"]
    assert nb["serviceAddress"] == f"/proxy/{nb['id']}/"
    wait_state(cluster, "notebook", nb["id"], "STATE_RUNNING")
    status = proxied(cluster, f"/proxy/{nb['id']}/api/status", timeout=90).json()
    assert "started" in status and "kernels" in status
    assert requests.get(f"{cluster.url}/proxy/{nb['id']}/api/status").status_code == 401
    cluster.post(f"/api/v1/notebooks/{nb['id']}/kill")
    wait_state(cluster, "notebook", nb["id"], "STATE_TERMINATED")
