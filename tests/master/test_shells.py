"""Shells as tasks (issue #21 item 2): a real ``ssh`` runs a command in the shell's own sshd,
through the master's proxy (``det shell open``: the tunnel is ssh's ProxyCommand)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest
from _kit.tasks import wait_state
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e
REPO = pathlib.Path(__file__).resolve().parents[2]


def test_a_shell_runs_a_command_over_real_ssh(cluster: Cluster, tmp_path: pathlib.Path) -> None:
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
    shell_id = started.stdout.strip().splitlines()[-1]
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
    cluster.post(f"/api/v1/shells/{shell['id']}/kill")
    wait_state(cluster, "shell", shell["id"], "STATE_TERMINATED")
