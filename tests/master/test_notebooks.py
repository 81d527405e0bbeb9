"""Notebooks as tasks (issue #21 item 2): a real JupyterLab answers ``/api/status`` through the
master's proxy for its owner's login only, and ends when killed; a browser-like client starts
a kernel and runs code over its websocket through the proxy."""

from __future__ import annotations

import json
import pathlib
import stat
import time
import uuid
from typing import Any

import psutil
import pytest
import requests
import websocket
from _kit.tasks import proxied, wait_state
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e


def test_jupyterlab_through_the_proxy(cluster: Cluster) -> None:
    pytest.importorskip("jupyterlab")
    bad = cluster.s.post(cluster.url + "/api/v1/notebooks", json={"config": {"idle_timeout": "x"}})
    assert bad.status_code == 400 and "like 30m" in bad.text
    r = cluster.s.post(cluster.url + "/api/v1/notebooks", json={"config": {"idle_timeout": "30m"}})
    assert r.status_code == 200, r.text
    nb = r.json()["notebook"]
    assert nb["serviceAddress"] == f"/proxy/{nb['id']}/"
    wait_state(cluster, "notebook", nb["id"], "STATE_RUNNING")
    status = proxied(cluster, f"/proxy/{nb['id']}/api/status", timeout=90).json()
    assert "started" in status and "kernels" in status
    assert requests.get(f"{cluster.url}/proxy/{nb['id']}/api/status").status_code == 401
    # Issue #35 item 2: JupyterLab listens on no TCP port anyone on the host could reach, only
    # on a unix socket in a directory of the master's user's, which the proxy talks to.
    started = next(x["log"] for x in cluster.logs(nb["id"]) if "have started" in x["log"])
    pid = int(started.split("pid ")[1].split(",")[0])
    sock = pathlib.Path(started.split("'unix:")[1].split("'")[0])
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(sock.stat().st_mode) & 0o077 == 0
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    listening = [c for p in procs for c in p.net_connections("inet") if c.status == "LISTEN"]
    assert listening == [], listening
    cluster.post(f"/api/v1/notebooks/{nb['id']}/kill")
    wait_state(cluster, "notebook", nb["id"], "STATE_TERMINATED")
    assert not sock.parent.exists()


def test_a_kernel_runs_code_over_the_proxied_websocket(cluster: Cluster) -> None:
    """The browser's path: the page sets JupyterLab's _xsrf cookie, a POST starts a kernel,
    and its channels websocket (through the proxy, with the master's cookie) runs code."""
    pytest.importorskip("jupyterlab")
    nb = cluster.s.post(cluster.url + "/api/v1/notebooks", json={}).json()["notebook"]
    wait_state(cluster, "notebook", nb["id"], "STATE_RUNNING")
    base = f"/proxy/{nb['id']}/"
    proxied(cluster, base + "api/status", timeout=90)
    token = str(cluster.s.headers["Authorization"]).split()[1]
    browser = requests.Session()
    browser.cookies.set("auth", token)
    assert browser.get(cluster.url + base + "lab").status_code == 200
    xsrf = browser.cookies.get("_xsrf")
    assert xsrf, "JupyterLab set no _xsrf cookie"
    # Without JupyterLab's own XSRF token a cookie-authenticated POST is refused.
    assert browser.post(cluster.url + base + "api/kernels", json={}).status_code == 403
    r = browser.post(cluster.url + base + "api/kernels", json={}, headers={"X-XSRFToken": xsrf})
    assert r.status_code == 201, r.text
    kernel = r.json()["id"]
    cookie = f"auth={token}; _xsrf={xsrf}"
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{cluster.master.port}{base}api/kernels/{kernel}/channels",
        header=[f"Cookie: {cookie}"],
        origin=cluster.url,
        timeout=60,
    )
    try:
        msg_id = uuid.uuid4().hex
        ws.send(json.dumps(_execute("print(6 * 7)", msg_id)))
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline
            reply = json.loads(ws.recv())
            if reply.get("msg_type") == "stream" and reply["parent_header"].get("msg_id") == msg_id:
                assert reply["content"]["text"] == "42\n"
                break
    finally:
        ws.close()
    cluster.post(f"/api/v1/notebooks/{nb['id']}/kill")
    wait_state(cluster, "notebook", nb["id"], "STATE_TERMINATED")


def _execute(code: str, msg_id: str) -> dict[str, Any]:
    header = {
        "msg_id": msg_id,
        "username": "test",
        "session": uuid.uuid4().hex,
        "msg_type": "execute_request",
        "version": "5.3",
    }
    return {
        "header": header,
        "parent_header": {},
        "metadata": {},
        "content": {"code": code, "silent": False, "store_history": False},
        "channel": "shell",
        "buffers": [],
    }
