"""Shells as tasks (issue #21 item 2): a real ``ssh`` runs a command in the shell's own sshd,
through the master's proxy (``det shell open``: the tunnel is ssh's ProxyCommand)."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import time

import pytest
import websocket
from _kit.tasks import wait_state
from _kit.trial_cluster import Cluster, config

pytestmark = pytest.mark.e2e
REPO = pathlib.Path(__file__).resolve().parents[2]


def _start_shell(cluster: Cluster, tmp_path: pathlib.Path) -> tuple[list[str], dict[str, str], str]:
    """``det shell start -d`` as admin (skipped without OpenSSH): det's argv, its environment
    and the shell's id."""
    if not shutil.which("ssh") or not any(os.access(p, os.X_OK) for p in ("/usr/sbin/sshd",)):
        pytest.skip("needs OpenSSH (scripts/setup.sh --tests installs it)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env.update(PYTHONPATH=str(REPO), DET_HOME=str(tmp_path / "home"), DET_MASTER=cluster.url)
    env.update(DET_USER="admin", DET_PASS="")
    det = [sys.executable, "-m", "determined.cli"]
    started = subprocess.run(
        [*det, "shell", "start", "-d"], env=env, capture_output=True, text=True, timeout=60
    )
    assert started.returncode == 0, started.stderr
    return det, env, started.stdout.strip().splitlines()[-1]


def test_a_shell_runs_a_command_over_real_ssh(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    det, env, shell_id = _start_shell(cluster, tmp_path)
    shell = cluster.get(f"/api/v1/shells/{shell_id}")["shell"]
    assert shell["privateKey"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    wait_state(cluster, "shell", shell["id"], "STATE_RUNNING")
    listed = subprocess.run(
        [*det, "shell", "list", "-q"], env=env, capture_output=True, text=True, timeout=60
    )
    assert listed.stdout.split() == [shell_id]
    cmd = [sys.executable, "-m", "determined.cli", "shell", "open", shell["id"], "--"]
    cmd += ["echo", "hello-over-ssh", "$DET_TASK_ID"]
    deadline = time.monotonic() + 30
    while True:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        if proc.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)  # sshd may still be starting
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == f"hello-over-ssh {shell['id']}"

    # The printed command works on its own later: the key is kept under DET_HOME, and the
    # tunnel finds the login det stored there (no DET_TUNNEL_TOKEN in its environment).
    shown = subprocess.run(
        [*det, "shell", "show-ssh-command", shell["id"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    printed = shlex.split(shown.stdout.strip().splitlines()[-1])
    assert printed[0] == "ssh"
    key = pathlib.Path(printed[printed.index("-i") + 1])
    assert key.is_relative_to(tmp_path / "home") and key.stat().st_mode & 0o777 == 0o600
    later = subprocess.run(
        [*printed, "echo", "printed-works"], env=env, capture_output=True, text=True, timeout=60
    )
    assert later.returncode == 0, later.stdout + later.stderr
    assert later.stdout.strip() == "printed-works"
    # As 0.37 (its own det shell open tunnels without a login): the sshd is reached without a
    # token, its key being the credential; a command's port is not (test_commands.py).
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{cluster.master.port}/proxy/{shell['id']}/", timeout=10
    )
    try:
        assert ws.recv().startswith(b"SSH-2.0-")
    finally:
        ws.close()
    cluster.post(f"/api/v1/shells/{shell['id']}/kill")
    wait_state(cluster, "shell", shell["id"], "STATE_TERMINATED")


def test_a_shell_key_with_a_passphrase_needs_it(cluster: Cluster) -> None:
    """``det shell start -p`` sends a passphrase; the shell's private key is encrypted with it."""
    if not shutil.which("ssh-keygen"):
        pytest.skip("needs ssh-keygen (OpenSSH)")
    r = cluster.s.post(
        cluster.url + "/api/v1/shells", json={"config": {}, "data": {"passphrase": "s3cret!"}}
    )
    assert r.status_code == 200, r.text
    shell = r.json()["shell"]
    key = pathlib.Path(cluster.master.data_dir) / "test-key"
    key.write_text(shell["privateKey"])
    key.chmod(0o600)

    def public_key(passphrase: str) -> subprocess.CompletedProcess[str]:
        args = ["ssh-keygen", "-y", "-P", passphrase, "-f", str(key)]
        return subprocess.run(args, capture_output=True, text=True, timeout=30)

    assert public_key("").returncode != 0  # encrypted: no key without the passphrase
    opened = public_key("s3cret!")
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.split()[:2] == shell["publicKey"].split()[:2]
    cluster.post(f"/api/v1/shells/{shell['id']}/kill")


def test_det_inside_a_task_is_its_owner(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    """As 0.37: a task's environment has `det` on PATH and its owner's ``DET_USER`` and
    ``DET_USER_TOKEN``, so `det` there is the owner (not the default user), until it ends."""
    det, env, shell_id = _start_shell(cluster, tmp_path)
    wait_state(cluster, "shell", shell_id, "STATE_RUNNING")
    deadline = time.monotonic() + 30
    while True:  # 0.37's e2e test_open_shell
        proc = subprocess.run(
            [*det, "shell", "open", shell_id, "det", "user", "whoami"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)  # sshd may still be starting
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "You are logged in as user 'admin'" in proc.stdout
    cluster.post(f"/api/v1/shells/{shell_id}/kill")
    wait_state(cluster, "shell", shell_id, "STATE_TERMINATED")

    # A command too; its token is the one issued for the run, dead once the run ends.
    r = cluster.s.post(
        cluster.url + "/api/v1/commands",
        json={"config": {"entrypoint": "which det; det user whoami; echo token=$DET_USER_TOKEN"}},
    )
    assert r.status_code == 200, r.text
    task_id = r.json()["command"]["id"]
    wait_state(cluster, "command", task_id, "STATE_TERMINATED", timeout=60)
    text = "".join(x["log"] for x in cluster.get(f"/api/v1/tasks/{task_id}/logs")["logs"])
    assert "You are logged in as user 'admin'" in text, text
    token = text.split("token=", 1)[1].split()[0]
    me = cluster.s.get(cluster.url + "/api/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert me.status_code == 401, me.text


def test_det_inside_a_trial_is_its_owner(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    """A trial too (0.37's DET_USER/DET_USER_TOKEN): a user token for the run, not the
    allocation's restricted one, dead once the run ends."""
    cfg = config(tmp_path / "out", max_length=1)
    cfg["entrypoint"] = "det user whoami && python3 train.py"
    exp = cluster.create(cfg)
    cluster.wait_experiment(exp, "STATE_COMPLETED", timeout=120)
    [trial] = cluster.get(f"/api/v1/experiments/{exp}/trials")["trials"]
    text = "".join(x["log"] for x in cluster.logs(trial["taskId"]))
    assert "You are logged in as user 'admin'" in text, text
    [env_file] = (tmp_path / "out").glob("*.env.json")
    env = json.loads(env_file.read_text())
    assert env["DET_USER"] == "admin" and env["DET_USER_TOKEN"] != env["DET_SESSION_TOKEN"]
    me = cluster.s.get(
        cluster.url + "/api/v1/me", headers={"Authorization": f"Bearer {env['DET_USER_TOKEN']}"}
    )
    assert me.status_code == 401, me.text
