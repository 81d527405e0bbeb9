"""Commands (issue #21 item 2) and the proxy (item 3) on a real master with the local resource
manager: a command's output reaches its task log, it is listed, killed and ended; a command
serving HTTP and a websocket echo is reached through ``/proxy/<task>:<port>/`` with the
caller's login only; 0.37's own ``det cmd run`` runs a command on this master."""

from __future__ import annotations

import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
from typing import Any

import pytest
import requests
import websocket
import yaml
from _kit.cli import Det
from _kit.master import free_port, login
from _kit.reference import REF, Ref
from _kit.trial_cluster import Cluster, config

pytestmark = pytest.mark.e2e
CLUSTER_CPU_SLOTS = 2
REPO = pathlib.Path(__file__).resolve().parents[2]


def _wait(cluster: Cluster, kind: str, task_id: str, state: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        task = cluster.get(f"/api/v1/{kind}s/{task_id}")[kind]
        if task["state"] == state:
            return task
        assert time.monotonic() < deadline, f"{kind} {task_id} is {task['state']}, not {state}"
        time.sleep(0.2)


def _log_text(cluster: Cluster, task_id: str) -> str:
    return "".join(line["log"] for line in cluster.get(f"/api/v1/tasks/{task_id}/logs")["logs"])


def _det(cluster: Cluster, home: pathlib.Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env.update(PYTHONPATH=str(REPO), DET_HOME=str(home), DET_MASTER=cluster.url, DET_USER="admin")
    env["DET_PASS"] = ""
    proc = subprocess.run(
        [sys.executable, "-m", "determined.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.both_stores
def test_a_command_logs_is_listed_and_killed(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "hello.py").write_text(
        "import os, sys, time\n"
        "print('hello from', os.environ['DET_TASK_TYPE'], sys.prefix, flush=True)\n"
        "time.sleep(300)\n"
    )
    out = _det(cluster, tmp_path / "home", "cmd", "run", "-d", "-c", str(ctx), "python3 hello.py")
    task_id = out.strip().splitlines()[-1]
    _wait(cluster, "command", task_id, "STATE_RUNNING")
    deadline = time.monotonic() + 20
    while "hello from COMMAND" not in _log_text(cluster, task_id):
        assert time.monotonic() < deadline, _log_text(cluster, task_id)
        time.sleep(0.2)
    # It runs in an environment of its own, not the master's.
    assert f"envs/task-{task_id}" in _log_text(cluster, task_id)
    listed = _det(cluster, tmp_path / "home", "cmd", "list", "--json")
    assert [c["id"] for c in json.loads(listed)] == [task_id]
    assert any(j["jobId"] == task_id for j in cluster.get("/api/v1/job-queues")["jobs"])
    tasks = cluster.get("/api/v1/tasks")["allocationIdToSummary"]
    assert tasks[f"{task_id}.1"]["taskId"] == task_id
    # Another user may not kill it.
    cluster.s.post(cluster.url + "/api/v1/users", json={"user": {"username": "eve"}})
    eve = requests.Session()
    eve.headers["Authorization"] = f"Bearer {login(cluster.url, 'eve')}"
    assert eve.post(f"{cluster.url}/api/v1/commands/{task_id}/kill").status_code == 403
    _det(cluster, tmp_path / "home", "cmd", "kill", task_id)
    ended = _wait(cluster, "command", task_id, "STATE_TERMINATED")
    assert ended["exitStatus"] == "killed"
    assert "killing the task" in _log_text(cluster, task_id)
    assert cluster.get("/api/v1/job-queues")["jobs"] == []
    # A bad config is a 400 that says what to fix (no config at all is fine, as in 0.37: the
    # command runs nothing and exits 0; tests/master/test_workspace_tasks.py).
    bad = {"entrypoint": ["true"], "environment": {"environment_variables": ["A=\x00"]}}
    r = cluster.s.post(cluster.url + "/api/v1/commands", json={"config": bad})
    assert r.status_code == 400 and "A=" in r.text, r.text


SERVER = r"""
import asyncio, http.server, sys, threading
from wsproto import ConnectionType, WSConnection
from wsproto.events import (AcceptConnection, CloseConnection, Request, TextMessage)

http_port, ws_port = int(sys.argv[1]), int(sys.argv[2])

class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("path=%s auth=%s cookie=%s" % (self.path, self.headers.get("Authorization"),
                self.headers.get("Cookie"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

server = http.server.ThreadingHTTPServer(("127.0.0.1", http_port), Hello)
threading.Thread(target=server.serve_forever, daemon=True).start()

async def echo(reader, writer):
    ws = WSConnection(ConnectionType.SERVER)
    parts = []
    while True:
        data = await reader.read(65536)
        if not data:
            return
        ws.receive_data(data)
        for event in ws.events():
            if isinstance(event, Request):
                writer.write(ws.send(AcceptConnection()))
            elif isinstance(event, TextMessage):
                parts.append(event.data)
                if event.message_finished:
                    writer.write(ws.send(TextMessage(data="echo:" + "".join(parts))))
                    parts.clear()
            elif isinstance(event, CloseConnection):
                writer.write(ws.send(event.response()))
                writer.close()
                return
        await writer.drain()

async def main():
    srv = await asyncio.start_server(echo, "127.0.0.1", ws_port)
    print("serving", flush=True)
    await srv.serve_forever()

asyncio.run(main())
"""


def test_the_proxy_reaches_a_commands_http_and_websocket_ports(cluster: Cluster) -> None:
    http_port, ws_port = free_port(), free_port()
    config = {
        "entrypoint": ["python3", "-c", SERVER, str(http_port), str(ws_port)],
        "environment": {"proxy_ports": [{"proxy_port": http_port}, {"proxy_port": ws_port}]},
        "resources": {"slots": 0},
    }
    r = cluster.s.post(cluster.url + "/api/v1/commands", json={"config": config})
    assert r.status_code == 200, r.text
    task_id = r.json()["command"]["id"]
    _wait(cluster, "command", task_id, "STATE_RUNNING")
    deadline = time.monotonic() + 20
    while "serving" not in _log_text(cluster, task_id):
        assert time.monotonic() < deadline, _log_text(cluster, task_id)
        time.sleep(0.2)
    token = str(cluster.s.headers["Authorization"]).split()[1]
    # The first proxy port is the task's own URL; the path goes through unchanged, and the
    # master's credentials do not.
    url = f"{cluster.url}/proxy/{task_id}/some/page?x=1"
    r = requests.get(url, headers={"Authorization": f"Bearer {token}", "Cookie": "a=b"})
    assert r.status_code == 200, r.text
    assert r.text == f"path=/proxy/{task_id}/some/page?x=1 auth=None cookie=a=b"
    # The web UI's cookie logs in too; nothing does not.
    assert requests.get(url, cookies={"auth": token}).text.endswith("cookie=None")
    assert requests.get(url).status_code == 401
    assert requests.get(f"{cluster.url}/proxy/{task_id}:1/").status_code == 401
    r = requests.get(
        f"{cluster.url}/proxy/{task_id}:1/", headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 404 and "proxy_ports" in r.text
    # A websocket to the second port, message by message.
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{cluster.master.port}/proxy/{task_id}:{ws_port}/echo",
        header=[f"Authorization: Bearer {token}"],
        timeout=10,
    )
    try:
        for text in ("hello", "x" * 70000):
            ws.send(text)
            assert ws.recv() == "echo:" + text
    finally:
        ws.close()
    with pytest.raises(websocket.WebSocketException):
        websocket.create_connection(
            f"ws://127.0.0.1:{cluster.master.port}/proxy/{task_id}:{ws_port}/echo", timeout=10
        ).recv()
    cluster.post(f"/api/v1/commands/{task_id}/kill")
    _wait(cluster, "command", task_id, "STATE_TERMINATED")
    r = requests.get(url, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 404


def test_the_reference_det_cmd_run(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    ref = Ref(cluster.master, tmp_path / "ref")
    out = ref.det("cmd", "run", "echo", "hello-from-the-reference")
    assert "hello-from-the-reference" in out
    [command] = cluster.get("/api/v1/commands")["commands"]
    assert command["username"] == "determined"
    assert command["description"] in out


def test_generic_task_create_and_kill(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "job.sh").write_text("echo generic-says-hi; sleep 300\n")
    cfg = tmp_path / "task.yaml"
    cfg.write_text("entrypoint: sh job.sh\nresources:\n  slots: 0\n")
    out = _det(cluster, tmp_path / "home", "task", "create", str(cfg), "-c", str(ctx))
    task_id = out.split()[-1]
    deadline = time.monotonic() + 30
    while "generic-says-hi" not in _log_text(cluster, task_id):
        assert time.monotonic() < deadline, _log_text(cluster, task_id)
        time.sleep(0.2)
    summaries = cluster.get("/api/v1/tasks")["allocationIdToSummary"].values()
    assert [t["slotsNeeded"] for t in summaries if t["taskId"] == task_id] == [0]
    _det(cluster, tmp_path / "home", "task", "kill", task_id)
    while any(
        t["taskId"] == task_id
        for t in cluster.get("/api/v1/tasks")["allocationIdToSummary"].values()
    ):
        assert time.monotonic() < deadline + 30
        time.sleep(0.2)
    assert "killed" in _log_text(cluster, task_id)


def test_an_experiments_proxy_ports(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    """A running trial's ``environment.proxy_ports`` are reached the same way, by its task id."""
    port = free_port()
    server = (
        "import http.server\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        body = ('trial says ' + self.path).encode()\n"
        "        self.send_response(200)\n"
        "        self.send_header('Content-Length', str(len(body)))\n"
        "        self.end_headers()\n"
        "        self.wfile.write(body)\n"
        f"http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n"
    )
    cfg = config(tmp_path / "out")
    cfg["entrypoint"] = "python3 server.py"
    cfg["environment"] = {"proxy_ports": [{"proxy_port": port}]}
    exp_id = cluster.create(cfg, {"server.py": server})
    deadline = time.monotonic() + 30
    task_id = None
    while task_id is None:
        assert time.monotonic() < deadline, "the trial did not start"
        for t in cluster.get("/api/v1/tasks")["allocationIdToSummary"].values():
            if str(t["taskId"]).startswith(f"{exp_id}."):
                task_id = t["taskId"]
        time.sleep(0.2)
    deadline = time.monotonic() + 30
    while True:
        r = cluster.s.get(f"{cluster.url}/proxy/{task_id}:{port}/x")
        if r.status_code == 200:
            break
        assert time.monotonic() < deadline, r.text
        time.sleep(0.3)
    assert r.text == f"trial says /proxy/{task_id}:{port}/x"
    assert (
        cluster.s.get(f"{cluster.url}/proxy/{task_id}/y").text == f"trial says /proxy/{task_id}/y"
    )
    assert requests.get(f"{cluster.url}/proxy/{task_id}/").status_code == 401
    cluster.post(f"/api/v1/experiments/{exp_id}/kill")


def test_det_cmd_run_follows_the_log_to_the_end(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    out = _det(cluster, tmp_path / "home", "cmd", "run", "echo one && echo two")
    assert "one\ntwo\n" in out
    assert "Task log stream ended" in out
    assert "resources exited successfully with a zero exit code" in out  # 0.37's words
    [command] = cluster.get("/api/v1/commands")["commands"]
    assert command["state"] == "STATE_TERMINATED"
    assert command["exitStatus"] == "exited with code 0"
    failed = _det_proc(cluster, tmp_path / "home", "cmd", "run", "exit 3")
    assert "crashed: resources failed with non-zero exit code" in failed.stdout, failed


def test_a_restarted_master_ends_the_tasks_it_lost(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    marker = tmp_path / "still-running"
    entry = f"while true; do date > {marker}; sleep 0.2; done"
    # The marker's directory is bound into the task's sandbox (TEST_TASK_ISOLATION=auto).
    mounts = [{"host_path": str(tmp_path), "container_path": str(tmp_path)}]
    cfg = {"entrypoint": entry, "bind_mounts": mounts}
    r = cluster.s.post(cluster.url + "/api/v1/commands", json={"config": cfg})
    task_id = r.json()["command"]["id"]
    _wait(cluster, "command", task_id, "STATE_RUNNING")
    cluster.master.kill()  # SIGKILL: the command's process group is left behind
    cluster.master.start()
    cluster.s = cluster.master.session()
    ended = _wait(cluster, "command", task_id, "STATE_TERMINATED")
    assert ended["exitStatus"] == "the master restarted"
    before = marker.read_text()
    time.sleep(1.0)
    assert marker.read_text() == before, "the old master's command still runs"


def _det_proc(cluster: Cluster, home: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return Det(home, cluster.url, user="admin")(*args)


def test_config_describe_workspace_sorting_priority_and_kill_force(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    home = tmp_path / "home"
    r = cluster.s.post(cluster.url + "/api/v1/workspaces", json={"name": "team"})
    assert r.status_code == 200, r.text
    ws_id = r.json()["workspace"]["id"]

    def run(*args: str) -> str:
        return _det(cluster, home, "cmd", "run", "-d", *args, "sleep 300").strip().splitlines()[-1]

    a = run("-w", "team", "-v", "/data:/mnt/data", "--config", "description=zeta")
    b = run("--config", "description=alpha")
    _wait(cluster, "command", a, "STATE_RUNNING")
    _wait(cluster, "command", b, "STATE_RUNNING")

    shown = yaml.safe_load(_det(cluster, home, "cmd", "config", a))
    assert shown["bind_mounts"] == [{"host_path": "/data", "container_path": "/mnt/data"}]
    assert shown["description"] == "zeta" and shown["entrypoint"] == ["sleep 300"]
    described = json.loads(_det(cluster, home, "cmd", "describe", a, "--json"))
    assert (described["workspaceId"], described["workspaceName"]) == (ws_id, "team")
    in_team = json.loads(_det(cluster, home, "cmd", "list", "-w", "team", "--json"))
    assert [c["id"] for c in in_team] == [a]
    table = _det(cluster, home, "cmd", "list", "--sort-by", "description", "--order-by", "desc")
    assert table.index("zeta") < table.index("alpha") and "workspaceName" in table
    assert "Uncategorized" in table and "team" in table
    logs = _det(cluster, home, "cmd", "logs", "--allocation-id", f"{a}.1", a)
    assert "have started" in logs
    assert "have started" not in _det(cluster, home, "cmd", "logs", "--allocation-id", "x.1", a)

    # Both slots are taken: c and d queue; d's priority 1 puts it first.
    c = run("--config", "description=third")
    d = run("--config", "description=fourth")
    assert f"Set priority of command {d} to 1" in _det(
        cluster, home, "cmd", "set", "priority", d, "1"
    )
    assert yaml.safe_load(_det(cluster, home, "cmd", "config", d))["resources"]["priority"] == 1
    priorities = {j["jobId"]: j["priority"] for j in cluster.get("/api/v1/job-queues")["jobs"]}
    assert priorities[d] == 1 and priorities[c] == 42
    bad = cluster.s.post(cluster.url + f"/api/v1/commands/{d}/set_priority", json={"priority": 0})
    assert bad.status_code == 400 and "1 to 99" in bad.text

    # A failed kill stops the rest, unless --force.
    refused = _det_proc(cluster, home, "cmd", "kill", "no-such-command", a)
    assert refused.returncode != 0 and f"Cowardly not killing {a}" in refused.stdout
    assert _wait(cluster, "command", a, "STATE_RUNNING")
    forced = _det(cluster, home, "cmd", "kill", "-f", "no-such-command", a)
    assert "Skipping" in forced and f"Killed command {a}" in forced
    _wait(cluster, "command", d, "STATE_RUNNING")
    assert cluster.get(f"/api/v1/commands/{c}")["command"]["state"] == "STATE_QUEUED"
    _det(cluster, home, "cmd", "kill", b, c, d)


def test_the_reference_cli_sets_priority_prints_config_and_previews(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    ref = Ref(cluster.master, tmp_path / "ref")
    out = ref.det("cmd", "run", "-d", "--config", "description=ref", "sleep", "300")
    [task_id] = re.findall(r"^[0-9a-f]{8}-[0-9a-f-]{27}$", out, re.M)
    assert "Set priority of command" in ref.det("cmd", "set", "priority", task_id, "5")
    assert yaml.safe_load(ref.det("cmd", "config", task_id))["resources"]["priority"] == 5
    listed = ref.det("cmd", "list", "--sort-by", "description", "--json")
    assert [c["id"] for c in json.loads(listed)] == [task_id]
    preview = yaml.safe_load(ref.det("notebook", "start", "--preview", "--config", "description=p"))
    assert preview["description"] == "p"
    assert cluster.get("/api/v1/notebooks")["notebooks"] == []  # nothing was started
    assert "Killed command" in ref.det("cmd", "kill", task_id)


def _task(cluster: Cluster, task_id: str) -> dict[str, Any]:
    return dict(cluster.get(f"/api/v1/tasks/{task_id}")["task"])


def _wait_task(cluster: Cluster, task_id: str, state: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (task := _task(cluster, task_id)).get("taskState") != state:
        assert time.monotonic() < deadline, f"{task_id}: {task.get('taskState')}, not {state}"
        time.sleep(0.2)
    return task


def test_generic_task_trees_fork_pause_unpause_and_kill_from_the_root(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    home = tmp_path / "home"
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "data.txt").write_text("from-the-parent\n")
    cfg = tmp_path / "task.yaml"
    cfg.write_text("entrypoint: sleep 300\nresources:\n  slots: 0\n")
    child_cfg = tmp_path / "child.yaml"
    child_cfg.write_text("entrypoint: cat data.txt; sleep 300\nresources:\n  slots: 0\n")

    def created(out: str) -> str:
        return out.strip().splitlines()[-1].split()[-1]

    parent = created(_det(cluster, home, "task", "create", str(cfg), "-c", str(ctx)))
    child = created(
        _det(cluster, home, "task", "create", str(child_cfg), "-p", parent, "--inherit_context")
    )
    steady = created(_det(cluster, home, "task", "create", str(cfg), "-p", parent, "--no_pause"))
    fork = created(_det(cluster, home, "task", "fork", parent))
    deadline = time.monotonic() + 30
    while "from-the-parent" not in _log_text(cluster, child):
        assert time.monotonic() < deadline, _log_text(cluster, child)
        time.sleep(0.2)
    described = _task(cluster, child)
    assert described["taskType"] == "TASK_TYPE_GENERIC" and described["parentId"] == parent
    assert described["taskState"] == "GENERIC_TASK_STATE_ACTIVE"
    assert _task(cluster, fork)["forkedFrom"] == parent
    forked = json.loads(_det(cluster, home, "task", "config", fork, "--json"))
    assert forked == {"entrypoint": "sleep 300", "resources": {"slots": 0}}  # the parent's, given
    # As 0.37: the config as it was given, without the master's defaults.
    given = json.loads(_det(cluster, home, "task", "config", parent, "--json"))
    assert given == {"entrypoint": "sleep 300", "resources": {"slots": 0}}

    # A pause stops the parent and the child that may be paused; --no_pause keeps running.
    assert f"Paused task: {parent}" in _det(cluster, home, "task", "pause", parent)
    for task_id in (parent, child):
        _wait_task(cluster, task_id, "GENERIC_TASK_STATE_PAUSED")
    assert _task(cluster, steady)["taskState"] == "GENERIC_TASK_STATE_ACTIVE"
    refused = cluster.s.post(cluster.url + f"/api/v1/tasks/{steady}/pause")
    assert refused.status_code == 400 and "noPause" in refused.text
    # Unpaused, both run again as a new allocation; the child in its parent's context.
    assert f"Unpaused task: {parent}" in _det(cluster, home, "task", "unpause", parent)
    for task_id in (parent, child):
        deadline = time.monotonic() + 30
        while [a["allocationId"] for a in _task(cluster, task_id)["allocations"]] != [
            f"{task_id}.2"
        ] or _task(cluster, task_id)["allocations"][0]["state"] != "STATE_RUNNING":
            assert time.monotonic() < deadline, _task(cluster, task_id)
            time.sleep(0.2)
    deadline = time.monotonic() + 30
    while _log_text(cluster, child).count("from-the-parent") < 2:
        assert time.monotonic() < deadline, _log_text(cluster, child)
        time.sleep(0.2)
    assert f"task {child} paused" in _log_text(cluster, child)

    # Killing the child from its root ends the whole tree; the fork is not in it.
    _det(cluster, home, "task", "kill", child, "--root")
    for task_id in (parent, child, steady):
        _wait_task(cluster, task_id, "GENERIC_TASK_STATE_CANCELED")
    assert _task(cluster, fork)["taskState"] == "GENERIC_TASK_STATE_ACTIVE"
    _det(cluster, home, "task", "kill", fork)
    assert "rows of log entries" in _det(cluster, home, "task", "cleanup-logs")


def test_the_reference_cli_drives_generic_tasks(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    ref = Ref(cluster.master, tmp_path / "ref")
    cfg = tmp_path / "task.yaml"
    cfg.write_text("entrypoint: sleep 300\nresources:\n  slots: 0\n")
    [parent] = re.findall(r"^Created task (\S+)$", ref.det("task", "create", str(cfg)), re.M)
    assert yaml.safe_load(ref.det("task", "config", parent))["entrypoint"] == "sleep 300"
    [fork] = re.findall(r"^Created task (\S+)$", ref.det("task", "fork", parent), re.M)
    assert _task(cluster, fork)["forkedFrom"] == parent
    assert f"Paused task: {parent}" in ref.det("task", "pause", parent)
    _wait_task(cluster, parent, "GENERIC_TASK_STATE_PAUSED")
    assert f"Unpaused task: {parent}" in ref.det("task", "unpause", parent)
    _wait_task(cluster, parent, "GENERIC_TASK_STATE_ACTIVE")
    ref.det("task", "kill", parent, "--root")
    _wait_task(cluster, parent, "GENERIC_TASK_STATE_CANCELED")
    ref.det("task", "kill", fork)
    _wait_task(cluster, fork, "GENERIC_TASK_STATE_CANCELED")


ECHO_SERVER = """
import socketserver, sys
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(1024):
            self.request.sendall(b"echo:" + data)
socketserver.ThreadingTCPServer(("127.0.0.1", int(sys.argv[1])), Echo).serve_forever()
"""


def _echo_through(local: int, deadline: float) -> bytes:
    while True:
        try:
            with socket.create_connection(("127.0.0.1", local), timeout=5) as s:
                s.sendall(b"ping")
                got = s.recv(1024)
                if got:
                    return got
        except OSError:
            pass
        assert time.monotonic() < deadline, f"nothing answered on port {local}"
        time.sleep(0.3)


@pytest.mark.parametrize("cli", ["ours", "reference"])
def test_experiment_create_publishes_a_tcp_proxy_port(
    cluster: Cluster, tmp_path: pathlib.Path, cli: str
) -> None:
    """``det e create -f -p LOCAL:PORT``: the first trial's ``proxy_tcp`` port is served on a
    local port while its logs are followed (a websocket through the master carrying TCP)."""
    port, local = free_port(), free_port()
    model = tmp_path / "model"
    model.mkdir()
    (model / "echo.py").write_text(ECHO_SERVER)
    cfg = config(tmp_path / "out")
    cfg["entrypoint"] = f"python3 echo.py {port}"
    cfg["environment"] = {"proxy_ports": [{"proxy_port": port, "proxy_tcp": True}]}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(cfg))
    args = ["e", "create", str(tmp_path / "exp.yaml"), str(model), "-f", "-p", f"{local}:{port}"]
    if cli == "ours":
        env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
        env.update(PYTHONPATH=str(REPO), DET_HOME=str(tmp_path / "home"), DET_MASTER=cluster.url)
        env.update(DET_USER="admin", DET_PASS="")
        argv = [sys.executable, "-m", "determined.cli", *args]
    else:
        ref = Ref(cluster.master, tmp_path / "ref")
        env, argv = ref.env, [str(REF / "bin" / "det"), "-m", ref.url, *args]
    proc = subprocess.Popen(
        argv, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        assert _echo_through(local, time.monotonic() + 60) == b"echo:ping"
    finally:
        for exp in cluster.get("/api/v1/experiments")["experiments"]:
            cluster.post(f"/api/v1/experiments/{exp['id']}/kill")
        try:
            proc.wait(60)
        finally:
            proc.kill()


def test_a_relative_bind_mount_is_linked_in_the_commands_work_dir(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    """As trials: a relative ``container_path`` (``-v HOST:rel``, or ``bind_mounts`` in the
    config) is the host path, found from the work dir (0.37's e2e test_relative_bind_mount)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "marker.txt").write_text("x")
    out = _det(cluster, tmp_path / "home", "cmd", "run", "-v", f"{shared}:data/in", "ls data/in")
    assert "marker.txt" in out


def test_slots_beyond_every_agent_are_refused_unless_a_template_brings_them(
    cluster: Cluster,
) -> None:
    """0.37 checks the request's own ``resources.slots`` against its largest agent ("request
    unfulfillable") before it lays the template under the config: a template's larger value is
    kept and the command waits in the queue."""
    refused = cluster.s.post(
        cluster.url + "/api/v1/commands",
        json={"config": {"entrypoint": ["true"], "resources": {"slots": 50}}},
    )
    assert refused.status_code == 400
    assert "request unfulfillable, please try requesting less slots" in refused.text
    r = cluster.s.post(
        cluster.url + "/api/v1/templates/big",
        json={"name": "big", "config": {"resources": {"slots": 50}}},
    )
    assert r.status_code == 200, r.text
    queued = cluster.s.post(
        cluster.url + "/api/v1/commands",
        json={"config": {"entrypoint": ["sleep", "5"]}, "templateName": "big"},
    )
    assert queued.status_code == 200, queued.text
    command = queued.json()["command"]
    time.sleep(1)
    assert cluster.get(f"/api/v1/commands/{command['id']}")["command"]["state"] == "STATE_QUEUED"
    shown = cluster.get(f"/api/v1/commands/{command['id']}")
    assert shown["config"]["resources"]["slots"] == 50
    cluster.post(f"/api/v1/commands/{command['id']}/kill")
