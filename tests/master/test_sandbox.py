"""Issue #35 item 1: every trial and task process runs in the sandbox (real bubblewrap,
``resources/_sandbox.py``): it reads neither the master's data dir (database, other tasks'
work dirs) nor the master's home; without a sandbox a multi-user master refuses other users'
tasks and says how to fix it (docs/security.md)."""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from _kit.cli import Det
from _kit.master import REPO, MasterProcess, login

from determined.master.resources import _sandbox

pytestmark = pytest.mark.e2e


def _needs_bwrap() -> None:
    bwrap = shutil.which("bwrap")
    if bwrap is None or _sandbox._probe(bwrap) is not None:
        pytest.skip("needs a working bubblewrap (scripts/setup.sh --tests installs it)")


def _users(m: MasterProcess) -> dict[str, requests.Session]:
    admin = m.session()
    for name in ("alice", "bob"):
        r = admin.post(m.url + "/api/v1/users", json={"user": {"username": name}})
        assert r.status_code == 200, r.text
    return {
        "admin": admin,
        "alice": m.session(login(m.url, "alice")),
        "bob": m.session(login(m.url, "bob")),
    }


def _run(s: requests.Session, url: str, entrypoint: str) -> dict[str, Any]:
    config = {"entrypoint": entrypoint, "resources": {"slots": 0}}
    r = s.post(url + "/api/v1/commands", json={"config": config})
    assert r.status_code == 200, r.text
    return dict(r.json()["command"])


def _log(s: requests.Session, url: str, task_id: str) -> str:
    logs = s.get(url + f"/api/v1/tasks/{task_id}/logs").json()["logs"]
    return "\n".join(str(x["log"]) for x in logs)


def _wait_log(s: requests.Session, url: str, task_id: str, text: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while text not in (log := _log(s, url, task_id)):
        assert time.monotonic() < deadline, log
        time.sleep(0.3)
    return log


@pytest.fixture
def sandboxed(tmp_path: pathlib.Path) -> Iterator[MasterProcess]:
    _needs_bwrap()
    home = tmp_path / "home"  # the master's user's home, with a credential in it
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("home-secret\n")
    args = ["--task-isolation", "bubblewrap"]
    with MasterProcess(tmp_path / "data", cpu_slots=1, args=args, env={"HOME": str(home)}) as m:
        yield m


def test_a_task_reads_neither_the_data_dir_nor_another_task(
    sandboxed: MasterProcess,
) -> None:
    m, url = sandboxed, sandboxed.url
    users = _users(m)
    info = requests.get(url + "/api/v1/master", timeout=10).json()["taskIsolation"]
    assert info["mode"] == "bubblewrap" and "never the master's data dir" in info["detail"]
    data = m.data_dir
    # alice keeps a secret in her work dir while bob looks for it and for the database.
    alice = _run(users["alice"], url, "echo alice-secret > secret.txt; echo ready; sleep 60")
    _wait_log(users["alice"], url, alice["id"], "ready")
    work = data / "work" / alice["id"]
    matches = list((data / "work").glob(f"{alice['id']}*/secret.txt"))
    assert matches, list((data / "work").iterdir())
    probe = (
        f"cat {data}/master.db > /dev/null && echo DB-READ; "
        f"cat {matches[0]} && echo OTHER-READ; "
        f"ls {data}/work | wc -l | sed 's/^/works:/'; "
        f"cat {data.parent}/home/.aws/credentials && echo HOME-READ; "
        "echo mine > own.txt && cat own.txt; "
        "echo tmp > /tmp/t && cat /tmp/t; "
        "ps -e | wc -l | sed 's/^/procs:/'; echo done"
    )
    bob = _run(users["bob"], url, probe)
    log = _wait_log(users["bob"], url, bob["id"], "done")
    for leak in ("DB-READ", "OTHER-READ", "alice-secret", "HOME-READ", "home-secret"):
        assert leak not in log, log
    assert "works:1" in log  # only its own work dir is there
    assert "mine" in log and "tmp" in log
    procs = int(log.split("procs:")[1].split()[0])
    assert procs < 10, log  # its own processes only (a PID namespace)
    assert work.exists() or matches  # alice's file is still there, untouched
    assert matches[0].read_text() == "alice-secret\n"
    users["alice"].post(url + f"/api/v1/commands/{alice['id']}/kill")


def test_a_data_dir_inside_a_bound_checkout_stays_hidden(tmp_path: pathlib.Path) -> None:
    """The master's data dir inside a directory the sandbox binds read-only (a checkout on
    the PYTHONPATH; scripts/reference_e2e.sh keeps its data dirs in .e2e/) stays hidden, and a
    task running as the unprivileged default OS user still reaches its work dir. Bound after
    the data dir was emptied, the checkout brought it back: the task read it (as root) or
    could not enter its work dir (as det_nobody)."""
    _needs_bwrap()
    checkout = tmp_path / "checkout"
    data = checkout / ".e2e" / "home"
    data.mkdir(parents=True)
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(checkout)])}
    args = ["--task-isolation", "bubblewrap"]
    if os.geteuid() == 0:
        args += ["--default-task", "det_nobody:65533:det_nobody:65533"]
    with MasterProcess(data, cpu_slots=1, args=args, env=env) as m:
        bob = _users(m)["bob"]
        probe = f"cat {data}/master.db > /dev/null && echo DB-READ; pwd; echo done"
        task = _run(bob, m.url, probe)
        log = _wait_log(bob, m.url, task["id"], "done")
    assert "DB-READ" not in log and f"{data}/work/{task['id']}" in log, log


def test_without_a_sandbox_only_the_single_user_accounts_run_tasks(
    tmp_path: pathlib.Path,
) -> None:
    """A bubblewrap that cannot run here (as on a machine without user namespaces): the
    master says so, runs admin's and determined's tasks, refuses alice's naming the fix."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\necho 'no user namespaces here' >&2\nexit 1\n")
    (fake / "bwrap").chmod(stat.S_IRWXU)
    env = {"PATH": f"{fake}{os.pathsep}{os.environ.get('PATH', '')}"}
    args = ["--task-isolation", "auto"]
    with MasterProcess(tmp_path / "data", cpu_slots=1, env=env, args=args) as m:
        assert "tasks run without a sandbox" in m.log_tail()
        info = requests.get(m.url + "/api/v1/master", timeout=10).json()["taskIsolation"]
        assert info["mode"] == "none" and "no user namespaces here" in info["detail"]
        shown = Det(tmp_path / "home", m.url).ok("master", "info")
        assert "taskIsolation" in shown and "mode: none" in shown, shown
        users = _users(m)
        config = {"config": {"entrypoint": "true", "resources": {"slots": 0}}}
        refused = users["alice"].post(m.url + "/api/v1/commands", json=config)
        assert refused.status_code == 400, refused.text
        message = refused.json()["message"]
        assert "apt-get install bubblewrap" in message and "task_isolation: none" in message
        # An experiment of alice's too: its trials would run unsandboxed.
        exp = {"config": "entrypoint: python3 train.py\nsearcher: {name: single, metric: x, "
               "max_length: 1}\nhyperparameters: {}\n"}  # fmt: skip
        refused = users["alice"].post(m.url + "/api/v1/experiments", json=exp)
        assert refused.status_code == 400 and "apt-get install bubblewrap" in refused.text
        ran = _run(users["admin"], m.url, "echo admin-runs")
        _wait_log(users["admin"], m.url, ran["id"], "admin-runs")
        determined = m.session(login(m.url, "determined"))
        ran = _run(determined, m.url, "echo determined-runs")
        _wait_log(determined, m.url, ran["id"], "determined-runs")


def test_task_isolation_bubblewrap_is_required_when_asked_for(tmp_path: pathlib.Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\nexit 1\n")
    (fake / "bwrap").chmod(stat.S_IRWXU)
    env = {"PATH": f"{fake}{os.pathsep}{os.environ.get('PATH', '')}"}
    m = MasterProcess(tmp_path / "d", cpu_slots=1, env=env, args=["--task-isolation", "bubblewrap"])
    with pytest.raises(RuntimeError, match="task_isolation: bubblewrap"):
        m.start()


def test_a_trial_trains_and_checkpoints_inside_the_sandbox(sandboxed: MasterProcess) -> None:
    """The training path in the sandbox: its startup hook, the Core API over HTTP, a
    checkpoint into the default shared_fs storage, files into a bind mount of its config."""
    from _kit.trial_cluster import TRAIN_PY, Cluster, config, env_of

    cluster = Cluster(sandboxed)
    out = sandboxed.data_dir.parent / "out"
    cfg = config(out, max_length=2)
    cfg["bind_mounts"] = [{"host_path": str(out), "container_path": str(out)}]
    files = {"train.py": TRAIN_PY, "startup-hook.sh": "export HOOK_RAN=inside\n"}
    exp_id = cluster.create(cfg, files)
    cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=90)
    [trial] = cluster.trials(exp_id)
    env = env_of(out, trial["id"], 1)
    assert env["HOOK_RAN"] == "inside"
    checkpoints = cluster.get(f"/api/v1/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert [c["metadata"]["steps_completed"] for c in checkpoints] == [2]


def test_a_notebook_serves_its_socket_from_inside_the_sandbox(sandboxed: MasterProcess) -> None:
    pytest.importorskip("jupyterlab")
    from _kit.tasks import proxied, wait_state
    from _kit.trial_cluster import Cluster

    cluster = Cluster(sandboxed)
    nb = cluster.s.post(cluster.url + "/api/v1/notebooks", json={}).json()["notebook"]
    wait_state(cluster, "notebook", nb["id"], "STATE_RUNNING")
    status = proxied(cluster, f"/proxy/{nb['id']}/api/status", timeout=90).json()
    assert "started" in status
    cluster.post(f"/api/v1/notebooks/{nb['id']}/kill")
    wait_state(cluster, "notebook", nb["id"], "STATE_TERMINATED")


_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ('served ' + self.path).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H)
print('serving', flush=True)
server.serve_forever()
"""


def _refused(port: int) -> bool:
    """Nothing answers on the host's 127.0.0.1:``port``."""
    try:
        requests.get(f"http://127.0.0.1:{port}/", timeout=5)
    except requests.ConnectionError:
        return True
    return False


def test_proxy_ports_answer_only_through_the_master(sandboxed: MasterProcess) -> None:
    """Issue #35: a command's and a trial's ``proxy_ports`` services answer their owner through
    the master's proxy, another user not (403), and nobody on the host's 127.0.0.1 (the task
    has a network of its own; the master reaches them on unix sockets). The task still
    reaches the master's API (the trial reports and completes)."""
    from _kit.tasks import proxied, wait_state
    from _kit.trial_cluster import TRAIN_PY, Cluster, config

    from determined.master.resources._tasks import free_port

    m, url = sandboxed, sandboxed.url
    users = _users(m)
    port = free_port()
    cfg = {
        "entrypoint": ["python3", "-c", _SERVER, str(port)],
        "environment": {"proxy_ports": [{"proxy_port": port}]},
        "resources": {"slots": 0},
    }
    r = users["alice"].post(url + "/api/v1/commands", json={"config": cfg})
    assert r.status_code == 200, r.text
    task_id = r.json()["command"]["id"]
    _wait_log(users["alice"], url, task_id, "serving")
    alice = Cluster(m)
    alice.s = users["alice"]
    assert proxied(alice, f"/proxy/{task_id}/x").text == f"served /proxy/{task_id}/x"
    assert users["bob"].get(url + f"/proxy/{task_id}/x").status_code == 403
    assert _refused(port)
    assert users["alice"].post(url + f"/api/v1/commands/{task_id}/kill").status_code == 200
    wait_state(alice, "command", task_id, "STATE_TERMINATED")

    # A trial: it serves its port until it was asked once, then trains to the end, reporting
    # through the relay to the master.
    trial_port = free_port()
    both = (
        "import threading, runpy, sys\n"
        "asked = threading.Event()\n"
        + _SERVER.replace("int(sys.argv[1])", str(trial_port))
        .replace("self.wfile.write(body)", "self.wfile.write(body); asked.set()")
        .replace(
            "server.serve_forever()",
            "threading.Thread(target=server.serve_forever, daemon=True).start()",
        )
        + "asked.wait(90)\n"
        + "runpy.run_path('train.py', run_name='__main__')\n"
    )
    out = m.data_dir.parent / "out"
    exp_cfg = config(out, max_length=2)
    exp_cfg["entrypoint"] = "python3 both.py"
    exp_cfg["environment"] = {"proxy_ports": [{"proxy_port": trial_port}]}
    exp_cfg["bind_mounts"] = [{"host_path": str(out), "container_path": str(out)}]
    exp_id = alice.create(exp_cfg, {"train.py": TRAIN_PY, "both.py": both})
    trial = alice.wait_trial(exp_id, "STATE_RUNNING", timeout=60)
    task = alice.get(f"/api/v1/trials/{trial['id']}")["trial"]["taskId"]
    assert proxied(alice, f"/proxy/{task}/y", timeout=90).text == f"served /proxy/{task}/y"
    assert _refused(trial_port)
    alice.wait_experiment(exp_id, "STATE_COMPLETED", timeout=90)


def test_absolute_bind_mounts_are_mounted_at_their_container_path(
    sandboxed: MasterProcess,
) -> None:
    """0.37's container mounted a bind mount's host_path at an absolute container_path; the
    sandbox does the same in the task's view: a new top-level path (made on the sandbox's own
    root, nothing made on the host), one inside its /tmp read-only; the host path itself stays
    out of sight (it is under the hidden /tmp here)."""
    m, url = sandboxed, sandboxed.url
    shared = m.data_dir.parent / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # the task runs as the default task account on a root master
    (shared / "hello.txt").write_text("hello-from-host\n")
    top = f"/det-mount-{uuid.uuid4().hex[:8]}"
    probe = (
        f"cat {top}/hello.txt; echo w > {top}/w.txt && echo WROTE; "
        "cat /tmp/somepath/hello.txt | sed 's/^/ro:/'; "
        "echo x > /tmp/somepath/x || echo READ-ONLY; "
        f"ls {shared} || echo HOST-HIDDEN; echo done"
    )
    mounts = [
        {"host_path": str(shared), "container_path": top},
        {"host_path": str(shared), "container_path": "/tmp/somepath", "read_only": True},
    ]
    config = {"entrypoint": probe, "resources": {"slots": 0}, "bind_mounts": mounts}
    admin = m.session()
    r = admin.post(url + "/api/v1/commands", json={"config": config})
    assert r.status_code == 200, r.text
    log = _wait_log(admin, url, r.json()["command"]["id"], "done")
    assert "hello-from-host" in log and "WROTE" in log, log
    assert "ro:hello-from-host" in log and "READ-ONLY" in log, log
    assert "HOST-HIDDEN" in log, log
    assert (shared / "w.txt").read_text() == "w\n"
    assert not (shared / "x").exists() and not os.path.exists(top)


def test_a_trial_checkpoints_into_directory_storage_under_a_moved_mount(
    sandboxed: MasterProcess,
) -> None:
    """0.37's fixtures: ``checkpoint_storage: {type: directory, container_path: /tmp/work_dir}``
    with a bind mount of a host directory there. The trial is accepted on a sandboxed master
    and its checkpoint lands in the host directory."""
    from _kit.trial_cluster import TRAIN_PY, Cluster, config

    cluster = Cluster(sandboxed)
    out = sandboxed.data_dir.parent / "out"
    host = sandboxed.data_dir.parent / "ckpts"
    host.mkdir()
    host.chmod(0o777)  # the trial runs as the default task account on a root master
    cfg = config(out, max_length=2)
    cfg["checkpoint_storage"] = {"type": "directory", "container_path": "/tmp/work_dir"}
    cfg["bind_mounts"] = [
        {"host_path": str(out), "container_path": str(out)},
        {"host_path": str(host), "container_path": "/tmp/work_dir"},
    ]
    exp_id = cluster.create(cfg, {"train.py": TRAIN_PY})
    cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=90)
    [trial] = cluster.trials(exp_id)
    [ckpt] = cluster.get(f"/api/v1/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert (host / ckpt["uuid"]).is_dir(), list(host.iterdir())
